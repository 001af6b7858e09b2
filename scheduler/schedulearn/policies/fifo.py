"""FIFO (thesis): strict arrival order; the head job waits until its GPUs are free."""

from collections.abc import Iterator

from .base import Policy, RoundContext, Want


class Fifo(Policy):
    name = "fifo"
    description = "First in, first out: strict arrival order; the head of the queue blocks the rest."
    blocking = True
    preemptive = False  # running jobs keep their GPUs: only the queue is ordered

    def schedule(self, ctx: RoundContext) -> Iterator[Want]:
        return ((j, j.spec.requested) for j in ctx.queued)  # the engine stops at the first misfit
