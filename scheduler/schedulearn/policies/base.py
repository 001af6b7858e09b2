"""What a policy is: it orders jobs and sizes them; the engine admits, places and acts.

Each round the engine hands the policy a `RoundContext` and gets back *wants*: `(job, gpus)`
pairs in priority order. The engine walks them, admitting each want whose GPUs still fit in
what is left (a `blocking` policy stops at the first that does not), keeps running jobs where
they are, places the rest through `place`, and turns the difference from what runs into
executor actions: start, stop (preempt), resize. A running job the policy leaves out is
preempted back to the queue.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING, ClassVar

from ..model import Allocation, Job, Node
from ..placement import FreePool

if TYPE_CHECKING:
    from ..estimates.predict import History


class RoundContext:
    """What a policy sees in a round. The views are built on first use, so a round on 10,000
    jobs does not pay for what its policy does not read; treat them as read-only.

    The engine hands over its own indexes (not copies): `queued` (sorted by priority, then
    arrival), the running jobs and the active (queued and running) jobs by id, the GPUs each
    running job holds, the round's `capacity` and the `history` of ended jobs."""

    __slots__ = ("now", "nodes", "queued", "gpus", "capacity", "history", "_by_id", "_active", "_running",
                 "_jobs", "_releasing")

    def __init__(self, now: float, nodes: list[Node], queued: list[Job], running: Mapping[int, Job],
                 active: Mapping[int, Job], gpus: Mapping[int, int], capacity: int,
                 history: History | None = None):
        self.now = now
        self.nodes = nodes
        #: Queued jobs, higher priority first, then in arrival order.
        self.queued = queued
        #: GPUs held by each running job, by job id (`job.size` without recounting its alloc).
        self.gpus = gpus
        #: GPUs this round may hand out (healthy GPUs not held by stopping jobs).
        self.capacity = capacity
        #: The jobs the engine has seen end (`estimates.predict.History`): what estimates of
        #: later jobs may learn from.
        self.history = history
        self._by_id = running
        self._active = active
        self._running: list[Job] | None = None
        self._jobs: list[Job] | None = None
        self._releasing: int | None = None

    @property
    def running(self) -> list[Job]:
        """Running jobs (none being stopped), in arrival order."""
        if self._running is None:
            self._running = sorted(self._by_id.values(), key=_ID)
        return self._running

    @property
    def jobs(self) -> list[Job]:
        """Queued and running jobs (none being stopped), in arrival order."""
        if self._jobs is None:
            self._jobs = [j for j in self._active.values() if j.stopping is None]
        return self._jobs

    @property
    def releasing(self) -> int:
        """GPUs on their way back, outside `capacity` for now: held by jobs being stopped, or
        given up by a shrink whose old run has not exited yet (`Job.releasing`). Free in seconds."""
        if self._releasing is None:
            self._releasing = sum(sum(len(g) for g in j.releasing.values())
                                  + (j.size if j.stopping is not None else 0) for j in self._active.values())
        return self._releasing

    def predict(self, job: Job) -> float | None:
        """The total work (seconds on one GPU) predicted for `job` from the jobs that finished
        before it (`history`); None without history."""
        return self.history.predict(job) if self.history is not None else None

    def pauses(self, job: Job) -> dict[str, list[float]] | None:
        """The resize pauses the finished jobs of `job`'s family measured (`pauses.price`'s
        `family`); None without history."""
        return self.history.pauses_of(job) if self.history is not None else None


Want = tuple[Job, int]


class Policy:
    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: stop admitting at the first want that does not fit (strict order: FIFO).
    blocking: ClassVar[bool] = False
    #: may stop running jobs. A policy that never does (False) orders only the queue: running
    #: jobs keep their GPUs, wants for them are ignored and the engine stops at the first
    #: want that cannot fit (blocking) or when no GPU is left, so a round costs what it starts.
    preemptive: ClassVar[bool] = True
    #: may resize running jobs: the engine then runs every round in full.
    elastic: ClassVar[bool] = False
    #: decisions change with time alone (attained service...): rounds run on ticks too.
    time_driven: ClassVar[bool] = False
    #: orders or sizes jobs by their deadlines (`JobSpec.deadline`); under the others a deadline
    #: is only shown (its status), and front-ends say so when one is given
    plans_deadlines: ClassVar[bool] = False

    def schedule(self, ctx: RoundContext) -> Iterable[Want]:
        raise NotImplementedError

    def place(self, job: Job, n: int, pool: FreePool) -> Allocation | None:
        """GPUs for a job that starts or grows; the default is best fit on the fewest hosts,
        preferring the hosts it already runs on."""
        return pool.best_fit(n, prefer=job.alloc.keys())

    def gave_up(self, job: Job) -> bool:
        """Whether this policy no longer plans for `job`'s deadline (it runs best effort): the
        engine then tells its user `will_miss` unless it is on track where it runs."""
        return False

    def move(self, job: Job, n: int, pool: FreePool) -> Allocation | None:
        """GPUs for a running job that restarts on a new size (its own GPUs are in `pool`): best
        fit on the fewest hosts, wherever they are."""
        return pool.best_fit(n)

    def next_change(self, running: list[Job], now: float) -> float:
        """For a time-driven policy: the earliest time at which time alone (no submit, exit or
        other event) may change the decisions of the last round, which ran at `now` and left
        `running` running. The engine asks at the first tick after a round (not after every
        round: most are followed by an event, which runs a round anyway) and skips tick rounds
        before the answer. The default, `now`, means any tick may."""
        return now

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


def arrival_key(job: Job) -> tuple[int, int]:
    """Higher priority first, then arrival order."""
    return (-job.spec.priority, job.id)


def by_arrival(jobs: Iterable[Job]) -> list[Job]:
    """`sorted(jobs, key=arrival_key)`, with C-speed keys (two stable sorts)."""
    out = sorted(jobs, key=_ID)
    out.sort(key=_PRIORITY, reverse=True)  # reverse=True keeps equal keys in order
    return out


def running_first(ctx: RoundContext) -> list[Job]:
    """Running jobs (never preempted by a non-preemptive policy), then the queue in order."""
    return by_arrival(ctx.running) + ctx.queued


NEVER = math.inf
_ID = attrgetter("id")
_PRIORITY = attrgetter("spec.priority")
