"""Where a job's GPUs go: one host when it fits (best fit), else the fewest hosts.

`FreePool` keeps the free GPUs of every node and buckets nodes by how many GPUs they have free,
so that a best-fit lookup costs O(GPUs per node), not O(nodes): a round on 1,000 hosts places
thousands of jobs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from .model import Allocation, Node


class FreePool:
    def __init__(self, nodes: Iterable[Node]):
        self.order: list[str] = []  # node names in inventory order
        self.free: dict[str, list[int]] = {}
        for n in nodes:
            if n.healthy:
                self.order.append(n.name)
                self.free[n.name] = [g.index for g in n.gpus if not g.held_by]
        self.rank = {name: i for i, name in enumerate(self.order)}
        width = max((len(v) for v in self.free.values()), default=0)
        # Ordered sets. OrderedDict, not dict: a dict that had many deletions leaves holes that
        # every iteration from its start walks over (100 us a lookup on 1,000 hosts).
        self.buckets: list[OrderedDict[str, None]] = [OrderedDict() for _ in range(width + 1)]
        for name in self.order:
            self.buckets[len(self.free[name])][name] = None
        self.total = sum(len(v) for v in self.free.values())

    def _move(self, name: str, before: int) -> None:
        del self.buckets[before][name]
        self.buckets[len(self.free[name])][name] = None

    def take(self, alloc: Allocation) -> None:
        """Mark the GPUs of `alloc` as used (they must be free)."""
        for name, idx in alloc.items():
            free = self.free.get(name)
            if free is None:
                continue  # node gone: nothing to take
            before = len(free)
            k = len(idx)
            if tuple(free[:k]) == idx:  # the usual case: the first free GPUs
                del free[:k]
            else:
                gone = set(idx)
                free[:] = [i for i in free if i not in gone]
            self.total -= before - len(free)
            self._move(name, before)

    def give(self, alloc: Allocation) -> None:
        for name, idx in alloc.items():
            free = self.free.get(name)
            if free is None:
                continue
            before = len(free)
            free.extend(idx)
            free.sort()
            self.total += len(free) - before
            self._move(name, before)

    def still_free(self, alloc: Allocation) -> Allocation:
        """The GPUs of `alloc` that are free."""
        out = {}
        for name, idx in alloc.items():
            free = set(self.free.get(name, ()))
            kept = tuple(i for i in idx if i in free)
            if kept:
                out[name] = kept
        return out

    def count(self, name: str) -> int:
        return len(self.free.get(name, ()))

    # -- choosing --------------------------------------------------------------------------
    def best_fit(self, n: int, prefer: Iterable[str] = ()) -> Allocation | None:
        """`n` GPUs on the fewest hosts; on one host, the one with the fewest free GPUs that
        still fits. Hosts in `prefer` (a job's current hosts) are taken first when they fit."""
        if n > self.total or n <= 0:
            return None
        plan: dict[str, int] = {}
        need = n
        for name in prefer:  # keep a resized job where it already is
            have = self.count(name)
            if have and need:
                k = min(have, need)
                plan[name] = k
                need -= k
        while need:
            name = self._smallest_fitting(need, exclude=plan)
            if name is not None:
                plan[name] = need
                need = 0
            else:  # no single host fits the rest: take the host with the most free GPUs
                name = self._largest(exclude=plan)
                k = self.count(name)
                plan[name] = k
                need -= k
        alloc = {name: tuple(self.free[name][:k]) for name, k in plan.items()}
        self.take(alloc)
        return alloc

    def one_host(self, n: int, only: str | None = None) -> Allocation | None:
        """`n` GPUs on one host: the one with the fewest free GPUs that fits (`only` that host,
        if given); None where no host has n free."""
        name = only if only is not None and self.count(only) >= n else (
            None if only is not None else self._smallest_fitting(n, exclude=()))
        if name is None or n <= 0:
            return None
        alloc = {name: tuple(self.free[name][:n])}
        self.take(alloc)
        return alloc

    def most_on_one_host(self) -> int:
        """The most free GPUs any one host has."""
        return next((k for k in range(len(self.buckets) - 1, 0, -1) if self.buckets[k]), 0)

    def _smallest_fitting(self, need: int, exclude) -> str | None:
        for k in range(need, len(self.buckets)):
            for name in self.buckets[k]:
                if name not in exclude:
                    return name
        return None

    def _largest(self, exclude) -> str:
        for k in range(len(self.buckets) - 1, 0, -1):
            for name in self.buckets[k]:
                if name not in exclude:
                    return name
        raise RuntimeError("FreePool: no free GPU left")  # guarded by the total check

    def from_host(self, n: int, start: int) -> Allocation | None:
        """`n` GPUs taking hosts in inventory order from host number `start` (wrapping)."""
        if n > self.total or n <= 0:
            return None
        alloc: Allocation = {}
        need = n
        m = len(self.order)
        for j in range(m):
            name = self.order[(start + j) % m]
            free = self.free[name]
            if free:
                k = min(len(free), need)
                alloc[name] = tuple(free[:k])
                need -= k
                if not need:
                    break
        self.take(alloc)
        return alloc

    def most_free_first(self, n: int) -> Allocation | None:
        """`n` GPUs taken from the node with the most free GPUs first (Tiresias-style)."""
        if n > self.total or n <= 0:
            return None
        alloc: Allocation = {}
        need = n
        while need:
            name = self._largest(exclude=alloc)
            free = self.free[name]
            k = min(len(free), need)
            alloc[name] = tuple(free[:k])
            need -= k
        self.take(alloc)
        return alloc


def shrink(alloc: Allocation, n: int) -> Allocation:
    """Keep `n` GPUs of `alloc`, on the hosts where the job has the most (fewest hosts)."""
    keep: Allocation = {}
    need = n
    for name, idx in sorted(alloc.items(), key=lambda kv: -len(kv[1])):
        if not need:
            break
        k = min(len(idx), need)
        keep[name] = idx[:k]
        need -= k
    return keep


def placement_shape(alloc: Allocation) -> tuple[int, ...]:
    """GPUs per node, largest first: the shape throughput models look up."""
    return tuple(sorted((len(v) for v in alloc.values() if v), reverse=True))
