"""What a policy is: it orders jobs and sizes them; the engine admits, places and acts.

Each round the engine hands the policy a `RoundContext` and gets back *wants*: `(job, gpus)`
pairs in priority order. The engine walks them, admitting each want whose GPUs still fit in
what is left (a `blocking` policy stops at the first that does not), keeps running jobs where
they are, places the rest through `place`, and turns the difference from what runs into
executor actions: start, stop (preempt), resize. A running job the policy leaves out is
preempted back to the queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..model import Allocation, Job, JobState, Node
from ..placement import FreePool


@dataclass(slots=True)
class RoundContext:
    now: float
    jobs: list[Job]  # queued and running jobs (none being stopped), in arrival order
    capacity: int  # GPUs this round may hand out (healthy GPUs not held by stopping jobs)
    nodes: list[Node]

    @property
    def running(self) -> list[Job]:
        return [j for j in self.jobs if j.state is JobState.running]

    @property
    def queued(self) -> list[Job]:
        return [j for j in self.jobs if j.state is JobState.queued]


Want = tuple[Job, int]


class Policy:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: stop admitting at the first want that does not fit (strict order: FIFO).
    blocking: ClassVar[bool] = False
    #: may resize running jobs: the engine then runs every round in full.
    elastic: ClassVar[bool] = False
    #: decisions change with time alone (attained service...): rounds run on ticks too.
    time_driven: ClassVar[bool] = False

    def schedule(self, ctx: RoundContext) -> list[Want]:
        raise NotImplementedError

    def place(self, job: Job, n: int, pool: FreePool) -> Allocation | None:
        """GPUs for a job that starts or grows; the default is best fit on the fewest hosts,
        preferring the hosts it already runs on."""
        return pool.best_fit(n, prefer=job.alloc.keys())

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


def arrival_key(job: Job) -> tuple[int, int]:
    """Higher priority first, then arrival order."""
    return (-job.spec.priority, job.id)


def running_first(ctx: RoundContext) -> list[Job]:
    """Running jobs (never preempted by a non-preemptive policy), then the queue in order."""
    return sorted(ctx.running, key=arrival_key) + sorted(ctx.queued, key=arrival_key)
