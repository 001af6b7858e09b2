"""Run jobs as process groups on this host.

Each job has a directory `<job_root>/<id>/`: the bundled script (`main.py`), `log.txt` (stdout
and stderr of every run, appended, a marker line per (re)start and exit), `checkpoints/`, `pid`
(pid, process start time and boot id of the running run: what a restarted server re-attaches
to) and `exit_code` (written by the run's wrapper, `schedulearn/exitwrap.py`, so that a
re-attached run's real exit status is known even though it is not our child).

The run lifecycle (stop = SIGTERM, `cancel_grace` seconds, SIGKILL; resize = the same stop, then
a relaunch at the new size in the same directory with `SCHEDULEARN_RESTART_COUNT` =
`job.restarts`, the old run's end reported as `engine.report_released`) is `lifecycle.RunExecutor`;
what is local is how a run starts (a process group behind the gate below), how it is signalled
(`killpg`) and watched: one thread per running job waits for its process (`waitid` for our
children, a pidfd for runs re-attached after a restart), so nothing polls while jobs run.

Crash consistency: a run's process starts behind a gate — a `/bin/sh` that waits for one line on
its stdin (a pipe from this executor) before it execs the job. The line is written only after
the `pid` file is; if the server dies first the pipe closes and the gate exits without running
anything, leaving its run number in the job directory's `gate_closed`. So a run that ever ran
user code always has its `pid` file, and after a restart `adopt` either re-attaches to it or knows
that it never ran (the engine then starts it again); a resize's relaunch found dead behind a
closed gate is launched again (`_reattach`), not reported lost.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import busygpus, gpulocks, joblogs, nofollow, pauses
from ..inventory import HostInventory, Inventory, gpu_names
from ..jobfiles import EXIT_CODE_FILE, GATE_CLOSED_FILE, PID_FILE
from ..model import Allocation, Gpu, Job, JobSpec, Launcher, Node
from . import oom
from .base import ExecutorError, Unavailable
from .jobdir import check_host_workdir, check_no_image
from .launch import (
    EXITWRAP,
    RUNNER,
    WORKERS_DIR,
    build_workers,
    check_command,
    elastic_files,
    job_environment,
    prepare_elastic_dir,
    user_command,
    wrap_exit_code,
)
from .lifecycle import Run, RunExecutor, reattached_line, resized_line, start_line
from .registry import ExecutorKind, Option
from .torchrun_elastic import resizable as _torchrun_resizable

if TYPE_CHECKING:
    from ..service import Settings

#: the gate's exit status when its pipe closed before the go-ahead (the run never started)
GATE_CLOSED = 75


def _gate(cwd: Path | str, closed: Path | str, restarts: int) -> list[str]:
    """The run's first process: waits for the go-ahead, changes into `cwd`, then execs the rest of
    its argv; if its pipe closes first (the server died), it writes `restarts` into `closed` and
    exits with `GATE_CLOSED`, having run nothing. The change is made here, by the job's own
    account (the shared set-up), never by the root server before the switch: a process that
    entered a folder as root keeps reading what lies there even when a folder above is private to
    another user (bob's `--workdir` set to alice's checkpoints, inside her 0700 job directory,
    read her model)."""
    enter = ('cd -- "$1" 2>/dev/null || '
             '{ echo "schedulearn: workdir: cannot enter $1 as $(id -un)" >&2; exit 1; }')
    first = f"echo {oom.JOB_OOM_SCORE_ADJ} > /proc/self/oom_score_adj 2>/dev/null"  # (`oom`: jobs go first)
    unopened = f'{{ {{ echo "$3" >"$2"; }} 2>/dev/null; exit {GATE_CLOSED}; }}'
    return ["/bin/sh", "-c", f'read -r go || {unopened}; {enter}; {first}; shift 3; exec "$@" '
            '</dev/null', "schedulearn-gate", str(cwd), str(closed), str(restarts)]


log = logging.getLogger("schedulearn.executors.local")

#: The reason's start for a run found gone, with no exit status, after a server restart.
LOST = "lost on restart"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding `schedulearn`


@dataclass(eq=False, kw_only=True)
class _Run(Run):
    pid: int  # the process group's leader (and the group's id)
    popen: subprocess.Popen | None = None  # None for a run re-attached after a restart
    elastic: tuple[int, int] | None = None  # Horovod Elastic's (min, max) workers: resized in place
    #: its host-wide GPU claims (`gpulocks`): GPU index -> this server's copy of the descriptor
    #: (its processes inherited those of the GPUs it started on: a restarted server has none)
    claims: dict[int, int] = field(default_factory=dict)
    #: the file counting OOM kills in its memory cgroup, and the count as it started (`oom`)
    oom: tuple[str | None, int | None] = (None, None)


class LocalExecutor(RunExecutor):
    def __init__(
        self,
        job_root: Path | str,
        cancel_grace: float = 10.0,
        python: str = sys.executable,
        use_uuids: bool = False,
        env: dict[str, str] | None = None,
        run_as: Callable[[str], object] | None = None,
        inventory: Inventory | None = None,
    ):
        if cancel_grace < 0:
            raise ValueError(f"cancel_grace: expected seconds >= 0, got {cancel_grace}")
        self.job_root = Path(job_root).resolve()  # jobs get it as SCHEDULEARN_JOB_DIR, from their own cwd
        self.job_root.mkdir(parents=True, exist_ok=True)
        self.cancel_grace = cancel_grace
        self.python = python
        self.use_uuids = use_uuids
        self.env = dict(env or {})  # for every job, on top of the allow-list (launch.job_environment)
        self.run_as = run_as  # user name -> accounts.Account (the shared set-up)
        self._problems: dict[int, str | None] = {}  # uid -> account_problem's answer
        self.inventory = inventory  # this host's GPUs (default: NVML, or none)
        #: host-wide claims of the GPUs a run uses (`gpulocks`: another scheduler on this machine
        #: leaves them alone); None: none taken
        self.gpu_locks: gpulocks.GpuLocks | None = None
        #: a GPU none of its jobs is on is held while a process there uses this many MiB of its
        #: memory or more (`busygpus`); 0: never
        self.gpu_busy_mib = busygpus.DEFAULT_MIB
        self._boot_id = _boot_id()
        self._init_runs()

    def check_spec(self, spec: JobSpec) -> None:
        check_no_image(spec, "local")
        check_host_workdir(spec, self.account_for(spec))

    # -- after a restart ---------------------------------------------------------------------------
    def _reattach(self, job: Job) -> _Run | None:
        info = self._pid_info(job.id)
        if info is not None and job.stopping is None and not self._alive(info):
            run_no = int(info.get("restarts", 0))
            if run_no < job.restarts:  # a resize was recorded and its old run is gone
                self._relaunch_now(job.id, job.spec, dict(job.alloc), job.restarts)
                return None
            if run_no == job.restarts and self._gate_closed(job.id, run_no):
                # a resize's relaunch cut short behind its gate: nothing of it ran
                joblogs.append_line(self.log_path(job.id), f"{joblogs.MARKER} run #{run_no} never started "
                                    "(the server stopped before its gate opened): starting it again ===\n")
                self._relaunch_now(job.id, job.spec, dict(job.alloc), job.restarts)
                return None
        return self._find_run(job)

    def _gate_closed(self, job_id: int, restarts: int) -> bool:
        """Whether run `restarts` of the job closed its gate unopened (`_gate`)."""
        try:  # (the job's own file: a few bytes are read, whatever it holds)
            said = nofollow.read_text(self.job_dir(job_id) / GATE_CLOSED_FILE, limit=32)
        except (OSError, ValueError):
            return False
        return said.strip() == str(restarts)

    def adopt(self, job: Job) -> bool:
        info = self._pid_info(job.id)
        if info is None or int(info.get("restarts", -1)) != job.restarts:
            return False  # the gate never opened for this run: nothing of it ran
        if self._alive(info):
            run = self._find_run(job)
            if run is None:
                return False
            self._adopted(run)
            return True
        code = _read_exit_code(self.job_dir(job.id) / EXIT_CODE_FILE)
        if code is None or info.get("boot_id") != self._boot_id:
            return False  # its pid file was written but the gate closed (or the host rebooted)
        self._find_run(job)  # ended while the server was down: reports that exit
        return True

    def account_problem(self, account: Any) -> str | None:
        """Whether `account` can run the jobs' Python and read the job runner and the exit-status
        wrapper, as its jobs must (this Python may live where only root can read, e.g. a
        virtualenv under /root: every Python job of that account then failed with `python:
        Permission denied`; its other jobs start under the `/bin/sh` wrapper). Asked once per
        account (`serve` asks at start; the first launch of each account's jobs reuses it)."""
        if account.uid not in self._problems:
            self._problems[account.uid] = self._probe(account)
        return self._problems[account.uid]

    def _probe(self, account: Any) -> str | None:
        env = job_environment({}, python=self.python, pythonpath=_PACKAGE_ROOT, home=account.home,
                              user=account.name)
        probe = "import os, sys; sys.exit(0 if all(os.access(f, os.R_OK) for f in sys.argv[1:]) else 3)"
        try:
            p = subprocess.run([self.python, "-c", probe, RUNNER, EXITWRAP], cwd="/", env=env,
                               capture_output=True, text=True, timeout=60, **account.popen_kwargs())
        except OSError as e:
            return f"it cannot run {self.python} ({e.strerror})"
        except subprocess.TimeoutExpired:
            return f"{self.python} did not start in 60 s as that account"
        if p.returncode == 3:
            return f"it cannot read the job runner {RUNNER}"  # exitwrap.py lies beside it
        if p.returncode != 0:
            return f"{self.python} fails as that account ({(p.stderr.strip().splitlines() or ['?'])[-1]})"
        return None

    def _wrapper_python(self, account: Any) -> str | None:
        """The Python that runs `account`'s exit-status wrapper (`schedulearn.exitwrap`): the jobs'
        own, unless that account cannot run it (then None: the `/bin/sh` wrapper, as before
        2026-11-29, so that its jobs that need no Python of the server's still start)."""
        return self.python if account is None or self.account_problem(account) is None else None

    # -- beyond the Executor interface -------------------------------------------------------------
    def pid(self, job_id: int) -> int | None:
        """The process (group) id of the job's current run."""
        with self._lock:
            run = self._runs.get(job_id)
            return run.pid if isinstance(run, _Run) else None

    # -- resizing in place (Horovod Elastic on this host) -------------------------------------------
    def _elastic_np(self, spec: JobSpec, alloc: Allocation) -> tuple[int, int] | None:
        """(min, max) workers when this run of the job goes under Horovod Elastic or torchrun's
        elastic agents (`torchrun_elastic`): it asks to be resized in place, it is elastic, on
        this one host."""
        if not (spec.in_place and spec.elastic and len(alloc) == 1
                and Launcher(spec.launcher) in (Launcher.horovod, Launcher.torchrun)):
            return None
        total = self.engine.total_gpus if self.engine is not None else sum(len(v) for v in alloc.values())
        n = sum(len(v) for v in alloc.values())
        return min(spec.min_size, n), max(spec.max_size(total), n)

    def _write_elastic(self, job_id: int, alloc: Allocation) -> None:
        """The job's `gpus` then `hosts` files, each replaced atomically (a worker that a grow
        adds reads its GPUs before discovery can see the new size)."""
        d = self.job_dir(job_id)
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        for name, text in elastic_files(alloc, nodes, self.use_uuids).items():
            tmp = d / (name + ".tmp")
            tmp.unlink(missing_ok=True)
            nofollow.write_text(tmp, text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, d / name)

    def resizes_in_place(self, job: Job, alloc: Allocation) -> bool:
        n = sum(len(v) for v in alloc.values())
        with self._lock:
            run = self._runs.get(job.id)
            ok = (isinstance(run, _Run) and run.elastic is not None and run.stopping is None
                  and job.id not in self._relaunch and len(alloc) == 1
                  and run.elastic[0] <= n <= run.elastic[1])
        if ok and Launcher(job.spec.launcher) is Launcher.torchrun:  # its slots, its last resize
            ok = len(job.alloc) == 1 and list(job.alloc) == list(alloc) and _torchrun_resizable(
                list(next(iter(job.alloc.values()))), list(next(iter(alloc.values()))),
                job.extra.get(pauses.PENDING_KEY), time.time())
        return ok

    def resize_in_place(self, job: Job, old: Allocation, now: float) -> None:
        alloc = dict(job.alloc)
        n, was = sum(len(v) for v in alloc.values()), sum(len(v) for v in old.values())
        with self._lock:
            run = self._runs.get(job.id)
        if not isinstance(run, _Run):
            return  # it has just ended: that exit is reported
        try:
            run.claims.update(self._claim_grown(job, old, alloc))
        except gpulocks.GpusTaken as e:  # (as below: the run goes on at its old size)
            log.error("job %s: not grown in place: %s", job.id, e)
            self._append_log(run, f"{joblogs.MARKER} run #{run.restarts} not grown in place: {e} ===\n")
            return
        try:
            self._write_elastic(job.id, alloc)
        except OSError as e:  # the run goes on at its old size; the books say the new one
            log.error("job %s: cannot write its Horovod Elastic allocation: %s", job.id, e)
            return
        nodes = {x.name: x for x in self.engine.nodes} if self.engine is not None else {}
        cuda = elastic_files(alloc, nodes, self.use_uuids)["gpus"].strip()
        self._append_log(run, resized_line(run.restarts, was, n, cuda,
                                           horovod=Launcher(job.spec.launcher) is Launcher.horovod))
        if n < was:  # the GPUs are free once the workers of the removed slots are gone
            pids = _slot_pids(self.job_dir(job.id) / WORKERS_DIR, n)
            removed = {p: _start_time(p) for p in pids if _descends_from(p, run.pid)}
            keep = {i for v in alloc.values() for i in v}
            threading.Thread(target=self._wait_removed, args=(run, removed, keep), name=f"shrink-{job.id}",
                             daemon=True).start()

    #: seconds the workers a shrink removes get to leave on their own (Horovod stops them at
    #: their next `state.commit()`), then SIGTERM, `cancel_grace`, SIGKILL
    shrink_wait = 60.0

    def _wait_removed(self, run: _Run, removed: dict[int, int | None], keep: set[int] | None = None) -> None:
        """Wait until the workers a shrink removed (pid -> start time: the processes their slots
        had when it was decided; a worker a later grow starts in the same slot is not one of
        them) are gone, then report the shrink's GPUs free; they are stopped if they stay. A
        removed worker is gone when it has ended, not when it stops being the run's descendant:
        one orphaned by its parent's end still holds its GPU."""
        deadline, sent = time.monotonic() + self.shrink_wait, signal.SIGTERM
        while not run.gone.is_set():
            left = [p for p, t in removed.items() if _is_process(p, t)]
            if not left:
                break
            if time.monotonic() >= deadline:
                log.warning("job %s: workers %s removed by a shrink are still there: %s", run.job_id, left,
                            signal.Signals(sent).name)
                for p in left:
                    try:
                        os.kill(p, sent)
                    except OSError:
                        pass
                wait = self.cancel_grace if sent == signal.SIGTERM else 5.0
                deadline, sent = time.monotonic() + wait, signal.SIGKILL
            time.sleep(0.05)
        if keep is not None:  # (the GPUs it no longer runs on are no longer claimed, for every copy)
            self._unclaim(run, keep)
        self._released(run.job_id)

    def _unclaim(self, run: _Run, keep: set[int] | frozenset[int] = frozenset()) -> None:
        """End the run's GPU claims, but those of the GPUs in `keep`."""
        with self._lock:
            gone = [run.claims.pop(i) for i in list(run.claims) if i not in keep]
        gpulocks.GpuLocks.release(gone)

    # -- launching ---------------------------------------------------------------------------------
    def _env(self, spec: JobSpec, extra: dict[str, str]) -> dict[str, str]:
        """The allow-listed part of the server's environment, never all of it; the scheduler's
        variables (`extra`) win over the user's."""
        return job_environment(extra, spec.env, inherit=os.environ, python=self.python,
                               pythonpath=_PACKAGE_ROOT, extra=self.env)

    def _launch(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int) -> _Run:
        if len(alloc) > 1:
            raise ExecutorError(
                f"job {job_id}: the local executor runs jobs on this host only, but it was placed on "
                f"{len(alloc)} nodes ({', '.join(alloc)}); declare one node or use the Docker executor")
        d = self.job_dir(job_id)
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        elastic = self._elastic_np(spec, alloc)
        (worker,) = build_workers(spec, job_id, alloc, d, restarts, nodes, python=self.python,
                                  use_uuids=self.use_uuids, result_key=self.result_key(job_id),
                                  elastic_np=elastic)
        account = self.account_for(spec)
        env = self._env(spec, worker.env)
        if account is not None:
            env.update(account.env())  # HOME, USER, LOGNAME: the account's
        cwd = self.host_workdir(job_id, spec, account)
        check_command(user_command(spec, self.python, d), env["PATH"], cwd)
        exit_file = d / EXIT_CODE_FILE
        exit_file.unlink(missing_ok=True)
        (d / GATE_CLOSED_FILE).unlink(missing_ok=True)
        if elastic is not None:
            self._prepare_elastic(d, job_id, alloc, account)
        with self._open_log(job_id) as logf:
            claims = self._claim(job_id, spec, alloc, restarts, logf)
            try:
                popen = self._spawn(job_id, restarts, worker, cwd, exit_file, env, account, logf, claims)
            except BaseException:
                gpulocks.GpuLocks.release(claims.values())
                raise
        assert popen.stdin is not None
        kills = oom.counter(popen.pid)
        run = _Run(job_id=job_id, restarts=restarts, pid=popen.pid, popen=popen, elastic=elastic,
                   claims=claims, oom=(kills, oom.count(kills)))
        info = {"pid": popen.pid, "start_time": _start_time(popen.pid), "boot_id": self._boot_id,
                "restarts": restarts, "argv": worker.argv, "elastic": list(elastic) if elastic else None,
                "oom": list(run.oom)}
        try:  # the pid file first: a run that may ever run user code can be found after a crash
            tmp = d / (PID_FILE + ".tmp")
            tmp.unlink(missing_ok=True)
            nofollow.write_text(tmp, json.dumps(info))
            os.replace(tmp, d / PID_FILE)
        except BaseException:
            popen.stdin.close()  # the gate sees the pipe close and exits without running the job
            popen.wait()
            gpulocks.GpuLocks.release(claims.values())
            raise
        try:
            popen.stdin.write(b"go\n")
            popen.stdin.close()
        except OSError:  # the gate is gone already (killed): its watcher reports the exit
            pass
        self._watch(run)
        return run

    def _spawn(self, job_id: int, restarts: int, worker: Any, cwd: Path, exit_file: Path,
               env: dict[str, str], account: Any, logf: Any, claims: dict[int, int]) -> subprocess.Popen:
        """The run's gate process (its GPU claims inherited), its start line in the log first."""
        cuda = worker.env["CUDA_VISIBLE_DEVICES"]
        logf.write(start_line(job_id, restarts, cuda, worker.shell()).encode())
        logf.flush()
        gate = _gate(cwd, exit_file.parent / GATE_CLOSED_FILE, restarts)
        argv = [*gate, *wrap_exit_code(worker.argv, exit_file, self._wrapper_python(account))]
        try:
            return subprocess.Popen(
                argv, cwd="/", env=env,
                stdin=subprocess.PIPE, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                close_fds=True, pass_fds=tuple(claims.values()),
                **(account.popen_kwargs() if account is not None else {}))
        except OSError as e:
            raise ExecutorError(f"job {job_id}: could not start the process: {e}") from None

    def _claim(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int,
               logf: Any) -> dict[int, int]:
        """The host-wide claims of the run's GPUs (`gpulocks`), for the run to inherit; where
        another scheduler's run took one since the inventory was read, `Unavailable` (the job
        is placed anew) and its log says so."""
        if self.gpu_locks is None:
            return {}
        try:
            return self.gpu_locks.claim(self._gpus(alloc), {"job": job_id, "run": restarts,
                                                            "user": spec.user})
        except gpulocks.GpusTaken as e:
            logf.write(f"{joblogs.MARKER} run #{restarts} not started: {e}; placed anew ===\n".encode())
            nodes = copy.deepcopy(self.engine.nodes) if self.engine is not None else []
            raise Unavailable(str(e), self._mark_claimed(nodes)) from None

    def _claim_grown(self, job: Job, old: Allocation, alloc: Allocation) -> dict[int, int]:
        """The claims of the GPUs an in-place grow adds, held by this server only (the run's
        processes started before them: they inherited the first GPUs' claims)."""
        if self.gpu_locks is None:
            return {}
        return self.gpu_locks.claim(self._gpus(alloc, but=old),
                                    {"job": job.id, "run": job.restarts, "user": job.spec.user})

    def _gpus(self, alloc: Allocation, but: Allocation | None = None) -> list[Gpu]:
        """The engine's `Gpu`s of `alloc` (one node: this host), less those of `but`."""
        name = next(iter(alloc), "")
        nodes = self.engine.nodes if self.engine is not None else []
        node = next((n for n in nodes if n.name == name), None)
        wanted = set(alloc.get(name, ())) - set((but or {}).get(name, ()))
        return [g for g in node.gpus if g.index in wanted] if node is not None else []

    def nodes(self) -> list[Node]:
        """This host's GPUs, those that another scheduler's run claims marked held (`gpulocks`),
        those a run of this scheduler's still claims where its job no longer runs (a process of
        its run outlived it), and those a process the scheduler did not start uses (`busygpus`)."""
        return self._mark_busy(self._mark_claimed(super().nodes()))

    def _mark_busy(self, nodes: list[Node]) -> list[Node]:
        """`nodes` with the GPUs no job of this scheduler is on, that a process uses
        `gpu_busy_mib` MiB of or more, marked held (`busygpus`; not GPUs held already)."""
        processes = getattr(self.inventory, "processes", None)
        if not processes or self.gpu_busy_mib <= 0:
            return nodes
        placed = self._placed(nodes)
        for node in nodes:
            for gpu in node.gpus:
                if gpu.held_by or gpu.virtual or (node.name, gpu.index) in placed:
                    continue
                gpu.held_by = busygpus.holder(processes.get(gpu.uuid, ()), self.gpu_busy_mib)
        return nodes

    def _placed(self, nodes: list[Node]) -> set[tuple[str, int]]:
        """The GPUs (node, index) the engine's books give a job — or, read at start-up before
        the engine has its books, that this scheduler's claims hold (its re-attached runs')."""
        placed: set[tuple[str, int]] = set()
        if self.engine is None:
            locks = self.gpu_locks
            for node in nodes if locks is not None else ():
                mine = {u for u, h in locks.holders(node.gpus).items() if h.get("owner") == locks.owner}
                placed.update((node.name, g.index) for g in node.gpus if g.uuid in mine)
            return placed
        for job in list(self.engine.active.values()):
            for alloc in (job.alloc, job.releasing):
                placed.update((name, i) for name, idx in list(alloc.items()) for i in idx)
        return placed

    def _mark_claimed(self, nodes: list[Node]) -> list[Node]:
        locks = self.gpu_locks
        if locks is None:
            return nodes
        for node in nodes:
            holders = locks.holders(node.gpus)
            for gpu in node.gpus:
                holder = holders.get(gpu.uuid)
                if holder is not None and not gpu.held_by and not self._ours(holder, node.name, gpu.index):
                    gpu.held_by = gpulocks.describe(holder, locks.owner)
        return nodes

    def _ours(self, holder: dict[str, Any], node: str, index: int) -> bool:
        """Whether a claim is of a job of this scheduler's that its books place on that GPU (or,
        read at start-up before the engine has its books, of this scheduler's at all)."""
        if self.gpu_locks is None or holder.get("owner") != self.gpu_locks.owner:
            return False
        if self.engine is None:
            return True
        job = self.engine.jobs.get(holder.get("job"))
        return job is not None and (index in job.alloc.get(node, ()) or index in job.releasing.get(node, ()))

    def _prepare_elastic(self, d: Path, job_id: int, alloc: Allocation, account: object) -> None:
        """Horovod Elastic's files: the discovery script, the allocation, an empty `workers/`."""
        try:
            workers = prepare_elastic_dir(d)
            self._write_elastic(job_id, alloc)
            if account is not None:
                os.chown(workers, account.uid, account.gid, follow_symlinks=False)  # type: ignore[attr-defined]
        except OSError as e:
            raise ExecutorError(f"job {job_id}: cannot write its Horovod Elastic files: {e.strerror}: "
                                f"{e.filename}") from None

    # -- watching and signalling -------------------------------------------------------------------
    def _watch(self, run: Run) -> None:
        assert isinstance(run, _Run)
        threading.Thread(target=self._wait_run, args=(run,), name=f"watch-{run.job_id}", daemon=True).start()

    def _wait_run(self, run: _Run) -> None:
        """Wait (blocking, in this thread) for the run's leader to exit, clear its group, report."""
        code: int | None = None
        if run.popen is not None:
            try:
                os.waitid(os.P_PID, run.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: pgid held
            except ChildProcessError:
                pass
            self._drain_group(run)
            code = run.popen.wait()
        else:
            _wait_foreign(run.pid)
            self._drain_group(run)
            # Not our child: its status is what the wrapper recorded, or unknown when the wrapper
            # itself was killed (never -1, which would read as "killed by SIGHUP").
            code = _read_exit_code(self.job_dir(run.job_id) / EXIT_CODE_FILE)
        self._unclaim(run)
        self._run_over(run, code, self._end_reason(run, code))

    def _drain_group(self, run: _Run) -> None:
        """After the leader's exit: what is left of its process group goes too (SIGTERM, then
        SIGKILL at the stop's deadline, or half a second on a normal exit), then what is left of
        the run outside it (`_end_strays`)."""
        pgid = run.pid
        deadline = run.deadline if run.deadline is not None else time.monotonic() + 0.5
        if _group_alive(pgid):
            if run.stopping is None:
                _killpg(pgid, signal.SIGTERM)
            while _group_alive(pgid):
                if time.monotonic() >= deadline:
                    _killpg(pgid, signal.SIGKILL)
                    run.killed = True
                    end = time.monotonic() + 5
                    while _group_alive(pgid) and time.monotonic() < end:
                        time.sleep(0.01)
                    break
                time.sleep(0.02)
        self._end_strays(run, deadline)

    def _end_strays(self, run: _Run, deadline: float) -> None:
        """The run's processes outside its process group, by the marks in their environment
        (`_strays`): torchrun and Horovod start each worker in a session of its own, so a worker
        that its launcher did not stop before the launcher was killed (one that ignores or
        outlasts SIGTERM: a hung collective, a long save) outlived the group's SIGKILL, held its
        GPU, and the GPU was given to the next job. They get SIGTERM, then SIGKILL at the
        deadline (at once if it has passed); the job's log says so. Not once this executor is
        closed: the job is the next executor's then, and a run of it started since (requeued
        after a crash, at the same restart count) carries the same marks."""
        if self._closed.is_set():
            return
        marks = _run_marks(self.job_dir(run.job_id), run.restarts)
        left = _strays(marks)
        if not left:
            return
        self._append_log(run, f"schedulearn: stopping {len(left)} process(es) of the run left outside its "
                              f"process group (pids {', '.join(map(str, left))})\n")
        log.warning("job %s: stopping processes left outside the run's process group: %s", run.job_id, left)
        for pid in left:
            _kill(pid, signal.SIGTERM)
        while (left := _strays(marks)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if left:
            for pid in left:
                _kill(pid, signal.SIGKILL)
            run.killed = True
            end = time.monotonic() + 5
            while _strays(marks) and time.monotonic() < end:
                time.sleep(0.05)

    def _signal(self, run: Run, sig: int) -> None:
        assert isinstance(run, _Run)
        _killpg(run.pid, sig)

    def _failure(self, run: Run, code: int | None) -> str:
        """Why a run with exit status `code` failed: the signal that ended it, the log's last
        exception line, or the code. `code` < 0 is the signal that killed our child (its
        wrapper) and 128 + N the wrapper's report of a command ended by signal N; None: the
        wrapper itself was killed (a re-attached run's status is unknown)."""
        assert isinstance(run, _Run)
        text = self._why_failed(run, code)
        memory = oom.note(*run.oom)
        return f"{memory}; {text}" if memory else text

    def _why_failed(self, run: _Run, code: int | None) -> str:
        last = joblogs.failure_reason(joblogs.tail(self.log_path(run.job_id), joblogs.REASON_LINES))
        if code is None:
            text = (f"ended without recording its exit status (its wrapper, pid {run.pid}, was killed, "
                    "e.g. by SIGKILL, not by the scheduler); exit status unknown")
            return f"{text}; last log line: {last}" if last else text
        sig = -code if code < 0 else (code - 128 if code > 128 else 0)
        if 0 < sig < signal.NSIG and (code < 0 or sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV,
                                                         signal.SIGABRT, signal.SIGBUS, signal.SIGINT)):
            who = "killed by" if code < 0 else "ended by"
            text = f"{who} {signal.Signals(sig).name}, not by the scheduler"
            return f"{text}; last log line: {last}" if last else text
        return last or f"exit code {code}"

    # -- re-attaching after a restart --------------------------------------------------------------
    def _pid_info(self, job_id: int) -> dict | None:
        try:
            # the server's own file: a job cannot make us signal another process group
            info = json.loads(nofollow.read_text(self.job_dir(job_id) / PID_FILE, owner=os.geteuid()))
            int(info["pid"]), info["start_time"]  # noqa: B018 - both must be there
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return info if isinstance(info, dict) else None

    def _alive(self, info: dict) -> bool:
        pid, started = int(info["pid"]), info["start_time"]
        return info.get("boot_id") == self._boot_id and started is not None and _is_process(pid, started)

    def _find_run(self, job: Job) -> _Run | None:
        """The job's run from its pid file if it still runs (not watched yet); else its end
        (or its loss) is reported and None returned."""
        d = self.job_dir(job.id)
        info = self._pid_info(job.id)
        if info is None:
            self._report(job.id, None, f"{LOST}: no record of its process ({PID_FILE} file missing or "
                                       "unreadable); exit status unknown")
            return None
        pid = int(info["pid"])
        if self._alive(info):
            np = info.get("elastic")
            run = _Run(job_id=job.id, restarts=int(info.get("restarts", 0)), pid=pid,
                       elastic=(int(np[0]), int(np[1])) if isinstance(np, list) and len(np) == 2 else None,
                       oom=_oom_info(info.get("oom")))
            self._append_log(run, reattached_line(run.restarts, f"pid {pid}"))
            if run.elastic is not None and job.alloc:  # a resize in place recorded before the crash
                self._write_elastic(job.id, dict(job.alloc))
            return run
        code = _read_exit_code(d / EXIT_CODE_FILE) if info.get("boot_id") == self._boot_id else None
        if code is None:
            self._report(job.id, None, f"{LOST}: ended while the server was down; exit status unknown")
        else:
            why = "" if code == 0 else f"exit code {code} while the server was down: " + (
                joblogs.failure_reason(self.logs(job.id, joblogs.REASON_LINES)) or "no log")
            self._report(job.id, code, why)
        return None


def _oom_info(value: Any) -> tuple[str | None, int | None]:
    """A pid file's `oom` ([counter file, count at the start]), checked: the file is one of the
    cgroup file system's, never a path a job could make the server read elsewhere."""
    if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int) and value[0].startswith(f"{oom.CGROUP_ROOT}/")
            and ".." not in value[0]):
        return value[0], value[1]
    return None, None


def _slot_pids(workers: Path, keep: int) -> list[int]:
    """The pids the Horovod Elastic workers of slots >= `keep` recorded, one a line (the slot
    wrapper's, then the worker's a prewarm server forked for it; the job's own files: only ever
    used for processes that descend from its run, `_descends_from`)."""
    out = []
    try:
        entries = list(os.scandir(workers))
    except OSError:
        return out
    for e in entries:
        if e.name.isdigit() and int(e.name) >= keep:
            try:
                text = nofollow.read_text(e.path, limit=4096)  # (a few pids)
            except (OSError, ValueError):
                continue
            out.extend(int(w) for w in text.split() if w.isdigit())
    return out


def _descends_from(pid: int, ancestor: int) -> bool:
    """Whether `pid` is alive (not a zombie) and a descendant of `ancestor` (Horovod starts its
    workers in sessions of their own: not in the run's process group)."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    for _ in range(64):
        ppid = int(fields[1])
        if ppid == ancestor:
            return True
        if ppid <= 1:
            return False
        fields = _stat_fields(ppid)
        if not fields:
            return False
    return False


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _run_marks(job_dir: Path, restarts: int) -> tuple[bytes, bytes]:
    """What every process of a run has in its environment (`launch.job_env`): its job's
    directory and its restart count (a later run of the job has another)."""
    return f"SCHEDULEARN_JOB_DIR={job_dir}".encode(), f"SCHEDULEARN_RESTART_COUNT={restarts}".encode()


def _strays(marks: tuple[bytes, ...]) -> list[int]:
    """Live processes whose environment (as they were started: `/proc/<pid>/environ`) holds
    every one of `marks`; where it cannot be read (another user's, without the privilege to
    stop it either) the process is not counted."""
    found = []
    me = os.getpid()
    for pid in _pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(m in env for m in marks) and not _is_zombie(pid):
            found.append(pid)
    return found


def _pids() -> Iterator[int]:
    """The pids in /proc now."""
    return (int(e.name) for e in os.scandir("/proc") if e.name.isdigit())


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def _is_process(pid: int, start: int | None) -> bool:
    """Whether `pid` is still the process that started at `start` (clock ticks after boot),
    alive and not a zombie (not a later process that reuses its pid)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ("Z", "X") and int(fields[19]) == start


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/<pid>/stat)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def _is_zombie(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is None or fields[0] in ("Z", "X")


def _group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process is left in process group `pgid`."""
    for pid in _pids():
        fields = _stat_fields(pid)
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _wait_foreign(pid: int) -> None:
    """Block until `pid` (not our child) exits: a pidfd where the kernel has them."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        while not _is_zombie(pid):  # no pidfd: poll slowly
            time.sleep(0.5)
        return
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        while not p.poll():
            pass
    finally:
        os.close(fd)


def _read_exit_code(path: Path) -> int | None:
    try:  # (written by the run's wrapper, as the job: a few bytes are read, whatever it holds)
        return int(nofollow.read_text(path, limit=32).strip())
    except (OSError, ValueError):
        return None


GPUS = Option("local_gpus", [], "this machine's GPUs the scheduler may give jobs: indices or UUIDs, "
              "comma-separated (e.g. 1,2,3 keeps GPU 0 for the desktop or interactive work); default all")


GPU_BUSY = Option("gpu_busy_mib", busygpus.DEFAULT_MIB, "a GPU is held from the scheduler's jobs while "
                  "a process it did not start (someone's python train.py, a kernel that loaded a "
                  "model) uses this many MiB of its memory or more; 0: never")


GPU_LOCKS = Option("gpu_locks", "", "where runs claim their GPUs host-wide, so that another scheduler "
                   "on this machine (someone else's JupyterLab) leaves them alone: '' = "
                   f"{gpulocks.DEFAULT_DIR}, for this machine's real GPUs; a directory, for virtual GPUs "
                   "too; 'off': no claims")


def _make(settings: Settings) -> LocalExecutor:
    ex = LocalExecutor(settings.job_root, settings.cancel_grace, run_as=settings.run_as())
    ex.gpu_locks = gpulocks.from_setting(settings.options.get(GPU_LOCKS.name, ""), ex.job_root)
    busy = settings.options.get(GPU_BUSY.name, GPU_BUSY.default)
    if isinstance(busy, bool) or not isinstance(busy, int) or busy < 0:
        raise ValueError(f"gpu_busy_mib: expected MiB >= 0 (0: never), got {busy!r}")
    ex.gpu_busy_mib = busy
    only = settings.options.get(GPUS.name) or []
    if only:  # (else the service gives it this host's inventory)
        ex.inventory = inv = HostInventory(settings.virtual_gpus, settings.node_name, only=only)
        if not inv.refresh()[0].gpus:  # a typo leaves the scheduler nothing: said at start
            inv.close()
            raise ValueError(f"local_gpus: none of {', '.join(inv.only)} is a GPU of this machine "
                             f"(it has {gpu_names(inv.found)})")
    return ex


KIND = ExecutorKind("local", "processes on this host", LocalExecutor, _make,
                    options=(GPUS, GPU_BUSY, GPU_LOCKS))

__all__ = ["KIND", "LocalExecutor"]
