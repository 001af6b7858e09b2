"""Goodput: size every job for the most total (weighted) speed-up — the policy behind `--gpus auto`.

Each round:
1. *Admission*, in priority order — queued jobs that have waited `starve_after` seconds first,
   longest wait first (once admitted, such a job keeps the front for as long again), then
   Tiresias' two queues (under 16 GPU-hours of service, then the rest), first come first served
   within each: every job gets its minimum while GPUs are left.
2. *Sizing*: the GPUs left go, a step at a time, to the job whose value grows most per GPU (a step
   may take several GPUs, so a job gets past a dip in its curve such as the first GPU on a second
   node). A job's value at n GPUs is `weight · S(n)`: S is its speed-up (goodput on n GPUs over
   goodput on one) and n is capped where its estimate stops trusting itself (twice the GPUs it
   was measured on); the weight is the job's rank by work left, the job with the most ranked 1
   (heSRPT's insight: for mean completion time what matters is the order of the jobs' sizes, and
   a job's share grows with the number of jobs it finishes before). Both come from
   `schedulearn.estimates`, which knows only the job's spec and reports. For a running job every
   n other than its current size is discounted by `restart_factor`: a resize pauses the job, so
   it must pay for its lost seconds — the pauses measured on the job's own resizes
   (`schedulearn.pauses`: far less for a job resized in place than for a checkpoint-restart),
   else those its family's finished runs measured, `restart_cost` until one is measured — but
   not for a job the admission resized already (its GPUs no longer fit beside the others'
   minimums): it pays the restart whatever its new size, so every size counts in full (seen live:
   a young job on 4 GPUs, shrunk for a newcomer, was cut to 1 and the newcomer given 3).
3. *Idle GPUs*: where every job is admitted and GPUs are still left, they go first to the running
   jobs resized this round anyway (a young one shrunk by the sizing lands on its minimum: the
   restart factor above is 0 for every other size), as far as their speed-up rises; then they are
   lent to a running job whose own reported progress says they save `hysteresis` times what the
   resize costs over the loan — its time left on its GPUs, or until the next arrival is expected
   to take them back (the `loan_window`'s arrivals) if sooner — × (1 − S(n)/S(m)). The age above
   is a stand-in for the time left, and it kept a job alone on 4 GPUs with 11 minutes of work on
   one for 4.5 minutes (seen live); with jobs queued, or arrivals every few minutes, it alone
   decides.
GPUs stay idle only when no job's value rises with more (all at their maximum, or not worth a
restart, or silent: a running job that stopped reporting, `estimates.job.silent_for`, is not
grown — hung, more GPUs would restart it for nothing; in a long evaluation, a restart loses it).
Jobs that may adapt their batch size (`JobSpec.adaptive_batch`) are told to pick it themselves
when they start or resize (`job.batch_size = None`).
"""

from __future__ import annotations

import heapq

from .. import pauses
from ..estimates import Estimate, estimate, remaining_s1
from ..estimates.job import silent
from ..model import Job, JobState
from ..placement import placement_shape
from .base import NEVER, Policy, RoundContext, Want


class Goodput(Policy):
    name = "goodput"
    description = "Sizes jobs (and batch sizes) for the most total goodput; restart-aware, starvation-free."
    elastic = True
    time_driven = True
    restart_cost = 30.0  # seconds of progress a resize costs until its own (or family's) are measured
    hysteresis = 3.0  # a resize must pay for this many times its cost
    beta = 1.0  # weight = rank ** beta (rank 1: the most work left)
    starve_after = 1800.0  # a queued job waiting this long is admitted first
    threshold = 16 * 3600.0  # GPU-seconds of service: the second queue
    loan_window = 3600.0  # arrivals over this long tell how long a loan of idle GPUs lasts

    def __init__(self) -> None:
        self._curves: dict[int, tuple[object, list[float]]] = {}  # job id -> (what it depends on, S)
        self._boost: dict[int, float] = {}  # job id -> until when it keeps the front (it starved)
        self._elastic, self._starve_at = True, NEVER  # for next_change, from the last round
        self._arrivals: list[float] = []  # submit times of the jobs seen, within `loan_window`
        self._newest = -1  # the highest job id seen
        self._forced: set[int] = set()  # running jobs this round's admission resizes whatever else

    def schedule(self, ctx: RoundContext) -> list[Want]:
        now, left = ctx.now, ctx.capacity
        per_node = max((len(n.gpus) for n in ctx.nodes if n.healthy), default=1)
        active = {j.id for j in ctx.jobs}
        self._curves = {k: v for k, v in self._curves.items() if k in active}
        self._boost = {k: t for k, t in self._boost.items() if k in active and t > now}
        order = sorted(ctx.jobs, key=lambda j: self.priority(j, now))
        self.arrived(ctx.jobs, now)
        size: dict[Job, int] = {}
        left = self.admit(ctx, order, size, per_node)  # 1. admission
        self._forced = {j.id for j in size if self.resized_anyway(j, size[j] + left)}
        rank = self.ranks([j for j in order if j.spec.elastic], ctx)
        value = {job: self.values(job, ctx, per_node, rank[job.id]) for job in size if job.spec.elastic}
        heap: list[tuple[float, int, Job, int]] = []

        def push(job: Job) -> None:  # the job's best next step: most value per extra GPU
            v, n = value[job], size[job]
            steps = [((v[m] - v[n]) / (m - n), m) for m in range(n + 1, min(len(v) - 1, n + left) + 1)]
            gain, m = max(steps, default=(0.0, n))
            if gain > 1e-12:
                heapq.heappush(heap, (-gain, job.id, job, m))

        for job in value:
            push(job)
        while heap and left:  # 2. sizing by marginal value per GPU
            _, _, job, m = heapq.heappop(heap)
            if m - size[job] > left:
                push(job)  # fewer GPUs left than that step needs: look again
                continue
            left -= m - size[job]
            size[job] = m
            push(job)
        if left and all(j in size for j in order):  # 3. idle GPUs, nobody waiting
            left = self.lend(ctx, value, size, left)
        for job, n in size.items():
            if n != job.size and job.spec.adaptive_batch:
                job.batch_size = None  # the job picks the batch size for its new placement
        self._elastic = any(j.spec.elastic for j in order)
        waiting = [(now if j.state is JobState.running else j.since) for j in order if j not in size]
        self._starve_at = min((t + self.starve_after for t in waiting if now - t < self.starve_after),
                              default=NEVER)  # the next waiting job to starve (preempted ones: now)
        # All of it fits: hand it over largest first, which places with less fragmentation.
        return sorted(((job, size[job]) for job in order if job in size), key=lambda w: -w[1])

    def lend(self, ctx: RoundContext, value: dict[Job, list[float]], size: dict[Job, int], left: int,
             loans: bool = True) -> int:
        """Idle GPUs: first to the running jobs resized this round anyway (more GPUs cost them no
        other restart), as far as their speed-up rises; then to those whose own progress says
        they pay for a resize — the size m that saves the most, where the time left t on its n
        GPUs gives t·(1 − S(n)/S(m)) of at least `hysteresis` times the resize's price, t no
        longer than the loan is expected to last (until the next arrival). The GPUs left."""
        best: dict[Job, tuple[bool, float, int]] = {}  # job -> (resized anyway, gain, size)
        loan = self.loan_length()
        for job, v in value.items():
            n = size[job]
            if job.state is not JobState.running or not job.alloc or len(v) <= n + 1:
                continue
            s, top = self._curves[job.id][1], min(len(v) - 1, n + left)
            if n != job.size:  # (seen live: shrunk 4 -> 1 for a newcomer's 1 GPU, then 1 -> 3)
                m = max(range(n, top + 1), key=lambda k: (s[k], -k))
                if m > n:
                    best[job] = (True, s[m] - s[n], m)
                continue
            est = estimate(job, ctx.now, ctx.history) if loans else None
            t = est.remaining_s(placement_shape(job.alloc)) if est and est.progress is not None else None
            if not t:
                continue
            t, price = min(t, loan), pauses.price(job, self.restart_cost, ctx.pauses(job))
            for m in range(n + 1, top + 1):
                saved = t * (1.0 - s[n] / s[m]) if s[m] > 0 else 0.0
                if saved >= self.hysteresis * price and saved > best.get(job, (False, 0.0, n))[1]:
                    best[job] = (False, saved, m)
        for job, (_, _, m) in sorted(best.items(), key=lambda kv: (not kv[1][0], -kv[1][1], kv[0].id)):
            if m - size[job] <= left:
                left -= m - size[job]
                size[job] = m
        return left

    def loan_length(self) -> float:
        """How long a loan of idle GPUs is expected to last: until the next arrival, at the rate
        of the `loan_window`'s arrivals."""
        return self.loan_window / max(len(self._arrivals), 1)

    def arrived(self, jobs: list[Job], now: float) -> None:
        """Note the jobs first seen this round (ids only grow) among the arrivals of the last
        `loan_window`."""
        new = [j for j in jobs if j.id > self._newest]
        self._newest = max((j.id for j in new), default=self._newest)
        seen = self._arrivals + [j.submit_time for j in new]
        self._arrivals = [t for t in seen if now - t < self.loan_window]

    def admit(self, ctx: RoundContext, order: list[Job], size: dict[Job, int], per_node: int) -> int:
        """Every job its minimum, in `order`, while GPUs are left; the GPUs left."""
        left = ctx.capacity - sum(size.values())
        for job in order:
            if not left:
                break
            if job not in size and job.spec.min_size <= left:
                self.give(job, job.spec.min_size, size, ctx.now)
                left -= job.spec.min_size
        return left

    def give(self, job: Job, n: int, size: dict[Job, int], now: float) -> None:
        """Admit `job` with n GPUs (a starving one keeps the front as long as it waited)."""
        size[job] = n
        if job.id not in self._boost and self.starving(job, now):
            self._boost[job.id] = now + self.starve_after

    def next_change(self, running: list[Job], now: float) -> float:
        """With elastic jobs, every tick (speed-ups, weights and restart factors move with
        time). With rigid jobs only: a waiting job starving, a boost ending, or a running job
        reaching the second queue."""
        if self._elastic:
            return now
        soonest = min(self._starve_at, min(self._boost.values(), default=NEVER))
        for j in running:
            if j.size and j.attained(now) < self.threshold:
                soonest = min(soonest, j.since + (self.threshold - j.attained_base) / j.size)
        return soonest

    def starving(self, job: Job, now: float) -> bool:
        return job.state is JobState.queued and now - job.since >= self.starve_after

    def priority(self, job: Job, now: float) -> tuple:
        """Boosted (admitted while starving) jobs, then starving ones, longest wait first, then
        Tiresias' queues: under `threshold` GPU-seconds of service, then the rest, each FCFS."""
        if job.id in self._boost:
            return (0, 0.0, job.id)
        if self.starving(job, now):
            return (1, job.since, job.id)
        return (2, job.attained(now) >= self.threshold, job.submit_time, job.id)

    def ranks(self, jobs: list[Job], ctx: RoundContext) -> dict[int, int]:
        """Each job's rank by estimated work left (seconds on one GPU): 1 for the most."""
        now, history = ctx.now, ctx.history
        left = {j.id: remaining_s1(j, estimate(j, now, history), now, ctx.predict(j)) for j in jobs}
        return {jid: k for k, jid in enumerate(sorted(left, key=lambda i: (-left[i], i)), start=1)}

    @staticmethod
    def cap(job: Job, est: Estimate, capacity: int) -> int:
        """The most GPUs `job`'s estimate trusts: twice those it reported from (never fewer than
        it runs on, where it is being measured), within its maximum."""
        top = job.spec.max_size(capacity)
        if est.max_gpus is None:
            return top
        return max(job.spec.min_size, min(top, max(est.max_gpus, job.size)))

    def values(self, job: Job, ctx: RoundContext, per_node: int, rank: int) -> list[float]:
        """The job's value at n = 0..its maximum GPUs."""
        now = ctx.now
        est = estimate(job, now, ctx.history)
        top = self.cap(job, est, ctx.capacity)
        key = (est.key, top, per_node)
        cached = self._curves.get(job.id)
        if cached is None or cached[0] != key or est.key is None:
            cached = self._curves[job.id] = (key, est.curve(top, per_node))
        w = float(rank) ** self.beta
        if job.state is not JobState.running:
            return [w * s for s in cached[1]]
        family = ctx.pauses(job)
        keep = 1.0 if job.id in self._forced else self.restart_factor(job, now, family)
        v = [w * s * (1.0 if n == job.size else keep) for n, s in enumerate(cached[1])]
        if self.ending(job, est, family) or silent(job, now):
            del v[job.size + 1:]  # more GPUs cannot pay for their restart before it ends, nor
        return v  # speed up a job that stopped reporting (hung: more GPUs restart it for nothing;
        # in a long evaluation: a restart loses it)

    def resized_anyway(self, job: Job, most: int) -> bool:
        """Whether the admission resized `job` already — running, it can have at most `most` GPUs,
        fewer than it has: it pays the restart whatever its new size, so its values carry no
        restart discount."""
        return job.state is JobState.running and job.size > most

    def ending(self, job: Job, est: Estimate, family: dict[str, list[float]] | None = None) -> bool:
        """Whether the running job, by its own reported progress, ends on its GPUs within
        `hysteresis` times what a resize costs it: more GPUs save at most that time left, and a
        resize must pay for `hysteresis` times its cost (seen live: an auto job grew 1 -> 2 GPUs
        at 94 % of its work, seconds from its end, and ended 13 s later than it would have)."""
        if est.progress is None or not job.alloc:
            return False
        left = est.remaining_s(placement_shape(job.alloc))
        return left is not None and left <= self.hysteresis * pauses.price(job, self.restart_cost, family)

    def restart_factor(self, job: Job, now: float, family: dict[str, list[float]] | None = None) -> float:
        """What a resize leaves of a running job's value: (age - h·spent) / (age + h·c), with c
        the price of its next resize and spent what its past resizes and restarts cost
        (`pauses.price`, `pauses.spent`: measured — on its own resizes, else on its `family`'s —
        `restart_cost` until measured), h the hysteresis — young and often-resized jobs are
        left alone."""
        age, h = now - job.submit_time, self.hysteresis
        cost = pauses.price(job, self.restart_cost, family)
        spent = pauses.spent(job, self.restart_cost, family)
        return max(age - h * spent, 0.0) / (age + h * cost)
