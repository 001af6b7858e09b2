"""The scheduling engine: one round loop for the live scheduler and the simulator.

Each round: admit (the queued and running jobs) -> order and size (the policy) -> place
(keeping running jobs where they are) -> diff against what runs -> executor actions.
Rounds run when something changed (submit, exit, cancel, policy or inventory change) and, for
time-driven policies, on clock ticks. The clock decides what "waiting for the next round" means:
`RealClock` sleeps on an asyncio event with a tick timeout, `VirtualClock` (sim/) jumps to the
next arrival, run end or tick.

Speed (a round on 1,000 hosts and 10,000 queued jobs, a replay of 82k jobs): the engine keeps the
queue sorted (priority, arrival) and the running jobs in a dict, so a round never rebuilds or
sorts them; a policy that never preempts (`Policy.preemptive = False`) sees only the queue and
the walk stops at the first job that cannot fit; what the round itself does (starts, resizes,
preemptions) does not ask for another round, since the round's outcome is what the policy wants;
and a tick only runs a round when `Policy.next_change` says time may have changed a decision.

Crash consistency (with a store): what the engine *decides* is written before anything acts on it
(`_ahead`): a launch is recorded as `starting` (run number and allocation) before the executor
starts it, a cancel, preemption or time limit as `stopping` before the executor stops it, a resize (new
allocation, run number, GPUs being released) before the executor restarts it, a policy before
it replaces the one in memory. When that write fails nothing changes (the error goes to the
caller; a round stops and is retried). What has *happened* (a launch returned, a run exited) is
applied in memory at once and written after; a failed write is retried before the next round
(`_resync`). After a crash, `_restore` completes or rolls back each intent: a `starting` job's run
is adopted when the executor finds it (`Executor.adopt`), else the job goes back to the queue; a
recorded stop is issued again. Any failure to prepare or launch a job fails that job alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import logging
import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any, Protocol

from . import deadlines, estimates, pauses, policies
from .estimates.deadline import RESTART_S
from .estimates.predict import History
from .executors.base import Executor, ExecutorError, Unavailable, launch_failure
from .hostbooks import HostBooks
from .model import Allocation, Job, JobSpec, JobState, Node, SpecError
from .placement import FreePool, shrink
from .policies.base import Policy, RoundContext

log = logging.getLogger("schedulearn.engine")

#: Seconds between looks at the deadline statuses at ticks that run no round (a policy that is
#: not time-driven, `fifo` or `edf`, runs rounds only when jobs come and go; a job can go from on
#: track to at risk in between, and its `deadline` event must not wait for the next arrival).
DEADLINE_WATCH_S = 30.0
#: At most how long rounds wait for the GPUs a shrink gives up, or a preemption frees, to come back
#: (the old run's exit: seconds, or the executor's grace period). A round in between would see a
#: smaller cluster than there is: seen live, a job shrunk 4 -> 3 for a newcomer was shrunk again to
#: 2 a second later; and of two jobs preempted to grow a third, the first to exit was started again
#: on its own GPU (the round saw too few for the third) and preempted again half a second later.
RELEASE_WAIT_S = 60.0
#: Why the engine stops a job that has run its `JobSpec.time_limit` (`Executor.stop`'s `why`),
#: and the exit code it fails with (as `timeout(1)`'s)
TIME_LIMIT, TIME_LIMIT_EXIT = "time-limit", 124
#: `Job.extra`'s key for when an ended job's directory was removed (`SchedulerService`'s
#: `keep_job_dirs`): its log, result and checkpoints are gone, its record stays
FILES_REMOVED = "files_removed"
#: `Job.extra`: the admin who cancelled a job that was not theirs (`Engine.cancel`)
CANCELLED_BY = "cancelled_by"
#: the store's setting for an operator's pause (`Engine.pause`): JSON, or "" while not paused
PAUSED = "paused"
#: who pauses scheduling when the executor says no job can start (`Engine.check_blocker`)
SELF_PAUSER = "schedulearn"
#: `Job.extra`: what the executor says of a running job's run that has not really begun
#: (`Engine.run_note`: waiting in Slurm's queue), its `reason` while it runs
RUN_NOTE = "run_note"


class JobNotFound(KeyError):
    def __str__(self) -> str:
        return f"job: no job with id {self.args[0]}"


class JobFinished(ValueError):
    """The job is already in a final state."""


class Store(Protocol):
    """Where the engine's state persists (see `schedulearn.store`). `transaction()` groups
    writes (all or none); a store without transactions returns `contextlib.nullcontext()`."""

    def transaction(self) -> contextlib.AbstractContextManager[Any]: ...
    def load_jobs(self) -> list[Job]: ...
    def add_job(self, job: Job) -> None: ...
    def update_job(self, job: Job) -> None: ...
    def add_event(self, job_id: int | None, kind: str, data: dict[str, Any], t: float) -> None: ...
    def get_policy(self) -> str | None: ...
    def set_policy(self, name: str) -> None: ...
    def get_setting(self, key: str) -> str | None: ...
    def set_setting(self, key: str, value: str) -> None: ...


class StoreWriteFailed(RuntimeError):
    """Raised by `Engine.round` when the store refused a write: the round did not act on what
    it could not record (retried at the next wake-up or tick)."""


class Clock(Protocol):
    #: True when the loop should end (a simulation ran out of work); a live clock never is
    done: bool

    def now(self) -> float: ...
    async def wait(self, engine: Engine) -> bool:
        """Wait until the next round is due; False ends the loop."""
        ...


def _held_outside(nodes: list[Node]) -> int:
    """GPUs of healthy nodes held outside the scheduler (`Gpu.held_by`)."""
    return sum(1 for n in nodes if n.healthy for g in n.gpus if g.held_by)


class Engine:
    def __init__(
        self,
        nodes: Iterable[Node],
        policy: str | Policy = "fifo",
        executor: Executor | None = None,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
        restart_cost: float | None = None,
    ):
        self.nodes: list[Node] = list(nodes)
        #: seconds a checkpoint-restart costs on this set-up (the operator's `restart_cost`):
        #: the elastic policies' `restart_cost` (what they charge a resize until a job's own
        #: pauses are measured), and so the deadline statuses; None: the policies' own
        self.restart_cost = restart_cost
        self.pool = FreePool(self.nodes)
        self._outside = _held_outside(self.nodes)  # GPUs held outside the scheduler (`Gpu.held_by`)
        self.jobs: dict[int, Job] = {}
        self.active: dict[int, Job] = {}  # queued and running, in arrival order
        # The round's indexes: the queue sorted by (-priority, id) as two parallel lists, its
        # GPU demand, and the running jobs that are not being stopped.
        self._qkeys: list[tuple[int, int]] = []
        self._qjobs: list[Job] = []
        self._queued_gpus = 0
        self.running: dict[int, Job] = {}
        self._gpus: dict[int, int] = {}  # GPUs held by each running job (its size)
        self._held = 0  # their sum
        self._in_round = False
        self._next_change: float | None = -math.inf  # ticks before it cannot change a decision
        self._last_round = -math.inf
        self.store = store
        self.clock = clock
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.history = History()  # finished jobs: what run-time predictions learn from
        self._deadlined: dict[int, Job] = {}  # active jobs with a deadline, watched each round
        self._limited: dict[int, Job] = {}  # active jobs with a time limit, checked at each round and tick
        self._watched = -math.inf  # when their statuses were last looked at
        self._releases: dict[int, float] = {}  # job id -> when its shrink or preemption began
        #: seconds between looks at them at ticks that run no round (`DEADLINE_WATCH_S`; None:
        #: at rounds only — the simulator's default: no one to tell mid-run, and a look costs
        #: an estimate per job, which tripled a `fifo` replay of a deadline workload)
        self.deadline_watch_s: float | None = DEADLINE_WATCH_S
        self.rounds = 0
        self.closed = False
        self._dirty = True
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_id = 1
        self._unsynced: dict[int, list[tuple[str, dict[str, Any], float]]] = {}  # facts not yet stored
        if executor is None:  # the engine imports no executor: the caller chooses
            raise TypeError("Engine: an executor is required (e.g. schedulearn.sim.executor.SimExecutor())")
        self.executor = executor
        executor.bind(self)
        stored = store.get_policy() if store is not None else None
        self.policy = self._configure(policies.create(stored) if stored else self._as_policy(policy))
        #: an operator's pause (`pause`): who, since when, why; None while jobs are scheduled
        self.paused: dict[str, Any] | None = None
        if store is not None:
            if not stored:
                store.set_policy(self.policy.name)
            paused = store.get_setting(PAUSED)
            self.paused = json.loads(paused) if paused else None
            self._restore(store.load_jobs())

    @staticmethod
    def _as_policy(policy: str | Policy) -> Policy:
        return policies.create(policy) if isinstance(policy, str) else policy

    def _configure(self, policy: Policy) -> Policy:
        """The set-up's restart cost on a policy that prices restarts (`restart_cost`)."""
        if self.restart_cost is not None and hasattr(policy, "restart_cost"):
            policy.restart_cost = float(self.restart_cost)  # type: ignore[attr-defined]
        return policy

    def restart_price(self, job: Job) -> float:
        """Seconds the job's next (re)start costs, as the policy prices it (`pauses.price`: the
        median of its measured pauses, else its family's; the policy's `restart_cost` until one is
        measured) — what its deadline status counts. A policy that prices none: the set-up's
        `restart_cost`, else `estimates.deadline.RESTART_S`."""
        default = getattr(self.policy, "restart_cost", None)
        if default is None:
            default = self.restart_cost if self.restart_cost is not None else RESTART_S
        return pauses.price(job, float(default), self.history.pauses_of(job))

    # -- inputs ------------------------------------------------------------------------------
    @property
    def total_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes if n.healthy)

    def submit(self, spec: JobSpec | dict[str, Any], now: float | None = None) -> Job:
        """Queue a job. Raises `SpecError` (one line) and stores nothing if it can never run."""
        if not isinstance(spec, JobSpec):
            spec = JobSpec.parse(spec)
        total = self.total_gpus
        if spec.min_size > total or (spec.gpus != "auto" and int(spec.gpus) > total):
            got = spec.min_size if spec.gpus == "auto" else spec.gpus
            raise SpecError(f"gpus: at most {total} (the GPUs of this cluster), got {got}")
        if spec.single_process:  # one process: on one host, whatever the cluster's total
            host = max((len(n.gpus) for n in self.nodes if n.healthy), default=0)
            got = spec.min_size if spec.gpus == "auto" else int(spec.gpus)
            if got > host:
                raise SpecError(f"gpus: a python job is one process, on one host: at most {host} GPUs "
                                f"here (the largest host), got {got}; the torchrun and horovod launchers "
                                "run on several hosts")
        now = self.clock() if now is None else now
        if spec.deadline is not None:
            deadlines.check(spec.deadline, now)
        job = Job(id=self._next_id, spec=spec, submit_time=now, since=now, batch_size=spec.batch_size)
        if self.store is not None:  # first: a failing store leaves no trace in memory either
            with self.store.transaction():  # the job and its first event, both or neither
                self.store.add_job(job)
                self.store.add_event(job.id, "submitted", {}, now)
        self._next_id += 1
        self.jobs[job.id] = job
        self.active[job.id] = job
        self._track(job)
        self._changed(job, "submitted", now)
        if spec.deadline is not None:
            self._deadlined[job.id] = job
            self._watch_deadline(job, now)  # one that cannot make it is told at once
        if spec.time_limit is not None:
            self._limited[job.id] = job
        return job

    def get(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobNotFound(job_id) from None

    def cancel(self, job_id: int, now: float | None = None, by: str | None = None) -> Job:
        """Cancel a job; `by`: who, where not its own user (an admin): kept in its reason,
        `cancelled by carol (an admin)`, and in its `cancelling` event."""
        job = self.get(job_id)
        if job.state.final:
            raise JobFinished(f"job {job_id}: already {job.state.value}")
        now = self.clock() if now is None else now
        if job.state is JobState.queued and job.stopping is None:
            self._finish(job, JobState.cancelled, None, _cancelled_by("cancelled", by), now, ahead=True)
        elif job.stopping != "cancel":
            def stopping(j: Job) -> None:
                j.stopping = "cancel"
                if by:
                    j.extra = {**j.extra, CANCELLED_BY: by}

            # first: a failure changes nothing
            self._ahead(job, "cancelling", now, stopping, **({"by": by} if by else {}))
            self._untrack(job)
            self.executor.stop(job, "cancel", now)
            self._changed(job, "cancelling", now, stored=True)
        return job

    def files_removed(self, job_id: int, now: float | None = None) -> None:
        """Record that the directory of an ended job was removed (its log, result and
        checkpoints with it): the job's dict says since when (`files_removed`)."""
        job = self.get(job_id)
        if not job.state.final or FILES_REMOVED in job.extra:
            return
        now = self.clock() if now is None else now
        job.extra = {**job.extra, FILES_REMOVED: now}
        self._changed(job, "files-removed", now)

    def set_policy(self, name: str) -> Policy:
        """Switch the policy; it takes effect at the next round. Running jobs are untouched."""
        policy = self._configure(policies.create(name))
        if self.store is not None:  # first: a failing store leaves the running policy in place
            with self.store.transaction():
                self.store.set_policy(policy.name)
                self.store.add_event(None, "policy", {"policy": policy.name}, self.clock())
        self.policy = policy
        self._next_change = -math.inf
        self._emit({"type": "policy", "policy": policy.name})
        self.wake()
        return policy

    def pause(self, by: str, reason: str = "", now: float | None = None,
              until: str | None = None) -> dict[str, Any]:
        """Stop scheduling (an operator's maintenance, a demo that needs the GPUs): no queued job
        starts and no running job is preempted, grown or shrunk until `resume`; running jobs
        run on, and end, are cancelled and stopped at their time limits as ever. Kept in the
        store (a restart stays paused). Pausing again changes who and why, not since when.
        `until`: the scheduler's own pause (`check_blocker`), which says when it ends by itself
        and holds even where the store cannot take it."""
        now = self.clock() if now is None else now
        since = self.paused["since"] if self.paused else now
        paused = {"by": by, "since": since, "reason": reason, **({"until": until} if until else {})}
        self._set_paused(paused, "paused", now, must=until is not None)
        return paused

    def resume(self, by: str, now: float | None = None, must: bool = False) -> None:
        """Schedule again (a round at once); `must`: even where the store cannot take it."""
        if self.paused is not None:
            self._set_paused(None, "resumed", self.clock() if now is None else now, must=must, by=by)

    def check_blocker(self, now: float) -> bool:
        """Pause scheduling on its own while the executor says that no job can start for a reason
        of the machine (`Executor.start_blocker`: the job root's disk is full), rather than fail
        every queued job in turn; resume when it no longer says so (not an admin's pause, which
        stays until an admin resumes). The pause is everyone's to see, as an admin's: its `until`
        says when it ends. True while paused so."""
        blocker = self.executor.start_blocker()
        mine = self.paused is not None and self.paused.get("by") == SELF_PAUSER and "until" in self.paused
        if blocker is None:
            if mine:
                log.info("schedulearn: scheduling resumed: %s", self.paused["until"])  # type: ignore[index]
                self.resume(SELF_PAUSER, now, must=True)
            return False
        why, until = blocker
        if self.paused is None or (mine and self.paused["reason"] != why):
            log.warning("schedulearn: scheduling paused: %s; no job starts until %s", why, until)
            self.pause(SELF_PAUSER, why, now, until=until)
        return self.paused is not None

    def _set_paused(self, paused: dict[str, Any] | None, kind: str, now: float, must: bool = False,
                    **data: Any) -> None:
        """Store, then apply, a pause or its end. `must`: where the store cannot take it (an SQLite
        store on the full disk), in memory all the same (else the store's error, nothing changed)."""
        if self.store is not None:  # first: a failing store leaves things as they were
            try:
                with self.store.transaction():
                    self.store.set_setting(PAUSED, json.dumps(paused) if paused else "")
                    self.store.add_event(None, kind, {**(paused or {}), **data}, now)
            except Exception as e:
                if not must:
                    raise
                log.warning("schedulearn: scheduling %s, not stored (in force all the same): %s",
                            kind, _line(e))
        self.paused = paused
        self._next_change = -math.inf
        self._emit({"type": "paused", "paused": paused})
        self.wake()

    def set_nodes(self, nodes: Iterable[Node]) -> None:
        """Replace the inventory (refresh, node up or down). Jobs on vanished GPUs keep running
        in the books until their executor reports them gone."""
        self.nodes = list(nodes)
        self.pool = FreePool(self.nodes)
        self._outside = _held_outside(self.nodes)
        for job in self.active.values():
            if job.alloc:
                self.pool.take(job.alloc)
            if job.releasing:
                self.pool.take(job.releasing)
        self._emit({"type": "inventory"})
        self.wake()

    def job_exited(self, job_id: int, exit_code: int | None, reason: str = "",
                   now: float | None = None) -> None:
        """Called by the executor when a run is over (ended, crashed, or stopped on request)."""
        job = self.jobs.get(job_id)
        if job is None or job.state.final:
            return
        now = self.clock() if now is None else now
        try:
            self.executor.collect(job, now)  # its last reports
        except Exception:
            log.warning("job %s: could not read its last reports", job_id, exc_info=True)
        self._untrack(job)
        job.extra.pop(RUN_NOTE, None)  # (what its run's wait said is over with it)
        why, job.stopping = job.stopping, None
        if why == "preempt":
            self._release(job, now)
            job.state = JobState.queued
            self._track(job)
            self._changed(job, "preempted", now)
        elif why == "cancel":
            self._finish(job, JobState.cancelled, exit_code,
                         _cancelled_by(reason or "cancelled", job.extra.get(CANCELLED_BY)), now)
        elif why == TIME_LIMIT:
            limit = deadlines.fmt_minutes(job.spec.time_limit or 0)
            self._finish(job, JobState.failed, TIME_LIMIT_EXIT, f"stopped at its time limit ({limit} of run "
                         f"time){'; SIGKILL after the grace period' if 'SIGKILL' in reason else ''}", now)
        elif exit_code == 0:
            self._finish(job, JobState.succeeded, 0, reason, now)
        else:
            self._finish(job, JobState.failed, exit_code, reason or f"exit code {exit_code}", now)

    def run_released(self, job_id: int, now: float | None = None) -> None:
        """Called by the executor when the old run of a resized job is gone (or, after a shrink in
        place, the workers it removed): the GPUs its shrink gave up (`Job.releasing`) return to
        the free pool."""
        job = self.jobs.get(job_id)
        if job is None or not job.releasing:
            return
        now = self.clock() if now is None else now
        freed, job.releasing = job.releasing, {}
        self.pool.give(freed)
        self._changed(job, "released", now, gpus=_alloc_data(freed))

    def resize_paused(self, job_id: int, pause: dict[str, Any], now: float | None = None) -> None:
        """Called by the executor when it has measured what the job's last resize cost
        (`pauses.measure`: `pause_s` from the last step before it to the first step after, from
        the job's own reports; `in_place`; the sizes). Kept in the job's `extra` (the last few
        per kind: what a policy prices its next resize with, `pauses.price`) and recorded as a
        `resize_pause` event."""
        job = self.jobs.get(job_id)
        if job is None or job.state.final:
            return
        now = self.clock() if now is None else now
        pauses.record(job, pause)
        self._changed(job, "resize_pause", now, **pause)

    # -- reports from other threads ------------------------------------------------------------
    def report_exit(self, job_id: int, exit_code: int | None, reason: str = "") -> None:
        """`job_exited`, from any thread: applied on the engine's loop while it runs, at once
        otherwise (no loop yet, or a loop that has closed)."""
        self.call_soon(self.job_exited, job_id, exit_code, reason)

    def report_released(self, job_id: int) -> None:
        """`run_released`, from any thread (as `report_exit`)."""
        self.call_soon(self.run_released, job_id)

    def report_pause(self, job_id: int, pause: dict[str, Any]) -> None:
        """`resize_paused`, from any thread (as `report_exit`)."""
        self.call_soon(self.resize_paused, job_id, pause)

    def placed(self, job_id: int, alloc: Allocation, now: float | None = None) -> None:
        """Called by an executor that does not choose devices itself (Slurm binds a job's GPUs)
        when it learns which GPUs a running job's run really holds: the books follow. Only the
        indices may differ from what the engine chose (the same nodes and counts); anything
        else is ignored. The free pool is rebuilt from every job's books."""
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.running or not job.alloc:
            return
        new = {node: tuple(sorted(idx)) for node, idx in alloc.items()}
        if new == job.alloc:
            return
        if {n: len(i) for n, i in new.items()} != {n: len(i) for n, i in job.alloc.items()}:
            log.warning("job %s: the executor reports GPUs %s, not a relabelling of %s; ignored",
                        job_id, new, job.alloc)
            return
        now = self.clock() if now is None else now
        job.alloc = job.last_alloc = new
        self._changed(job, "placed", now, alloc=_alloc_data(new))
        self.set_nodes(self.nodes)  # the free pool from every job's books

    def run_note(self, job_id: int, note: str, now: float | None = None) -> None:
        """Called by an executor whose run of a running job waits outside the scheduler (pending
        in Slurm's queue behind a job Slurm ranks higher): `note` says so, as the job's reason
        while it runs ("" when it runs after all); an event, kept until the run's end."""
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.running or job.extra.get(RUN_NOTE, "") == note:
            return
        if note:
            job.extra[RUN_NOTE] = note
        else:
            job.extra.pop(RUN_NOTE, None)
        self._changed(job, "run_note", self.clock() if now is None else now, note=note)

    def withdrawn(self, job_id: int, nodes: Iterable[Node], reason: str, now: float | None = None) -> None:
        """Called by an executor that withdrew a run before it started, because what the engine
        placed it on was taken outside the scheduler since the last inventory (GPUs that another
        user's Slurm job holds): `nodes` is the inventory as it is now, and the job goes back to
        the queue — no restart counted, nothing of it ran — for the next round to place it anew
        (it waited, shown running, for as long as the outside job held them)."""
        job = self.jobs.get(job_id)
        now = self.clock() if now is None else now
        if job is not None and job.state is JobState.running and job.stopping is None:
            self._untrack(job)
            self._requeue(job, now, reason, job.start_time)
        self.set_nodes(nodes)  # (after the release: GPUs held outside are not given back as free)

    def _held_outside(self, nodes: list[Node]) -> None:
        """Mid-round, GPUs `nodes` (the inventory now) says are held outside the scheduler leave
        the free pool at once (the round's books read it); the inventory itself is replaced once
        the round is over."""
        for node in nodes:
            held = tuple(g.index for g in node.gpus if g.held_by)
            if held:
                self.pool.take({node.name: held})
        if self._loop is not None:
            self.call_soon(self.set_nodes, nodes)

    def _requeue(self, job: Job, now: float, reason: str, started: float | None) -> None:
        """Back to the queue, untracked `job` whose run never ran (withdrawn, or a start that
        failed for a reason of the machine): no restart counted, its service as at this run's
        start, its first start `started` (None: it never ran)."""
        attained, run = job.attained_base, job.run_base
        job.extra.pop(RUN_NOTE, None)
        self._release(job, now)
        job.attained_base, job.run_base, job.start_time = attained, run, started
        job.state = JobState.queued
        self._track(job)
        self._changed(job, "requeued", now, reason=reason)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the engine's loop (thread-safe): scheduled there while the loop
        runs, called here and now when there is no loop (tests driving rounds by hand, or after
        the loop closed)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
                return
            except RuntimeError:  # closed in between
                pass
        fn(*args)

    # -- the round ---------------------------------------------------------------------------
    def needs_tick(self) -> bool:
        """Whether time alone can change this policy's decisions now."""
        if not self.policy.time_driven:
            return False
        # (An elastic policy resizes running jobs as time goes; with no job at all, nothing can
        # change: ticking then would keep a simulation going forever.)
        return bool(self._qjobs) or (self.policy.elastic and bool(self.running))

    def _tick_due(self, now: float) -> bool:
        if not self.needs_tick():
            return False
        if self._next_change is None:  # nothing happened since the last round: ask the policy
            self._next_change = self.policy.next_change(list(self.running.values()), self._last_round)
        # A margin against rounding: a tick a hair before the change runs a (no-op) round.
        return now + 1e-9 * (1.0 + abs(now)) >= self._next_change

    # -- what users read -----------------------------------------------------------------------
    def job_dict(self, job: Job, now: float) -> dict[str, Any]:
        """`job.to_dict(now)`, with a queued job's `reason` saying why it waits, and its progress
        and estimated time left where its reports tell (`estimates.summary`); its deadline status
        counts a restart at the policy's price (`restart_price`). Without its spec's script: its
        size instead (`script_bytes`), since every listing, poll and event carries this dict and
        a notebook cell's script (the cell, its `--files` and `--vars`, the runner) is 30 KB to
        4 MB; `GET jobs/{id}/script` has it."""
        d = job.to_dict(now)
        script = d["spec"].pop("script", None)
        if job.script_bytes is not None or script is not None:
            d["script_bytes"] = job.script_bytes if job.script_bytes is not None else len(script.encode())
        if job.state is JobState.queued and job.stopping is None:
            d["reason"] = self.waiting_reason(job)
        elif job.state is JobState.running and RUN_NOTE in job.extra:
            d["reason"] = job.extra[RUN_NOTE]
        if job.spec.deadline is not None:
            d["deadline"] = job.spec.deadline
        if FILES_REMOVED in job.extra:
            d[FILES_REMOVED] = job.extra[FILES_REMOVED]
        known = estimates.REPORTS_KEY in job.extra or (job.alloc and self.history.count)
        if known or job.spec.deadline is not None:
            d.update(self._verdict(job, estimates.summary(
                job, now, self.history, self.total_gpus, self.per_node, restart_s=self.restart_price(job))))
        return d

    def _verdict(self, job: Job, info: dict[str, Any]) -> dict[str, Any]:
        """`info` with the policy's word on the deadline: a job it no longer plans for
        (`Policy.gave_up`: it runs best effort) that is not on track where it runs will miss."""
        said = info.get("deadline_status")
        if (said in ("at_risk", "unknown") or (said == "on_track" and job.state is JobState.queued)) \
                and not job.state.final and self.policy.gave_up(job):
            info["deadline_status"] = "will_miss"
            info["given_up"] = self.policy.name
        return info

    def _deadline_summary(self, job: Job, now: float) -> dict[str, Any]:
        info = estimates.deadline_summary(job, now, self.history, self.total_gpus, self.per_node,
                                          restart_s=self.restart_price(job))
        return self._verdict(job, info)

    @property
    def per_node(self) -> int:
        """GPUs on the largest healthy node (how speed-up curves pack GPUs)."""
        return max((len(n.gpus) for n in self.nodes if n.healthy), default=1)

    def _watch_deadlines(self, now: float) -> None:
        self._watched = now
        for job in list(self._deadlined.values()):
            self._watch_deadline(job, now)

    def _watch_deadline(self, job: Job, now: float) -> None:
        """A `deadline` event when the scheduler's estimate of a job's deadline changes (on track,
        at risk, will miss; met or missed at its end): what the widget and the sidebar show."""
        info = self._deadline_summary(job, now)
        status = info.get("deadline_status")
        if status is None or status == job.extra.get("deadline_status"):
            return
        job.extra["deadline_status"] = status
        self._changed(job, "deadline", now, **info)

    def waiting_reason(self, job: Job) -> str:
        """Why a queued job waits: what it needs, what is free, and its place in the queue (by
        priority, then arrival; the policy decides the order in which jobs start), e.g.
        `waiting: needs 3 GPUs, 2 free; 2nd in line of 4`."""
        # what the policy starts it on: its minimum where it sizes jobs, else its GPU count
        need = job.spec.min_size if self.policy.elastic else job.spec.requested
        free = self.pool.total
        i = bisect_left(self._qkeys, (-job.spec.priority, job.id))
        if job.spec.single_process and len(self.pool.order) > 1:  # one process: on one host
            free = self.pool.most_on_one_host()
            text = f"waiting: needs {need} GPU{'' if need == 1 else 's'} on one host, at most {free} free " \
                   f"on one ({self.pool.total} in all)"
        else:
            text = f"waiting: needs {need} GPU{'' if need == 1 else 's'}, {free} free"
        if self._outside:
            text += f", {self._outside} held outside the scheduler"
        text += f"; {_ordinal(i + 1)} in line of {len(self._qkeys)}"
        if self.paused is not None:
            why = f" ({self.paused['reason']})" if self.paused.get("reason") else ""
            paused = f"waiting: scheduling paused by {self.paused['by'] or '?'}{why}; "
            return paused + text.removeprefix("waiting: ")
        if need <= free:  # it fits: the policy (or a round not run yet) holds it back
            text += f"; the {self.policy.name} policy starts it when it comes first"
        return text

    def _stop_overrun(self, now: float) -> None:
        """Stop each running job that has run for its `time_limit` (its runs together; time in
        the queue does not count), as a cancel does: SIGTERM, the grace period to save a
        checkpoint, SIGKILL. It then fails (`job_exited`)."""
        for job in list(self._limited.values()):
            if _limit_reached_at(job) <= now:
                limit = job.spec.time_limit
                self._ahead(job, TIME_LIMIT, now, _stopping(TIME_LIMIT), limit_s=limit)
                self._untrack(job)
                self._changed(job, TIME_LIMIT, now, stored=True, limit_s=limit)
                self.executor.stop(job, TIME_LIMIT, now)

    def next_time_limit(self) -> float:
        """When the first running job reaches its time limit (inf: none will): the simulator's
        clock stops there, the live loop wakes then."""
        return min(map(_limit_reached_at, self._limited.values()), default=math.inf)

    def round(self, now: float | None = None, tick: bool = False) -> None:
        now = self.clock() if now is None else now
        self.check_blocker(now)
        if self._limited:
            self._stop_overrun(now)  # (at every tick: a limit is wall-clock, whatever the policy)
        if not self._dirty and not self._unsynced and not (tick and self._tick_due(now)):
            every = self.deadline_watch_s
            if tick and self._deadlined and every is not None and now - self._watched >= every:
                self._in_round = True  # no round: time alone moves a deadline's status (fifo,
                try:  # edf: rounds only at events); its events are the scheduler's own, no round
                    self._watch_deadlines(now)
                finally:
                    self._in_round = False
            return
        self._resync()  # what happened but is not stored yet goes first (raises: no round)
        self._dirty = False
        self.rounds += 1
        self._in_round = True
        try:
            self._round(now)
            self._watch_deadlines(now)
        except BaseException:
            self._dirty = True  # try again at the next wake-up or tick
            raise
        finally:
            self._in_round = False
        self._next_change = None  # worked out at the first tick that asks (`_tick_due`)
        self._last_round = now

    def _round(self, now: float) -> None:
        policy = self.policy
        if self.paused is not None or (not self._qjobs and not policy.elastic):
            return  # (paused: nothing starts or moves)
        if not policy.elastic and self._queued_gpus <= self.pool.total:
            # Everything waiting fits: every non-elastic policy starts it all, nothing else moves
            # (one-process jobs first: the others may take what is left on any host).
            waiting = sorted(self._qjobs, key=_ID)
            if len(self.pool.order) > 1:
                waiting.sort(key=_spans)
            for job in waiting:
                self._start(job, job.spec.requested, now)
            if not self._qjobs or len(self.pool.order) == 1:
                return  # (else one-process jobs that no host could hold: the policy weighs them)
        if (policy.preemptive or policy.elastic) and self._releasing(now):
            return  # GPUs on their way back: their release wakes the next round (RELEASE_WAIT_S)
        ctx = RoundContext(now, self.nodes, self._qjobs, self.running, self.active, self._gpus,
                           self.pool.total + self._held, self.history)
        if policy.preemptive or policy.elastic:
            self._full_round(policy, ctx, now)
        else:
            self._admit_round(policy, ctx, now)

    def _releasing(self, now: float) -> bool:
        """Whether a running job's shrink or preemption is still giving GPUs back (its old run
        not gone yet), for under `RELEASE_WAIT_S`."""
        if self._releases:
            self._releases = {i: t for i, t in self._releases.items() if (j := self.jobs.get(i)) is not None
                              and (j.stopping == "preempt" or (i in self.running and j.releasing))}
        return any(now - t < RELEASE_WAIT_S for t in self._releases.values())

    def _admit_round(self, policy: Policy, ctx: RoundContext, now: float) -> None:
        """Running jobs keep their GPUs: start queued jobs in the policy's order while they fit."""
        left = self.pool.total
        picked: dict[Job, int] = {}
        books: HostBooks | None = None
        for job, n in policy.schedule(ctx):
            if not left:
                break
            if n <= 0 or job in picked or job.state is not JobState.queued:
                continue
            if n <= left and job.spec.single_process and books is None and len(self.pool.order) > 1:
                books = self._books(picked, ())
            if n <= left and (books is None or books.want(job, n)):
                picked[job] = n
                left -= n
            elif policy.blocking:
                break
        if books is None:
            for job, n in picked.items():
                self._start(job, n, now)
            return
        for job, n in _one_process_first(picked):
            self._start(job, n, now, books.plan.get(job))

    def _full_round(self, policy: Policy, ctx: RoundContext, now: float) -> None:
        chosen, unplaced, plan = self._choose(policy, ctx)
        if unplaced and not policy.blocking and sum(chosen.values()) < ctx.capacity:
            # The policy sized the round counting jobs that no host can hold now: GPUs it meant
            # for them would stay idle. It weighs the round again without them.
            active = {i: j for i, j in self.active.items() if j not in unplaced}
            ctx = RoundContext(now, self.nodes, [j for j in ctx.queued if j not in unplaced], self.running,
                               active, self._gpus, ctx.capacity, self.history)
            chosen, _, plan = self._choose(policy, ctx)
        self._carry_out(chosen, plan, policy, now)

    def _choose(self, policy: Policy,
                ctx: RoundContext) -> tuple[dict[Job, int], set[Job], dict[Job, str] | None]:
        """The round's wants that fit, in the policy's order; the queued one-process jobs that
        no host could hold; where the others are to be placed (`HostBooks.plan`, None where the
        round weighed no one-process job on several hosts)."""
        chosen: dict[Job, int] = {}
        unplaced: set[Job] = set()
        left = ctx.capacity
        books: HostBooks | None = None  # (where a one-process job is weighed on several hosts)
        for job, n in policy.schedule(ctx):
            if not left:
                break  # nothing more fits; later wants change nothing
            if n <= 0 or job in chosen or job.stopping is not None:
                continue
            if n > left:
                if policy.blocking:
                    break
                continue
            if books is None and job.spec.single_process and len(self.pool.order) > 1:
                books = self._books(chosen, self.running.values())
                left = ctx.capacity - sum(chosen.values())
            if books is not None:
                n = books.want(job, n)
                if not n:  # no host holds it (a queued job), or its GPUs are promised ahead
                    if job.state is JobState.queued:
                        unplaced.add(job)
                        if policy.blocking:
                            break
                    continue
            chosen[job] = n
            left -= n
        return chosen, unplaced, None if books is None else books.plan

    def _carry_out(self, chosen: dict[Job, int], plan: dict[Job, str] | None, policy: Policy,
                   now: float) -> None:
        # Release first (preemptions, shrinks, in arrival order), then grow and start in the
        # policy's order (one-process jobs first where they were weighed host by host: on the
        # hosts `plan` gives them). A job resized by a restart (not in place) moves: it is
        # placed anew (`_move`), on the fewest hosts, as a starting job is.
        get, size = chosen.get, self._gpus
        losing = [j for j in self.running.values() if get(j, 0) < size[j.id]]
        moving = dict.fromkeys(j for j, n in chosen.items() if j.state is not JobState.queued
                               and n != size.get(j.id, n) and not j.spec.in_place)  # (in order)
        for job in sorted(losing, key=_ID):
            n = get(job, 0)
            if n == 0:
                self._preempt(job, now)
            elif job not in moving:
                keep = shrink(job.alloc, n)
                self._resize(job, keep, now, freed=_minus(job.alloc, keep))
        olds: dict[Job, Allocation] = {}
        if not self.executor.confirms_release:  # their GPUs are free now: for all to share,
            for job in moving:  # and out of their books, which never list a GPU of the pool
                olds[job] = job.alloc
                self.pool.give(job.alloc)
                job.set_alloc({}, now)
        for job, n in _one_process_first(chosen) if plan is not None else chosen.items():
            if job.state is JobState.queued:
                self._start(job, n, now, plan.get(job) if plan else None)
            elif job in moving:
                self._move(job, n, now, olds.get(job), plan.get(job) if plan else None)
            elif n > size.get(job.id, n):
                extra = self._one_host(job, n - job.size, policy.place(job, n - job.size, self.pool),
                                       only=next(iter(job.alloc), None))
                if extra is not None:
                    try:  # (a job resized in place keeps its slot order: new GPUs are new slots)
                        self._resize(job, (_append if job.spec.in_place else _plus)(job.alloc, extra), now)
                    except BaseException:
                        self.pool.give(extra)
                        raise

    def _books(self, chosen: dict[Job, int], running: Iterable[Job]) -> HostBooks:
        """The round's books by host (`HostBooks`), with what `chosen` took so far (a want
        they cut down is cut in `chosen` too)."""
        books = HostBooks(self.pool, running)
        for job, n in list(chosen.items()):
            got = books.want(job, n)
            if got:
                chosen[job] = got
            else:
                del chosen[job]
        return books

    def _move(self, job: Job, n: int, now: float, old: Allocation | None = None,
              host: str | None = None) -> None:
        """`job` restarts on n GPUs, placed anew (`Policy.move`): a restart costs the same wherever
        it lands, and keeping the hosts a job had piece by piece scatters it. Where the executor
        confirms that an old run is gone (`confirms_release`), only the job itself may reuse its
        GPUs: they return to the pool for its own placement alone, and those it leaves are held
        until its old run exits; elsewhere they are already free and out of its books
        (`_full_round`), and `old` says where it ran."""
        hold = self.executor.confirms_release
        if old is None:
            old = job.alloc
            self.pool.give(old)
        new = self._place(job, n, host, self.policy.move) if n <= self.pool.total else None
        if new is None:  # (GPUs of stopping jobs not yet free) it stays, on what is still free
            new = self.pool.still_free(old)
            self.pool.take(new)
            if not new:  # nothing of it is left: stopped, its old run frees nothing
                job.set_alloc({}, now)
                self._preempt(job, now)
                return
            if new == old:  # it stays where it is (its books back, where they were emptied)
                job.set_alloc(old, now)
                return
        freed = _minus(old, new)
        if hold:
            self.pool.take(freed)  # (`_resize` holds them)
        self._resize(job, new, now, freed=freed if hold else None, old=old)

    def _preempt(self, job: Job, now: float) -> None:
        self._ahead(job, "preempting", now, _preempting, run=job.restarts + 1)
        self._untrack(job)
        self._releases[job.id] = now  # (rounds wait for its exit: `_releasing`)
        self.executor.stop(job, "preempt", now)

    def _one_host(self, job: Job, n: int, alloc: Allocation | None,
                  only: str | None = None) -> Allocation | None:
        """The policy's placement `alloc` of n GPUs, unless `job` is one process (plain Python,
        `JobSpec.single_process`) and `alloc` is not on one host (or not on `only`, the host it
        runs on): a process cannot span hosts. Then n GPUs on one host; failing that, an elastic
        job takes the most one host has, down to its minimum (to grow: any, on its host); else
        None (it waits)."""
        if alloc is None or not job.spec.single_process or (
                len(alloc) == 1 and (only is None or only in alloc)):
            return alloc
        self.pool.give(alloc)
        if job.spec.elastic:
            n = min(n, self.pool.count(only) if only is not None else self.pool.most_on_one_host())
            if n < (1 if only is not None else job.spec.min_size):
                return None
        return self.pool.one_host(n, only)

    def _place(self, job: Job, n: int, host: str | None, place: Callable) -> Allocation | None:
        """n GPUs for `job` on `host` where the round's books planned it there and they are
        free; else where `place` (the policy's) puts them, on one host for one process."""
        alloc = self.pool.one_host(n, only=host) if host is not None else None
        return alloc if alloc is not None else self._one_host(job, n, place(job, n, self.pool))

    def _start(self, job: Job, n: int, now: float, host: str | None = None) -> None:
        if self.paused is not None:
            return  # (paused in this round: a start failed for want of disk)
        alloc = self._place(job, n, host, self.policy.place)
        if alloc is None:
            return  # GPUs still held by stopping jobs, or not on one host: a later round places it

        def starting(j: Job) -> None:
            j.set_alloc(alloc, now)
            j.state = JobState.starting
            if j.start_time is None:
                j.start_time = now

        started = job.start_time
        try:  # the intent first: a crash from here on finds it (`_restore`)
            self._ahead(job, "starting", now, starting, run=job.restarts, alloc=_alloc_data(alloc))
        except BaseException:
            self.pool.give(alloc)
            raise
        self._untrack(job)
        try:
            self.executor.start(job, now)
        except Unavailable as e:  # its GPUs were taken outside since the inventory: placed anew
            self._requeue(job, now, f"not started: {e}; placed anew", started)
            self._held_outside(e.nodes)
            return
        except Exception as e:  # whatever it is, it fails this job alone, and its GPUs are free
            if not isinstance(e, (ExecutorError, OSError)):  # (those say it all in one line)
                log.warning("job %s: launch failed", job.id, exc_info=True)
            if self.check_blocker(now):  # not the job's fault (the disk is full): it waits
                self._requeue(job, now, f"{launch_failure(e)}; it waits: {self.paused['reason']}", started)
                return
            self._finish(job, JobState.failed, None, launch_failure(e), now)
            return
        job.state = JobState.running
        self._track(job)
        self._changed(job, "started", now, gpus=job.size)

    def _resize(self, job: Job, alloc: Allocation, now: float, freed: Allocation | None = None,
                old: Allocation | None = None) -> None:
        """`job` runs on `alloc` from now: in place where the job asks for it and the executor can
        (`Executor.resizes_in_place`: the framework adds or removes workers; `job.restarts` does
        not change), else a checkpoint-restart by the executor (`job.restarts` + 1). `freed`: the
        GPUs a shrink gives up; with an executor that confirms that the run no longer uses them
        (the old run's exit, or the removed workers' end) they stay out of the pool
        (`job.releasing`) until `run_released`. `old`: where it ran, if its books no longer say."""
        old = job.alloc if old is None else old
        in_place = job.spec.in_place and self.executor.resizes_in_place(job, alloc)
        hold = bool(freed) and self.executor.confirms_release
        run = job.restarts + (0 if in_place else 1)

        def resized(j: Job) -> None:
            j.set_alloc(alloc, now)
            extra = dict(j.extra)  # (a new dict: `_ahead` works on a shallow copy)
            if in_place:
                extra[pauses.IN_PLACE_KEY] = int(extra.get(pauses.IN_PLACE_KEY, 0)) + 1
            else:
                j.restarts += 1
            extra[pauses.PENDING_KEY] = pauses.pending(now, len(_flat(old)), len(_flat(alloc)), run, in_place)
            j.extra = extra
            if hold:
                j.releasing = _plus(j.releasing, freed)

        self._ahead(job, "resized", now, resized, run=run, gpus=len(_flat(alloc)), alloc=_alloc_data(alloc),
                    releasing=_alloc_data(freed) if hold else {}, in_place=in_place)
        if freed and not hold:
            self.pool.give(freed)
        elif freed:
            self._releases.setdefault(job.id, now)
        if job.id in self._gpus:
            self._held += job.size - self._gpus[job.id]
            self._gpus[job.id] = job.size
        if in_place:
            self.executor.resize_in_place(job, old, now)
        else:
            self.executor.resize(job, old, now)
        self._changed(job, "resized", now, stored=True, gpus=job.size)

    def _release(self, job: Job, now: float) -> None:
        held = _plus(job.alloc, job.releasing) if job.releasing else job.alloc
        if held:
            self.pool.give(held)
        if job.alloc:
            job.set_alloc({}, now)
        job.releasing = {}

    def _finish(self, job: Job, state: JobState, code: int | None, reason: str, now: float,
                ahead: bool = False) -> None:
        """End `job`. `ahead`: a decision (a cancel), written before memory changes; else a fact
        (an exit), applied at once and written after."""
        def final(j: Job) -> None:
            j.state, j.exit_code, j.reason, j.end_time = state, code, reason, now

        if ahead and self.store is not None:
            def ended(j: Job) -> None:
                if j.alloc:
                    j.set_alloc({}, now)
                final(j)

            held = job.alloc
            self._ahead(job, state.value, now, ended)
            self._untrack(job)
            if held:
                self.pool.give(held)
        else:
            self._untrack(job)
            self._release(job, now)
            final(job)
        self.active.pop(job.id, None)
        self._limited.pop(job.id, None)
        self._learn(job, now)
        if self._deadlined.pop(job.id, None) is not None:
            job.extra["deadline_status"] = estimates.deadline_summary(
                job, now, None, 0, 1).get("deadline_status")
        self._changed(job, state.value, now, stored=ahead and self.store is not None)
        self._shed_script(job)

    def _shed_script(self, job: Job) -> None:
        """Keep a finished job's script in the store only: it never runs again, and a notebook
        cell's is 30 KB to 4 MB, so 10,000 finished cells held 300 MB for as long as the server
        ran. Its size stays (`job_dict`); `GET jobs/{id}/script` reads it from the store. The spec
        keeps an empty script, so the job still reads as a script's to what learns from it."""
        script = job.spec.script
        if self.store is None or not script or job.script_bytes is not None or not job.state.final:
            return
        job.script_bytes = len(script.encode())
        job.spec = job.spec.model_copy(update={"script": ""})

    def stored_script(self, job: Job) -> str | None:
        """The script `job` runs: its spec's, or the store's for a finished job (`_shed_script`)."""
        if job.script_bytes is None or self.store is None:
            return job.spec.script
        stored = self.store.get_job(job.id)
        return stored.spec.script if stored is not None else None

    def _learn(self, job: Job, now: float) -> None:
        """A job ended: what it needed (seconds on one GPU, where its reports told) and what it
        measured go into the history that estimates of later jobs learn from."""
        if job.state is JobState.succeeded and estimates.REPORTS_KEY in job.extra:
            est = estimates.estimate(job, now)
            work = est.total_s1()
            if work is not None:
                job.extra["work_s1"] = round(work, 3)
            k = est.work_per_progress() if est.kind == "reported" else None  # per unit of progress
            if k is not None and est.progress is not None and est.progress >= 0.5:
                job.extra["work_k"] = round(k, 3)
        self.history.add(job)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _track(self, job: Job) -> None:
        """Index a queued or running job for the round (the inverse of `_untrack`)."""
        if job.state is JobState.queued and job.stopping is None:
            key = (-job.spec.priority, job.id)
            i = bisect_right(self._qkeys, key)
            if i and self._qkeys[i - 1] == key:
                return
            self._qkeys.insert(i, key)
            self._qjobs.insert(i, job)
            self._queued_gpus += job.spec.requested
        elif job.state is JobState.running and job.stopping is None:
            self.running[job.id] = job
            self._gpus[job.id] = n = job.size
            self._held += n

    def _untrack(self, job: Job) -> None:
        if self.running.pop(job.id, None) is not None:
            self._held -= self._gpus.pop(job.id)
            return
        key = (-job.spec.priority, job.id)
        i = bisect_left(self._qkeys, key)
        if i < len(self._qkeys) and self._qkeys[i] == key:
            del self._qkeys[i]
            del self._qjobs[i]
            self._queued_gpus -= job.spec.requested

    def _ahead(self, job: Job, kind: str, now: float, change: Callable[[Job], None], **data: Any) -> None:
        """Write-ahead: store `job` as `change` leaves it (and a `kind` event), then apply `change`
        in memory. A store failure raises and changes nothing."""
        if self.store is None:
            change(job)
            return
        new = copy.copy(job)
        change(new)
        if job.id in self._unsynced:  # older facts of this job go first, in the same transaction
            with self.store.transaction():
                self._store_job(new, self._unsynced[job.id] + [(kind, data, now)])
            del self._unsynced[job.id]
        else:
            self._store_job(new, [(kind, data, now)])
        for name in _JOB_FIELDS:
            setattr(job, name, getattr(new, name))

    def _store_job(self, job: Job, events: list[tuple[str, dict[str, Any], float]]) -> None:
        assert self.store is not None
        with self.store.transaction():
            self.store.update_job(job)
            for kind, data, t in events:
                self.store.add_event(job.id, kind, data, t)

    def _resync(self) -> None:
        """Store the facts whose writes failed (oldest first); raise while the store fails."""
        for job_id, events in list(self._unsynced.items()):
            try:
                self._store_job(self.jobs[job_id], events)
            except Exception as e:
                raise StoreWriteFailed(f"store: cannot record job {job_id} yet: {_line(e)}") from e
            del self._unsynced[job_id]
            log.info("job %s: its state is stored again", job_id)

    def _changed(self, job: Job, kind: str, now: float, stored: bool = False, **data: Any) -> None:
        if self.store is not None and kind != "submitted" and not stored:  # submit() stored those itself
            if job.id in self._unsynced:
                self._unsynced[job.id].append((kind, data, now))
            else:
                try:
                    self._store_job(job, [(kind, data, now)])
                except Exception as e:  # it happened all the same: kept, and written before the next round
                    log.warning("job %s: %s not stored yet (retried before the next round): %s",
                                job.id, kind, _line(e))
                    self._unsynced[job.id] = [(kind, data, now)]
                    self._dirty = True
        if self.listeners:
            self._emit({"type": "job", "event": kind, "job": self.job_dict(job, now)})
        if not (self._in_round and kind in _ROUND_OWN):
            self.wake()  # what the round did itself is what the policy wants: no new round

    def _emit(self, event: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must not break scheduling
                log.exception("event listener failed")

    def _restore(self, jobs: list[Job]) -> None:
        """Rebuild from the store after a (re)start, completing or rolling back the intents a
        crash left: a `starting` job's run is adopted when the executor finds it, else the job
        is queued again; a recorded stop (cancel, preemption) is issued again."""
        lost, starting = [], []
        for job in sorted(jobs, key=lambda j: j.id):
            self.jobs[job.id] = job
            self._next_id = max(self._next_id, job.id + 1)
            if job.state.final:
                self.history.add(job)
                self._shed_script(job)
            else:
                self.active[job.id] = job
                if job.spec.deadline is not None:
                    self._deadlined[job.id] = job
                if job.spec.time_limit is not None:
                    self._limited[job.id] = job
                if job.alloc:
                    self.pool.take(job.alloc)
                if job.releasing:
                    self.pool.take(job.releasing)
                if job.state is JobState.starting:
                    starting.append(job)
                    continue
                self._track(job)
                if job.alloc:
                    lost.append(job)
        now = self.clock()
        for job in starting:
            self._resume_start(job, now)
        if lost:
            self.executor.recover(lost)
        for job in lost:
            if job.stopping is not None and not job.state.final:
                self.executor.stop(job, job.stopping, now)
            if job.releasing or job.stopping == "preempt":  # (still on their way back)
                self._releases[job.id] = now
        if jobs:
            log.info("store: %s", restored_summary(jobs, lost + starting))

    def _resume_start(self, job: Job, now: float) -> None:
        job.state = JobState.running  # what the executor re-attaches to, if it finds the run
        try:
            adopted = self.executor.adopt(job)
        except Exception as e:  # cannot tell: starting it again could run it twice
            log.warning("job %s: could not look for its run after the restart: %s", job.id, _line(e))
            self._finish(job, JobState.failed, None, f"lost on restart: {_line(e)}", now)
            return
        if job.state.final:  # the adopted run had ended already, and reported it
            return
        if adopted:
            self._track(job)
            self._changed(job, "adopted", now, run=job.restarts)
            return
        # nothing of that run is running: back to the queue, the next round starts it
        self._release(job, now)
        job.state = JobState.queued
        self._track(job)
        self._changed(job, "requeued", now, reason="its launch was cut short by a restart")

    def wake(self) -> None:
        """Ask for a round soon (thread-safe)."""
        self._dirty = True
        if self._wake is not None and self._loop is not None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                self._wake.set()
            elif not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._wake.set)

    async def woken(self, timeout: float) -> bool:
        """Wait (in `run`'s loop) until `wake` is called or `timeout` seconds pass; True when
        woken. Clears the wake-up either way."""
        assert self._wake is not None, "woken() is for the clock of a running loop"
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
            woke = True
        except TimeoutError:
            woke = False
        self._wake.clear()
        return woke

    # -- the loop ------------------------------------------------------------------------------
    async def run(self, clock: Clock) -> None:
        """The one round loop: advance the executor, run a round, wait for the next."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        tick = False
        while not self.closed and not clock.done:
            now = clock.now()
            self.executor.advance(now)
            try:
                self.round(now, tick=tick)
            except Exception as e:
                if isinstance(e, StoreWriteFailed) or _is_store_error(e):
                    log.warning("scheduling round stopped, retried at the next tick: %s", _line(e))
                else:
                    log.exception("scheduling round failed; the loop goes on")
            tick = not await clock.wait(self)

    def close(self) -> None:
        self.closed = True
        if self._wake is not None:
            self.wake()
        self.executor.close()


class RealClock:
    """Wall-clock time; waits for a wake-up (submit, exit, ...) or a tick."""

    done = False

    def __init__(self, tick: float = 5.0):
        self.tick = tick

    def now(self) -> float:
        return time.time()

    async def wait(self, engine: Engine) -> bool:
        """True when woken by an event, False on a tick (or when a job reaches its time limit)."""
        return await engine.woken(min(self.tick, max(engine.next_time_limit() - self.now(), 0.0)))


_ID = attrgetter("id")
_ROUND_OWN = frozenset({"started", "resized", "preempted", "deadline"})
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))


def _cancelled_by(reason: str, by: str | None) -> str:
    """A cancelled job's reason, naming who cancelled it where that was not its user."""
    if not by:
        return reason
    head, sep, rest = reason.partition("cancelled")
    return f"{head}cancelled by {by} (an admin){rest}" if sep else f"cancelled by {by} (an admin): {reason}"


def _stopping(why: str) -> Callable[[Job], None]:
    def change(job: Job) -> None:
        job.stopping = why
    return change


def _limit_reached_at(job: Job) -> float:
    """When a running job's run time reaches its `time_limit` (inf: not running, being stopped,
    or no limit)."""
    limit = job.spec.time_limit
    if limit is None or job.state is not JobState.running or not job.alloc or job.stopping is not None:
        return math.inf
    return job.since + limit - job.run_base


def _preempting(job: Job) -> None:
    job.stopping = "preempt"
    job.restarts += 1
    if pauses.PENDING_KEY in job.extra:  # a resize not measured yet never will be (a new dict: see `_ahead`)
        job.extra = {k: v for k, v in job.extra.items() if k != pauses.PENDING_KEY}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def restored_summary(jobs: list[Job], resumed: list[Job]) -> str:
    """What a (re)start found in the store, for the operator's log: `12 job(s): 1 running, 2
    queued, 9 finished` (and those whose runs ended while the server was down)."""
    running = sum(j.state is JobState.running for j in jobs)
    queued = sum(j.state is JobState.queued for j in jobs)
    ended = sum(j.state.final for j in resumed)
    finished = len(jobs) - running - queued - ended
    counts = [(running, "running"), (queued, "queued"), (finished, "finished"),
              (ended, "ended while it was down")]
    return f"{len(jobs)} job(s): " + ", ".join(f"{n} {what}" for n, what in counts if n)


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _is_store_error(e: BaseException) -> bool:
    return any(type(x).__name__ == "StoreError" for x in (e, e.__cause__) if x is not None)


def _alloc_data(alloc: Allocation | None) -> dict[str, list[int]]:
    return {k: list(v) for k, v in (alloc or {}).items()}


def _one_process_first(chosen: dict[Job, int]) -> list[tuple[Job, int]]:
    """The round's wants, one-process jobs first (on the hosts planned for them), then those
    that may span hosts (on what is left, wherever it is); each kind in the policy's order."""
    return sorted(chosen.items(), key=lambda want: _spans(want[0]))


def _spans(job: Job) -> bool:
    """Whether `job` may span hosts (sorts one-process jobs first)."""
    return not job.spec.single_process


def _flat(alloc: Allocation) -> list[tuple[str, int]]:
    return [(k, i) for k, v in alloc.items() for i in v]


def _minus(a: Allocation, b: Allocation) -> Allocation:
    out = {}
    for name, idx in a.items():
        rest = tuple(i for i in idx if i not in set(b.get(name, ())))
        if rest:
            out[name] = rest
    return out


def _append(a: Allocation, b: Allocation) -> Allocation:
    """`a` and then `b`, in that order on each node (the slots of a job resized in place: its
    workers keep their GPUs, new GPUs become new slots; `placement.shrink` keeps the first)."""
    out = dict(a)
    for name, idx in b.items():
        out[name] = out.get(name, ()) + tuple(i for i in idx if i not in set(out.get(name, ())))
    return out


def _plus(a: Allocation, b: Allocation) -> Allocation:
    out = dict(a)
    for name, idx in b.items():
        out[name] = tuple(sorted(out.get(name, ()) + idx))
    return out
