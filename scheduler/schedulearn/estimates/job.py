"""One job's estimate: goodput on any placement, the best batch size, the work left.

`estimate(job, now, history)` is all a policy may know of a job. It is built from the job's spec
and its reports (`estimates.reports`) — identically live and in simulation — and is one of:

* `Estimate` (reports): goodput = throughput x statistical efficiency, Pollux's definition.
  Throughput = global batch / step time from the fitted model (`estimates.throughput`);
  efficiency from the reported gradient statistics (`efficiency`) — until the job reports its
  own, its family's at that point of their runs (`Prior.grad_path`: finished jobs'), else 1
  (a job with neither is taken to scale its batch for free, which a young job seldom can). For
  a job that adapts its batch size, goodput on a placement is at the batch size that maximises
  it within the job's bounds. Where nothing was measured, speed-up is linear (the fit has no data).
  Exploration cap (`max_gpus`): twice the largest GPU count the job has reported, at least its
  minimum — a job grows by doubling as it is measured (Pollux); likewise an adaptive batch is
  valued and chosen only up to twice the largest micro-batch measured (`trusted`).
  Work left: the declared progress (fraction done) and how fast it moved between reports on each
  configuration (`spans`): one unit of progress costs K goodput-seconds, K = sum(goodput(c) *
  seconds on c) / sum(progress on c); the work left is (1 - progress) * K. Without declared
  progress: the run-time predictor (`estimates.predict`) over finished jobs, less the attained
  service; without history, the attained service plus an hour.
* A simulation-only upper bound (`--estimates oracle`): the simulator hands the estimator the
  job model's ground truth instead of the reports, through the same interface (`Estimate`'s
  `goodput`, `best_batch` and `remaining_work`); `job.extra["_oracle"]` holds it and nothing
  else puts it there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..model import Job
from . import libm
from . import reports as rep
from .throughput import PerfParams, fit

#: candidate global batch sizes tried per placement (geometrically spaced), as Pollux
BATCH_CANDIDATES = 50
#: a job is trusted up to this many times the most GPUs it was measured on (Pollux: 2)
EXPLORE = 2.0
#: seconds after which a throughput model is refitted to what changed since
REFIT_AFTER = 600.0
#: work left assumed when nothing predicts it (on top of the attained service), seconds on 1 GPU
UNKNOWN_WORK_S = 3600.0


def packed_shape(n: int, per_node: int) -> tuple[int, ...]:
    """GPUs per node when n GPUs are packed on the fewest nodes."""
    full, rest = divmod(n, per_node)
    return (per_node,) * full + ((rest,) if rest else ())


def efficiency_gain(sqr: float, var: float, batch, init_batch: float):
    """Progress per step at global batch B, relative to one step at the initial batch B0:
    (var + sqr) / (var / s + sqr), s = B / B0 (Pollux's statistical efficiency is gain / s)."""
    s = np.asarray(batch, dtype=float) / init_batch
    denom = var / s + sqr
    return np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)


def configure(r, batch, max_local: float, init_batch: float):
    """Micro-batch m and accumulation steps a of global batch B on r GPUs (as AdaptDL does:
    a = ceil(local / max_local) - 1, at least 1 on one GPU above the initial batch)."""
    r = np.asarray(r, dtype=float)
    local = np.ceil(np.asarray(batch, dtype=float) / r)
    a = np.ceil(local / max_local - 1e-9) - 1
    a = np.where((r == 1) & (np.asarray(batch) > init_batch), np.maximum(a, 1), np.maximum(a, 0))
    m = np.maximum(np.ceil(local / (a + 1) - 1e-9), 1)
    return m, a


class Estimate:
    """What the scheduler believes about a job, from its spec and reports."""

    kind = "reported"

    def __init__(self, job: Job, perf: PerfParams | None, prior: Any = None):
        st = rep.state(job)
        spec = job.spec
        self.perf = perf
        self.st = st
        path = prior is not None and bool(prior.grad_path)  # the family's statistics stand in
        self.adaptive = bool(spec.adaptive_batch) and perf is not None and ("grad" in st or path)
        self.batch = job.batch_size or st.get("batch_size") or spec.batch_size
        bounds = {**(prior.bounds if prior is not None else {}), **st}  # its own first
        self.b0 = bounds.get("init_batch_size") or spec.batch_size or self.batch or 1
        self.bmax = max(bounds.get("max_batch_size") or self.batch or self.b0, self.b0)
        self.lmax = bounds.get("max_local_bsz") or self.bmax
        self.grad = self.own_grad = st.get("grad")  # own_grad: what the job itself reported
        if self.grad is None and path:  # none of its own yet: the family's at this point of a run
            self.grad = rep.nearest(prior.grad_path, rep.path_bin(st.get("progress") or 0.0))
        seen = max(st.get("max_gpus", 0), prior.max_gpus if prior is not None else 0)
        self.measured = seen
        self.max_gpus: int | None = max(spec.requested, int(EXPLORE * seen))
        self.max_micro = EXPLORE * _largest_micro(st, prior)  # `trusted`
        self.progress: float | None = st.get("progress")
        self.prior = prior
        self.key: Any = st.get("version", 0)
        self._goodput: dict[tuple, float] = {}
        self._k: tuple[float | None] | None = None
        self._fix: dict[tuple[int, int], float] | None = None  # `corrections`
        self.path_goodputs: dict[tuple, np.ndarray] = {}  # `deadline.path_times`' cache

    # -- goodput -------------------------------------------------------------------------------
    def goodput_matrix(self, nodes: np.ndarray, gpus: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Goodput (initial-batch samples per second, statistically) of each (nodes, GPUs) row at
        each batch size column."""
        r = gpus[:, None].astype(float)
        b = batch[None, :].astype(float)
        if self.perf is None:  # nothing measured: linear in the GPUs
            return np.broadcast_to(r * 1.0, np.broadcast(r, b).shape).copy()
        m, a = configure(r, b, self.lmax, self.b0)
        t = self.perf.step_time(nodes[:, None], r, m, a)
        fix = self.corrections()
        if fix:
            pairs = zip(nodes.tolist(), gpus.tolist(), strict=True)
            t = t * np.array([fix.get((int(k), int(g)), 1.0) for k, g in pairs])[:, None]
        gain = 1.0 if self.grad is None else efficiency_gain(self.grad[0], self.grad[1], b, self.b0)
        eff_b = self.b0 if self.grad is not None else b
        return eff_b * gain / t

    def corrections(self) -> dict[tuple[int, int], float]:
        """Per (nodes, GPUs) pair that the job or its family ran on: measured over fitted step
        time (geometric mean over its configurations). The fitted model is smooth; a real
        placement's step time is not (a second node, a full node), and where it was measured the
        measurement wins."""
        fix = self._fix
        if fix is None:
            cfgs = dict(self.prior.configs) if self.prior is not None and self.prior.configs else {}
            cfgs.update(rep.configs(self.st, bool(cfgs)))
            logs: dict[tuple[int, int], list[float]] = {}
            keys = [tuple(int(x) for x in key.split(",")) for key in cfgs]
            cols = np.array(keys, dtype=int).reshape(-1, 4).T
            fitted = np.atleast_1d(self.perf.step_time(*cols)).tolist() if keys else []
            for (k, r, _, _), (_, step, _), t in zip(keys, cfgs.values(), fitted, strict=True):
                if step and t > 0:
                    logs.setdefault((k, r), []).append(math.log(step / t))
            fix = self._fix = {kr: math.exp(sum(v) / len(v)) for kr, v in logs.items()}
        return fix

    def candidates(self, r: int) -> np.ndarray:
        lo = max(self.b0, r)
        if not self.adaptive or lo >= self.bmax:
            return np.array([self.batch or self.b0], dtype=float)
        cands = np.unique(np.round(libm.geomspace(lo, self.bmax, BATCH_CANDIDATES)))
        return cands[self.trusted(np.array([r]), cands)[0]]

    def trusted(self, r: np.ndarray, batch: np.ndarray) -> np.ndarray:
        """Which batch sizes (columns) on r GPUs (rows) the fitted step time may be believed at:
        a micro-batch at most `EXPLORE` times the largest one measured (by the job or its
        family), as for GPUs. Beyond the micro-batches measured the fit is a guess: a live job
        timed at micro-batches 8 and 64 was sent to 1024 (two of 512), whose step took 0.115 s
        where the fit said 0.021 s. The smallest candidate is always trusted."""
        if not self.max_micro:
            return np.ones((len(r), len(batch)), dtype=bool)
        m, _ = configure(r[:, None], batch[None, :], self.lmax, self.b0)
        ok = m <= self.max_micro
        ok[:, 0] = True
        return ok

    def goodput(self, shape: tuple[int, ...], batch: int | None = None) -> float:
        key = (shape, batch)
        hit = self._goodput.get(key)
        if hit is None:
            r = sum(shape)
            b = np.array([batch], dtype=float) if batch else self.candidates(r)
            g = self.goodput_matrix(np.array([len(shape)]), np.array([r]), b)[0]
            hit = self._goodput[key] = float(g.max())
        return hit

    def throughput(self, shape: tuple[int, ...], batch: int) -> float:
        """Samples per second on `shape` at global batch `batch` (the fitted step time)."""
        r = float(sum(shape))
        m, a = configure(r, float(batch), self.lmax, self.b0)
        fix = self.corrections().get((len(shape), int(r)), 1.0)
        return batch / (float(self.perf.step_time(len(shape), r, m, a)) * fix)

    def best_batch(self, shape: tuple[int, ...]) -> int | None:
        """The batch size with the most goodput on `shape` (the current one for a fixed-batch job)."""
        if not self.adaptive:
            return self.batch
        r = sum(shape)
        cands = self.candidates(r)
        g = self.goodput_matrix(np.array([len(shape)]), np.array([r]), cands)[0]
        return int(cands[int(np.argmax(g))])

    def curve(self, top: int, per_node: int, efficiency: bool = True) -> list[float]:
        """S[n] for n = 0..top: goodput on n packed GPUs over goodput on one (S[0] = 0); with
        `efficiency=False`, throughput (samples per second at the best batch size): what the
        job's later epochs, whose gradients tolerate larger batches, come close to."""
        if top < 1:
            return [0.0]
        g = self.goodputs(top, per_node, self.grad if efficiency else None)
        return [0.0] + (g / g[0]).tolist()

    def goodputs(self, top: int, per_node: int, grad: tuple[float, float] | None) -> np.ndarray:
        """Goodput on n = 1..top packed GPUs (at the best batch size for an adaptive job), with
        the gradient statistics `grad` in place of the job's latest."""
        own, self.grad = self.grad, grad
        try:
            n = np.arange(1, top + 1)
            nodes = -(-n // per_node)
            if self.adaptive:
                cands = np.unique(np.round(libm.geomspace(self.b0, self.bmax, BATCH_CANDIDATES)))
                g = self.goodput_matrix(nodes, n, cands)
                ok = (cands[None, :] >= n[:, None]) & self.trusted(n, cands)
                return np.where(ok, g, 0.0).max(axis=1)
            return self.goodput_matrix(nodes, n, np.array([self.batch or self.b0], dtype=float))[:, 0]
        finally:
            self.grad = own

    # -- work left -----------------------------------------------------------------------------
    def work_per_progress(self) -> float | None:
        """Goodput-seconds one unit of progress (the whole job) costs, from the spans (None when
        the reports cannot tell)."""
        if self._k is None:
            self._k = (self._work_per_progress(),)
        return self._k[0]

    def _work_per_progress(self) -> float | None:
        spans = self.st.get("spans")
        if not spans:
            return None
        work = done = 0.0
        for key, value in spans.items():
            k, r, dt, dp, b, edt = _span(key, value)
            shape = packed_shape(r, max(-(-r // k), 1))
            if self.perf is None:
                work += dt * r
            elif edt is not None and b and self.grad is not None:  # its efficiency then, not now
                work += edt * self.throughput(shape, b)
            else:
                work += dt * self.goodput(shape, None if self.adaptive else b)
            done += dp
        return work / done if done > 1e-9 else None

    def remaining_work(self) -> float | None:
        """Goodput-seconds of work left (None when the reports cannot tell; none once its
        progress says done, whatever its rate: a job that said so in its first report, and ran on
        to save its model, read `no estimate yet` and had no time left)."""
        if self.progress is not None and self.progress >= 1.0:
            return 0.0
        k = self.work_per_progress() if self.progress is not None else None
        return None if k is None else max(1.0 - self.progress, 0.0) * k

    def total_s1(self) -> float | None:
        """The job's whole work in seconds on one GPU, as far as its progress tells."""
        k = self.work_per_progress()
        g = self.goodput((1,)) if self.perf is not None else 1.0
        return k / g if k is not None and g > 0 else None

    def remaining_s(self, shape: tuple[int, ...]) -> float | None:
        """Seconds left on `shape` (at its best batch size), if the work left is known."""
        w = self.remaining_work()
        if w is None:
            return None
        g = self.goodput(shape) if self.perf is not None else float(sum(shape))
        return w / g if g > 0 else None


def _largest_micro(st: dict[str, Any], prior: Any) -> int:
    """The largest micro-batch the job or its family ran at and timed (0: none)."""
    keys = list(st.get("configs") or {})
    if prior is not None and prior.configs:
        keys += list(prior.configs)
    return max((int(key.split(",")[2]) for key in keys), default=0)


def _span(key: str, value: list) -> tuple[int, int, float, float, int | None, float | None]:
    """(nodes, GPUs, seconds, progress, batch size, seconds x statistical efficiency then) of a
    span: key `k,r`, value `[dt, dp, b, edt]` (older ones: `[dt, dp, b]`, or key `k,r,b` and
    `[dt, dp]`; edt None: judged by today's efficiency)."""
    k, r, *old = key.split(",")
    b = value[2] if len(value) > 2 else (int(old[0]) if old and old[0] != "None" else None)
    edt = float(value[3]) if len(value) > 3 and value[3] is not None else None
    return int(k), int(r), float(value[0]), float(value[1]), b, edt


def estimate(job: Job, now: float, history: Any = None) -> Estimate:
    """The job's current estimate (cached until new reports arrive). With `history`
    (`estimates.predict.History`), the step times that finished jobs of the same family measured
    count too (the job's own first): a re-run starts with a calibrated model."""
    oracle = job.extra.get("_oracle")
    if oracle is not None:
        return oracle(now)
    st = rep.state(job)
    prior = history.prior(job) if history is not None else None
    version = (st.get("version", 0), job.batch_size, prior.version if prior is not None else None)
    slot = "_estimate" if prior is None else "_estimate_prior"  # the job's own view, the scheduler's
    cached = job.extra.get(slot)
    if cached is not None and cached[0] == version:
        return cached[1]
    est = Estimate(job, _perf(job, st, prior, now), prior)
    job.extra[slot] = (version, est)
    return est


def _perf(job: Job, st: dict[str, Any], prior: Any = None, now: float = 0.0) -> PerfParams | None:
    """The throughput model: refitted when the job (or its family) ran on a new (nodes, GPUs)
    pair, when a quarter more configurations were measured, or `REFIT_AFTER` seconds after the
    last fit if anything changed (a fit costs milliseconds; rounds happen every minute)."""
    family = prior is not None and bool(prior.configs)
    cfgs = rep.configs(st, family)
    if family:
        cfgs = {**prior.configs, **cfgs}
    if not cfgs:
        return None
    obs = []
    for key, (_, step, comp) in cfgs.items():
        k, r, m, a = (int(x) for x in key.split(","))
        obs.append((k, r, float(m), a, float(step), comp))
    slot = "_perf" if prior is None or not prior.configs else "_perf_prior"
    cached = job.extra.get(slot)
    if cached is not None:
        old_obs, perf, when = cached
        if old_obs == obs:
            return perf
        pairs = {o[:2] for o in obs}
        if pairs <= {o[:2] for o in old_obs} and len(obs) < 1.25 * len(old_obs) and now - when < REFIT_AFTER:
            return perf
    perf = fit(obs, start=cached[1] if cached is not None else None, batch_fixed=not _batch_grows(job, st))
    job.extra[slot] = (obs, perf, now)
    return perf


def _batch_grows(job: Job, st: dict[str, Any]) -> bool:
    """Whether the job's batch may grow with its GPUs: the spec lets the scheduler pick it
    (`adaptive_batch`), or the job reports a largest batch above its own (an `elastic.Monitor`
    that adapts it itself)."""
    top, batch = st.get("max_batch_size"), st.get("batch_size") or job.spec.batch_size
    return bool(job.spec.adaptive_batch) or (top is not None and batch is not None and top > batch)


def remaining_s1(job: Job, est: Estimate, now: float, predicted: float | None = None) -> float:
    """Seconds the job still needs on one GPU (what the goodput policy weighs jobs by): from its
    progress where it reports one, else `predicted` total (from history) less what it had, else
    what it had plus an hour."""
    left = est.remaining_s((1,))
    if left is not None:
        return left
    had = job.attained(now)
    if predicted is not None and math.isfinite(predicted):
        return max(predicted - had, 0.1 * predicted, 60.0)
    return had + UNKNOWN_WORK_S


#: seconds past its estimated end, with no report since, after which a job's time left is not
#: shown (`summary`): it is stuck, or its reports stopped, and 0 would be a promise that never ends
OVERDUE_S = 60.0
#: a running job that reported at least twice in a run is `silent_s` once its last report (or its
#: start on its GPUs, if later) is this long ago and `SILENT_TIMES` its mean gap between reports
SILENT_S = 180.0
SILENT_TIMES = 10.0


def summary(job: Job, now: float, history: Any = None, capacity: int = 0,
            per_node: int = 1, restart_s: float | None = None) -> dict[str, Any]:
    """`_summary`, less any figure that is not finite (with the basis of a dropped `eta_s`).
    What users see is JSON: a job that reported `progress=1e-320` had `eta_s` infinite, which
    the API wrote as `Infinity` — no JSON parser's number (schemathesis read it as null; the
    sidebar's `JSON.parse` fails on it, and with it the whole job list)."""
    out = _summary(job, now, history, capacity, per_node, restart_s)
    for key, value in list(out.items()):
        if isinstance(value, float) and not math.isfinite(value):
            del out[key]
    if "eta_s" not in out:
        out.pop("eta_basis", None)
    return out


def silent_from(st: dict[str, Any], job: Job) -> float | None:
    """When a running job counts as silent if it reports nothing more: `SILENT_S`, or
    `SILENT_TIMES` times its mean gap between reports where that is longer, after its last report
    (or its start on its GPUs, where that came later: a resized job takes time to report again).
    None for a job that never reported twice in one run: one that does not report is not silent."""
    heard = st.get("heard")
    if not heard or heard[2] < 1:
        return None
    return max(heard[0], job.since) + max(SILENT_S, SILENT_TIMES * heard[3] / heard[2])


def silent_for(st: dict[str, Any], job: Job, now: float) -> float | None:
    """Seconds since a running job's last report (or its start on its GPUs) once it counts as
    silent (`silent_from`); None before, and for a job that never reported twice in one run."""
    at = silent_from(st, job)
    return now - max(st["heard"][0], job.since) if at is not None and now > at else None


def silent(job: Job, now: float) -> bool:
    """Whether the running `job` has stopped reporting (`silent_for`): what the policies do not
    grow."""
    return silent_for(rep.state(job), job, now) is not None


def unreported_s(st: dict[str, Any], job: Job, now: float) -> float:
    """Seconds since the job's last progress report that the estimates count as run at its rate
    (the work it did since, not yet reported) — none once it went silent: the silence says it
    stopped, most likely at that report (seen: a deadline job hung at 30 % read `on track` up to
    its deadline, its estimate counting the work of every second since its last report; a job
    that hangs near its end would have been counted done before it went silent); and none for a
    job that has not reported since it started on its GPUs (`job.since`): a restart's seconds
    are not work (they counted at the new GPUs' speed-up, and the time left jumped back at the
    new run's first report)."""
    last = st.get("last")
    if last is None or last[0] < job.since:  # none of its run on these GPUs until it reports
        return 0.0
    at = silent_from(st, job)
    return 0.0 if at is not None and now > at else max(now - last[0], 0.0)


def _summary(job: Job, now: float, history: Any = None, capacity: int = 0,
             per_node: int = 1, restart_s: float | None = None) -> dict[str, Any]:
    """What users see of a job's estimate: `progress` (0..1) where it reports one, and, while it
    runs, `eta_s` (seconds left on the GPUs it has, counted from its last report; none once that
    is `OVERDUE_S` past with no report since) with
    `eta_basis`: `progress` (its reported progress and rate; after its first report, before
    there is a rate, the pace of its run so far) or `history` (the predicted work of
    similar finished jobs, less its service; none once it has run longer than they took, rather
    than a time left of 0 that never passes); `silent_s` where it stopped reporting while it
    runs (`silent_for`: a hung job, or a long stretch without reports such as an evaluation) —
    and then no `eta_s`: a countdown it does not follow is no time left (seen: a job hung at 30 %
    counted down to `~0s left` with no report for 11 minutes); for a job with a deadline, its status
    (`estimates.deadline.status`, on up to the `capacity` GPUs it may use, a restart priced at
    `restart_s`: the policy's price; `deadline.RESTART_S` if None). Empty when nothing is known."""
    from ..placement import placement_shape

    st = rep.state(job)
    out: dict[str, Any] = {}
    if st.get("progress") is not None:
        out["progress"] = round(float(st["progress"]), 4)
    if job.spec.deadline is not None:
        from .deadline import summary as deadline_summary

        extra = {} if restart_s is None else {"restart_s": restart_s}
        out.update(deadline_summary(job, now, history, capacity, per_node, **extra))
    if not job.alloc or job.state.final:
        return out
    if (quiet := silent_for(st, job, now)) is not None:
        out["silent_s"] = round(quiet)
        return out
    est = estimate(job, now, history)
    shape = placement_shape(job.alloc)
    left = est.remaining_s(shape)
    if left is not None:
        last = st.get("last")
        since = now - last[0] if last is not None and now >= last[0] else 0.0
        if left - since > -OVERDUE_S:  # else past its estimated end and silent since: no time
            out["eta_s"] = round(max(left - since, 0.0), 1)  # left to tell (a job hung at 5 %
            out["eta_basis"] = "progress"  # counted down to `~0s left` and stayed there)
        return out
    predicted = history.predict(job, similar=True) if history is not None else None
    if predicted is not None and (work := predicted - job.attained(now)) > 0:  # past it: no honest
        g1 = est.goodput((1,))  # guess is left
        ratio = est.goodput(shape) / g1 if g1 > 0 else float(sum(shape))
        out["eta_s"], out["eta_basis"] = round(work / max(ratio, 1e-9), 1), "history"
    p, last = st.get("progress"), st.get("last")
    if p is not None and 0 < p < 1 and last is not None:  # one report, no rate yet: at the pace
        t = last[0] if job.since <= last[0] <= now else now  # of its run so far (a job 5 % done
        left = max(job.run_time(t) * (1 - p) / p - (now - t), 0.0)  # after 17 s showed `~3s left?`
        if left > out.get("eta_s", 0.0):  # from a 20-s job's history)
            out["eta_s"], out["eta_basis"] = round(left, 1), "progress"
    return out
