"""Least attained service, Tiresias-style (two queues).

A job moves from the first queue to the second once it has received `threshold` GPU-seconds
(16 GPU-hours). Each round walks the first queue then the second, first come first served
within each, and runs every job whose GPUs still fit in what is left: small jobs pass larger
ones, and a running job that no longer fits is preempted. New allocations take GPUs from the
node with the most free GPUs first.
"""

from collections.abc import Iterator
from itertools import chain
from operator import attrgetter

from ..model import Allocation, Job
from ..placement import FreePool
from .base import NEVER, Policy, RoundContext, Want

_SUBMITTED = attrgetter("submit_time")


class LeastAttainedService(Policy):
    name = "las"
    description = "Tiresias two-queue least attained service: short jobs first, preemptive."
    time_driven = True
    threshold = 16 * 3600.0

    def schedule(self, ctx: RoundContext) -> Iterator[Want]:
        now, limit = ctx.now, self.threshold
        first: list[Job] = []
        second: list[Job] = []
        gpus = ctx.gpus
        for job in ctx.jobs:  # arrival order
            served = job.attained_base + gpus.get(job.id, 0) * (now - job.since)  # job.attained(now)
            (second if served >= limit else first).append(job)
        first.sort(key=_SUBMITTED)  # stable: equal submit times stay in arrival order
        second.sort(key=_SUBMITTED)
        return ((j, j.spec.requested) for j in chain(first, second))  # walked until GPUs run out

    def next_change(self, running: list[Job], now: float) -> float:
        """Only a running job reaching the threshold (moving to the second queue) changes the
        order by itself: the earliest such time."""
        limit, soonest = self.threshold, NEVER
        for j in running:
            n = j.size
            if n and j.attained(now) < limit:
                soonest = min(soonest, j.since + (limit - j.attained_base) / n)
        return soonest

    def place(self, job: Job, n: int, pool: FreePool) -> Allocation | None:
        return pool.most_free_first(n)
