"""`--estimates oracle`: the estimator fed the job model's ground truth instead of the reports.

An upper bound for comparison, never a headline figure: no live job can tell the scheduler its
goodput on placements it never ran on, nor exactly how much work it has left. `OracleEstimate`
answers through the same interface as `schedulearn.estimates.Estimate` (goodput per placement,
best batch size, speed-up curve, work left), so a policy runs the same code in both modes; only
what the estimator is fed differs. The simulated executor puts `oracle_estimate` into
`job.extra["_oracle"]` when it runs with `estimates="oracle"`, and nothing else does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..estimates.job import Estimate, packed_shape
from ..model import Job
from .executor import RigidModel

if TYPE_CHECKING:
    from .executor import SimExecutor


class OracleEstimate(Estimate):
    kind = "oracle"
    own_grad = ()  # not None: judged at its true efficiency wherever a policy asks for its own

    def __init__(self, job: Job, model: Any, progress: float):
        self.model, self.true_progress = model, progress
        self.rigid = isinstance(model, RigidModel)
        self.adaptive = bool(job.spec.adaptive_batch) and not self.rigid
        self.batch = job.batch_size or job.spec.batch_size
        self.max_gpus = None
        self.measured = None
        if self.rigid:
            self.progress = min(progress / model.work, 1.0)
            self.key = None
        else:
            self.progress = model.fraction_done(progress)
            self.key = (model.epoch_of(progress), None if self.adaptive else self.batch)

    def _batch_for(self, shape: tuple[int, ...], batch: int | None = None) -> int:
        if batch:
            return batch
        if self.adaptive:
            return self.model.best_batch_size(shape, self.true_progress)
        return self.batch or self.model.init_batch_size

    def goodput(self, shape: tuple[int, ...], batch: int | None = None) -> float:
        if self.rigid:
            return float(sum(shape))
        return self.model.goodput(shape, self._batch_for(shape, batch), self.true_progress)

    def best_batch(self, shape: tuple[int, ...]) -> int | None:
        return None if self.rigid else self._batch_for(shape)

    def curve(self, top: int, per_node: int, efficiency: bool = True) -> list[float]:
        base = self.goodput(packed_shape(1, per_node))
        return [0.0] + [self.goodput(packed_shape(n, per_node)) / base for n in range(1, top + 1)]

    def remaining_work(self) -> float:
        if self.rigid:
            return max(self.model.work - self.true_progress, 0.0)
        b = self._batch_for((1,))
        return self.model.time_to_complete(self.true_progress, (1,), b) * self.goodput((1,), b)

    def total_s1(self) -> float:
        if self.rigid:
            return self.model.work
        return self.model.time_to_complete(0.0, (1,), self._batch_for((1,)))

    def times(self, top: int, per_node: int) -> list[float]:
        """Exact: the model run to completion on each size (an adaptive job at each epoch's best
        batch size), not the current epoch's goodput extrapolated."""
        out = [float("inf")]
        for n in range(1, max(top, 1) + 1):
            shape = packed_shape(n, per_node)
            if self.rigid:
                out.append(max(self.model.work - self.true_progress, 0.0) / n)
                continue
            batch = None if self.adaptive else self._batch_for(shape)
            _, left = self.model.advance(self.true_progress, shape, batch, float("inf"))
            out.append(left if left is not None else float("inf"))
        return out

    def remaining_s(self, shape: tuple[int, ...]) -> float:
        g = self.goodput(shape)
        return self.remaining_work() / g if g > 0 else float("inf")


def oracle_estimate(executor: SimExecutor, job: Job, now: float) -> OracleEstimate:
    model = executor.models.get(job.id) or executor.model(job)
    executor.models.setdefault(job.id, model)
    return OracleEstimate(job, model, executor.progress(job, now))
