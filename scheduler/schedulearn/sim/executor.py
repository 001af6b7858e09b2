"""A simulated executor: runs end when their job model says so, on the engine's virtual clock.

A job model answers one question: from progress `p`, on a placement of shape `shape` (GPUs per
node) at global batch size `bsz`, where is the job after `dt` seconds, and does it finish?
`RigidModel` is a fixed run time; the application profiles (`sim.apps`) are another model.
Finish times sit in a heap and progress is computed only when a run changes (lazily), so a
replay of 82k jobs costs O(log n) per event, not O(running jobs).

Ground truth stays here. The models and the true progress of every job live in this executor,
never in the `Job`: what the scheduler learns of a running job is what the job *reports*. A model
with a `report(progress, shape, bsz)` method is a job that reports (the application profiles
always; a rigid run time only when the job is elastic, and then only its progress), and before
each round every such running job that has trained since its last report (at most once per
`report_every` seconds) emits one — the same record a live job writes to `metrics.jsonl` — which
goes through `schedulearn.estimates.ingest` exactly as live reports do; a run that ends (done,
or stopped for a preemption or a cancel) emits one more at its end, as a live job's last lines
are read when its run ends.

Resize pauses are measured as live. A resize in place costs the job its launcher's
`in_place_penalty`, a checkpoint-restart (and every start) `restart_penalty`; the policy is never
told either. Like a live job, the simulated one has a last step before the resize (at the resize,
on the old placement) and a first step after it (one step time, on the new placement, after its
pause ends); once that step is past, the executor measures the pause from the two
(`pauses.measure`) and hands it to the engine (`Engine.resize_paused`: the `resize_pause` event and
the measurements `pauses.price` charges the job's next resize) — the live executors' path. A job
that reports only its progress (an elastic rigid run) has its report at the resize and those it
writes after it, and its pause is measured from them once two came, as live.

`estimates="oracle"` (an upper bound for comparison, never the headline) hands the estimator the
job model itself (`sim.oracle`) instead; reports are emitted either way.

A job whose batch size the policy leaves to the job (`job.batch_size = None`, for
`spec.adaptive_batch` jobs) picks it: with reported estimates from its own reports (the estimate's
`best_batch` on its placement, re-chosen after every report without a restart, as an AdaptDL job
does); with the oracle, the true best batch size of each epoch (`sim.adaptive`).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .. import estimates, pauses
from ..executors.base import Executor
from ..executors.lifecycle import stopped_reason
from ..executors.registry import ExecutorKind
from ..inventory import Inventory
from ..model import Allocation, Job, JobSpec, SpecError
from ..placement import placement_shape

if TYPE_CHECKING:
    from ..service import Settings

ESTIMATES = ("reported", "oracle")


class JobModel(Protocol):
    def advance(
        self, progress: float, shape: tuple[int, ...], bsz: int | None, dt: float
    ) -> tuple[float, float | None]: ...


class RigidModel:
    """`duration` seconds on the requested GPUs; linear speed-up on more or fewer. Reports only
    its progress (fraction of its GPU-seconds done)."""

    __slots__ = ("work",)

    def __init__(self, duration: float, gpus: int):
        self.work = duration * gpus  # GPU-seconds

    def advance(self, progress, shape, bsz, dt):
        rate = sum(shape)
        need = self.work - progress
        if rate > 0 and rate * dt >= need:
            return self.work, need / rate
        return progress + rate * dt, None

    def report(self, progress, shape, bsz) -> dict:
        return {"progress": min(progress / self.work, 1.0)}


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
    bsz: int | None  # the batch size it runs at (None: the oracle's best of each epoch)
    reports: bool  # emits reports
    finish: float = math.inf
    version: int = 0
    reported: float = -math.inf
    before: dict | None = None  # the last step before a resize whose pause is not measured yet
    after: list = field(default_factory=list)  # progress-only: its reports since that resize
    shape: tuple[int, ...] = ()  # GPUs per node of the placement it runs on (set by `_plan`:
    # a move that finds no GPUs empties `job.alloc` before the engine stops the job, whose
    # progress and last report are still those of the placement it had)


def in_place_penalty_for(penalty: float | dict[str, float] | None, launcher: str) -> float | None:
    """Seconds a resize in place pauses a job of `launcher`: `penalty` itself (one figure for
    every launcher), its entry for the launcher (per launcher), or None (it cannot: a resize is a
    checkpoint-restart)."""
    if isinstance(penalty, dict):
        return penalty.get(launcher)
    return penalty


class SimExecutor(Executor):
    """Simulated runs. Live (the server's `sim` executor) its `inventory` gives the nodes.
    `estimates`: what the policy is told of a job — `reported` (what the job model reports, as
    a live job would) or `oracle` (the ground truth: an upper bound)."""

    simulated = True

    def __init__(self, restart_penalty: float = 0.0, model=default_model, inventory: Inventory | None = None,
                 estimates: str = "reported", report_every: float = 60.0,
                 in_place_penalty: float | dict[str, float] | None = None):
        if estimates not in ESTIMATES:
            raise ValueError(f"estimates: expected one of {', '.join(ESTIMATES)}, got {estimates!r}")
        self.restart_penalty = restart_penalty
        #: seconds a resize in place pauses a job that asks for it (`JobSpec.resize`): one figure,
        #: or one per launcher ({"horovod": 0.5, ...}: jobs of other launchers restart); None:
        #: every resize is a checkpoint-restart (`restart_penalty`)
        self.in_place_penalty = in_place_penalty
        self.model = model
        self.inventory = inventory
        self.estimates = estimates
        self.report_every = report_every
        self.runs: dict[int, _Run] = {}
        self.models: dict[int, JobModel] = {}  # ground truth, by job id
        self.done: dict[int, float] = {}  # true progress of jobs that are not running
        self.heap: list[tuple[float, int, int]] = []
        self._versions = itertools.count(1)  # unique across runs: a stale heap entry never matches

    def check_spec(self, spec: JobSpec) -> None:
        """A job of an application model: a known application, a batch size it was validated for,
        and no `duration` beside it (which of the two would it run?). An unknown one was run as a
        1-s rigid job, without a word."""
        if spec.application is None:
            return
        from .apps import get_profile

        if spec.duration is not None:
            raise SpecError("duration: give a duration (a rigid run) or an application (its model), not both")
        try:
            profile = get_profile(spec.application)
            if spec.batch_size is not None:
                profile.check_batch_size(spec.batch_size)
        except ValueError as e:
            raise SpecError(str(e)) from None

    def _plan(self, run: _Run) -> None:
        job = run.job
        run.shape = placement_shape(job.alloc)
        _, left = run.model.advance(run.progress, run.shape, run.bsz, math.inf)
        run.version = next(self._versions)
        run.finish = max(run.ready, run.last) + (left if left is not None else math.inf)
        if run.finish < math.inf:
            heapq.heappush(self.heap, (run.finish, job.id, run.version))

    def _sync(self, run: _Run, now: float) -> None:
        """Bring `run.progress` up to `now` on the allocation it had since `run.last`."""
        start = max(run.last, run.ready)
        if now > start:
            run.progress, _ = run.model.advance(run.progress, run.shape, run.bsz, now - start)
        run.last = max(run.last, now)

    def _batch(self, job: Job, now: float) -> int | None:
        """The batch size a run starts with: the job's, or the one it picks for its placement —
        from its reports, and before it has any (a spec with an application and no batch size,
        as a live `sim` job may be) the smallest its application accepts, as a training script
        starts at its own initial batch size. With the oracle, an adaptive job's None: the true
        best of each epoch (`sim.adaptive`)."""
        if job.batch_size is not None:
            return job.batch_size
        model = self.models.get(job.id)
        if self.estimates == "oracle":
            from .adaptive import AdaptiveBatch

            if isinstance(model, AdaptiveBatch):
                return None
        else:
            bsz = estimates.estimate(job, now).best_batch(placement_shape(job.alloc))
            if bsz is not None:
                return bsz
        return getattr(model, "init_batch_size", None)

    def start(self, job: Job, now: float) -> None:
        model = self.models.get(job.id)
        if model is None:
            model = self.models[job.id] = self.model(job)
        reports = hasattr(model, "report") and (not isinstance(model, RigidModel) or job.spec.elastic)
        run = _Run(job, model, self.done.get(job.id, 0.0), now, now + self.restart_penalty,
                   self._batch(job, now), reports)
        self._plan(run)  # (a start that fails leaves no run behind for `advance` to step)
        self.runs[job.id] = run
        self.done.pop(job.id, None)

    def resize(self, job: Job, old: Allocation, now: float, penalty: float | None = None) -> None:
        run = self.runs[job.id]
        self._sync(run, now)  # progress so far was made on the old allocation (`run.shape`)
        if now >= run.ready:  # it has stepped since its last (re)start: its last step is now
            run.before = self._step(run, now)  # (else the pending resize's last step stays the last)
        run.after = []
        run.ready = now + (self.restart_penalty if penalty is None else penalty)
        run.bsz = self._batch(job, now)
        self._plan(run)

    def _in_place_penalty(self, job: Job) -> float | None:
        return in_place_penalty_for(self.in_place_penalty, job.spec.launcher.value)

    def resizes_in_place(self, job: Job, alloc: Allocation) -> bool:
        return self._in_place_penalty(job) is not None and job.id in self.runs

    def resize_in_place(self, job: Job, old: Allocation, now: float) -> None:
        self.resize(job, old, now, self._in_place_penalty(job))

    def _step(self, run: _Run, t: float) -> dict | None:
        """The step record the job writes at `t` on its current placement (its true step time;
        for a model that reports no step time its progress; None for one that does not report)."""
        if not run.reports:
            return None
        shape = run.shape
        rec = run.model.report(run.progress, shape, run.bsz)
        step = rec.get("step_time")
        if step is None:
            return {"t": t, "progress": rec["progress"], "num_gpus": sum(shape), "restart": run.job.restarts}
        return {"t": t, "step_time": step, "num_gpus": sum(shape), "restart": run.job.restarts}

    def _measure(self, run: _Run, now: float) -> None:
        """Once the first step after a resize is past, the pause from the last step before it
        goes to the engine, as a live executor measures it from the job's `metrics.jsonl`."""
        mark = run.job.extra.get(pauses.PENDING_KEY)
        if mark is None:
            run.before = None
            return
        after = self._step(run, 0.0)
        if after is None:
            run.before = None
            return
        if "step_time" in after:
            after["t"] = run.ready + after["step_time"]  # its first step ends one step after the pause
            if after["t"] > now:
                return
            pause = pauses.measure(mark, [run.before, after])
        else:  # progress only: from the reports it wrote since (None until two are past it)
            pause = pauses.measure(mark, [run.before, *run.after])
            if pause is None:
                return
        run.before = None
        if pause is not None:
            assert self.engine is not None
            self.engine.resize_paused(run.job.id, pause, now)

    def replan(self, job: Job, now: float) -> None:
        """The job's batch size changed on the same GPUs (its own choice): no restart cost."""
        run = self.runs[job.id]
        self._sync(run, now)
        self._plan(run)

    def progress(self, job: Job, now: float) -> float:
        """The true progress (model units) of `job` at `now` — for the oracle and tests only."""
        run = self.runs.get(job.id)
        if run is None:
            return self.done.get(job.id, 0.0)
        self._sync(run, now)
        return run.progress

    def stop(self, job: Job, why: str, now: float) -> None:
        run = self.runs.pop(job.id)
        self._sync(run, now)
        self._last_report(run, now)
        self.done[job.id] = run.progress
        assert self.engine is not None
        self.engine.job_exited(job.id, -15, stopped_reason(why, killed=False), now)  # as a live run's

    def advance(self, now: float) -> None:
        if self.estimates == "oracle":  # every job the engine knows (queued too) gets its truth
            from .oracle import oracle_estimate

            assert self.engine is not None
            for job in self.engine.active.values():
                if "_oracle" not in job.extra:
                    job.extra["_oracle"] = functools.partial(oracle_estimate, self, job)
        heap = self.heap
        while heap and heap[0][0] <= now:
            t, job_id, version = heapq.heappop(heap)
            run = self.runs.get(job_id)
            if run is None or run.version != version:
                continue
            del self.runs[job_id]
            self._last_report(run, t, finished=True)
            self.models.pop(job_id, None)
            assert self.engine is not None
            self.engine.job_exited(job_id, 0, "", now=t)
        for run in list(self.runs.values()):
            if run.before is not None:
                self._measure(run, now)
        for run in self.runs.values():
            if run.reports and now > run.ready and now - run.reported >= self.report_every - 1e-9:
                self._report(run, now)

    def _emit(self, run: _Run, now: float, finished: bool = False) -> None:
        """The job reports what it measured, up to `now` (`finished`: all of its work, whatever
        the last bits of the sum of its steps say)."""
        job = run.job
        self._sync(run, now)
        shape = run.shape
        rec = run.model.report(run.progress, shape, run.bsz)
        if finished and "progress" in rec:
            rec["progress"] = 1.0
        rec.update(t=now, num_gpus=sum(shape), num_nodes=len(shape), restart=job.restarts)
        if rec.get("step_time"):  # the mean of the steps since its last report (or its pause)
            rec["timed_steps"] = max((now - max(run.ready, run.reported)) / rec["step_time"], 1.0)
        estimates.ingest(job, [rec])
        run.reported = now
        if run.before is not None and "step_time" not in rec:
            run.after.append(rec)  # (a progress-only job's pause is measured from them)

    def _last_report(self, run: _Run, now: float, finished: bool = False) -> None:
        """A run that ends (done, or stopped) reports what it did since its last report: a live
        job writes a report every step, and its last ones are read as its run ends
        (`Executor.collect`)."""
        if run.reports and now > max(run.ready, run.reported):
            self._emit(run, now, finished)

    def _report(self, run: _Run, now: float) -> None:
        """The job reports what it measured; a job that picks its batch size picks it again."""
        job = run.job
        self._emit(run, now)
        if job.batch_size is None and self.estimates == "reported":
            bsz = estimates.estimate(job, now).best_batch(run.shape)
            if bsz is not None and bsz != run.bsz:
                run.bsz = bsz
                self._plan(run)  # progress is synced to now: the new batch size from here on

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
