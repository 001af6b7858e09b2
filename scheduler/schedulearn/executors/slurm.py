"""Run jobs through Slurm: Schedulearn decides which jobs run, how many GPUs each gets and on which
nodes; Slurm runs them (as their users, confined to their GPUs) on the cluster it owns.

Each run of a job is one Slurm batch job in one partition (`slurm_partition`, default the
cluster's default partition), submitted with `sbatch` exactly where the policy placed it:

* one node: `--nodes=1 --nodelist=N --gres=gpu:K`; several nodes with the same count each:
  `--nodes=H --nodelist=A,B --gres=gpu:K --ntasks-per-node=1`; uneven counts (3 + 1): a
  heterogeneous job, one component per node (Slurm starts those through its backfill scheduler,
  so within `bf_interval`);
* `--output` = the job's `log.txt` (appended), `--chdir`; the job's environment is written into
  its scripts (the allow-list of `launch.job_environment`), and sbatch itself runs with only
  `PATH`, the locale and `SLURM_CONF` (`SlurmCli.job_env`): never the server's secrets;
  `--no-requeue` (Schedulearn requeues), `--comment=schedulearn:<server>:<job>:<run>` (how a
  restarted server finds its runs, and how the inventory tells its jobs from other people's),
  `--uid/--gid` of the user's OS account in the shared set-up (the server must be root), plus the
  operator's `slurm_sbatch_args` (`--account=...`, `--qos=...`, `--cpus-per-gpu=...`).
* The batch script (`slurm-<run>/batch.sh` in the job directory, which must be on a file system
  shared by the nodes at the same path) runs the launcher of `launch.build_workers`: on one node
  it runs the worker itself; across nodes `srun --ntasks-per-node=1` starts each node's worker
  (`slurm-<run>/worker-<node>.sh`): torchrun with its c10d rendezvous on the first node. Horovod
  across nodes is started by horovodrun on the first node, whose remote workers go through
  `srun` (a `ssh` shim first on its PATH: no ssh between nodes needed). `CUDA_VISIBLE_DEVICES` is
  Slurm's: the batch script logs it per node.

Crash consistency, as the local executor's gate: the job is submitted held (`--hold`), its Slurm
id written to `slurm-<run>/job` in the job directory, then released (`scontrol release`). A run
that ever ran user code therefore always has its id on disk; a held one found after a crash never
ran: its launch is completed (the id written, the job released), not submitted a second time —
a job's first launch (`adopt`) and a relaunch after a resize (`_reattach`) alike. A held job of
ours that no run tracks for `orphan_grace` seconds (an `sbatch` that reached Slurm only after the
restarted server had looked, so the run was submitted again) is cancelled by the poll.

One thread polls `squeue --json` (every `slurm_poll_interval` s) while runs are tracked: a run
that left the active states is over; its exit status is the one its batch script wrote into the
job directory (`exit_code`), else Slurm's; where srun says a task of a multi-node run failed
(`task 1: Exited with exit code 1`) and then ended the others (its own status 143), the failed
task's. What Slurm did to it on its own — a node failure, its time limit, an out-of-memory kill,
a cancel outside Schedulearn — is the job's reason. The GPU indices Slurm bound are reported to
the engine (`Engine.placed`), so that the books and the sidebar show the GPUs the job really holds.

Stop = `scancel --signal=TERM --full` (the batch script and every step), the grace period, then
`scancel --signal=KILL --full` and `scancel`; a job still pending is cancelled at once. A resize is
a stop and a new Slurm job at the new size (checkpoint-restart, as everywhere).

The inventory comes from Slurm too (`nodes`): the partition's nodes with their gres GPUs (a
drained, down or failing node is unhealthy: nothing new goes there), and the GPUs that jobs
Schedulearn did not submit hold (`Gpu.held_by`: never double-booked).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import joblogs, nofollow
from ..jobfiles import EXIT_CODE_FILE
from ..model import Allocation, Gpu, Job, JobSpec, Launcher, Node
from .base import ExecutorError
from .jobdir import check_host_workdir, check_no_image
from .launch import build_workers, job_environment
from .lifecycle import Run, RunExecutor, reattached_line, start_line
from .registry import ExecutorKind, Option
from .slurmcli import SlurmCli, SlurmError, SlurmJob, SlurmNode, decode_exit

if TYPE_CHECKING:
    from ..service import Settings

log = logging.getLogger("schedulearn.executors.slurm")

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding `schedulearn`
#: The folder of one run's scripts and Slurm id, in the job directory.
RUN_DIR = "slurm-{restarts}"
JOB_ID_FILE = "job"
#: Where torchrun's rendezvous listens on the first node of a multi-node job.
RDZV_PORTS = (20000, 30000)
#: Slurm states whose reason is Slurm's, not the program's.
_SLURM_ENDS = {
    "NODE_FAIL": "a node of the job failed (Slurm: NODE_FAIL)",
    "BOOT_FAIL": "a node of the job failed to boot (Slurm: BOOT_FAIL)",
    "TIMEOUT": "Slurm's time limit for the job was reached (TIMEOUT)",
    "DEADLINE": "Slurm's deadline for the job passed (DEADLINE)",
    "OUT_OF_MEMORY": "out of memory: Slurm killed the job (OUT_OF_MEMORY)",
    "PREEMPTED": "preempted by Slurm (PREEMPTED)",
    "CANCELLED": "cancelled in Slurm, not by the scheduler (scancel outside Schedulearn)",
}
_HELD_REASONS = ("JobHeldUser", "JobHeldAdmin")
#: how long a run waits in Slurm's queue before the job's reason says so (a run is usually
#: started within a second or two: no flicker for that)
PENDING_NOTE_S = 10.0
#: how long one of this server's Slurm jobs may sit held with no run tracking it before it is
#: cancelled as an orphan (a launch holds its job for well under a second)
ORPHAN_GRACE_S = 300.0

PARTITION = Option("slurm_partition", "", "the Slurm partition Schedulearn manages "
                   "(default: the cluster's default partition)")
SBATCH_ARGS = Option("slurm_sbatch_args", [], "extra sbatch arguments for every job, comma-separated "
                     "(e.g. --account=lab,--qos=normal,--cpus-per-gpu=4)")
POLL = Option("slurm_poll_interval", 1.0, "seconds between squeue polls while Slurm jobs run")


@dataclass(eq=False, kw_only=True)
class _Run(Run):
    slurm_id: int
    state: str = "PENDING"  # Slurm's, as last polled
    slurm_end: str = ""  # Slurm's final state, when it is one of `_SLURM_ENDS`
    seen: bool = False  # squeue has listed it at least once
    alloc: Allocation = field(default_factory=dict)  # where the engine placed it
    since: float = field(default_factory=time.monotonic)  # when it was submitted (or adopted)
    #: what the job's reason says of its wait in Slurm's queue ("": nothing; None: not known, a
    #: run found after a restart, whose job may still carry what was said before)
    note: str | None = ""


@dataclass
class _Tracked:
    runs: dict[int, _Run] = field(default_factory=dict)  # Slurm id -> run
    wake: threading.Event = field(default_factory=threading.Event)


def _held(parts: list[SlurmJob]) -> bool:
    """Every component of a Slurm job still held (`sbatch --hold`: behind the launch's gate)."""
    return all(j.state == "PENDING" and j.reason in _HELD_REASONS for j in parts)


def pending_text(reason: str, alloc: Allocation) -> str:
    """Why a run waits in Slurm's queue, in words ("" for a reason that is not a wait: `None`,
    not considered yet; the scheduler's own hold until it releases the run)."""
    if reason in ("", "None", *_HELD_REASONS):
        return ""
    where = ", ".join(alloc) or "its node"
    said = {"Priority": "jobs Slurm ranks higher wait for the same resources",
            "Resources": f"what it asks for (GPUs, CPUs, memory) is not free on {where} yet",
            "ReqNodeNotAvail": f"{where} is not available"}.get(reason)
    return f"waiting in Slurm's queue ({reason}{': ' + said if said else ''})"


class SlurmExecutor(RunExecutor):
    run_noun = "Slurm job"

    def __init__(
        self,
        job_root: Path | str,
        partition: str = "",
        cancel_grace: float = 10.0,
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        run_as: Callable[[str], Any] | None = None,
        sbatch_args: list[str] | tuple[str, ...] = (),
        poll_interval: float = 1.0,
        slurm_env: Mapping[str, str] | None = None,
        cli: SlurmCli | None = None,
    ):
        if cancel_grace < 0:
            raise ValueError(f"cancel_grace: expected seconds >= 0, got {cancel_grace}")
        if not 0 < poll_interval < math.inf:  # (nan too)
            raise ValueError(f"slurm_poll_interval: expected seconds > 0, got {poll_interval}")
        self.job_root = Path(job_root).resolve()
        self.job_root.mkdir(parents=True, exist_ok=True)
        self.cancel_grace = cancel_grace
        self.python = python
        self.env = dict(env or {})
        self.run_as = run_as
        self.sbatch_args = list(sbatch_args)
        self.poll_interval = poll_interval
        self.pending_note_s = PENDING_NOTE_S
        self.orphan_grace = ORPHAN_GRACE_S
        self._orphans: dict[int, float] = {}  # held Slurm job no run tracks -> monotonic first seen
        self.cli = cli or SlurmCli(slurm_env)
        self._partition = partition
        #: this server's mark on its Slurm jobs (one Schedulearn per job root)
        self.tag = "schedulearn:" + hashlib.sha1(str(self.job_root).encode()).hexdigest()[:10]
        self.kill_wait = max(self.kill_wait, 30.0)  # Slurm's KillWait and epilog come first
        self._tracked = _Tracked()
        self._poller: threading.Thread | None = None
        self._srun = shutil.which("srun", path=self.cli.env.get("PATH")) or "srun"
        self._init_runs()

    def check_spec(self, spec: JobSpec) -> None:
        check_no_image(spec, "slurm")
        # (the nodes see this machine's paths: a shared file system)
        check_host_workdir(spec, self.account_for(spec))

    @property
    def partition(self) -> str:
        if not self._partition:
            self._partition = self.cli.default_partition() or ""
            if not self._partition:
                raise ExecutorError("slurm_partition: the cluster has no default partition; set one")
        return self._partition

    # -- inventory -------------------------------------------------------------------------------
    def nodes(self, jobs: list[SlurmJob] | None = None) -> list[Node]:
        """The partition's nodes and their gres GPUs; GPUs held by jobs not submitted by this
        server are marked `held_by` (`jobs`: Slurm's queue as just read, else read now), and so
        are the free GPUs of a node where Slurm could start no job (all its CPUs, or memory,
        allocated: `n1: all 8 CPUs allocated (Slurm job 12)`). A Slurm that does not answer: no
        nodes (logged)."""
        try:
            snodes = self.cli.nodes(self.partition)
            jobs = self.cli.jobs() if jobs is None else jobs
        except (SlurmError, ExecutorError) as e:
            log.warning("slurm: cannot read the nodes: %s", e)
            return []
        held: dict[tuple[str, int], str] = {}
        for j in jobs:
            if j.active and not self._ours(j):
                for node, idx in j.gpus.items():
                    for i in idx:
                        held[(node, i)] = f"Slurm job {j.leader} ({j.user or 'another user'})"
        for n in snodes:
            if n.full:  # GPUs free, but no CPU (or memory) to start a job with them
                ours = {i for j in jobs if j.active and self._ours(j) for i in j.gpus.get(n.name, ())}
                why = self._full_text(n, jobs)
                for i in range(n.gpus):
                    if i not in ours:
                        held.setdefault((n.name, i), why)
        return [
            Node(name=n.name, virtual=False, address=n.address, healthy=n.healthy,
                 gpus=[Gpu(index=i, uuid=f"slurm-{n.name}-gpu{i}", name="GPU (Slurm gres)", virtual=False,
                           utilization=None, held_by=held.get((n.name, i), "")) for i in range(n.gpus)])
            for n in snodes
        ]

    def _ours(self, j: SlurmJob) -> bool:
        return j.comment.startswith(self.tag + ":")

    @staticmethod
    def _full_text(n: SlurmNode, jobs: list[SlurmJob]) -> str:
        """`n1: all 8 CPUs allocated (Slurm job 12)`: what holds the node's CPUs or memory."""
        holders = sorted({j.leader for j in jobs if j.state == "RUNNING" and n.name in j.nodes})
        by = f" (Slurm job{'s' if len(holders) > 1 else ''} {', '.join(map(str, holders))})" \
            if holders else ""
        return f"{n.name}: {n.full}{by}"

    # -- launching ---------------------------------------------------------------------------------
    def _launch(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int) -> _Run:
        d = self.job_dir(job_id)
        account = self.account_for(spec)
        nodes = {n.name: n for n in self.engine.nodes} if self.engine is not None else {}
        if Launcher(spec.launcher) is Launcher.horovod:  # horovodrun reaches nodes by name (srun)
            addresses = {name: name for name in alloc}
        else:
            addresses = {name: (nodes[name].address if name in nodes and nodes[name].address else name)
                         for name in alloc}
        workers = build_workers(spec, job_id, alloc, d, restarts, nodes, python=self.python,
                                addresses=addresses, rdzv_port=random.randrange(*RDZV_PORTS),
                                network_interface=None, result_key=self.result_key(job_id))
        cwd = self.host_workdir(job_id, spec, account)
        run_dir = d / RUN_DIR.format(restarts=restarts)
        try:
            self._write_scripts(run_dir, job_id, spec, alloc, workers, account)
            log_file = self.log_path(job_id)
            with self._open_log(job_id) as f:
                f.write(start_line(job_id, restarts, "(Slurm binds the GPUs)", workers[0].shell(),
                                   f"through Slurm on {','.join(alloc)}").encode())
            if account is not None:
                os.chown(log_file, account.uid, account.gid, follow_symlinks=False)  # Slurm appends as them
        except OSError as e:
            raise ExecutorError(f"job {job_id}: cannot write its Slurm scripts: {e.strerror}: {e.filename}") \
                from None
        argv = self._sbatch_argv(job_id, spec, alloc, restarts, cwd, account)
        try:
            slurm_id = self.cli.submit(str(run_dir / "batch.sh"), argv)
        except SlurmError as e:
            raise ExecutorError(f"job {job_id}: Slurm refused it: {e}") from None
        run = _Run(job_id=job_id, restarts=restarts, slurm_id=slurm_id, alloc=dict(alloc))
        try:
            self._release(run_dir, slurm_id, restarts)
        except BaseException:
            self._cancel_quietly(slurm_id)
            raise
        self._watch(run)
        return run

    def _release(self, run_dir: Path, slurm_id: int, restarts: int) -> None:
        """Open the gate: the run's Slurm id on disk before anything of it may run (it is held
        until then), then `scontrol release`."""
        tmp = run_dir / (JOB_ID_FILE + ".tmp")
        tmp.unlink(missing_ok=True)
        nofollow.write_text(tmp, json.dumps({"slurm_id": slurm_id, "restarts": restarts, "tag": self.tag}))
        os.replace(tmp, run_dir / JOB_ID_FILE)
        self.cli.run("scontrol", "release", str(slurm_id))

    def _write_scripts(self, run_dir: Path, job_id: int, spec: JobSpec, alloc: Allocation,
                       workers: list, account: Any) -> None:
        run_dir.mkdir(mode=0o700, exist_ok=True)
        (run_dir / JOB_ID_FILE).unlink(missing_ok=True)
        # the previous run's status (143 after a resize's stop) is not this run's: a poll that has
        # not listed this run yet would take it for its end (the batch script removes it too late)
        (run_dir.parent / EXIT_CODE_FILE).unlink(missing_ok=True)
        for w in workers:
            env = job_environment({k: v for k, v in w.env.items() if k != "CUDA_VISIBLE_DEVICES"},
                                  spec.env, inherit=os.environ, python=self.python,
                                  pythonpath=_PACKAGE_ROOT, extra=self.env,
                                  home=account.home if account is not None else None,
                                  user=account.name if account is not None else None)
            lines = ["#!/bin/sh", "# one node's worker of a Schedulearn job (written by the Slurm executor)"]
            lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
            if Launcher(spec.launcher) is Launcher.horovod and len(alloc) > 1:
                lines.append(f'export PATH="{run_dir}/bin:$PATH"')  # horovodrun's ssh: srun
            lines += [_command_check(w.argv[0]), "exec " + shlex.join(w.argv)]
            nofollow.write_text(run_dir / f"worker-{w.node}.sh", "\n".join(lines) + "\n")
        if Launcher(spec.launcher) is Launcher.horovod and len(alloc) > 1:
            (run_dir / "bin").mkdir(exist_ok=True)
            shim = run_dir / "bin" / "ssh"
            uneven = len({len(v) for v in alloc.values()}) > 1  # a heterogeneous job: a component per node
            groups = {node: i for i, node in enumerate(alloc)} if uneven else {}
            nofollow.write_text(shim, _SSH_SHIM.format(srun=self._srun, python=self.python, pattern=_NODE_OWN,
                                                       groups=groups))
            shim.chmod(0o755)
        nofollow.write_text(run_dir / "batch.sh", self._batch_script(run_dir, alloc, len(workers)))
        if account is not None:
            for p in [run_dir, *run_dir.rglob("*")]:
                os.chown(p, account.uid, account.gid, follow_symlinks=False)

    def _batch_script(self, run_dir: Path, alloc: Allocation, n_workers: int) -> str:
        d = run_dir.parent
        exit_file = shlex.quote(str(d / EXIT_CODE_FILE))
        report = ('echo "=== schedulearn: Slurm job $SLURM_JOB_ID on $SLURMD_NODENAME: '
                  'CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-} ==="')
        if n_workers == 1:
            node = next(iter(alloc))
            run = f"/bin/sh {shlex.quote(str(run_dir / f'worker-{node}.sh'))}"
        else:
            het = len({len(v) for v in alloc.values()}) > 1
            group = f" --het-group=0-{len(alloc) - 1}" if het else ""
            per_node = shlex.quote(f'{report}; exec /bin/sh "$0/worker-$SLURMD_NODENAME.sh"')
            run = (f"{shlex.quote(self._srun)} --label --kill-on-bad-exit=1 --ntasks-per-node=1{group} "
                   f"/bin/sh -c {per_node} {shlex.quote(str(run_dir))}")
        return "\n".join([
            "#!/bin/sh",
            "# a run of a Schedulearn job (written by the Slurm executor)",
            f"rm -f {exit_file}",
            report if n_workers == 1 else "",
            "trap : TERM INT  # outlive the workers to record their status",
            run,
            "rc=$?",
            f"echo $rc > {exit_file}",
            "exit $rc",
        ]) + "\n"

    def _sbatch_argv(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int, cwd: Path,
                     account: Any) -> list[str]:
        name = "".join(c if c.isalnum() or c in "._-" else "-" for c in spec.name or "job")[:40]
        argv = [
            "--hold", f"--job-name=sl{job_id}.{restarts}-{name}", f"--comment={self.tag}:{job_id}:{restarts}",
            f"--partition={self.partition}", f"--output={self.log_path(job_id)}", "--open-mode=append",
            f"--chdir={cwd}", "--no-requeue", *self.sbatch_args,
        ]
        if account is not None:
            argv += [f"--uid={account.uid}", f"--gid={account.gid}"]
        counts = {len(v) for v in alloc.values()}
        if len(alloc) == 1 or len(counts) == 1:
            (k,) = counts
            argv += [f"--nodes={len(alloc)}", f"--nodelist={','.join(alloc)}", f"--gres=gpu:{k}",
                     "--ntasks-per-node=1"]
        else:  # uneven: a heterogeneous job, one component per node
            for i, (node, idx) in enumerate(alloc.items()):
                if i:
                    argv.append(":")
                argv += ["--nodes=1", f"--nodelist={node}", f"--gres=gpu:{len(idx)}", "--ntasks=1"]
                if i:
                    argv += [f"--partition={self.partition}"]
        return argv

    # -- watching ----------------------------------------------------------------------------------
    def _watch(self, run: Run) -> None:
        assert isinstance(run, _Run)
        with self._lock:
            self._tracked.runs[run.slurm_id] = run
            if self._poller is None or not self._poller.is_alive():
                self._poller = threading.Thread(target=self._poll_loop, name="slurm-poll", daemon=True)
                self._poller.start()
        self._tracked.wake.set()

    def _poll_loop(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                if not self._tracked.runs:
                    self._poller = None
                    return
            try:
                jobs = self.cli.jobs()
            except SlurmError as e:
                log.warning("slurm: %s (retrying)", e)
            else:
                self._poll_once(jobs)
            self._tracked.wake.wait(self.poll_interval)
            self._tracked.wake.clear()

    def _poll_once(self, jobs: list[SlurmJob]) -> None:
        by_leader: dict[int, list[SlurmJob]] = {}
        for j in jobs:
            by_leader.setdefault(j.leader, []).append(j)
        with self._lock:
            runs = list(self._tracked.runs.values())
        for run in runs:
            parts = by_leader.get(run.slurm_id, [])
            if parts:
                run.seen = True
                lead = min(parts, key=lambda j: j.id)
                run.state = lead.state
                if any(j.active for j in parts):
                    if lead.state == "RUNNING":
                        self._placed(run, parts)
                        self._note(run, "")
                    elif lead.state == "PENDING" and lead.reason == "Resources" and (
                            taken := self._taken_outside(run, jobs) or self._no_room(run, jobs)):
                        self._withdraw(run, taken, jobs)
                    elif lead.state == "PENDING":
                        self._note(run, pending_text(lead.reason, run.alloc))
                    continue
                self._ended(run, parts)
            elif run.seen or self._exit_code(run) is not None:  # aged out of squeue
                self._ended(run, [])
        self._sweep_orphans(by_leader)

    def _sweep_orphans(self, by_leader: dict[int, list[SlurmJob]]) -> None:
        """Cancel this server's Slurm jobs that sat held, tracked by no run, for `orphan_grace`
        s: a launch's `sbatch` whose answer a crash lost and that reached Slurm only after the
        restarted server had looked for it, so that the run was submitted again. Such a job
        holds no GPU, but would sit in the queue for ever."""
        now = time.monotonic()
        with self._lock:
            tracked = set(self._tracked.runs)
        held = [leader for leader, parts in by_leader.items() if leader not in tracked and _held(parts)
                and any(j.id == leader and self._ours(j) for j in parts)]
        self._orphans = {i: self._orphans.get(i, now) for i in held}
        for slurm_id, since in list(self._orphans.items()):
            if now - since >= self.orphan_grace:
                comment = next(j.comment for j in by_leader[slurm_id] if j.id == slurm_id)
                log.warning("slurm: cancelling job %s (%s): held with no run of this server tracking it "
                            "for %.0f s (a submit a crash cut short)", slurm_id, comment, now - since)
                self._cancel_quietly(slurm_id)
                del self._orphans[slurm_id]

    def _taken_outside(self, run: _Run, jobs: list[SlurmJob]) -> str:
        """Where Slurm cannot start `run` because jobs it did not get from this server took the
        GPUs since the engine's last inventory (e.g. `n1: 3 of 4 GPUs held by Slurm job 9`), or
        "" when that is not why it waits (its own jobs' GPUs still being released, or CPUs)."""
        total = {n.name: len(n.gpus) for n in self.engine.nodes} if self.engine is not None else {}
        outside: dict[str, int] = {}
        ours: dict[str, int] = {}
        holders: dict[str, set[int]] = {}
        for j in jobs:
            if not j.active or j.leader == run.slurm_id:
                continue
            mine = self._ours(j)
            counts = ours if mine else outside
            for node, idx in j.gpus.items():
                counts[node] = counts.get(node, 0) + len(idx)
                if not mine:
                    holders.setdefault(node, set()).add(j.leader)
        short = [f"{node}: {outside[node]} of {total[node]} GPUs held by Slurm job "
                 f"{', '.join(map(str, sorted(holders[node])))}"
                 for node, idx in run.alloc.items() if outside.get(node) and node in total
                 and outside[node] + ours.get(node, 0) + len(idx) > total[node]]
        return "; ".join(short)

    def _note(self, run: _Run, note: str) -> None:
        """Tell the engine why `run` still waits in Slurm's queue (the job's reason while it is
        shown running), once it has waited `pending_note_s`; "" once it runs."""
        if note == run.note or (note and time.monotonic() - run.since < self.pending_note_s):
            return
        run.note = note
        engine = self.engine
        if engine is not None and not run.superseded and not self._closed.is_set():
            engine.call_soon(engine.run_note, run.job_id, note)

    def _no_room(self, run: _Run, jobs: list[SlurmJob]) -> str:
        """Where Slurm cannot start `run` because a node it was placed on has no CPU (or memory)
        left, its GPUs free (`its node has no room: n1: all 8 CPUs allocated (Slurm job 12)`),
        or "" (the engine counts GPUs only: it placed the job there)."""
        try:
            full = {n.name: n for n in self.cli.nodes(self.partition) if n.full}
        except (SlurmError, ExecutorError):
            return ""
        short = [self._full_text(full[node], jobs) for node in run.alloc if node in full]
        return f"its node has no room ({'; '.join(short)})" if short else ""

    def _withdraw(self, run: _Run, taken: str, jobs: list[SlurmJob]) -> None:
        """Cancel `run`, still pending, and hand its job back to the engine to be placed anew on
        what is free now (it waited, shown running, until the outside job ended)."""
        with self._lock:
            current = self._runs.get(run.job_id) is run and run.stopping is None and not run.superseded
            if not current or self._tracked.runs.pop(run.slurm_id, None) is None:
                return
            del self._runs[run.job_id]
        self._cancel_quietly(run.slurm_id)
        run.gone.set()
        why = taken if taken.startswith("its node has no room") else \
            f"its GPUs were taken outside the scheduler ({taken})"
        reason = f"not started: {why}; placed anew"
        try:
            self._append_log(run, f"{joblogs.MARKER} run #{run.restarts} {reason} ===\n")
        except OSError:
            pass
        nodes = self.nodes(jobs)  # (the queue the poll just read: the run's cancel changes no holder)
        engine = self.engine
        if engine is not None and not self._closed.is_set():
            engine.call_soon(engine.withdrawn, run.job_id, nodes, reason)

    def _placed(self, run: _Run, parts: list[SlurmJob]) -> None:
        alloc: dict[str, tuple[int, ...]] = {}
        for j in parts:
            for node, idx in j.gpus.items():
                alloc[node] = tuple(sorted(set(alloc.get(node, ())) | set(idx)))
        engine = self.engine
        if alloc and engine is not None and not run.superseded and not self._closed.is_set():
            engine.call_soon(engine.placed, run.job_id, alloc)

    def _ended(self, run: _Run, parts: list[SlurmJob]) -> None:
        with self._lock:
            if self._tracked.runs.pop(run.slurm_id, None) is None:
                return
        code = self._exit_code(run)
        states = {j.state for j in parts}
        ends = [s for s in ("NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "DEADLINE", "PREEMPTED",
                            "CANCELLED") if s in states]
        run.slurm_end = ends[0] if ends else ""
        if code is None and parts:
            status = min(parts, key=lambda j: j.id).exit_status
            exit_code, sig = decode_exit(status)
            code = -sig if sig else exit_code
        if run.slurm_end and run.stopping is None and code == 0:
            code = None  # Slurm ended it (its status file says 0 only if the program finished)
        if code and not run.slurm_end and run.stopping is None:
            task = self._task_failed(run)
            if task:  # srun's status is its SIGTERM of the other tasks: the failed task's is the job's
                code = int(task["code"])
        self._run_over(run, code, self._end_reason(run, code))

    def _task_failed(self, run: Run) -> re.Match[str] | None:
        """srun's line for the task of a multi-node run that failed first (not an earlier run's,
        before a restart)."""
        tail = joblogs.current_run(joblogs.tail(self.log_path(run.job_id), joblogs.REASON_LINES))
        return _TASK_FAILED.search(tail)

    def _exit_code(self, run: _Run) -> int | None:
        """What the batch script recorded for this run (None: it did not get that far)."""
        d = self.job_dir(run.job_id)
        try:
            info = json.loads(nofollow.read_bytes(d / RUN_DIR.format(restarts=run.restarts) / JOB_ID_FILE,
                                                  limit=4096))  # (in the job's directory: bounded)
            if int(info["slurm_id"]) != run.slurm_id:
                return None
            # (the batch script's, as the job: a few bytes are read, whatever it holds)
            return int(nofollow.read_text(d / EXIT_CODE_FILE, limit=32).strip())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # -- signalling ----------------------------------------------------------------------------------
    def _signal(self, run: Run, sig: int) -> None:
        assert isinstance(run, _Run)
        if run.state in ("PENDING", "CONFIGURING") or not run.seen:
            self._cancel_quietly(run.slurm_id)  # nothing of it runs yet: no grace to give
            return
        name = "KILL" if sig == signal.SIGKILL else signal.Signals(sig).name.removeprefix("SIG")
        try:
            self.cli.signal(run.slurm_id, name)
        except SlurmError as e:
            log.info("slurm: signalling job %s: %s", run.slurm_id, e)
        if sig == signal.SIGKILL:
            self._cancel_quietly(run.slurm_id)
        self._tracked.wake.set()  # look again soon

    def _cancel_quietly(self, slurm_id: int) -> None:
        try:
            self.cli.cancel(slurm_id)
        except SlurmError as e:
            log.info("slurm: cancelling job %s: %s", slurm_id, e)

    def _failure(self, run: Run, code: int | None) -> str:
        assert isinstance(run, _Run)
        tail = joblogs.current_run(joblogs.tail(self.log_path(run.job_id), joblogs.REASON_LINES))
        last = joblogs.failure_reason(tail)
        task = _TASK_FAILED.search(tail)  # (not an earlier run's, before a restart)
        if run.slurm_end:
            text = _SLURM_ENDS[run.slurm_end]
        elif task:  # a node's task failed and srun ended the others (--kill-on-bad-exit): its
            return last or f"exit code {task['code']} on {task['node']}"  # SIGTERM is not the cause
        elif code is None:
            text = f"Slurm job {run.slurm_id} ended without recording its exit status"
        else:
            sig = -code if code < 0 else (code - 128 if code > 128 else 0)
            if 0 < sig < signal.NSIG and (code < 0 or sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV,
                                                             signal.SIGABRT, signal.SIGBUS, signal.SIGINT)):
                who = "killed by" if code < 0 else "ended by"
                text = f"{who} {signal.Signals(sig).name}, not by the scheduler"
            else:
                return last or f"exit code {code}"
        return f"{text}; last log line: {last}" if last else text

    # -- after a restart -----------------------------------------------------------------------------
    def _run_info(self, job: Job, restarts: int) -> dict | None:
        """The Slurm id of run `restarts` of `job`: its file, else a search by this server's tag
        (the server died between sbatch and the file)."""
        path = self.job_dir(job.id) / RUN_DIR.format(restarts=restarts) / JOB_ID_FILE
        try:
            info = json.loads(nofollow.read_text(path, owner=os.geteuid()))
            return {"slurm_id": int(info["slurm_id"]), "restarts": int(info["restarts"])}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            for j in self.cli.jobs():
                if j.comment == f"{self.tag}:{job.id}:{restarts}" and j.leader == j.id:
                    return {"slurm_id": j.id, "restarts": restarts}
        except SlurmError:
            pass
        return None

    def _slurm_job(self, slurm_id: int) -> list[SlurmJob] | None:
        """The job's components as squeue lists them ([] when it has aged out), None when
        Slurm does not answer."""
        try:
            return [j for j in self.cli.jobs() if j.leader == slurm_id]
        except SlurmError as e:
            log.warning("slurm: %s", e)
            return None

    def _reattach(self, job: Job) -> _Run | None:
        info = self._run_info(job, job.restarts)
        if info is None and job.restarts > 0 and job.stopping is None:
            old = self._run_info(job, job.restarts - 1)  # a resize was recorded: was its old run gone?
            parts = self._slurm_job(old["slurm_id"]) if old else []
            if not any(j.active for j in parts or []):
                self._relaunch_now(job.id, job.spec, dict(job.alloc), job.restarts)
                return None
            info = old
        if info is None:
            self._report(job.id, None, "lost on restart: no record of its Slurm job; exit status unknown")
            return None
        parts = self._slurm_job(info["slurm_id"])
        if parts and _held(parts) and info["restarts"] == job.restarts and job.stopping is None:
            # a relaunch (a resize) cut short behind its gate (a stop recorded cancels it as it is)
            if (released := self._open_gate(job, info["slurm_id"])) is None:
                self._relaunch_now(job.id, job.spec, dict(job.alloc), job.restarts)
            return released
        run = _Run(job_id=job.id, restarts=info["restarts"], slurm_id=info["slurm_id"], seen=True, note=None)
        if parts is not None and not any(j.active for j in parts):
            self._end_found(run, parts)  # ended while the server was down: reports that end
            return None
        self._append_log(run, reattached_line(run.restarts, f"Slurm job {run.slurm_id}"))
        return run

    def adopt(self, job: Job) -> bool:
        info = self._run_info(job, job.restarts)
        if info is None:
            return False  # never submitted: nothing of it ran
        parts = self._slurm_job(info["slurm_id"])
        if parts and _held(parts):  # still behind the gate: it never ran
            if (released := self._open_gate(job, info["slurm_id"])) is None:
                return False  # the engine starts the job again
            self._adopted(released)
            return True
        run = _Run(job_id=job.id, restarts=job.restarts, slurm_id=info["slurm_id"], seen=bool(parts),
                   note=None)
        if parts and not any(j.active for j in parts):
            self._end_found(run, parts)
            return True
        self._adopted(run)
        return True

    def _open_gate(self, job: Job, slurm_id: int) -> _Run | None:
        """Complete a launch that a crash cut short behind its gate (submitted held; its id on
        disk or not): the id written, the job released where it was placed. Submitting it again
        would leave Slurm a cancelled twin of every such run. None (cancelled) where it cannot
        be released: the job is started again."""
        run_dir = self.job_dir(job.id) / RUN_DIR.format(restarts=job.restarts)
        try:
            self._release(run_dir, slurm_id, job.restarts)
        except (OSError, SlurmError) as e:
            log.warning("job %s: cannot release its held Slurm job %s after the restart (%s): submitting "
                        "it again", job.id, slurm_id, e)
            self._cancel_quietly(slurm_id)
            return None
        return _Run(job_id=job.id, restarts=job.restarts, slurm_id=slurm_id, alloc=dict(job.alloc))

    def _end_found(self, run: _Run, parts: list[SlurmJob]) -> None:
        """A run found over after a restart: its end is reported like any other."""
        with self._lock:
            self._runs[run.job_id] = run
            self._tracked.runs[run.slurm_id] = run
        self._ended(run, parts)

    def close(self) -> None:
        super().close()
        self._tracked.wake.set()


def _command_check(prog: str) -> str:
    """A worker script's line that ends the run with status 127 and one line naming the program
    and the node when the program is not there (the shell's own was `worker-n1.sh: 15: exec:
    nope: not found`); the local executor says the same before a start (`launch.check_command`)."""
    q = shlex.quote(prog)
    if "/" in prog:
        test, said, after = f"[ -e {q} ]", f"command: {prog!r} does not exist on node", " (relative to $PWD)"
    else:
        test = f"command -v {q} >/dev/null 2>&1"
        said, after = f"command: {prog!r} not found on PATH on node", ""
    where = f'"$SLURMD_NODENAME" "{after}"'
    return f"{test} || {{ printf '%s %s%s\\n' {shlex.quote(said)} {where} >&2; exit 127; }}"


#: horovodrun reaches the other nodes with `ssh [options] host [options] command`: through srun
#: instead. Its command carries the launching node's whole environment as assignments (`cd DIR ;
#: A=1 B=2 program`, values quoted as `shlex.quote` does): the node's own Slurm and GPU variables
#: must win, so those assignments are dropped.
_NODE_OWN = (r"(?<!\S)(?:SLURMD?_[A-Z0-9_]*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES)="
             r"""(?:'[^']*'(?:"'"'[^']*')*|[^\s']+)(?=\s)""")


_SSH_SHIM = """#!{python}
# horovodrun's ssh, written by Schedulearn's Slurm executor: run the command on HOST with srun.
import os, re, sys
args, host, i = sys.argv[1:], None, 0
while i < len(args):
    if args[i] in ("-o", "-p", "-i", "-l", "-F"):
        i += 2
    elif args[i].startswith("-"):
        i += 1
    elif host is None:
        host, i = args[i], i + 1
    else:
        break
command = re.sub({pattern!r}, "", " ".join(args[i:]))
group = {groups!r}.get(host)  # a heterogeneous job: the component on that host
os.execv({srun!r}, [{srun!r}, "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=" + host,
                    *(["--het-group=%d" % group] if group is not None else []), "/bin/sh", "-c", command])
"""


def _make(settings: Settings) -> SlurmExecutor:
    opts = settings.options
    return SlurmExecutor(settings.job_root, partition=opts.get(PARTITION.name, ""),
                         cancel_grace=settings.cancel_grace, run_as=settings.run_as(),
                         sbatch_args=opts.get(SBATCH_ARGS.name) or [],
                         poll_interval=opts.get(POLL.name, POLL.default))


#: srun's word for the first task of a multi-node run that failed (the others it then ends).
_TASK_FAILED = re.compile(r"^srun: error: (?P<node>\S+): task \d+: Exited with exit code (?P<code>\d+)$",
                          re.MULTILINE)

KIND = ExecutorKind("slurm", "Slurm jobs on the nodes of a Slurm partition (sbatch, srun)", SlurmExecutor,
                    _make, (PARTITION, SBATCH_ARGS, POLL))

__all__ = ["KIND", "SlurmExecutor"]
