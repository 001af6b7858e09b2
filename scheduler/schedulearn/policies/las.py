"""Least attained service, Tiresias-style (two queues).

A job moves from the first queue to the second once it has received `threshold` GPU-seconds
(16 GPU-hours). Each round walks the first queue then the second, first come first served
within each, and runs every job whose GPUs still fit in what is left: small jobs pass larger
ones, and a running job that no longer fits is preempted. New allocations take GPUs from the
node with the most free GPUs first.
"""

from ..model import Allocation, Job
from ..placement import FreePool
from .base import Policy, RoundContext, Want


class LeastAttainedService(Policy):
    name = "las"
    description = "Tiresias two-queue least attained service: short jobs first, preemptive."
    time_driven = True
    threshold = 16 * 3600.0

    def schedule(self, ctx: RoundContext) -> list[Want]:
        now, limit = ctx.now, self.threshold
        ordered = sorted(ctx.jobs, key=lambda j: (j.attained(now) >= limit, j.submit_time, j.id))
        return [(j, j.spec.requested) for j in ordered]

    def place(self, job: Job, n: int, pool: FreePool) -> Allocation | None:
        return pool.most_free_first(n)
