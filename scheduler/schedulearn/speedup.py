"""How much faster a job runs on n GPUs: the estimates behind the `goodput` policy.

Three sources, best first (`estimate_for`):

* **Profile** (simulation): the job's measured application profile (`sim.apps.AppProfile`): goodput
  = statistical efficiency of its batch size / step time, on a placement, at its current progress.
  Batch size: the job's own when it is fixed; the best one for the placement when the job may adapt
  it (`JobSpec.adaptive_batch`).
* **Fitted** (live): step times the job reports (`schedulearn.elastic.report(step_time=, batch_size=)`,
  one JSON line per report in the job directory's `metrics.jsonl`; `load_reports` reads it,
  `record` adds one observation) fitted to a Pollux-style model: a step is compute time, linear in
  the per-GPU batch, plus synchronisation time, zero on one GPU and linear in the GPU count above
  (`ThroughputModel`). Throughput = global batch / step time; statistical efficiency is taken as 1
  (live jobs do not report gradient statistics). With fewer than 3 distinct configurations the fit
  falls back to linear speed-up.
* **Linear** (nothing known, or a simulated rigid run time): speed-up = GPU count.

Fitted and linear estimates are trusted up to twice the largest GPU count the job has reported
(at least its minimum): a new job grows by doubling while it reports, as in Pollux.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import nofollow
from .model import Job

#: `Job.extra` key holding live observations: a list of [num_gpus, batch_size, step_time].
REPORTS_KEY = "throughput"


def packed_shape(n: int, per_node: int) -> tuple[int, ...]:
    """GPUs per node when n GPUs are packed on the fewest nodes."""
    full, rest = divmod(n, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


class ProfileEstimate:
    """Goodput from a simulated job's application profile at its current progress."""

    def __init__(self, profile: Any, progress: float, batch_size: int | None):
        self.profile, self.progress, self.batch_size = profile, progress, batch_size
        self.max_gpus: int | None = None
        self.key = (profile.epoch_of(progress), batch_size)  # what the rates depend on

    def batch_for(self, shape: tuple[int, ...]) -> int:
        return self.batch_size or self.profile.best_batch_size(shape, self.progress)

    def rate(self, shape: tuple[int, ...]) -> float:
        return self.profile.goodput(shape, self.batch_for(shape), self.progress)

    def remaining(self) -> float:
        """Seconds to completion on one GPU at the current batch size (the job's own estimate)."""
        return self.profile.time_to_complete(self.progress, (1,), self.batch_for((1,)))


@dataclass(frozen=True)
class ThroughputModel:
    """step_time(n, b) = compute0 + compute1*b + [n > 1]*(sync0 + sync1*(n - 1)), b = per-GPU batch."""

    compute0: float
    compute1: float
    sync0: float
    sync1: float

    def step_time(self, n: int, local_bsz: float) -> float:
        sync = self.sync0 + self.sync1 * (n - 1) if n > 1 else 0.0
        return max(self.compute0 + self.compute1 * local_bsz + sync, 1e-9)

    @classmethod
    def fit(cls, obs: Iterable[tuple[int, int, float]]) -> ThroughputModel | None:
        """Least squares over (num_gpus, global batch, step time) observations; parameters are
        kept >= 0 (a negative one is dropped and the rest refitted). None if under-determined."""
        pts = sorted({(int(n), int(b)): float(t) for n, b, t in obs if n >= 1 and b >= 1 and t > 0}.items())
        if len(pts) < 3:
            return None
        x = np.array([[1.0, math.ceil(b / n), 1.0 if n > 1 else 0.0, n - 1.0] for (n, b), _ in pts])
        y = np.array([t for _, t in pts])
        active = [i for i in range(4) if x[:, i].any()]
        while True:
            coef = np.zeros(4)
            coef[active], *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
            neg = [i for i in active if coef[i] < 0]
            if not neg:
                return cls(*(float(c) for c in coef))
            active.remove(min(neg, key=lambda i: coef[i]))
            if not active:
                return None


class FittedEstimate:
    """Throughput (samples/s) of the job's batch size from a fitted `ThroughputModel`."""

    def __init__(self, model: ThroughputModel, batch_size: int, max_gpus: int):
        self.model, self.batch_size, self.max_gpus = model, batch_size, max_gpus
        self.key = None

    def rate(self, shape: tuple[int, ...]) -> float:
        n = sum(shape)
        return self.batch_size / self.model.step_time(n, math.ceil(self.batch_size / n))

    def remaining(self) -> float | None:
        """The work left, where known (a live job's reports do not say)."""
        return None


class LinearEstimate:
    def __init__(self, max_gpus: int | None):
        self.max_gpus = max_gpus
        self.key = None

    def rate(self, shape: tuple[int, ...]) -> float:
        return float(sum(shape))

    def remaining(self) -> float | None:
        return None


def estimate_for(job: Job, now: float) -> ProfileEstimate | FittedEstimate | LinearEstimate:
    spec = job.spec
    model = job.extra.get("model")
    profile = getattr(model, "profile", model)
    if profile is None and spec.application is not None:
        from .sim.apps import get_profile

        profile = get_profile(spec.application)
    if profile is not None and hasattr(profile, "goodput"):
        progress_fn = job.extra.get("_progress")
        progress = progress_fn(now) if progress_fn else job.extra.get("progress", 0.0)
        fixed = None if spec.adaptive_batch else job.batch_size or spec.batch_size or profile.init_batch_size
        return ProfileEstimate(profile, progress, fixed)
    if model is not None or spec.duration is not None:  # a simulated rigid run time: linear speed-up
        return LinearEstimate(None)
    obs = job.extra.get(REPORTS_KEY) or []
    trusted = max(spec.min_size, 2 * max((int(o[0]) for o in obs), default=0))
    fitted = ThroughputModel.fit(obs)
    batch = job.batch_size or spec.batch_size or (int(obs[-1][1]) if obs else None)
    if fitted is not None and batch:
        return FittedEstimate(fitted, batch, trusted)
    return LinearEstimate(trusted)


def speedup_curve(est, max_n: int, per_node: int) -> list[float]:
    """S[n] for n = 0..max_n: goodput on n packed GPUs over goodput on one (S[0] = 0)."""
    base = est.rate(packed_shape(1, per_node))
    return [0.0] + [est.rate(packed_shape(n, per_node)) / base for n in range(1, max_n + 1)]


# -- live observations -------------------------------------------------------------------------
def record(job: Job, num_gpus: int, batch_size: int, step_time: float, keep: int = 200) -> None:
    """Add one observation to the job (kept JSON-able so the store persists it)."""
    obs = job.extra.setdefault(REPORTS_KEY, [])
    obs.append([int(num_gpus), int(batch_size), float(step_time)])
    del obs[:-keep]


def refresh(job: Job, path: str | Path, keep: int = 200) -> bool:
    """Reload the job's observations from its `metrics.jsonl` when the file changed (a stat per
    call otherwise). Live executors call it for every running job before each round."""
    try:
        st = Path(path).stat()
    except OSError:
        return False
    stamp = [st.st_mtime_ns, st.st_size]
    if job.extra.get("_reports_stamp") == stamp:
        return False
    job.extra["_reports_stamp"] = stamp
    job.extra[REPORTS_KEY] = load_reports(path)[-keep:]
    return True


def load_reports(path: str | Path) -> list[list[float]]:
    """Observations from a job's `metrics.jsonl` (lines without the fields are skipped)."""
    out = []
    try:
        lines = nofollow.read_text(path).splitlines()  # the job's file: no link, no FIFO
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
            out.append([int(rec.get("num_gpus", 1)), int(rec["batch_size"]), float(rec["step_time"])])
        except (ValueError, KeyError, TypeError):
            continue
    return out
