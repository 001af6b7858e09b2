"""A simulated job that picks its own global batch size (Pollux/AdaptDL-style co-adaptation).

`AdaptiveBatch(profile)` is a job model for `SimExecutor`: with a batch size it behaves exactly
like the profile (the user's fixed B); with `None` it runs every epoch at the B that maximises its
goodput on the placement it has (`AppProfile.best_batch_size`), re-choosing at each epoch
boundary without a restart, as an AdaptDL job does in the published simulator. A policy hands
the choice to the job by setting `job.batch_size = None` (only for `spec.adaptive_batch` jobs);
rigid policies leave the user's B in place.
"""

from __future__ import annotations

import math

from .apps import AppProfile


class AdaptiveBatch:
    __slots__ = ("profile",)

    def __init__(self, profile: AppProfile):
        self.profile = profile

    def __getattr__(self, name):  # the profile's tables and helpers (goodput, epochs...)
        return getattr(self.profile, name)

    def report(self, progress: float, shape, bsz: int | None) -> dict:
        p = self.profile
        return p.report(progress, shape, bsz if bsz is not None else p.best_batch_size(shape, progress))

    def advance(self, progress: float, shape, bsz: int | None, dt: float) -> tuple[float, float | None]:
        """Like `AppProfile.advance`; `bsz=None`: the best B of each epoch on `shape`."""
        p = self.profile
        if bsz is not None:
            return p.advance(progress, shape, bsz, dt)
        if progress >= p.target_progress:
            return progress, 0.0
        used = 0.0
        while True:
            e = p.epoch_of(progress)
            end = p.epoch_progress[e + 1] if e + 1 < len(p.epoch_progress) else p.target_progress
            rate = p.goodput(shape, p.best_batch_size(shape, progress), progress)
            need = (end - progress) / rate
            if used + need > dt:
                return min(progress + (dt - used) * rate, p.target_progress), None
            used += need
            progress = end
            if e + 1 >= p.epochs or progress >= p.target_progress:
                return p.target_progress, used if math.isfinite(used) else None
