"""Deadlines against the estimates: how long a job still needs on n GPUs, the fewest GPUs that
finish it in time, and the status users see — from the same report-fed estimates `--gpus auto`
uses (`estimates.job`, `estimates.predict`), never from ground truth.

Where finished jobs of the job's family (`estimates.predict.family`) reported their progress and
gradient statistics, the time left follows their run (`path_times`): the work each stretch of
progress cost them (goodput-seconds per unit of progress, the same for every run of one training
recipe) at the goodput the family's gradient statistics of that stretch give on n GPUs — a young
job's own statistics understate how well its later epochs use a large batch. Otherwise:

Time left on n GPUs (packed) = the work left in seconds on one GPU over the job's speed-up S(n)
(`Estimate.curve`, the goodput policy's own). The work left is (1 - progress) x the job's total
work, which two sources tell: its own progress rate (`Estimate.total_s1`: the spans between its
reports) and what similar finished jobs needed (`History.predict`). The first says little early
on (a few minutes of the first epochs, whose statistical efficiency at a large batch is poor:
it overestimates an adaptive job's work by up to 2x), so the two are blended, the job's own
weighing in as its progress reaches `TRUST_PROGRESS`; a prediction more than `AGREE` times off
the job's own is dropped (the predictor backs off to ever less similar jobs). Without progress,
the prediction less the service had; with neither, unknown (None). A job that is not running on
n GPUs now pays a restart (`restart_s`) first.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..model import Job, JobState
from ..placement import placement_shape
from .job import Estimate, estimate, unreported_s
from .reports import PATH_BINS, nearest, path_bin

#: seconds a (re)start costs before a job makes progress, where nothing says otherwise
RESTART_S = 30.0
#: progress at which a job's own rate alone is trusted for its total work (blended before)
TRUST_PROGRESS = 0.3
#: the history's prediction counts only within this factor of the job's own rate's
AGREE = 4.0
#: a job whose measured work per unit of progress is within this factor of its family's runs
#: like them (its own stretches are short and noisy); beyond, its own pace takes over
LIKE_FAMILY = 1.5
#: how far the expected speed-up lies towards throughput's at the start (see `expected_curve`);
#: less by the job's progress, today's from this progress on
EFFICIENCY_GROWTH = 0.7


def work_left_s1(job: Job, est: Estimate, now: float, predicted: float | None = None) -> float | None:
    """Seconds on one GPU `job` still needs (None when nothing tells), counted from now."""
    p, own = est.progress, est.total_s1()
    if p is not None and p >= 1.0:  # done by its own word: nothing left, whatever its rate
        return 0.0
    if predicted is not None and not math.isfinite(predicted):
        predicted = None
    if p is None:
        if predicted is None:
            return None
        return max(predicted - job.attained(now), 0.1 * predicted)
    if own is not None and predicted is not None and not own / AGREE <= predicted <= own * AGREE:
        predicted = None  # "similar" jobs unlike this one (the predictor backs off to any job)
    if own is not None and predicted is not None:
        w = min(p / TRUST_PROGRESS, 1.0)
        total = w * own + (1.0 - w) * predicted
    else:
        total = own if own is not None else predicted
    if total is None:
        return None
    left = max(1.0 - p, 0.0) * total
    if job.state is JobState.running and job.alloc and (since := unreported_s(est.st, job, now)) > 0:
        g1 = est.goodput((1,))  # less what it did since its last report, at its speed-up
        speedup = est.goodput(placement_shape(job.alloc)) / g1 if g1 > 0 else job.size
        left = max(left - since * speedup, 0.0)
    return left


def times_left(job: Job, est: Estimate, top: int, per_node: int, now: float,
               predicted: float | None = None, hopeful: bool = False) -> list[float] | None:
    """Seconds `job` still needs on n = 0..top packed GPUs (index 0: infinite); None when nothing
    tells. Where finished jobs of its family reported their run, along that run (`path_times`,
    hopeful or not). Else by default at the *expected* speed-up (`expected_curve`); `hopeful`: at
    the speed-up of throughput, which the later epochs of a job that adapts its batch size approach (its
    statistical efficiency at large batches grows as it trains)."""
    if est.kind == "oracle":  # the simulator's ground truth (`--estimates oracle`): exact
        return est.times(top, per_node)
    by_path = path_times(job, est, top, per_node, now)  # (it knows how the later epochs go)
    if by_path is not None:
        return by_path
    left = work_left_s1(job, est, now, predicted)
    if left is None:
        return None
    curve = est.curve(top, per_node, False) if hopeful else expected_curve(est, top, per_node)
    return [left / s if s > 0 else math.inf for s in curve]


def expected_curve(est: Estimate, top: int, per_node: int) -> list[float]:
    """The speed-up a job can expect over the rest of its run: today's goodput curve moved
    towards its throughput curve (geometrically) by `EFFICIENCY_GROWTH` less its progress. Early
    in training the gradient noise is small and large batches are inefficient, but the noise
    grows as the loss falls, so a young job's statistical efficiency on many GPUs rises over its
    run; judged by today's statistics alone, a job at 5 % of its work needed up to 2-6x longer
    than it did (Pollux workloads, simulated; the curve of a job past `EFFICIENCY_GROWTH` is
    today's)."""
    today = est.curve(top, per_node)
    w = max(EFFICIENCY_GROWTH - (est.progress or 0.0), 0.0)
    if w <= 0 or est.grad is None:
        return today
    hope = est.curve(top, per_node, False)
    return [t ** (1.0 - w) * h ** w if t > 0 and h > 0 else t for t, h in zip(today, hope, strict=True)]


def needed_gpus(job: Job, times: list[float] | None, now: float, restart_s: float = RESTART_S,
                margin_s: float = 0.0) -> int | None:
    """The fewest GPUs (from its minimum up to the last entry of `times`) on which `job`
    finishes by its deadline with `margin_s` to spare; 0 when no size does; None when unknown."""
    deadline = job.spec.deadline
    if deadline is None or times is None:
        return None
    for n in range(job.spec.min_size, len(times)):
        cost = 0.0 if (job.state is JobState.running and n == job.size) else restart_s
        if now + cost + times[n] + margin_s <= deadline:
            return n
    return 0


#: a queued job is on track when the GPUs it asked for, started now, leave this share of the time
#: left to spare (the `qoe` policy plans with the same fifth); else it is at risk until it runs
QUEUED_SPARE = 0.2


def status(job: Job, times: list[float] | None, now: float, hope: list[float] | None = None,
           restart_s: float = RESTART_S) -> dict[str, Any]:
    """`deadline_status` (`on_track`, `at_risk`, `will_miss`, `unknown`; `met`, `missed` once it
    ended), `deadline_left_s`, and `missed_by_s` for a job that ended late. `times`, `hope`: the
    job's `times_left` up to the most GPUs it may use, at today's and at the hopeful speed-up;
    `restart_s`: what a (re)start on a new size costs it (the engine passes the policy's price,
    `Engine.restart_price`: this module imports no policy).
    `will_miss`: no size makes it at either (the `qoe` policy gives up on such a job once the
    estimate rests on its own reported progress, not only on similar jobs'). A queued job is
    `on_track` where the GPUs it asked for, started now, finish it with `QUEUED_SPARE` of the
    time left to spare (a job due in 10 minutes that takes one on one GPU read `at_risk` while it
    waited for its first round)."""
    deadline = job.spec.deadline
    if deadline is None:
        return {}
    if job.state.final:
        end = job.end_time if job.end_time is not None else now
        if job.state is JobState.succeeded and end <= deadline:
            return {"deadline_status": "met"}
        if job.state is JobState.succeeded:
            return {"deadline_status": "missed", "missed_by_s": round(end - deadline, 1)}
        return {"deadline_status": "missed"} if end > deadline else {}
    out: dict[str, Any] = {"deadline_left_s": round(deadline - now, 1)}
    if now >= deadline:
        out["deadline_status"] = "missed"
    elif times is None:
        out["deadline_status"] = "unknown"
    elif 0 < job.size < len(times) and job.state is JobState.running and now + times[job.size] <= deadline:
        out["deadline_status"] = "on_track"
    elif job.state is JobState.queued and job.spec.requested < len(times) and now + restart_s \
            + times[job.spec.requested] + QUEUED_SPARE * (deadline - now) <= deadline:
        out["deadline_status"] = "on_track"  # what it asked for, from now, makes it with time to spare
    elif needed_gpus(job, times, now, restart_s) or needed_gpus(job, hope, now, restart_s):
        out["deadline_status"] = "at_risk"
    else:
        out["deadline_status"] = "will_miss"
    return out


def summary(job: Job, now: float, history: Any, capacity: int, per_node: int,
            restart_s: float = RESTART_S) -> dict[str, Any]:
    """The deadline part of `estimates.summary`: `status` on up to the `capacity` GPUs the job
    may use, a restart costing `restart_s`."""
    if job.state.final:
        return status(job, None, now)
    est = estimate(job, now, history)
    top = job.spec.max_size(max(capacity, job.spec.min_size))
    predicted = history.predict(job, similar=True) if history is not None else None
    if est.progress is None and predicted is not None and job.attained(now) >= predicted:
        predicted = None  # it has had more service than similar jobs needed: the history tells
        # nothing more of its time left (nor does its ETA); `unknown`, not on track on a tenth
    times, hope = (times_left(job, est, top, per_node, now, predicted, h) for h in (False, True))
    return status(job, times, now, hope, restart_s)


def path_times(job: Job, est: Estimate, top: int, per_node: int, now: float) -> list[float] | None:
    """Seconds `job` still needs on n = 0..top packed GPUs along its family's run: the work left
    (1 - progress) x the work per unit of progress (the family's finished jobs', blended with the
    job's own as its progress reaches `TRUST_PROGRESS`), each stretch of it at the goodput the
    family's gradient statistics of that stretch give (the job's own for the stretch it is in).
    None where the family has no finished job that reported them."""
    prior = est.prior
    if prior is None or not prior.grad_path or not prior.work_path or est.perf is None or top < 1:
        return None
    scale = own_work_scale(est.st.get("path_work") or {}, prior.work_path)
    p = est.progress or 0.0
    if job.state is JobState.running and job.alloc and (since := unreported_s(est.st, job, now)) > 0:
        k = scale * nearest(prior.work_path, path_bin(p))
        p = min(p + since * est.goodput(placement_shape(job.alloc)) / k, 1.0)
    cache = est.path_goodputs
    total = np.zeros(top)
    here = path_bin(p)
    for b in range(here, PATH_BINS):
        frac = (b + 1) / PATH_BINS - max(b / PATH_BINS, p)
        if frac <= 0:
            continue
        own_now = b == here and est.grad is not None
        key = (top, per_node, "own" if own_now else b)
        g = cache.get(key)
        if g is None:
            grad = est.grad if own_now else nearest(prior.grad_path, b)
            g = cache[key] = est.goodputs(top, per_node, grad)
        total += frac * scale * nearest(prior.work_path, b) / np.where(g > 0, g, np.nan)
    return [math.inf] + [x if math.isfinite(x) else math.inf for x in total.tolist()]


def own_work_scale(own: dict[str, list], family: dict[int, float]) -> float:
    """How much more (or less) work a unit of progress costs this job than its family's runs:
    the work its own reported stretches cost (`path_work`: goodput-seconds, progress) over what
    the family's would have cost for them, trusted as its measured progress reaches
    `TRUST_PROGRESS` (1 before any, and while within `LIKE_FAMILY` of the family's). Live, a
    family is a notebook cell of one user: run again with twice the epochs, a unit of its
    progress costs twice the work."""
    work = expected = done = 0.0
    for key, (w, dp) in own.items():
        work += w
        done += dp
        expected += dp * nearest(family, int(key))
    if done <= 0 or expected <= 0 or work <= 0 or 1 / LIKE_FAMILY <= work / expected <= LIKE_FAMILY:
        return 1.0  # a run like the family's: theirs, measured over whole runs, is the better guide
    trust = min(done / TRUST_PROGRESS, 1.0)
    return 1.0 - trust + trust * work / expected
