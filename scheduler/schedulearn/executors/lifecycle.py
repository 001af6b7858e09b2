"""One run lifecycle for every executor that runs programs (local processes, Docker containers,
Slurm jobs): start, stop with a grace period, resize by checkpoint-restart, re-attach after a
server restart, and report each end of a run to the engine exactly once.

A job's *run* is one start of it (`Run`; `restarts` numbers them). The engine's calls map to:

* `start` — prepare the job's directory, then `_launch` a run (the executor's own way).
* `stop` — mark the run `stopping` ('cancel', 'preempt') and `_terminate` it in a thread:
  `_signal(run, SIGTERM)`, up to `cancel_grace` seconds for it to be gone, then
  `_signal(run, SIGKILL)`. Its end is reported as the job's ('cancelled', 'preempted', with
  "(SIGKILL after the grace period)" when it came to that).
* `resize` — the run is *superseded*: it is stopped the same way, and when it is gone the old
  allocation's GPUs are released (`engine.report_released`) and the next run starts in the same
  directory at the new size. A second resize before the relaunch only changes what starts; a
  stop before the relaunch reports the job stopped instead (`_Relaunch.cancel`).
* `recover` / `adopt` (after a server restart) — `_reattach` finds the run the store names;
  a resize that was recorded but not finished is finished.

The executor watches each run (`_watch`: a thread per process, container or Slurm job) and calls
`_run_over(run, code, reason)` when it has ended; that writes the exit marker into the log,
forgets the run and reports it, unless it was superseded by a resize.

What an executor adds (`local.py`, `docker.py`; a Slurm executor alike): `_launch` (start a run:
fork a process group, create containers, `sbatch`), `_signal` (`killpg`, `docker kill`,
`scancel --signal`), `_watch` (wait for the end: `waitid`, the log stream, `squeue`/`sacct`),
`_reattach` and `adopt` (find a run again: a pid file, container labels, a Slurm job id),
and `_failure` (why a run failed, from its exit status and log); `_append_log` (a marker line
on a line of its own) is the same for all but Docker, which holds its log open.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, BinaryIO, ClassVar

from .. import joblogs, nofollow
from ..model import Allocation, Job, JobSpec
from .base import ExecutorError, Unavailable, launch_failure
from .jobdir import JobDirExecutor

log = logging.getLogger("schedulearn.executors")


@dataclass(eq=False, kw_only=True)
class Run:
    """One run of a job, as the lifecycle tracks it (executors add their handles: a pid, the
    containers, a Slurm job id)."""

    job_id: int
    restarts: int
    superseded: bool = False  # replaced by a resize: its exit is not the job's
    stopping: str | None = None  # 'cancel' | 'preempt' | 'resize' | 'shutdown'
    deadline: float | None = None  # monotonic time at which a stop escalates to SIGKILL
    killed: bool = False  # SIGKILL came to it (after the grace period)
    code: int | None = None  # its exit status, once over
    gone: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class _Relaunch:
    """A resize in progress: the old run is stopping, this is what starts next."""

    spec: JobSpec
    alloc: Allocation
    restarts: int
    cancel: str | None = None  # stopped (cancel/preempt) before the relaunch happened
    shutdown: bool = False  # `terminate_all` came in between: no relaunch, no report


class RunExecutor(JobDirExecutor):
    """The shared lifecycle; subclasses call `_init_runs()` from their constructor."""

    confirms_release = True
    #: what one run is called in messages ("no process was running")
    run_noun: ClassVar[str] = "process"
    cancel_grace: float
    #: seconds to wait for a run to be gone after SIGKILL before saying it survived
    kill_wait: float = 10.0

    def _init_runs(self) -> None:
        self._lock = threading.RLock()
        self._runs: dict[int, Run] = {}
        self._relaunch: dict[int, _Relaunch] = {}
        self._closed = threading.Event()

    # -- what subclasses provide ---------------------------------------------------------------
    def _launch(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int) -> Run:
        """Start run `restarts` of the job on `alloc` and watch it; raise `ExecutorError` (one
        line) when it cannot start."""
        raise NotImplementedError

    def _signal(self, run: Run, sig: int) -> None:
        """Send `sig` (SIGTERM, SIGKILL) to everything of `run`; never raises."""
        raise NotImplementedError

    def _watch(self, run: Run) -> None:
        """Start watching a re-attached run (in threads of its own) until `_run_over`."""
        raise NotImplementedError

    def _reattach(self, job: Job) -> Run | None:
        """After a restart: the run of `job` that still goes (not watched yet), or None when
        none does (its end, or its loss, is reported by then)."""
        raise NotImplementedError

    def _append_log(self, run: Run, text: str) -> None:
        """Append a marker line to the job's log, on a line of its own."""
        joblogs.append_line(self.log_path(run.job_id), text)

    def _failure(self, run: Run, code: int | None) -> str:
        """Why a run that ended on its own with `code` (not 0) failed, in one line."""
        raise NotImplementedError

    # -- the Executor interface ----------------------------------------------------------------
    def start(self, job: Job, now: float) -> None:
        self.prepare(job, now)
        with self._lock:
            self._runs[job.id] = self._launch(job.id, job.spec, dict(job.alloc), job.restarts)

    def stop(self, job: Job, why: str, now: float) -> None:
        with self._lock:
            pending = self._relaunch.get(job.id)
            if pending is not None:  # mid-resize: the resize thread reports instead of relaunching
                pending.cancel = why
                return
            run = self._runs.get(job.id)
            if run is None:
                self._report(job.id, -1, f"{why}: no {self.run_noun} was running")
                return
            run.stopping = why
        _thread(self._terminate, run, name=f"stop-{job.id}")

    def resize(self, job: Job, old: Allocation, now: float) -> None:
        with self._lock:
            pending = self._relaunch.get(job.id)
            if pending is not None:  # a relaunch is on its way: it takes the newest allocation
                pending.alloc, pending.restarts = dict(job.alloc), job.restarts
                return
            run = self._runs.get(job.id)
            if run is None:
                return  # it has just ended; that exit is reported
            run.superseded = True
            run.stopping = "resize"
            self._relaunch[job.id] = _Relaunch(job.spec, dict(job.alloc), job.restarts)
        _thread(self._restart, run, name=f"resize-{job.id}")

    def recover(self, jobs: list[Job]) -> None:
        for job in jobs:
            run = self._reattach(job)
            if run is None:
                continue
            resizing = run.restarts < job.restarts and job.stopping is None
            with self._lock:
                self._runs[job.id] = run
                if resizing:  # a resize was recorded, its old run still goes: finish the resize
                    run.superseded, run.stopping = True, "resize"
                    self._relaunch[job.id] = _Relaunch(job.spec, dict(job.alloc), job.restarts)
            self._watch(run)
            if resizing:
                _thread(self._restart, run, name=f"resize-{job.id}")

    def _adopted(self, run: Run) -> None:
        """A run found by `adopt`: tracked and watched from now on."""
        with self._lock:
            self._runs[run.job_id] = run
        self._watch(run)

    def close(self) -> None:
        """Stop reporting; the runs go on (a new executor can `recover` them)."""
        self._closed.set()

    # -- beyond the Executor interface ---------------------------------------------------------
    def running(self) -> list[int]:
        with self._lock:
            return sorted(set(self._runs) | set(self._relaunch))

    def is_running(self, job_id: int) -> bool:
        with self._lock:
            return job_id in self._runs or job_id in self._relaunch

    def terminate_all(self, grace: float | None = None) -> None:
        """Stop every run and wait for them to be gone, reporting nothing (tests, shutdown)."""
        with self._lock:
            runs = list(self._runs.values())
            for run in runs:
                run.superseded = True
                run.stopping = run.stopping or "shutdown"
            for nxt in self._relaunch.values():  # a resize under way must not start its next run
                nxt.shutdown = True
        threads = [_thread(self._terminate, r, grace) for r in runs]
        for t in threads:
            t.join()

    # -- stopping, restarting ------------------------------------------------------------------
    def _terminate(self, run: Run, grace: float | None = None) -> None:
        """SIGTERM, up to the grace period for the run to be gone, then SIGKILL."""
        grace = self.cancel_grace if grace is None else grace
        run.deadline = time.monotonic() + grace
        self._signal(run, signal.SIGTERM)
        if not run.gone.wait(grace):
            run.killed = True
            self._signal(run, signal.SIGKILL)
            if not run.gone.wait(self.kill_wait):
                log.error("job %s: run #%s still there after SIGKILL", run.job_id, run.restarts)

    def _restart(self, run: Run) -> None:
        """The resize thread: stop the old run, then start the next (or report a stop that came
        in between)."""
        self._terminate(run)
        job_id = run.job_id
        with self._lock:
            nxt = self._relaunch.pop(job_id)
            if nxt.shutdown:
                return
            if nxt.cancel is not None:
                code = run.code if run.code is not None else -15
                self._report(job_id, code, stopped_reason(nxt.cancel, run.killed))
                return
            self._relaunch_now(job_id, nxt.spec, nxt.alloc, nxt.restarts)

    def _relaunch_now(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int) -> None:
        """The old run is gone: its GPUs are released, the next run starts (or the job fails)."""
        self._released(job_id)
        with self._lock:
            try:
                self._runs[job_id] = self._launch(job_id, spec, alloc, restarts)
            except Unavailable as e:  # its new GPUs were taken outside: the engine places it anew
                if self.engine is not None and not self._closed.is_set():
                    self.engine.call_soon(self.engine.withdrawn, job_id, e.nodes,
                                          f"not started: {e}; placed anew")
            except Exception as e:  # noqa: BLE001 - whatever it is, the job fails with it
                self._report(job_id, 127, launch_failure(e))

    # -- ends ------------------------------------------------------------------------------------
    def _end_reason(self, run: Run, code: int | None) -> str:
        if run.stopping in ENGINE_STOPS:
            return stopped_reason(run.stopping, run.killed)
        if run.stopping is not None:
            return f"stopped for {run.stopping}"
        if code == 0:
            return ""
        reason = self._failure(run, code)
        job = self.engine.jobs.get(run.job_id) if self.engine is not None else None
        full = self.disk_note(self.job_dir(run.job_id), job.spec.workdir if job is not None else None)
        return f"{full}; {reason}" if full else reason  # (its likely cause first)

    def _run_over(self, run: Run, code: int | None, reason: str) -> None:
        """The run has ended with `code` (None: unknown): marker, bookkeeping, report."""
        run.code = code
        if not self._closed.is_set():  # else the next server's executor owns the log
            try:
                self._append_log(run, exit_line(run.restarts, code, reason))
            except OSError:
                pass
        with self._lock:
            current = self._runs.get(run.job_id) is run
            if current:
                del self._runs[run.job_id]
        run.gone.set()
        if current and not run.superseded:
            self._report(run.job_id, code, reason)

    def _report(self, job_id: int, code: int | None, reason: str) -> None:
        if self.engine is not None and not self._closed.is_set():
            self.engine.report_exit(job_id, code, reason)

    def _released(self, job_id: int) -> None:
        if self.engine is not None and not self._closed.is_set():
            self.engine.report_released(job_id)

    def _open_log(self, job_id: int, buffering: int = -1) -> BinaryIO:
        """The job's log, opened to append (never through a link); `ExecutorError` when it
        cannot be."""
        try:
            return open(self.log_path(job_id), "ab", buffering=buffering, opener=nofollow.opener)
        except OSError as e:
            raise ExecutorError(f"job {job_id}: cannot open its log: {e.strerror}: {e.filename}") from None


# -- the log's marker lines (what `joblogs.failure_reason` and a re-attach read back) -------------
def start_line(job_id: int, restarts: int, cuda: str, command: str, where: str = "") -> str:
    """The marker a run's log starts with: one line, a command's newlines (`python -c` with a
    program) shown as `\\n` (else the lines after the first read as the job's output: the "last
    log line" of a job that printed nothing)."""
    stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    command = command.replace("\r", "\\r").replace("\n", "\\n")
    return (f"{joblogs.MARKER} start #{restarts} of job {job_id} at {stamp}{' ' + where if where else ''} "
            f"CUDA_VISIBLE_DEVICES={cuda}: {command} ===\n")


def exit_line(restarts: int, code: int | None, reason: str) -> str:
    return (f"{joblogs.MARKER} exit of run #{restarts}: code {'unknown' if code is None else code}"
            f"{': ' + reason if reason else ''} ===\n")


#: what a Horovod Elastic worker whose slot a shrink removed prints as it ends (C++ `terminate`
#: in its background thread, SIGABRT): the driver ignores that exit, the job trains on
HOROVOD_REMOVED = "has been removed from elastic job"


def resized_line(restarts: int, was: int, now: int, cuda: str, horovod: bool = False) -> str:
    """The marker of a resize in place; a Horovod shrink says what its removed workers print
    next (`terminate called after throwing ...`, `what(): ... has been removed from elastic job`,
    `Aborted`, then horovodrun's `Process N exit with status code 134.`): how Horovod Elastic ends
    a worker, which reads like a crash (docs/resize.md)."""
    note = ""
    if horovod and now < was:
        n = was - now
        note = (f"; Horovod Elastic ends the {n} removed worker{'s' if n > 1 else ''} with "
                f"'{HOROVOD_REMOVED}' and exit code 134: expected, not an error")
    return (f"{joblogs.MARKER} run #{restarts} resized in place: {was} -> {now} GPUs, "
            f"CUDA_VISIBLE_DEVICES={cuda}{note} ===\n")


def reattached_line(restarts: int, what: str) -> str:
    return f"{joblogs.MARKER} re-attached to run #{restarts} ({what}) ===\n"


#: the engine's stops (`Executor.stop`'s `why`), as a run's end says them (a time limit: the run's
#: own code is its signal's, 143 or 137, the job's 124, which `show` and `--wait` give: the log said
#: `code 143: stopped at its time limit` alone)
ENGINE_STOPS = {"cancel": "cancelled", "preempt": "preempted",
                "time-limit": "stopped at its time limit (the job fails with exit code 124)"}


def stopped_reason(why: str, killed: bool) -> str:
    text = ENGINE_STOPS.get(why, why)
    return f"{text} (SIGKILL after the grace period)" if killed else text


def _thread(target: Callable[..., Any], *args: Any, name: str | None = None) -> threading.Thread:
    t = threading.Thread(target=target, args=args, name=name, daemon=True)
    t.start()
    return t
