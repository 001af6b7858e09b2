"""A simulated executor: runs end when their job model says so, on the engine's virtual clock.

A job model answers one question: from progress `p`, on a placement of shape `shape` (GPUs per
node) at global batch size `bsz`, where is the job after `dt` seconds, and does it finish?
`RigidModel` is a fixed run time; the application profiles (`sim.apps`) are another model.
Finish times sit in a heap and progress is computed only when a run changes (lazily), so a
replay of 82k jobs costs O(log n) per event, not O(running jobs).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..executors.base import Executor
from ..executors.registry import ExecutorKind
from ..inventory import Inventory
from ..model import Allocation, Job
from ..placement import placement_shape

if TYPE_CHECKING:
    from ..service import Settings


class JobModel(Protocol):
    def advance(
        self, progress: float, shape: tuple[int, ...], bsz: int | None, dt: float
    ) -> tuple[float, float | None]: ...


class RigidModel:
    """`duration` seconds on the requested GPUs; linear speed-up on more or fewer."""

    __slots__ = ("work",)

    def __init__(self, duration: float, gpus: int):
        self.work = duration * gpus  # GPU-seconds

    def advance(self, progress, shape, bsz, dt):
        rate = sum(shape)
        need = self.work - progress
        if rate > 0 and rate * dt >= need:
            return self.work, need / rate
        return progress + rate * dt, None


def default_model(job: Job) -> JobModel:
    spec = job.spec
    if spec.application is not None:
        from .apps import get_profile

        if spec.adaptive_batch:  # the job may pick its own batch size when a policy lets it
            from .adaptive import AdaptiveBatch

            return AdaptiveBatch(get_profile(spec.application))
        return get_profile(spec.application)
    if spec.duration is None:
        raise ValueError(f"job {job.id}: a simulated job needs a duration or an application")
    return RigidModel(spec.duration, spec.requested)


@dataclass(slots=True)
class _Run:
    job: Job
    model: JobModel
    progress: float
    last: float  # time `progress` was computed at
    ready: float  # progress resumes at this time (after a restart's cost)
    finish: float = math.inf
    version: int = 0


class SimExecutor(Executor):
    """Simulated runs. Live (the server's `sim` executor) its `inventory` gives the nodes."""

    simulated = True

    def __init__(self, restart_penalty: float = 0.0, model=default_model, inventory: Inventory | None = None):
        self.restart_penalty = restart_penalty
        self.model = model
        self.inventory = inventory
        self.runs: dict[int, _Run] = {}
        self.heap: list[tuple[float, int, int]] = []
        self._versions = itertools.count(1)  # unique across runs: a stale heap entry never matches

    def _plan(self, run: _Run) -> None:
        job = run.job
        _, left = run.model.advance(run.progress, placement_shape(job.alloc), job.batch_size, math.inf)
        run.version = next(self._versions)
        run.finish = run.ready + (left if left is not None else math.inf)
        if run.finish < math.inf:
            heapq.heappush(self.heap, (run.finish, job.id, run.version))

    def _sync(self, run: _Run, now: float) -> None:
        """Bring `run.progress` up to `now` on the allocation it had since `run.last`."""
        start = max(run.last, run.ready)
        if now > start:
            shape = placement_shape(run.job.alloc)
            run.progress, _ = run.model.advance(run.progress, shape, run.job.batch_size, now - start)
        run.last = max(run.last, now)

    def start(self, job: Job, now: float) -> None:
        model = job.extra.get("model")
        if model is None:
            model = job.extra["model"] = self.model(job)
        run = _Run(job, model, job.extra.get("progress", 0.0), now, now + self.restart_penalty)
        job.extra["_progress"] = functools.partial(self.progress, job)  # for goodput estimates
        self.runs[job.id] = run
        self._plan(run)

    def resize(self, job: Job, old: Allocation, now: float) -> None:
        run = self.runs[job.id]
        new, job.alloc = job.alloc, old  # progress so far was made on the old allocation
        self._sync(run, now)
        job.alloc = new
        run.ready = now + self.restart_penalty
        self._plan(run)

    def replan(self, job: Job, now: float) -> None:
        """The job's batch size changed on the same GPUs (a policy's choice): no restart cost."""
        run = self.runs[job.id]
        self._sync(run, now)
        self._plan(run)

    def progress(self, job: Job, now: float) -> float:
        run = self.runs.get(job.id)
        if run is None:
            return job.extra.get("progress", 0.0)
        self._sync(run, now)
        return run.progress

    def stop(self, job: Job, why: str, now: float) -> None:
        run = self.runs.pop(job.id)
        self._sync(run, now)
        job.extra["progress"] = run.progress
        assert self.engine is not None
        self.engine.job_exited(job.id, -15, why, now)

    def advance(self, now: float) -> None:
        heap = self.heap
        while heap and heap[0][0] <= now:
            t, job_id, version = heapq.heappop(heap)
            run = self.runs.get(job_id)
            if run is None or run.version != version:
                continue
            del self.runs[job_id]
            run.job.extra["progress"] = run.progress
            assert self.engine is not None
            self.engine.job_exited(job_id, 0, "", now=t)

    def next_event_time(self) -> float | None:
        heap = self.heap
        while heap:
            t, job_id, version = heap[0]
            run = self.runs.get(job_id)
            if run is not None and run.version == version:
                return t
            heapq.heappop(heap)
        return None

    def state(self) -> dict[str, Any]:
        return {"running": len(self.runs)}


# -- the server's `sim` executor ---------------------------------------------------------------------
def live_model(job: Job) -> JobModel:
    """A live simulated run: the spec's `duration` seconds (its application model's run time),
    1 s when it gives neither (a command): demos and load tests without processes."""
    if job.spec.duration is not None or job.spec.application is not None:
        try:
            return default_model(job)
        except (KeyError, ValueError):
            pass
    return RigidModel(1.0, job.spec.requested)


def _make(settings: Settings) -> SimExecutor:
    return SimExecutor(model=live_model)


KIND = ExecutorKind("sim", "simulated runs that end after their spec's duration (demos and load tests)",
                    SimExecutor, _make)
