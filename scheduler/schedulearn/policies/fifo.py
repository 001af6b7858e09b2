"""FIFO (thesis): strict arrival order; the head job waits until its GPUs are free."""

from ..model import JobState
from .base import Policy, RoundContext, Want, running_first


class Fifo(Policy):
    name = "fifo"
    description = "First in, first out: strict arrival order; the head of the queue blocks the rest."
    blocking = True

    def schedule(self, ctx: RoundContext) -> list[Want]:
        return [
            (j, j.size if j.state is JobState.running else j.spec.requested)
            for j in running_first(ctx)
        ]
