"""Elastic FIFO (thesis): FIFO start; idle GPUs grow running elastic jobs up to their
maximum when nothing waits; queued jobs get GPUs back by shrinking the newest elastic jobs
toward their minimum. Every resize is a checkpoint-restart done by the executor."""

from .base import Policy, RoundContext, Want, arrival_key, running_first


class ElasticFifo(Policy):
    name = "elastic-fifo"
    description = "FIFO start; grows elastic jobs into idle GPUs and shrinks them for queued jobs."
    blocking = True
    elastic = True

    def schedule(self, ctx: RoundContext) -> list[Want]:
        jobs = running_first(ctx)
        size = {j: ctx.gpus[j.id] for j in ctx.running}
        used = sum(size.values())
        waiting = False
        for job in jobs:
            if job in size:
                continue
            need = job.spec.requested
            deficit = need - (ctx.capacity - used)
            shrinkable = [] if deficit <= 0 else sorted(
                (r for r in size if r.spec.elastic and size[r] > r.spec.min_size),
                key=arrival_key, reverse=True)  # newest first
            if deficit > 0 and sum(size[r] - r.spec.min_size for r in shrinkable) >= deficit:
                for r in shrinkable:
                    give = min(size[r] - r.spec.min_size, deficit)
                    size[r] -= give
                    used -= give
                    deficit -= give
                    if not deficit:
                        break
            if deficit > 0:
                waiting = True
                break
            size[job] = need
            used += need
        if not waiting:
            self._grow(size, ctx.capacity - used, ctx.capacity)
        return [(j, size[j]) for j in jobs if j in size]

    @staticmethod
    def _grow(size: dict, idle: int, cluster: int) -> None:
        """Hand idle GPUs to elastic jobs one at a time, oldest first, up to their maximum."""
        growable = sorted((j for j in size if j.spec.elastic), key=arrival_key)
        while idle > 0:
            grew = False
            for j in growable:
                if idle and size[j] < j.spec.max_size(cluster):
                    size[j] += 1
                    idle -= 1
                    grew = True
            if not grew:
                return
