"""What to run for a job: argv and environment per worker, for every launcher and executor.

Pure functions, no processes: the local executor runs the workers as process groups on this
host, the Docker executor runs them as containers; both take the argv and env from here.

* `python`   — one process: `python main.py` for a script, the command as given otherwise.
* `torchrun` — one host: `torchrun --standalone --nproc-per-node N`; several hosts: one worker
  per host, `--nnodes H --node-rank r --rdzv-backend c10d --rdzv-endpoint first:port`; a job
  resized in place runs one elastic agent per GPU under a supervisor (`torchrun_elastic`) that
  follows the job's `gpus` file.
* `horovod`  — `horovodrun -np N -H localhost:N --gloo --network-interface lo` on one host;
  a job resized in place (`JobSpec.resize = 'in-place'`, see docs/resize.md) runs Horovod
  Elastic instead: `horovodrun -np N --min-np MIN --max-np MAX --host-discovery-script
  <job dir>/discover_hosts.sh`, the script printing the job's current allocation
  (`localhost:N`, the file `hosts` the executor rewrites on a resize), each worker started
  through a `/bin/sh` wrapper that sets its `CUDA_VISIBLE_DEVICES` from the file `gpus` (the
  job's GPUs in slot order: Horovod's local rank r uses the r-th) and records its pid in
  `workers/<local rank>`, then runs the command through `schedulearn.prewarm` (a fork server of
  pre-warmed workers started beside horovodrun: a worker a grow adds skips the cold start);
  `-H h1:n1,h2:n2` across hosts, started once on the first host (Horovod then reaches the
  others over ssh: passwordless ssh between the hosts and the same Python environment on each
  is the requirement); resized in place across hosts (the Docker executor), the discovery
  script lists `host:slots` and each host's GPUs are in `gpus@<address>` (the slot wrapper
  reads its host's). Horovod gives every host the first host's environment, so across hosts
  the plain launch's `CUDA_VISIBLE_DEVICES` is right only where each host was given the same
  GPU indices; torchrun has no such limit.

Every Python program of a job (the bundled `main.py`, or a command `python [flags] script.py
args` / `python -m module args`) runs through the job runner `schedulearn/run.py`
(`python -u run.py main.py`), which ends it cleanly: the torch process group destroyed, output
flushed, the program's own exit status (see `schedulearn.run`).

Every worker sees `CUDA_VISIBLE_DEVICES` = exactly its host's assigned GPUs (NVML indices, with
`CUDA_DEVICE_ORDER=PCI_BUS_ID` so that CUDA numbers GPUs as NVML does; UUIDs for MIG devices or
when asked), and `SCHEDULEARN_JOB_ID`, `SCHEDULEARN_JOB_DIR`, `SCHEDULEARN_RESTART_COUNT`,
`SCHEDULEARN_NUM_GPUS` and `SCHEDULEARN_RESULT_KEY` (see `schedulearn.results`).

The rest of a job's environment is built by `job_environment` from an allow-list (never the
server's whole environment: its settings and secrets stay out of jobs).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .. import nofollow
from ..jobfiles import SCRIPT_NAME
from ..model import Allocation, JobSpec, Launcher, Node
from ..run import RESULT_KEY_ENV
from . import torchrun_elastic
from .base import ExecutorError

#: The job runner (`python -m schedulearn.run`): standard library only, run by its path.
RUNNER = str(Path(__file__).resolve().parents[1] / "run.py")
DEFAULT_RDZV_PORT = 29400

#: Horovod Elastic's files in the job directory: the discovery script, what it prints (the
#: job's current allocation, `localhost:N`), the GPUs in slot order, the workers' pids.
DISCOVER_SCRIPT = "discover_hosts.sh"
HOSTS_FILE = "hosts"
GPUS_FILE = "gpus"
WORKERS_DIR = "workers"
#: A local run's exit-status recorder (`schedulearn.exitwrap`): standard library only, by path.
EXITWRAP = str(Path(__file__).resolve().parents[1] / "exitwrap.py")
#: The fork server of pre-warmed workers (`schedulearn.prewarm`): standard library only, by path.
PREWARM = str(Path(__file__).resolve().parents[1] / "prewarm.py")
#: Each Horovod Elastic worker: its GPUs from the `gpus` file (read when it starts: a worker
#: added by a grow sees the new list), its pid under `workers/`, then the job's command through
#: the prewarm client (`$0`: Python; `$1`: prewarm.py), which forks it from the run's server of
#: pre-warmed workers or else execs it.
#: Across hosts (the Docker executor), a host other than horovodrun's has files of its own,
#: `gpus@<address>` and `workers/<local rank>@<address>` (its worker runs there: no prewarm
#: server there, the command is exec'd); Horovod names the host in `HOROVOD_HOSTNAME`.
_SLOT_WRAPPER = ('d="$SCHEDULEARN_JOB_DIR"; g=gpus; w="${HOROVOD_LOCAL_RANK:-0}"; p="$1"; shift; '
                 'if [ -f "$d/gpus@$HOROVOD_HOSTNAME" ]; then g="gpus@$HOROVOD_HOSTNAME"; '
                 'w="$w@$HOROVOD_HOSTNAME"; p=""; fi; '
                 'CUDA_VISIBLE_DEVICES=$(cat "$d/$g") || exit 1; '
                 'export CUDA_VISIBLE_DEVICES; echo $$ > "$d/workers/$w"; '
                 '[ -z "$p" ] || exec "$0" -I -S "$p" fork "$@"; exec "$@"')
#: Starts the run's prewarm server (`$0`: Python, `$1`: prewarm.py, `$2`: the job directory) in
#: the background, then becomes horovodrun (the server's parent: it exits when horovodrun has).
_WITH_PREWARM = '"$0" -u "$1" serve "$2" & shift 2; exec "$@"'


def discover_script(job_dir: Path | str) -> str:
    """The host-discovery script of a Horovod Elastic job: prints its current allocation."""
    return f"#!/bin/sh\nexec cat {shlex.quote(str(Path(job_dir) / HOSTS_FILE))}\n"


def prepare_elastic_dir(job_dir: Path) -> Path:
    """Write a Horovod Elastic job's discovery script and an empty `workers/` (where the slots'
    wrappers record their pids) in `job_dir`, replacing what an earlier run left; returns
    `workers/` for the caller to give to the job's account. OSError as raised."""
    script = job_dir / DISCOVER_SCRIPT
    script.unlink(missing_ok=True)
    nofollow.write_text(script, discover_script(job_dir))
    os.chmod(script, 0o755)
    workers = job_dir / WORKERS_DIR
    if workers.is_symlink() or (workers.exists() and not workers.is_dir()):
        workers.unlink()
    workers.mkdir(exist_ok=True)
    for old in workers.iterdir():
        old.unlink()
    return workers


def elastic_files(alloc: Allocation, nodes: Mapping[str, Node] | None = None,
                  use_uuids: bool = False) -> dict[str, str]:
    """What the executor writes (atomically) for a Horovod Elastic job on one host, at its
    start and at every resize in place: `hosts` (what discovery prints) and `gpus` (the
    workers' `CUDA_VISIBLE_DEVICES`, slot order)."""
    ((name, idx),) = alloc.items()
    gpus = visible_devices((nodes or {}).get(name), tuple(idx), use_uuids)
    return {GPUS_FILE: gpus + "\n", HOSTS_FILE: f"localhost:{len(idx)}\n"}


def elastic_host_files(hosts: list[tuple[str, str, int]]) -> dict[str, str]:
    """The same across hosts (the Docker executor): `hosts` (what discovery prints) lists
    `address:slots` of every host, `(address, CUDA_VISIBLE_DEVICES, slots)` in `hosts`, the
    first being horovodrun's (its GPUs in `gpus`, the others' in `gpus@<address>`)."""
    out = {HOSTS_FILE: "".join(f"{a}:{n}\n" for a, _, n in hosts)}
    for i, (address, cuda, _) in enumerate(hosts):
        out[GPUS_FILE if i == 0 else f"{GPUS_FILE}@{address}"] = cuda + "\n"
    return out


@dataclass(frozen=True)
class Worker:
    """One launcher process: the whole job on one host, or the job's share of one host."""

    node: str  # the node name of the allocation
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the executor's base environment
    gpus: tuple[int, ...] = ()

    def shell(self) -> str:
        """The command line, quoted (for logs and docs)."""
        return shlex.join(self.argv)


def visible_devices(node: Node | None, indices: tuple[int, ...], use_uuids: bool = False) -> str:
    """`CUDA_VISIBLE_DEVICES` for `indices` of `node`: NVML indices, or UUIDs for MIG devices
    (CUDA accepts nothing else for them) and where `use_uuids` asks for them."""
    gpus = {g.index: g for g in node.gpus} if node is not None else {}
    out = []
    for i in indices:
        g = gpus.get(i)
        if g is not None and not g.virtual and g.uuid and (use_uuids or g.mig_parent is not None):
            out.append(g.uuid)
        else:
            out.append(str(i))
    return ",".join(out)


def user_command(
    spec: JobSpec, python: str, job_dir: Path | str = ".", runner: str | None = None
) -> list[str]:
    """The job's own command: the spec's argv, or the bundled script (`<job_dir>/main.py`, so
    that a `workdir` does not lose it) run by `python`; with `runner` (the path of
    `schedulearn/run.py` as the job sees it), Python programs run through it."""
    if spec.script is not None:
        script = str(Path(job_dir) / SCRIPT_NAME)
        return [python, "-u", runner, script] if runner else [python, "-u", script]
    assert spec.command is not None
    return with_runner(list(spec.command), runner) if runner else list(spec.command)


def with_runner(argv: list[str], runner: str) -> list[str]:
    """`python [options] script.py args` -> `python [options] RUNNER script.py args` (and
    `-m module` alike); anything else (not Python, `-c`, `-` for stdin, nothing to run) as is."""
    if not argv or not os.path.basename(argv[0]).startswith("python"):
        return argv
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("-", "--"):
            return argv
        if not arg.startswith("-"):  # the script
            return [*argv[:i], runner, *argv[i:]]
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        step = 1
        for j, ch in enumerate(arg[1:], 1):  # a cluster of one-letter options: -u, -uB, -Wignore
            if ch == "c":
                return argv
            if ch == "m":  # the module: the rest of the cluster, or the next argument
                flags = [arg[:j]] if j > 1 else []
                joined = arg[j + 1:]
                module, rest = ([joined], argv[i + 1:]) if joined else (argv[i + 1:i + 2], argv[i + 2:])
                return [*argv[:i], *flags, runner, "-m", *module, *rest]
            if ch in ("W", "X"):
                step = 1 if arg[j + 1:] else 2  # the value joined, or the next argument
                break
        i += step
    return argv


def check_command(argv: list[str], path: str, cwd: Path) -> None:
    """Fail now, with one line, when the program to run does not exist."""
    prog = argv[0]
    if os.sep in prog:
        target = Path(prog) if os.path.isabs(prog) else cwd / prog
        if not target.exists():
            raise ExecutorError(f"command: {prog!r} does not exist (relative to {cwd})")
        return
    if shutil.which(prog, path=path) is None:
        hint = ""
        if prog.endswith(".py") and (cwd / prog).is_file():  # `submit -- train.py`
            hint = f" ({prog} is a Python script in {cwd}: run `-- python {prog} ...`, or --script {prog})"
        raise ExecutorError(f"command: {prog!r} not found on PATH{hint}")


def job_env(job_id: int, job_dir: Path | str, restart_count: int, num_gpus: int,
            result_key: str | None = None) -> dict[str, str]:
    env = {
        "SCHEDULEARN_JOB_ID": str(job_id),
        "SCHEDULEARN_JOB_DIR": str(job_dir),
        "SCHEDULEARN_RESTART_COUNT": str(restart_count),
        "SCHEDULEARN_NUM_GPUS": str(num_gpus),
        "PYTHONUNBUFFERED": "1",  # log lines as they happen, not when a buffer fills
    }
    if result_key:
        env[RESULT_KEY_ENV] = result_key
    return env


#: What a job inherits from the server's environment: exact names, then prefixes. Nothing else
#: passes (the server's `SCHEDULEARN_*` settings such as `SCHEDULEARN_STORE_URL` with its
#: password, `SCHEDULEARN_REMOTE_TOKEN`, Jupyter's tokens, cloud credentials, ...).
INHERITED_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_HOME", "OMP_NUM_THREADS",
)
INHERITED_ENV_PREFIXES = ("LC_", "NCCL_")


def job_environment(
    scheduler: Mapping[str, str],
    spec_env: Mapping[str, str] = {},  # noqa: B006 - read only
    *,
    inherit: Mapping[str, str] | None = None,
    python: str | None = None,
    pythonpath: str | None = None,
    extra: Mapping[str, str] | None = None,
    home: str | None = None,
    user: str | None = None,
) -> dict[str, str]:
    """A job's whole environment, the one place it is made (local and Docker executors).

    In order, later wins: the allow-listed variables of `inherit` (the server's environment for
    the local executor; nothing for containers, which have their image's) — `INHERITED_ENV` and
    names starting with `INHERITED_ENV_PREFIXES`; `python`'s bin folder first on `PATH`; `home`
    and `user` (`HOME`, `USER`, `LOGNAME` of the OS account the job runs as); the operator's
    `extra` (an executor's `env`); the job's own `spec_env`; the `scheduler`'s variables
    (`SCHEDULEARN_JOB_*`, `CUDA_VISIBLE_DEVICES`, the launcher's `TORCH_*`: they win over the
    user's). `pythonpath` (the folder holding `schedulearn`) is appended to `PYTHONPATH` last."""
    env: dict[str, str] = {}
    for name, value in (inherit or {}).items():
        if name in INHERITED_ENV or name.startswith(INHERITED_ENV_PREFIXES):
            env[name] = value
    if python is not None:
        env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH") or os.defpath])
    if home is not None:
        env["HOME"] = home
    if user is not None:
        env["USER"] = env["LOGNAME"] = user
    env.update(extra or {})
    env.update(spec_env)
    env.update(scheduler)
    if pythonpath:
        pp = env.get("PYTHONPATH")
        env["PYTHONPATH"] = f"{pp}{os.pathsep}{pythonpath}" if pp else pythonpath
    return env


def _torchrun_target(command: list[str], python: str) -> list[str]:
    """torchrun runs `python <script> args` itself; anything else goes with --no-python."""
    exe = os.path.basename(command[0])
    if command[0] == python or exe.startswith("python"):
        rest = command[1:]
        while rest and rest[0] in ("-u", "-B"):
            rest = rest[1:]
        if rest and rest[0] == "-m":
            return ["--module", *rest[1:]]
        if rest and not rest[0].startswith("-"):
            return rest
    if command[0].endswith(".py"):
        return command
    return ["--no-python", *command]


def build_workers(
    spec: JobSpec,
    job_id: int,
    alloc: Allocation,
    job_dir: Path | str,
    restart_count: int = 0,
    nodes: Mapping[str, Node] | None = None,
    *,
    python: str = sys.executable,
    addresses: Mapping[str, str] | None = None,
    rdzv_port: int = DEFAULT_RDZV_PORT,
    use_uuids: bool = False,
    network_interface: str | None = None,
    runner: str | None = RUNNER,
    result_key: str | None = None,
    elastic_np: tuple[int, int] | None = None,
) -> list[Worker]:
    """The workers that run `spec` on `alloc` (node name -> GPU indices).

    `addresses` maps node names to the hostnames workers use to reach each other (the node's
    own name when absent). `network_interface` is Horovod's (`lo` on one host by default).
    `runner` is the job runner's path as the job sees it (None: Python programs run bare);
    `result_key` the job's key for signing its result (`SCHEDULEARN_RESULT_KEY`);
    `elastic_np` (min, max workers): a Horovod job runs under Horovod Elastic (on one host, or
    across hosts where the executor writes `elastic_host_files`), a torchrun job on one host
    under `torchrun_elastic`'s supervisor, to be resized in place (the executor
    writes `elastic_files` first)."""
    if not alloc:
        raise ExecutorError(f"job {job_id}: no GPUs allocated")
    nodes = nodes or {}
    addresses = addresses or {}
    hosts = list(alloc)
    total = sum(len(v) for v in alloc.values())
    command = user_command(spec, python, job_dir, runner)
    base = job_env(job_id, job_dir, restart_count, total, result_key)

    def env_for(name: str) -> dict[str, str]:
        env = dict(base)
        env["CUDA_VISIBLE_DEVICES"] = visible_devices(nodes.get(name), tuple(alloc[name]), use_uuids)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        return env

    launcher = Launcher(spec.launcher)
    if launcher is Launcher.python:
        if len(hosts) > 1:
            raise ExecutorError(
                f"launcher: python runs one process on one host, but job {job_id} was placed on "
                f"{len(hosts)} hosts ({', '.join(hosts)}); use torchrun or horovod")
        return [Worker(hosts[0], command, env_for(hosts[0]), tuple(alloc[hosts[0]]))]

    if launcher is Launcher.torchrun:
        if elastic_np is not None:  # resized in place: one elastic agent per GPU (torchrun_elastic)
            if len(hosts) > 1:
                raise ExecutorError(f"job {job_id}: torchrun resizes in place on one host only here")
            argv = torchrun_elastic.supervisor_argv(python, str(job_dir), elastic_np, command)
            return [Worker(hosts[0], argv, env_for(hosts[0]), tuple(alloc[hosts[0]]))]
        # On one host or several, the workers share the store of the agent the rendezvous makes
        # rank 0 (bound once, kept open); with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torch would
        # pick their store's port by binding port 0 and closing it, a race another socket can
        # win (EADDRINUSE at start).
        # (through the runner where there is one: a cancel or resize then ends the agent quietly,
        # status 143, not with torchrun's traceback and status 1)
        torchrun = [python, runner, "--torchrun"] if runner else [python, "-m", "torch.distributed.run"]
        target = _torchrun_target(command, python)
        if len(hosts) == 1:
            n = len(alloc[hosts[0]])
            argv = [*torchrun, "--standalone", f"--nproc-per-node={n}",
                    "--rdzv-conf=last_call_timeout=1", *target]
            return [Worker(hosts[0], argv, env_for(hosts[0]), tuple(alloc[hosts[0]]))]
        first = addresses.get(hosts[0], hosts[0])
        workers = []
        for rank, name in enumerate(hosts):
            argv = [
                *torchrun, f"--nnodes={len(hosts)}", f"--node-rank={rank}",
                f"--nproc-per-node={len(alloc[name])}", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={first}:{rdzv_port}", f"--rdzv-id=schedulearn-{job_id}-{restart_count}",
                "--rdzv-conf=last_call_timeout=1", f"--local-addr={addresses.get(name, name)}",
                *target,
            ]
            workers.append(Worker(name, argv, env_for(name), tuple(alloc[name])))
        return workers

    # Horovod: one horovodrun on the first host starts every rank (ssh to the others).
    hvd = [python, "-m", "horovod.runner.launch", "-np", str(total)]
    if elastic_np is not None:  # across hosts: the discovery script lists them (Docker executor)
        lo, hi = elastic_np
        nic = network_interface or ("lo" if not addresses else None)
        argv = ["/bin/sh", "-c", _WITH_PREWARM, python, PREWARM, str(job_dir),
                *hvd, "--min-np", str(lo), "--max-np", str(hi),
                "--host-discovery-script", str(Path(job_dir) / DISCOVER_SCRIPT),
                "--gloo", *(["--network-interface", nic] if nic else []),
                "/bin/sh", "-c", _SLOT_WRAPPER, python, PREWARM, *command]
        return [Worker(hosts[0], argv, env_for(hosts[0]), tuple(alloc[hosts[0]]))]
    if len(hosts) == 1:
        argv = [*hvd, "-H", f"localhost:{total}", "--gloo",
                "--network-interface", network_interface or "lo", *command]
    else:
        spread = ",".join(f"{addresses.get(h, h)}:{len(alloc[h])}" for h in hosts)
        argv = [*hvd, "-H", spread, "--gloo"]
        if network_interface:
            argv += ["--network-interface", network_interface]
        argv += command
    return [Worker(hosts[0], argv, env_for(hosts[0]), tuple(alloc[hosts[0]]))]


#: The exit-status wrapper where the job's account cannot run the jobs' Python (the server warns
#: of such an account at start, docs/server.md): a SIGTERM between its fork and the command's
#: exec is lost (`schedulearn.exitwrap` says why), and such a stop then waits for SIGKILL.
_SH_WRAPPER = 'f=$1; shift; trap : TERM INT; "$@"; rc=$?; echo $rc > "$f"; exit $rc'


def wrap_exit_code(argv: list[str], exit_file: str | Path, python: str | None = sys.executable) -> list[str]:
    """Run `argv` under `schedulearn/exitwrap.py`, which records its exit status in `exit_file`
    and exits with it: it outlives the command when the job is stopped, so a job started before
    a server restart can report its real exit code to the next server, and no SIGTERM sent to
    the group is lost while the command starts (see `schedulearn.exitwrap`). A command it cannot
    run reads `schedulearn-job: python: not found` in the job's log. With `python` None, under
    `/bin/sh` instead (`_SH_WRAPPER`)."""
    if python is None:
        return ["/bin/sh", "-c", _SH_WRAPPER, "schedulearn-job", str(exit_file), *argv]
    return [python, "-I", "-S", EXITWRAP, str(exit_file), *argv]
