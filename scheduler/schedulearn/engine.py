"""The scheduling engine: one round loop for the live scheduler and the simulator.

Each round: admit (the queued and running jobs) -> order and size (the policy) -> place
(keeping running jobs where they are) -> diff against what runs -> executor actions.
Rounds run when something changed (submit, exit, cancel, policy or inventory change) and, for
time-driven policies, on clock ticks. The clock decides what "waiting for the next round" means:
`RealClock` sleeps on an asyncio event with a tick timeout, `VirtualClock` (sim/) jumps to the
next arrival, run end or tick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
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
            raise SpecError(
                f"gpus: at most {total} (the GPUs of this cluster), got {spec.min_size if spec.gpus == 'auto' else spec.gpus}")
        now = self.clock() if now is None else now
        job = Job(id=self._next_id, spec=spec, submit_time=now, since=now, batch_size=spec.batch_size)
        if self.store is not None:
            self.store.add_job(job)  # first: a failing store leaves no trace in memory either
        self._next_id += 1
        self.jobs[job.id] = job
        self.active[job.id] = job
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
            job.stopping = "cancel"
            self.executor.stop(job, "cancel", now)
        return job

    def set_policy(self, name: str) -> Policy:
        """Switch the policy; it takes effect at the next round. Running jobs are untouched."""
        policy = policies.create(name)
        self.policy = policy
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
        why, job.stopping = job.stopping, None
        if why == "preempt":
            self._release(job, now)
            job.state = JobState.queued
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
        return self.policy.elastic or any(j.state is JobState.queued for j in self.active.values())

    def round(self, now: float | None = None, tick: bool = False) -> None:
        now = self.clock() if now is None else now
        if not self._dirty and not (tick and self.needs_tick()):
            return
        self._dirty = False
        self.rounds += 1
        policy = self.policy
        queued = [j for j in self.active.values() if j.state is JobState.queued and j.stopping is None]
        if not queued and not policy.elastic:
            return
        if not policy.elastic and sum(j.spec.requested for j in queued) <= self.pool.total:
            # Everything waiting fits: every non-elastic policy starts it all, nothing else moves.
            for job in queued:
                self._start(job, job.spec.requested, now)
            return
        ctx_jobs = [j for j in self.active.values() if j.stopping is None]
        capacity = self.pool.total + sum(j.size for j in ctx_jobs)
        wants = policy.schedule(RoundContext(now, ctx_jobs, capacity, self.nodes))
        chosen: dict[Job, int] = {}
        left = capacity
        for job, n in wants:
            if n <= 0 or job in chosen or job.stopping is not None:
                continue
            if n <= left:
                chosen[job] = n
                left -= n
            elif policy.blocking:
                break
        # Release first (preemptions, shrinks), then grow and start in the policy's order.
        for job in ctx_jobs:
            if job.state is JobState.running:
                n = chosen.get(job, 0)
                if n == 0:
                    job.stopping = "preempt"
                    job.restarts += 1
                    self.executor.stop(job, "preempt", now)
                elif n < job.size:
                    keep = shrink(job.alloc, n)
                    self.pool.give(_minus(job.alloc, keep))
                    self._resize(job, keep, now)
        for job, n in chosen.items():
            if job.state is JobState.queued:
                self._start(job, n, now)
            elif n > job.size:
                extra = policy.place(job, n - job.size, self.pool)
                if extra is not None:
                    self._resize(job, _plus(job.alloc, extra), now)

    def _start(self, job: Job, n: int, now: float) -> None:
        alloc = self.policy.place(job, n, self.pool)
        if alloc is None:
            return  # GPUs still held by stopping jobs: the next round places it
        job.set_alloc(alloc, now)
        job.state = JobState.running
        if job.start_time is None:
            job.start_time = now
        try:
            self.executor.start(job, now)
        except ExecutorError as e:
            self._finish(job, JobState.failed, None, str(e), now)
            return
        self._changed(job, "started", now, gpus=job.size)

    def _resize(self, job: Job, alloc: Allocation, now: float) -> None:
        old = job.alloc
        job.set_alloc(alloc, now)
        job.restarts += 1
        self.executor.resize(job, old, now)
        self._changed(job, "resized", now, gpus=job.size)

    def _release(self, job: Job, now: float) -> None:
        if job.alloc:
            self.pool.give(job.alloc)
            job.set_alloc({}, now)

    def _finish(self, job: Job, state: JobState, code: int | None, reason: str, now: float) -> None:
        self._release(job, now)
        job.state, job.exit_code, job.reason, job.end_time = state, code, reason, now
        self.active.pop(job.id, None)
        self._changed(job, state.value, now)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _changed(self, job: Job, kind: str, now: float, **data: Any) -> None:
        if self.store is not None:
            if kind != "submitted":
                self.store.update_job(job)
            self.store.add_event(job.id, kind, data, now)
        if self.listeners:
            self._emit({"type": "job", "event": kind, "job": job.to_dict(now)})
        self.wake()

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
