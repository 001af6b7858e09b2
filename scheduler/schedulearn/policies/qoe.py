"""QoE: plan for deadlines (ElasticFlow-style admission), then goodput for the rest.

Each round, before the `goodput` policy's sizing (which then shares the GPUs left by marginal
value among all admitted jobs, deadline jobs included):
0. A running job past its deadline, or given up, that its estimate (from its own reported
   progress) finishes where it runs within what a restart costs it keeps its GPUs (not one that
   went silent: a hung job is not finishing): taken, they
   would cost it more than they free (traced on workload 1: a cifar10 job 6 s late at 99.7 % of
   its work lost its 38 GPUs to newer deadlines and waited 18 minutes to run its last second).
1. Jobs that have waited `starve_after` (30 min) get their minimum first. This is the bound every
   job keeps, best effort or not: a queued job is admitted at most 30 min after it starts waiting
   plus the time the starving jobs ahead of it hold the front (each as long as it waited).
2. Jobs with a deadline, earliest deadline first, get the fewest GPUs on which their estimate
   (`estimates.deadline`: the same report-fed estimates as `--gpus auto`) finishes them with
   `slack` of the time left to spare, a restart counted for a new size. A running job keeps its
   size (no restart) where its estimate there finishes it by the deadline or within
   `keep_within` (a fifth) of the time left after it — a young estimate errs by that much; not
   beside best-effort jobs, whose GPUs a job that misses would hold on to longer — and
   where only a larger size with no time to spare would make it (a restart planned with no
   margin puts it further behind: traced, a job grew 28 -> 38 -> 54 GPUs and still missed).
   Measured at four phases on the eight workloads: +0.8 points of deadlines met, 7.6 % fewer
   restarts (docs/benchmarks.md). With no estimate yet: what its user asked for. Admission
   is Moore-Hodgson's rule for the fewest late jobs, in GPU-seconds: while the GPU-seconds the
   jobs due by a deadline need exceed the GPUs' seconds until then, the costliest of them is left
   to best effort for good (one imagenet-sized job gives way to the ten short ones it would make
   late); the GPUs a shrink or a stop is releasing count (seen live: a deadline job arriving
   as a best-effort job was shrunk for it was given up for good in the round after, while the
   old run's GPUs were still on their way back). Sizes stay within what the estimate trusts: twice
   the most GPUs it reported from, never fewer than it has — not twice what it has (seen live:
   that grew a job measured on 1 GPU 1 -> 2 -> 4 in two restarts 1 s apart, the second before its
   run on 2 reported anything). A job that no size can
   finish in time (its status says `will_miss`: an event the widget and sidebar show) still gets
   its fastest size while that needs at most `tolerance` (1.5x) the time left — a young job's
   estimate errs by a fifth and more; the tolerance narrows to 1x as the job's own progress reaches
   a half (its estimate is then within a tenth); beyond, it gets nothing here and, like the jobs
   without a deadline, it is best effort from then on. One without progress of its own (the
   estimate is similar jobs' runs) gets what its user asked for instead, or nothing past the
   tolerance.
3. Everyone else gets their minimum, in the `goodput` order (beside best-effort jobs, the
   deadline jobs given up last).
4. GPUs left idle (nobody waiting, no job's value rises with them) go, while deadlines are in
   play, first to a running deadline job behind its deadline whose restart they pay for as a
   loan must (`catch_up`), then — with no best-effort job active — as `goodput`'s loans to the
   deadline jobs before their deadline; never to a best-effort job.
Beside best-effort jobs (no deadline), deadlines do not take everything: `be_share` (a quarter)
of the GPUs is kept for the best-effort jobs' minimums; a deadline is not planned on more GPUs
than a job has and asked for if it would use them at under `least_efficiency` (half) of a linear
speed-up (the best-effort jobs would make more of them; such a job runs best effort); a
planned deadline job gets what it needs and no more, the sizing sharing the rest among the others;
and a given-up deadline job's value counts a tenth (`given_up_weight`) in that sizing — it runs on
what the jobs that never had a deadline leave, its minimum after theirs in step 3; so does, for
the round, a waiting one no size makes it for (its deadline passed, or past the tolerance: seen
live, a job due in 30 s took 3 GPUs of 4 from a best-effort job at full weight) (measured on
the mixed workloads at four phases and the tuning set: their average JCT 0.99-1.34x of what
`goodput` gives them before, 0.84-1.21x after; docs/benchmarks.md).
"""

from __future__ import annotations

from .. import pauses
from ..estimates import estimate
from ..estimates.deadline import needed_gpus, times_left
from ..estimates.job import silent
from ..model import Job, JobState
from .base import RoundContext
from .goodput import Goodput


class QoE(Goodput):
    name = "qoe"
    description = ("Deadline-aware: earliest deadline first, each job the GPUs its estimate needs to "
                   "finish in time; best-effort jobs share the rest by goodput.")
    plans_deadlines = True
    slack = 0.2  # plan to finish this share of the time left before the deadline
    tolerance = 1.5  # a young job is given up once its fastest size needs this many times the
    # time left (1x from half its progress on)
    keep_within = 0.2  # a running job keeps its size while its estimate there ends it within this
    # share of the time left past the deadline (young estimates err by as much)

    be_share = 0.25  # with best-effort jobs: the share of the GPUs kept for their minimums
    least_efficiency = 0.5  # with best-effort jobs: no deadline planned below this S(n)/n
    given_up_weight = 0.1  # with best-effort jobs: what a given-up deadline job's value counts

    def __init__(self) -> None:
        super().__init__()
        self._dropped: set[int] = set()  # deadline jobs left to best effort to save the others
        self._planned: dict[int, int] = {}  # with best-effort jobs: the GPUs planned, and no more
        self._beside = False  # whether this round has best-effort jobs
        self._timed = False  # whether this round had a job with a deadline
        self._hopeless: set[int] = set()  # this round: waiting deadline jobs no size makes it for
        self._per_node = 1  # this round's GPUs per node

    def admit(self, ctx: RoundContext, order: list[Job], size: dict[Job, int], per_node: int) -> int:
        now, left = ctx.now, ctx.capacity
        self._per_node = per_node
        for job in order:  # 0. missed or given up, and done sooner than a restart would cost
            if job.size and job.size <= left and self.finishing(job, ctx, per_node):
                self.give(job, job.size, size, now)
                left -= job.size
        for job in order:  # 1. the starving (and those admitted so), who keep the front
            if not (job.id in self._boost or self.starving(job, now)):
                break
            if job not in size and job.spec.min_size <= left:
                self.give(job, job.spec.min_size, size, now)
                left -= job.spec.min_size
        self._dropped &= {j.id for j in order}
        self._timed = any(j.spec.deadline is not None for j in order)
        self._planned, self._hopeless = {}, set()
        beside = self._beside = any(j.spec.deadline is None for j in order)  # best-effort jobs
        kept = self.kept(ctx, [j for j in order if j not in size and (
            j.spec.deadline is None or j.id in self._dropped)]) if beside else 0
        timed = sorted((j for j in order if j.spec.deadline is not None and j not in size
                        and j.id not in self._dropped), key=lambda j: (j.spec.deadline, j.id))
        plan: list[tuple[Job, int, float]] = []  # (job, GPUs, GPU-seconds it needs)
        demand, share = 0.0, left - kept
        room = share + (ctx.releasing if timed else 0)  # GPUs being released are back in seconds
        for job in timed:  # 2. deadlines, earliest first, while what they need fits before each
            n, secs = self.needs(job, ctx, per_node)
            if not n and job.state is JobState.queued:
                self._hopeless.add(job.id)
            if n and beside and not self.efficient(job, ctx, n, per_node):
                n = 0  # best-effort jobs would use those GPUs better
            if n:
                plan.append((job, n, n * min(secs, job.spec.deadline - now)))
                demand += plan[-1][2]
            while plan and demand > room * (job.spec.deadline - now):  # Moore-Hodgson: the
                costliest = max(plan, key=lambda p: p[2])  # costliest gives way to the others
                plan.remove(costliest)
                demand -= costliest[2]
                self._dropped.add(costliest[0].id)
        for job, n, _ in plan:
            if n > share:  # not all it needs: at least it keeps what it has
                n = job.size if job.size <= share else 0
            if n:
                self.give(job, n, size, now)
                share -= n
                if beside:
                    self._planned[job.id] = n
        return super().admit(ctx, self.rest(order), size, per_node)  # 3. the rest at their minimum

    def next_change(self, running: list[Job], now: float) -> float:
        """With a deadline in play, every tick: time left shrinks and reports come in, so a plan
        changes with time alone even when every job is rigid (a rigid job found to miss its
        deadline gives way to one that can still make it, at the next tick, not at the next
        submission or exit)."""
        return now if self._timed else super().next_change(running, now)

    def finishing(self, job: Job, ctx: RoundContext, per_node: int) -> bool:
        """Whether `job` runs past its deadline (or was given up) and its estimate, from its own
        reported progress, finishes it on its GPUs sooner than a restart would cost it."""
        deadline = job.spec.deadline
        if job.state is not JobState.running or deadline is None or not (
                ctx.now >= deadline or job.id in self._dropped):
            return False
        est = estimate(job, ctx.now, ctx.history)
        if est.progress is None:  # no progress of its own: similar jobs' runs, floored at a
            return False  # tenth of theirs, say nothing of how near its end is
        if silent(job, ctx.now):  # it stopped reporting: a job hung at
            return False  # 99 % is not finishing, and would keep its GPUs for good
        times = times_left(job, est, job.size, per_node, ctx.now, ctx.predict(job))
        return times is not None and times[job.size] <= pauses.price(job, self.restart_cost, ctx.pauses(job))

    def gave_up(self, job: Job) -> bool:
        return job.id in self._dropped

    def rest(self, order: list[Job]) -> list[Job]:
        """The order of step 3: beside best-effort jobs, the deadline jobs given up after all the
        others (they run on what the jobs that never had a deadline leave; one starving is still
        admitted first, in step 1)."""
        return sorted(order, key=self.behind) if self._beside else order

    def behind(self, job: Job) -> bool:
        """Whether `job` runs behind the best-effort jobs: given up, or waiting and no size makes
        it for this round (a running one as before: counted too, 11 fewer deadlines met of 640 on
        the mixed workloads at two phases, the best-effort jobs' JCT unchanged)."""
        return job.id in self._dropped or job.id in self._hopeless

    def resized_anyway(self, job: Job, most: int) -> bool:
        """Goodput's, for a best-effort job only: a deadline job the admission shrinks keeps its
        restart discount (its plan sizes it; valued in full, such jobs kept GPUs others used for
        their deadlines: on workloads 1-4 at four phases 19 fewer met of 2,560, and 15 fewer with
        the given-up ones left out)."""
        return super().resized_anyway(job, most) and job.spec.deadline is None

    def kept(self, ctx: RoundContext, best_effort: list[Job]) -> int:
        """GPUs kept from the deadline stage for the minimums of `best_effort` (in order), at
        most `be_share` of the cluster."""
        kept = 0
        for job in best_effort:
            if kept + job.spec.min_size > self.be_share * ctx.capacity:
                break
            kept += job.spec.min_size
        return kept

    def efficient(self, job: Job, ctx: RoundContext, n: int, per_node: int) -> bool:
        """Whether `job` would use n GPUs (more than it has and asked for) at `least_efficiency`
        of a linear speed-up or better — judged on its own gradient statistics: before it has
        reported any, at its throughput (its family's early statistics would judge a job whose
        efficiency rises over its run by its first epochs; measured beside best-effort jobs,
        that left 6-11 points more of the deadlines to best effort); one that would not, once it
        reported progress, is left to best effort for good."""
        if n <= max(job.size, job.spec.requested):
            return True
        est = estimate(job, ctx.now, ctx.history)
        if est.curve(n, per_node, est.own_grad is not None)[n] >= self.least_efficiency * n:
            return True
        if est.progress is not None:
            self._dropped.add(job.id)
        return False

    def lend(self, ctx: RoundContext, value: dict[Job, list[float]], size: dict[Job, int], left: int,
             loans: bool = True) -> int:
        """Goodput's, but with deadlines in play the GPUs nobody takes go first to a deadline job
        running behind (`catch_up`), then, where no best-effort job is active, as `goodput`'s
        loans to the deadline jobs before their deadline (a lone `--deadline 10m` job of 200 s
        on track was kept on 1 GPU of 4 for 90 s; beside best-effort jobs their JCT on the mixed
        workload 2 went to 1.34x `goodput`'s at 45 s): none to a best-effort job (a young
        deadline job's plan grows as its estimate firms up: seen live, a loan to a best-effort
        job was taken back 12 s later, a restart for nothing); a job resized anyway still keeps
        the GPUs nobody takes."""
        if not self._timed:
            return super().lend(ctx, value, size, left, loans)
        left = super().lend(ctx, value, size, left, False)
        if left:
            left = self.catch_up(ctx, size, left)
        if left and loans and not self._beside:  # (beside best-effort jobs, whose JCT it cost)
            timed = {j: v for j, v in value.items() if j.spec.deadline is not None
                     and ctx.now < j.spec.deadline and j.id not in self._dropped and size[j] == j.size}
            left = super().lend(ctx, timed, size, left, True)
        return left

    def catch_up(self, ctx: RoundContext, size: dict[Job, int], left: int) -> int:
        """GPUs nobody takes go to the running deadline jobs (earliest deadline first) whose
        estimate finishes them past their deadline where they run: the fewest within their cap
        that make it, else the fastest, where they pay for a restart as a loan must (`goodput`'s
        rule: the time they save over the loan's expected length, until the next arrival, is
        `hysteresis` times its price; without that bound a job due in 4 hours grew 10 -> 17 ->
        18 -> 22 -> 23 -> 24 -> 28 GPUs in 12 minutes, a restart each). The plan keeps a job's
        size where only a larger one with no time to spare would make it (a restart with no
        margin, taken from others, puts it further behind), but idle GPUs are taken from nobody
        (seen live: a 2-minute job behind on 1 GPU of 4 kept it for 90 s beside an idle one, and
        missed by 46 s). The GPUs left."""
        now, behind = ctx.now, []
        loan = self.loan_length()
        for job, n in size.items():
            deadline = job.spec.deadline
            if (deadline is None or now >= deadline or job.id in self._dropped or n != job.size
                    or job.state is not JobState.running or not job.alloc):
                continue
            est = estimate(job, now, ctx.history)
            if silent(job, now):
                continue  # stopped reporting: more GPUs would restart it for nothing
            top = min(self.cap(job, est, ctx.capacity), n + left)
            times = times_left(job, est, top, self._per_node, now, ctx.predict(job)) if top > n else None
            if times is None or now + times[n] <= deadline:
                continue
            price = pauses.price(job, self.restart_cost, ctx.pauses(job))
            m = needed_gpus(job, times, now, price) or min(range(n, top + 1), key=lambda k: (times[k], k))
            if m > n and min(times[n], loan) * (1.0 - times[m] / times[n]) >= self.hysteresis * price:
                behind.append((deadline, job.id, job, m))
        for _, _, job, m in sorted(behind, key=lambda b: b[:2]):
            if m - size[job] <= left:
                left -= m - size[job]
                size[job] = m
        return left

    def values(self, job: Job, ctx: RoundContext, per_node: int, rank: int) -> list[float]:
        """Goodput's, but beside best-effort jobs a planned deadline job grows no further and a
        given-up one counts `given_up_weight` (it runs on what the others leave: a deadline it
        will miss does not outbid the jobs that never had one)."""
        v = super().values(job, ctx, per_node, rank)
        n = self._planned.get(job.id)
        if n:
            return v[: n + 1]
        if self._beside and self.behind(job):
            return [self.given_up_weight * x for x in v]
        return v

    def needs(self, job: Job, ctx: RoundContext, per_node: int) -> tuple[int, float]:
        """GPUs `job` needs now to make its deadline (0: no size can, or it has passed), and the
        seconds it then still runs."""
        now, deadline = ctx.now, job.spec.deadline
        restart = pauses.price(job, self.restart_cost, ctx.pauses(job))
        if now >= deadline:
            return 0, 0.0
        est = estimate(job, now, ctx.history)
        top, cap = job.spec.max_size(ctx.capacity), self.cap(job, est, ctx.capacity)
        margin = self.slack * (deadline - now)
        # at today's speed-up, and at the one its later epochs approach (throughput)
        today, hope = (times_left(job, est, top, per_node, now, ctx.predict(job), h) for h in (False, True))
        if today is None or hope is None:  # nothing known yet: what the user asked for
            return min(job.spec.requested, cap), deadline - now
        # On track where it runs, or nearly: no restart (not "nearly" beside best-effort jobs:
        # a job that misses would hold GPUs they use). Nor for a job that stopped reporting:
        # more GPUs do not speed up a hung job (its time left is then where it stopped).
        keep = 0.0 if self._beside else self.keep_within
        if job.size and (now + today[job.size] <= deadline + keep * (deadline - now)
                         or silent(job, now)):
            return job.size, today[job.size]
        if job.size and now + hope[job.size] + margin <= deadline:
            return job.size, hope[job.size]
        for times in (today, hope):
            n = needed_gpus(job, times, now, restart, margin)
            if not n:  # no size with time to spare: one with none, but a running job does not
                n = needed_gpus(job, times, now, restart)  # chase it with a restart
                if n and job.size and n > job.size:
                    return job.size, times[job.size]
            if n:
                n = min(max(n, job.size), cap)
                return n, times[n]
        # No size makes it by the estimate: its fastest size while that is within the tolerance
        # of the time left (`tolerance` for a young job, whose estimate errs by a fifth and more,
        # narrowing to 1x at half its progress), else nothing. Until the job measured its own
        # progress (the work is then the guess of similar jobs) what its user asked for instead
        # of the fastest — and nothing too where even the fastest is past the tolerance (one
        # due in 5 s that similar jobs say takes 44 s stopped a best-effort job live).
        tolerance = self.tolerance - (self.tolerance - 1.0) * min((est.progress or 0.0) / 0.5, 1.0)
        cost = [hope[n] + (0.0 if n == job.size else restart) for n in range(cap + 1)]
        n = min(range(job.spec.min_size, cap + 1), key=cost.__getitem__)
        if cost[n] > tolerance * (deadline - now):
            return 0, 0.0
        if est.progress is None:
            return min(job.spec.requested, cap), deadline - now
        return n, hope[n]
