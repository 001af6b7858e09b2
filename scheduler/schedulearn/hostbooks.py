"""A round's books, host by host: so that a one-process job (plain Python) is chosen only where
one host can hold it.

The engine weighs a round's wants in the policy's order against the cluster's GPU count. A job
that must run on one host, weighed that way where no host had room for it, took its GPUs out
of the count and started nowhere; every want after it found the count spent, and on a cluster
whose free GPUs were split over hosts the jobs behind it waited round after round (a torchrun
job that could run across the hosts' leftovers, among them).

`HostBooks` keeps, for each host, its free GPUs, those of running jobs not weighed yet (a
running job the policy does not keep is stopped: its GPUs may be promised) and those already
promised out of the latter. The engine builds them at the first one-process want of a round on
more than one host and weighs every later want through them. A running job weighed on a host
where a job ahead of it in the policy's order was promised GPUs that the running jobs weighed
after it cannot give is not kept (it stops, as a want that does not fit): its GPUs settle the
promise. Only what a job must have is promised: all of a rigid job, an elastic one's minimum
(else it takes the most one host has free; one growing by a restart stays as it is rather than
shrink). Each one-process job placed anew is given a host (`plan`) where the engine starts it,
before the jobs that may span hosts: those take what is left, wherever it is (the round's GPU
count, which every want is weighed against too, says that it is enough).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from .model import Allocation, Job, JobState
from .placement import FreePool, shrink


class HostBooks:
    def __init__(self, pool: FreePool, running: Iterable[Job]):
        self.free = {h: pool.count(h) for h in pool.order}
        self.unweighed = dict.fromkeys(pool.order, 0)  # GPUs of running jobs not weighed yet
        self.owed = dict.fromkeys(pool.order, 0)  # promised out of those
        self.plan: dict[Job, str] = {}  # the host of each one-process job placed anew
        #: the fewest GPUs of one process that no host had room for. A host's room (free +
        #: unweighed - owed) never grows within a round: no host will have them (a queue of
        #: jobs that do not fit is turned down without a look at every host for each)
        self.too_many = 1 << 30
        for job in running:
            for h, idx in job.alloc.items():
                if h in self.unweighed:
                    self.unweighed[h] += len(idx)
        #: hosts by their free GPUs: best fit looks at the buckets from n up, not at every host
        #: (OrderedDicts, as `FreePool.buckets`: a dict with many deletions is slow to iterate)
        width = max((k + self.unweighed[h] for h, k in self.free.items()), default=0)
        self.by_free: list[OrderedDict[str, None]] = [OrderedDict() for _ in range(width + 1)]
        for h, k in self.free.items():
            self.by_free[k][h] = None

    def want(self, job: Job, n: int) -> int:
        """Weigh `job` wanting n GPUs, as the engine will carry it out (a running job keeps its
        GPUs, shrinks on them or grows from where it is; a queued one, or one resized by a
        restart, is placed anew): the GPUs it is given, 0 where it cannot have any."""
        if job.state is JobState.queued:
            return self._place(job, self._find(job, n))
        size = job.size
        if n != size and not job.spec.in_place:  # it moves: placed anew, its own GPUs freed first
            saved = [(h, self.free[h], self.unweighed[h], self.owed[h]) for h in job.alloc if h in self.free]
            self._release(job.alloc)
            found = self._find(job, n)
            if found is not None and (found[0] > size if n > size else found[0] < size):
                return self._place(job, found)  # (on a new size the way it asked: else it stays)
            for h, free, unweighed, owed in saved:  # no host holds it on a new size: it stays
                self._set(h, free)
                self.unweighed[h], self.owed[h] = unweighed, owed
            n = size
        keep = job.alloc if n >= size else shrink(job.alloc, n)
        if not self._can_keep(job.alloc, keep):
            self._release(job.alloc)  # promised to jobs ahead of it: it stops
            return 0
        self._release(job.alloc, keep)
        if n > size and job.spec.single_process:  # it grows on its host, by what is free there
            host = next(iter(job.alloc))
            n = size + min(n - size, self.free.get(host, 0))
            if n > size:
                self._set(host, self.free[host] - (n - size))
        return n

    # -- the books -------------------------------------------------------------------------
    def _set(self, host: str, free: int) -> None:
        del self.by_free[self.free[host]][host]
        self.free[host] = free
        self.by_free[free][host] = None

    def _release(self, alloc: Allocation, keep: Allocation | None = None) -> None:
        """A running job is weighed: its GPUs are no longer unweighed; those it does not keep
        settle what was promised on their host, and the rest is free."""
        for h, idx in alloc.items():
            if h not in self.unweighed:
                continue
            gone = len(idx) - (len(keep.get(h, ())) if keep is not None else 0)
            self.unweighed[h] -= len(idx)
            settled = min(self.owed[h], gone)
            self.owed[h] -= settled
            if gone > settled:
                self._set(h, self.free[h] + gone - settled)

    def _can_keep(self, alloc: Allocation, keep: Allocation) -> bool:
        """Whether a running job may keep `keep` of its `alloc` and what was promised out of
        the running jobs not weighed yet can still be paid by the others (those later in the
        policy's order stop first)."""
        for h, idx in alloc.items():
            owed = self.owed.get(h, 0)
            if owed:
                gone = len(idx) - len(keep.get(h, ()))
                if owed - min(owed, gone) > self.unweighed[h] - len(idx):
                    return False
        return True

    def _find(self, job: Job, n: int) -> tuple[int, str | None] | None:
        """Where `job` would be placed anew on n GPUs, and on how many; None: nowhere. An
        elastic one takes the most one host has free, down to its minimum; only what it must
        have (its minimum; all of a rigid job) may be promised out of running jobs."""
        if not job.spec.single_process:
            return n, None  # (anywhere: after the one-process jobs)
        host = self._best_fit(n)
        if host is None and job.spec.elastic:
            most = next((k for k in range(len(self.by_free) - 1, 0, -1) if self.by_free[k]), 0)
            if most >= job.spec.min_size:
                return most, next(iter(self.by_free[most]))
            n = job.spec.min_size
            host = self._best_fit(n)
        if host is None:
            host = self._room(n)
        return None if host is None else (n, host)

    def _place(self, job: Job, found: tuple[int, str | None] | None) -> int:
        """Book what `_find` found: the GPUs the job is given (0: none)."""
        if found is None:
            return 0
        n, host = found
        if host is None:
            return n
        take = min(self.free[host], n)
        self._set(host, self.free[host] - take)
        self.owed[host] += n - take
        self.plan[job] = host
        return n

    def _best_fit(self, n: int) -> str | None:
        """The host with n free GPUs and the fewest such (as `FreePool.one_host` places; among
        equals maybe another, and the job starts there)."""
        for k in range(n, len(self.by_free)):
            if self.by_free[k]:
                return next(iter(self.by_free[k]))
        return None

    def _room(self, n: int) -> str | None:
        """The host with the most free GPUs of those where running jobs not weighed yet hold the
        rest of n (they stop for it)."""
        if n >= self.too_many:
            return None
        room = [h for h, k in self.free.items() if k + self.unweighed[h] - self.owed[h] >= n]
        if not room:
            self.too_many = n
        return max(room, key=self.free.__getitem__, default=None)
