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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any, Protocol

from . import policies
from .executors.base import Executor, ExecutorError
from .model import Allocation, Job, JobSpec, JobState, Node, SpecError
from .placement import FreePool, shrink
from .policies.base import Policy, RoundContext

log = logging.getLogger("schedulearn.engine")


class JobNotFound(KeyError):
    def __str__(self) -> str:
        return f"job: no job with id {self.args[0]}"


class JobFinished(ValueError):
    """The job is already in a final state."""


class Store(Protocol):
    """Where the engine's state persists (see `schedulearn.store`)."""

    def load_jobs(self) -> list[Job]: ...
    def add_job(self, job: Job) -> None: ...
    def update_job(self, job: Job) -> None: ...
    def add_event(self, job_id: int | None, kind: str, data: dict[str, Any], t: float) -> None: ...
    def get_policy(self) -> str | None: ...
    def set_policy(self, name: str) -> None: ...


def _transaction(store: Store):
    """The store's transaction if it has one (SqlStore does), else nothing."""
    tx = getattr(store, "transaction", None)
    return tx() if tx is not None else contextlib.nullcontext()


class Clock(Protocol):
    def now(self) -> float: ...
    async def wait(self, engine: Engine) -> bool:
        """Wait until the next round is due; False ends the loop."""
        ...


class Engine:
    def __init__(
        self,
        nodes: Iterable[Node],
        policy: str | Policy = "fifo",
        executor: Executor | None = None,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.nodes: list[Node] = list(nodes)
        self.pool = FreePool(self.nodes)
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
        self.rounds = 0
        self.closed = False
        self._dirty = True
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_id = 1
        if executor is None:
            from .sim.executor import SimExecutor

            executor = SimExecutor()
        self.executor = executor
        executor.bind(self)
        stored = store.get_policy() if store is not None else None
        self.policy = policies.create(stored) if stored else self._as_policy(policy)
        if store is not None:
            if not stored:
                store.set_policy(self.policy.name)
            self._restore(store.load_jobs())

    @staticmethod
    def _as_policy(policy: str | Policy) -> Policy:
        return policies.create(policy) if isinstance(policy, str) else policy

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
        now = self.clock() if now is None else now
        job = Job(id=self._next_id, spec=spec, submit_time=now, since=now, batch_size=spec.batch_size)
        if self.store is not None:  # first: a failing store leaves no trace in memory either
            with _transaction(self.store):  # the job and its first event, both or neither
                self.store.add_job(job)
                self.store.add_event(job.id, "submitted", {}, now)
        self._next_id += 1
        self.jobs[job.id] = job
        self.active[job.id] = job
        self._track(job)
        self._changed(job, "submitted", now)
        return job

    def get(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise JobNotFound(job_id) from None

    def cancel(self, job_id: int, now: float | None = None) -> Job:
        job = self.get(job_id)
        if job.state.final:
            raise JobFinished(f"job {job_id}: already {job.state.value}")
        now = self.clock() if now is None else now
        if job.state is JobState.queued and job.stopping is None:
            self._finish(job, JobState.cancelled, None, "cancelled", now)
        elif job.stopping != "cancel":
            self._untrack(job)
            job.stopping = "cancel"
            self.executor.stop(job, "cancel", now)
        return job

    def set_policy(self, name: str) -> Policy:
        """Switch the policy; it takes effect at the next round. Running jobs are untouched."""
        policy = policies.create(name)
        self.policy = policy
        self._next_change = -math.inf
        if self.store is not None:
            self.store.set_policy(policy.name)
            self.store.add_event(None, "policy", {"policy": policy.name}, self.clock())
        self._emit({"type": "policy", "policy": policy.name})
        self.wake()
        return policy

    def set_nodes(self, nodes: Iterable[Node]) -> None:
        """Replace the inventory (refresh, node up or down). Jobs on vanished GPUs keep running
        in the books until their executor reports them gone."""
        self.nodes = list(nodes)
        self.pool = FreePool(self.nodes)
        for job in self.active.values():
            if job.alloc:
                self.pool.take(job.alloc)
        self._emit({"type": "inventory"})
        self.wake()

    def job_exited(self, job_id: int, exit_code: int, reason: str = "", now: float | None = None) -> None:
        """Called by the executor when a run is over (ended, crashed, or stopped on request)."""
        job = self.jobs.get(job_id)
        if job is None or job.state.final:
            return
        now = self.clock() if now is None else now
        self._untrack(job)
        why, job.stopping = job.stopping, None
        if why == "preempt":
            self._release(job, now)
            job.state = JobState.queued
            self._track(job)
            self._changed(job, "preempted", now)
        elif why == "cancel":
            self._finish(job, JobState.cancelled, exit_code, reason or "cancelled", now)
        elif exit_code == 0:
            self._finish(job, JobState.succeeded, 0, reason, now)
        else:
            self._finish(job, JobState.failed, exit_code, reason or f"exit code {exit_code}", now)

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

    def round(self, now: float | None = None, tick: bool = False) -> None:
        now = self.clock() if now is None else now
        if not self._dirty and not (tick and self._tick_due(now)):
            return
        self._dirty = False
        self.rounds += 1
        self._in_round = True
        try:
            self._round(now)
        finally:
            self._in_round = False
        self._next_change = None  # worked out at the first tick that asks (`_tick_due`)
        self._last_round = now

    def _round(self, now: float) -> None:
        policy = self.policy
        if not self._qjobs and not policy.elastic:
            return
        if not policy.elastic and self._queued_gpus <= self.pool.total:
            # Everything waiting fits: every non-elastic policy starts it all, nothing else moves.
            for job in sorted(self._qjobs, key=_ID):
                self._start(job, job.spec.requested, now)
            return
        ctx = RoundContext(now, self)
        if policy.preemptive or policy.elastic:
            self._full_round(policy, ctx, now)
        else:
            self._admit_round(policy, ctx, now)

    def _admit_round(self, policy: Policy, ctx: RoundContext, now: float) -> None:
        """Running jobs keep their GPUs: start queued jobs in the policy's order while they fit."""
        left = self.pool.total
        picked: dict[Job, int] = {}
        for job, n in policy.schedule(ctx):
            if not left:
                break
            if n <= 0 or job in picked or job.state is not JobState.queued:
                continue
            if n <= left:
                picked[job] = n
                left -= n
            elif policy.blocking:
                break
        for job, n in picked.items():
            self._start(job, n, now)

    def _full_round(self, policy: Policy, ctx: RoundContext, now: float) -> None:
        chosen: dict[Job, int] = {}
        left = ctx.capacity
        for job, n in policy.schedule(ctx):
            if not left:
                break  # nothing more fits; later wants change nothing
            if n <= 0 or job in chosen or job.stopping is not None:
                continue
            if n <= left:
                chosen[job] = n
                left -= n
            elif policy.blocking:
                break
        # Release first (preemptions, shrinks, in arrival order), then grow and start in the
        # policy's order.
        get, size = chosen.get, self._gpus
        losing = [j for j in self.running.values() if get(j, 0) < size[j.id]]
        for job in sorted(losing, key=_ID):
            n = get(job, 0)
            if n == 0:
                self._untrack(job)
                job.stopping = "preempt"
                job.restarts += 1
                self.executor.stop(job, "preempt", now)
            else:
                keep = shrink(job.alloc, n)
                self.pool.give(_minus(job.alloc, keep))
                self._resize(job, keep, now)
        for job, n in chosen.items():
            if job.state is JobState.queued:
                self._start(job, n, now)
            elif n > size.get(job.id, n):
                extra = policy.place(job, n - job.size, self.pool)
                if extra is not None:
                    self._resize(job, _plus(job.alloc, extra), now)

    def _start(self, job: Job, n: int, now: float) -> None:
        alloc = self.policy.place(job, n, self.pool)
        if alloc is None:
            return  # GPUs still held by stopping jobs: the next round places it
        self._untrack(job)
        job.set_alloc(alloc, now)
        job.state = JobState.running
        if job.start_time is None:
            job.start_time = now
        self._track(job)
        try:
            self.executor.start(job, now)
        except ExecutorError as e:
            self._finish(job, JobState.failed, None, str(e), now)
            return
        self._changed(job, "started", now, gpus=job.size)

    def _resize(self, job: Job, alloc: Allocation, now: float) -> None:
        old = job.alloc
        job.set_alloc(alloc, now)
        if job.id in self._gpus:
            self._held += job.size - self._gpus[job.id]
            self._gpus[job.id] = job.size
        job.restarts += 1
        self.executor.resize(job, old, now)
        self._changed(job, "resized", now, gpus=job.size)

    def _release(self, job: Job, now: float) -> None:
        if job.alloc:
            self.pool.give(job.alloc)
            job.set_alloc({}, now)

    def _finish(self, job: Job, state: JobState, code: int | None, reason: str, now: float) -> None:
        self._untrack(job)
        self._release(job, now)
        job.state, job.exit_code, job.reason, job.end_time = state, code, reason, now
        self.active.pop(job.id, None)
        self._changed(job, state.value, now)

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

    def _changed(self, job: Job, kind: str, now: float, **data: Any) -> None:
        if self.store is not None and kind != "submitted":  # submit() stored those itself
            self.store.update_job(job)
            self.store.add_event(job.id, kind, data, now)
        if self.listeners:
            self._emit({"type": "job", "event": kind, "job": job.to_dict(now)})
        if not (self._in_round and kind in _ROUND_OWN):
            self.wake()  # what the round did itself is what the policy wants: no new round

    def _emit(self, event: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must not break scheduling
                log.exception("event listener failed")

    def _restore(self, jobs: list[Job]) -> None:
        lost = []
        for job in sorted(jobs, key=lambda j: j.id):
            self.jobs[job.id] = job
            self._next_id = max(self._next_id, job.id + 1)
            if not job.state.final:
                self.active[job.id] = job
                self._track(job)
                if job.alloc:
                    self.pool.take(job.alloc)
                    lost.append(job)
        if lost:
            self.executor.recover(lost)

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

    # -- the loop ------------------------------------------------------------------------------
    async def run(self, clock: Clock) -> None:
        """The one round loop: advance the executor, run a round, wait for the next."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        tick = False
        while not self.closed and not getattr(clock, "done", False):
            now = clock.now()
            self.executor.advance(now)
            try:
                self.round(now, tick=tick)
            except Exception:
                log.exception("scheduling round failed; the loop goes on")
            tick = not await clock.wait(self)

    def close(self) -> None:
        self.closed = True
        if self._wake is not None:
            self.wake()
        self.executor.close()


class RealClock:
    """Wall-clock time; waits for a wake-up (submit, exit, ...) or a tick."""

    def __init__(self, tick: float = 5.0):
        self.tick = tick

    def now(self) -> float:
        return time.time()

    async def wait(self, engine: Engine) -> bool:
        """True when woken by an event, False on a tick."""
        assert engine._wake is not None
        try:
            await asyncio.wait_for(engine._wake.wait(), self.tick)
            woke = True
        except TimeoutError:
            woke = False
        engine._wake.clear()
        return woke


_ID = attrgetter("id")
_ROUND_OWN = frozenset({"started", "resized", "preempted"})


def _minus(a: Allocation, b: Allocation) -> Allocation:
    out = {}
    for name, idx in a.items():
        rest = tuple(i for i in idx if i not in set(b.get(name, ())))
        if rest:
            out[name] = rest
    return out


def _plus(a: Allocation, b: Allocation) -> Allocation:
    out = dict(a)
    for name, idx in b.items():
        out[name] = tuple(sorted(out.get(name, ()) + idx))
    return out
