"""Earliest deadline first: the classic deadline baseline (rigid sizes).

Each round walks the jobs with a deadline, earliest first, then the others in arrival order,
and runs every job whose requested GPUs still fit in what is left; a running job passed by
earlier deadlines that no longer fits is preempted. Sizes are the users' own: no job grows or
shrinks. Decisions change only with arrivals and exits.
"""

from collections.abc import Iterator

from .base import Policy, RoundContext, Want


class EarliestDeadlineFirst(Policy):
    name = "edf"
    description = "Earliest deadline first (rigid sizes); jobs without a deadline after, in arrival order."
    plans_deadlines = True

    def schedule(self, ctx: RoundContext) -> Iterator[Want]:
        order = sorted(ctx.jobs, key=lambda j: (j.spec.deadline is None, j.spec.deadline or 0.0, j.id))
        return ((j, j.spec.requested) for j in order)
