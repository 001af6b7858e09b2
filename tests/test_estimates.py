"""The estimator (`schedulearn.estimates`): the throughput fit, the exploration cap, statistical
efficiency and the best batch size, the work left from reported progress, the run-time
predictor, and the history of job families."""

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from schedulearn.estimates import (
    PerfParams,
    deadline_summary,
    estimate,
    fit,
    ingest,
    load_reports,
    packed_shape,
    refresh,
    summary,
)
from schedulearn.estimates.job import efficiency_gain, remaining_s1
from schedulearn.estimates.predict import History, MeanOfSimilar, Predictor, family, features, mdape
from schedulearn.estimates.reports import progress_of
from schedulearn.model import Job, JobSpec, JobState
from schedulearn.store.sql import persisted_extra

TRUE = PerfParams(alpha_c=0.02, beta_c=0.004, alpha_n=0.08, beta_n=0.01, alpha_r=0.02, beta_r=0.002,
                  gamma=1.5)


def _obs(k, r, m, a=0, perf=TRUE):
    step = float(perf.step_time(k, r, m, a))
    return (k, r, float(m), a, step, float(perf.compute_time(m)))


def _job(**kw) -> Job:
    spec = {"command": ["train"], "gpus": "auto", "max_gpus": 64, **kw}
    return Job(id=1, spec=JobSpec(**spec), submit_time=0.0)


def _report(t, n, batch, *, perf=TRUE, nodes=None, restart=0, **extra):
    """What a job on n packed GPUs (4 a node) measures at global batch `batch` under `perf`."""
    shape = packed_shape(n, 4)
    k = nodes or len(shape)
    m = math.ceil(batch / n)
    return {"t": t, "num_gpus": n, "num_nodes": k, "batch_size": batch, "restart": restart,
            "step_time": float(perf.step_time(k, n, m)), "compute_time": float(perf.compute_time(m)), **extra}


# -- the throughput model --------------------------------------------------------------------------
def test_fit_matches_what_it_saw_and_extrapolates_optimistically():
    """Pollux's regularisers prefer small retrogression terms: beyond the data the model errs on
    the fast side (the exploration cap bounds how far that is believed)."""
    seen = [_obs(1, 1, m) for m in (16, 64)] + [_obs(1, r, 32) for r in (2, 3, 4)] + \
           [_obs(k, 4 * k, 32) for k in (2, 3)]
    perf = fit(seen)
    for k, r, m, a, step, _ in seen:
        assert float(perf.step_time(k, r, m, a)) == pytest.approx(step, rel=0.03)
    for k, r, m in ((1, 4, 128), (4, 16, 16), (8, 32, 32), (2, 6, 8)):
        ratio = float(perf.step_time(k, r, m)) / float(TRUE.step_time(k, r, m))
        assert 0.8 < ratio < 1.03, (k, r, m, ratio)


def test_fit_priors_where_the_data_cannot_tell():
    one_gpu = fit([_obs(1, 1, 32)])
    # one GPU, one micro-batch size: synchronisation unknown (speed-up linear: optimistic), the
    # compute time split evenly between its constant and per-sample parts
    assert one_gpu.alpha_c == pytest.approx(one_gpu.beta_c * 32, rel=1e-6)
    t1 = float(one_gpu.step_time(1, 1, 32))
    assert float(one_gpu.step_time(1, 2, 16)) < t1  # two GPUs share the batch, nothing to sync
    on_node = fit([_obs(1, 1, 32), _obs(1, 2, 16), _obs(1, 4, 8)])
    # never crossed nodes: the network is assumed at least 1.1x as slow as the node
    assert on_node.alpha_n >= 1.1 * on_node.alpha_r - 1e-12
    assert on_node.beta_n >= 1.1 * on_node.beta_r - 1e-12
    assert fit([]) is None


def test_one_gpu_of_a_fixed_batch_job_extrapolates_to_a_linear_speed_up():
    """A job whose batch does not grow with its GPUs only splits it: with one micro-batch size
    seen, the prior takes all its compute time per sample (optimistic, as the unknown
    synchronisation is), not half of it constant — which valued a second GPU at 1.33x, so a
    fixed-batch job alone on idle GPUs was never grown to measure it (seen live)."""
    fixed = fit([_obs(1, 1, 32)], batch_fixed=True)
    t1 = float(fixed.step_time(1, 1, 32))
    assert float(fixed.step_time(1, 2, 16)) == pytest.approx(t1 / 2, rel=1e-4)
    assert float(fixed.step_time(1, 4, 8)) == pytest.approx(t1 / 4, rel=1e-4)
    growing = fit([_obs(1, 1, 32)])  # a batch that grows: Pollux's even split, as before
    assert float(growing.step_time(1, 2, 16)) == pytest.approx(0.75 * t1, rel=1e-4)
    # the estimate picks the prior by the spec: a fixed batch doubles on two GPUs (the cap: 2)
    for adaptive, s2 in ((False, 2.0), (True, 4 / 3)):
        job = _job(batch_size=256, adaptive_batch=adaptive)
        ingest(job, [_report(t, 1, 256) for t in range(1, 12)])
        est = estimate(job, 12.0)
        assert est.max_gpus == 2 and est.curve(2, 4)[2] == pytest.approx(s2, rel=0.02), adaptive
    # a job that adapts its own batch (elastic.Monitor) says so by its largest batch
    own = _job(batch_size=256)
    ingest(own, [_report(t, 1, 256, max_batch_size=1024) for t in range(1, 12)])
    assert estimate(own, 12.0).curve(2, 4)[2] == pytest.approx(4 / 3, rel=0.02)
    # two micro-batch sizes seen: the data decide, whatever the prior
    two = [_obs(1, 1, 32), _obs(1, 2, 16)]
    assert fit(two, batch_fixed=True).step_time(1, 4, 8) == pytest.approx(
        float(fit(two).step_time(1, 4, 8)), rel=0.02)


# -- the exploration cap ---------------------------------------------------------------------------
def test_cap_is_twice_the_most_gpus_measured_or_what_the_spec_asks():
    job = _job(batch_size=64)
    assert estimate(job, 0.0).max_gpus == 1  # nothing measured: its minimum
    ingest(job, [_report(10, 1, 64)])
    assert estimate(job, 10.0).max_gpus == 2
    ingest(job, [_report(20, 2, 64), _report(30, 4, 64)])
    assert estimate(job, 30.0).max_gpus == 8
    asked = _job(gpus=6, max_gpus=32, batch_size=64)
    assert estimate(asked, 0.0).max_gpus == 6  # the user's own count is trusted from the start


def test_curve_follows_the_fitted_model_and_is_linear_with_nothing_measured():
    job = _job(batch_size=256)
    assert estimate(job, 0.0).curve(4, 4) == [0.0, 1.0, 2.0, 3.0, 4.0]
    ingest(job, [_report(i, n, 256) for i, n in enumerate((1, 2, 4, 8, 16))])
    s = estimate(job, 20.0).curve(16, 4)
    for n in (2, 4, 8, 16):
        shape = packed_shape(n, 4)
        truth = TRUE.step_time(1, 1, 256) / TRUE.step_time(len(shape), n, math.ceil(256 / n))
        assert s[n] == pytest.approx(float(truth), rel=0.05), n


def test_a_report_counts_for_the_seconds_it_covers_and_a_new_placement_settles_first():
    """A job reporting every step is smoothed over as many seconds as one reporting every 10 s
    (`elastic.Monitor`), not over its last three steps; and a placement it measured for less
    than `SETTLE_S` seconds is not believed over its other measurements (while it has none, it
    is: a job's first seconds)."""
    from schedulearn.estimates.reports import SETTLE_S, SMOOTHING, state

    def step_time(job):
        return state(job)["configs"]["1,1,64,0"][1]

    each = _job(batch_size=64)
    ingest(each, [{"t": 0.2 * i, "step_time": 0.2, "batch_size": 64} for i in range(1, 301)])
    ingest(each, [{"t": 60.0 + 0.4 * i, "step_time": 0.4, "batch_size": 64} for i in range(1, 4)])
    assert step_time(each) == pytest.approx(0.2, rel=0.06)  # three slow steps: +4 %, not +66 %
    tens = _job(batch_size=64)
    ingest(tens, [{"t": 10.0 * i, "step_time": 0.2, "batch_size": 64} for i in range(1, 7)])
    ingest(tens, [{"t": 70.0, "step_time": 0.4, "batch_size": 64}])
    assert step_time(tens) == pytest.approx(0.2 + SMOOTHING * 0.2)  # a 10-s report: as before

    job = _job(batch_size=256)
    ingest(job, [_report(t, 1, 256) for t in range(1, 62)])
    before = estimate(job, 61.0).curve(2, 4)  # 1 GPU measured: 2 extrapolated
    slow = {**_report(0, 1, 256), "num_gpus": 2}  # its first steps on 2 GPUs: no faster yet
    ingest(job, [{**slow, "t": 61.0 + 0.5 * i} for i in range(1, 10)])
    assert estimate(job, 66.0).curve(2, 4) == before
    ingest(job, [_report(66.0 + i, 2, 256) for i in range(1, int(SETTLE_S) + 2)])
    assert estimate(job, 88.0).curve(2, 4)[2] != before[2]  # measured long enough: believed
    ingest(job, [_report(88.0 + i, 2, 256) for i in range(1, 91)])
    truth = TRUE.step_time(1, 1, 256) / TRUE.step_time(1, 2, 128)
    assert estimate(job, 178.0).curve(2, 4)[2] == pytest.approx(float(truth), rel=0.1)


def test_a_job_that_reports_only_progress_is_trusted_up_to_twice_the_gpus_it_ran_on():
    """`elastic.report(progress=...)` alone (no step times) still measures the job's rate on its
    GPUs: the exploration cap counts them (before: its request, 1, whatever it ran on)."""
    job = _job()
    ingest(job, [{"t": 10.0 + i, "num_gpus": 2, "progress": 0.01 * i} for i in range(5)])
    est = estimate(job, 15.0)
    assert est.perf is None and est.progress == pytest.approx(0.04)
    assert est.max_gpus == 4


def test_a_family_learns_only_the_placements_its_jobs_believed():
    """A finished job's placement run on for under `SETTLE_S` (a resize undone seconds later: a
    worker's warm-up) is not its family's measurement, as it was not its own; one run on long
    enough is."""
    from schedulearn.estimates.reports import SETTLE_S

    spec = JobSpec(name="nb.ipynb:4", command=["python", "train.py"], batch_size=256)

    def family_after(seconds_on_2):
        done = Job(id=1, spec=spec, submit_time=0.0, state=JobState.succeeded, attained_base=100.0)
        ingest(done, [_report(t, 1, 256) for t in range(1, 62)])
        slow = {**_report(0, 1, 256), "num_gpus": 2, "step_time": 3 * TRUE.step_time(1, 2, 128)}
        ingest(done, [{**slow, "t": 61.0 + i} for i in range(1, seconds_on_2 + 1)])
        h = History()
        h.add(done)
        return h.prior(Job(id=2, spec=spec, submit_time=200.0)).configs

    brief = family_after(int(SETTLE_S) // 4)
    assert sorted(brief) == ["1,1,256,0"]  # before: the warm-up's step time on 2 GPUs too
    assert sorted(family_after(int(SETTLE_S) + 5)) == ["1,1,256,0", "1,2,128,0"]


# -- statistical efficiency and the batch size ------------------------------------------------------
def test_efficiency_gain_is_pollux_formula():
    assert float(efficiency_gain(1.0, 0.0, 512, 128)) == pytest.approx(1.0)  # no noise: no gain
    assert float(efficiency_gain(0.0, 1.0, 512, 128)) == pytest.approx(4.0)  # pure noise: linear
    assert float(efficiency_gain(1.0, 1.0, 256, 128)) == pytest.approx(2 / 1.5)


def test_best_batch_follows_the_gradient_noise():
    def best(sqr, var, batches=(64, 64, 64)):
        job = _job(batch_size=64, adaptive_batch=True)
        recs = [_report(i, n, b, grad_sqr=sqr, grad_var=var, init_batch_size=64, max_batch_size=4096)
                for i, (n, b) in enumerate(zip((1, 2, 4), batches, strict=True))]
        ingest(job, recs)
        return estimate(job, 10.0).best_batch((4,))

    # noisy gradients: large batches lose little efficiency — as large as is trusted
    assert best(1e-3, 10.0, (64, 64, 4096)) > 2000
    assert best(10.0, 1e-3, (64, 64, 4096)) < 200  # a clean gradient: every extra sample is wasted
    fixed = _job(batch_size=64)  # not adaptive: its own batch size
    ingest(fixed, [_report(0, 1, 64, grad_sqr=1e-3, grad_var=10.0)])
    assert estimate(fixed, 1.0).best_batch((4,)) == 64


def test_a_batch_is_trusted_up_to_twice_the_largest_micro_batch_measured():
    """Beyond the micro-batches measured the fitted step time is a guess (a live job timed at
    micro-batches 8 and 64 went to 1024 at its second choice): an adaptive batch grows by doubling its
    micro-batch, as a job's GPUs do, however cheap the fit says a larger one is."""
    job = _job(batch_size=64, adaptive_batch=True)
    slow = PerfParams(alpha_c=0.5, beta_c=0.001, alpha_n=0.08, beta_n=0.01, alpha_r=0.02, beta_r=0.002,
                      gamma=1.5)  # a large cost per step: the larger the batch, the better
    grad = {"grad_sqr": 1e-3, "grad_var": 10.0, "init_batch_size": 64, "max_batch_size": 4096, "perf": slow}
    ingest(job, [_report(1, 1, 64, **grad), _report(2, 2, 64, **grad)])  # micro-batches 64, 32
    est = estimate(job, 2.0)
    # at most 128 a micro-batch: on one GPU two of them (the noise estimate's), on two one each
    assert 240 < est.best_batch((1,)) <= 256 and 240 < est.best_batch((2,)) <= 256
    assert est.curve(2, 4)[2] == pytest.approx(est.goodput((2,)) / est.goodput((1,)))
    ingest(job, [_report(3, 1, 256, accum_steps=1, **grad)])  # measured at 128 a micro-batch
    est = estimate(job, 3.0)
    assert 480 < est.best_batch((1,)) <= 512
    family = Job(id=2, spec=job.spec, submit_time=0.0, state=JobState.succeeded, attained_base=90.0)
    ingest(family, [_report(t, 1, 4096, accum_steps=1, **grad) for t in range(1, 12)])
    h = History()  # a finished run of the family counts too
    h.add(family)
    fresh = _job(batch_size=64, adaptive_batch=True)
    ingest(fresh, [_report(21, 1, 64, **grad)])
    assert estimate(fresh, 21.0, h).best_batch((1,)) > 2000
    assert estimate(fresh, 21.0).best_batch((1,)) <= 256


# -- progress and the work left --------------------------------------------------------------------
def test_progress_from_fraction_epochs_or_steps():
    assert progress_of({"progress": 0.25}) == 0.25
    assert progress_of({"epoch": 3}, epochs=12) == 0.25
    assert progress_of({"epoch": 3, "epochs": 6}) == 0.5
    assert progress_of({"step": 50, "total_steps": 200}) == 0.25
    assert progress_of({"progress": 1.7}) == 1.0
    assert progress_of({"epoch": 3}) is None and progress_of({"progress": "x"}) is None


def test_work_left_from_progress_and_the_observed_rate():
    job = _job(batch_size=128)
    rate = 1 / 2000  # of the job per second, on 2 GPUs
    ingest(job, [_report(t, 2, 128, progress=t * rate) for t in (100, 400, 700, 1000)])
    est = estimate(job, 1000.0)
    assert est.progress == pytest.approx(1000 * rate)
    left = (1 - 1000 * rate) / rate
    assert est.remaining_s((2,)) == pytest.approx(left, rel=1e-6)
    # elsewhere, through the fitted model: on 1 GPU by the ratio of goodputs
    ratio = est.goodput((2,)) / est.goodput((1,))
    assert est.remaining_s((1,)) == pytest.approx(left * ratio, rel=1e-6)
    assert est.total_s1() == pytest.approx(2000 * ratio, rel=1e-6)
    # what users see, counted from the last report (one every 5 minutes: not silent within the
    # hour); past its end and silent since (a job hung after it, seen live at 5 %, showed `~0s
    # left` for good): nothing to tell
    job.state, job.alloc, job.since = JobState.running, {"n": (0, 1)}, 100.0
    assert summary(job, 1000.0 + left - 10)["eta_s"] == pytest.approx(10.0, abs=0.1)
    assert summary(job, 1000.0 + left + 30)["eta_s"] == 0.0
    out = summary(job, 1000.0 + left + 61)
    assert "eta_s" not in out and "eta_basis" not in out and out["progress"] == pytest.approx(0.5)


def test_a_job_that_stops_reporting_is_shown_silent():
    """A running job that reported every 10 s and then nothing (hung in a collective, or in a
    long evaluation) says how long it has been silent, once that is past 3 minutes and ten times
    its gap between reports; counted from its start on its GPUs where that came later; a job that
    never reported twice in one run is not silent, nor one that has ended."""
    from schedulearn.estimates.job import SILENT_S

    job = _job(batch_size=128)
    ingest(job, [_report(t, 2, 128, progress=t / 10_000) for t in (100, 110, 120, 130)])
    job.state, job.alloc, job.since = JobState.running, {"n": (0, 1)}, 90.0
    assert "silent_s" not in summary(job, 130 + SILENT_S)
    assert summary(job, 130 + SILENT_S + 1)["silent_s"] == SILENT_S + 1
    job.since = 200.0  # restarted on other GPUs at 200: silent from then
    assert "silent_s" not in summary(job, 130 + SILENT_S + 1)
    assert summary(job, 200 + SILENT_S + 5)["silent_s"] == SILENT_S + 5
    job.state = JobState.succeeded
    assert "silent_s" not in summary(job, 10_000)

    slow = _job(batch_size=128)  # one report every 5 minutes: silent past 10 of its gaps
    ingest(slow, [_report(t, 2, 128, progress=t / 100_000) for t in (0, 300, 600)])
    slow.state, slow.alloc, slow.since = JobState.running, {"n": (0, 1)}, 0.0
    assert "silent_s" not in summary(slow, 600 + 2999)
    assert summary(slow, 600 + 3001)["silent_s"] == 3001

    once = _job(batch_size=128)  # one report per run (the gap spans a restart): never silent
    ingest(once, [_report(0, 2, 128, progress=0.1), _report(500, 2, 128, progress=0.2, restart=1)])
    once.state, once.alloc, once.since = JobState.running, {"n": (0, 1)}, 400.0
    assert "silent_s" not in summary(once, 10_000)
    assert "silent_s" not in summary(_job(batch_size=128), 10_000)


def test_a_silent_job_is_not_counted_as_working_on():
    """Seen: a deadline job hung at 30 % read `on track` up to its deadline, and its time left
    counted down to `~0s`: the estimates counted every second since its last report as work done
    at its rate. They still do between reports, but not once the job went silent (`SILENT_S`
    after its last report, here; ten times its gap between reports where that is longer): its
    time left is then what it would need were it to resume now, its deadline status follows the
    time running out, it shows no time left; a report brings it back. A job that hangs near its
    end (less work left than the silence takes to show) no longer counts as done for good."""
    from schedulearn.estimates.deadline import times_left, work_left_s1
    from schedulearn.estimates.job import SILENT_S

    # 1 % of its work every 10 s on 1 GPU (1,000 s in all), due at 2,000 s; hung at 30 % (300 s)
    job = _job(batch_size=128, deadline=2000.0)
    ingest(job, [_report(t, 1, 128, progress=t / 1000) for t in range(0, 310, 10)])
    job.state, job.alloc, job.since = JobState.running, {"n": (0,)}, 0.0

    def left(now):
        return work_left_s1(job, estimate(job, now), now)

    assert left(300.0) == pytest.approx(700.0, rel=1e-3)
    assert left(400.0) == pytest.approx(600.0, rel=1e-3)  # not silent yet: 100 s more of work
    at = 300.0 + SILENT_S  # silent from then: none of it counted, however long it stays
    assert left(at) == pytest.approx(700.0 - SILENT_S, rel=1e-3)
    assert left(at + 1) == left(at + 1000) == pytest.approx(700.0, rel=1e-3)
    late = at + 1000
    assert times_left(job, estimate(job, late), 1, 4, late)[1] == pytest.approx(700.0, rel=1e-3)
    status = {now: summary(job, now, None, 4, 4) for now in (310, 1200, 1500, 1900)}
    assert status[310]["deadline_status"] == "on_track" and status[310]["eta_s"] == 690.0
    assert status[1200]["deadline_status"] == "on_track"  # 700 s would still make it, resumed now
    assert status[1500]["deadline_status"] == "at_risk"  # now only on more GPUs
    assert status[1900]["deadline_status"] == "will_miss"  # before: `on_track`, 70 % left
    assert all("eta_s" not in status[t] and status[t]["silent_s"] == t - 300 for t in (1200, 1500, 1900))
    ingest(job, [_report(1500, 1, 128, progress=0.31)])  # it reports again (its rate now counts
    assert left(1500.0) - left(1510.0) == pytest.approx(10.0, rel=1e-3)  # the hang): counted on
    assert summary(job, 1510.0, None, 4, 4)["eta_s"] == pytest.approx(left(1510.0), abs=0.1)

    near = _job(batch_size=128, deadline=2000.0)  # hung at 95 %: 50 s left, counted done after
    ingest(near, [_report(t, 1, 128, progress=t / 1000) for t in range(0, 960, 10)])  # 50 s,
    near.state, near.alloc, near.since = JobState.running, {"n": (0,)}, 0.0  # until it went silent
    assert summary(near, 1100.0, None, 4, 4)["deadline_status"] == "on_track"
    assert work_left_s1(near, estimate(near, 1100.0), 1100.0) == 0.0
    assert work_left_s1(near, estimate(near, 1960.0), 1960.0) == pytest.approx(50.0, rel=1e-3)
    assert summary(near, 1930.0, None, 4, 4)["deadline_status"] == "on_track"  # 50 s, resumed now
    assert summary(near, 1960.0, None, 4, 4)["deadline_status"] == "will_miss"  # 55 s on 2 GPUs


def test_a_restarting_job_is_not_counted_as_working_before_it_reports():
    """Between two reports the estimates count the seconds since the last one as work at the
    job's speed-up on its GPUs — but not for a job that has not reported since it started on
    them: a restart's seconds are not work (they read as twice as fast on twice the GPUs, and
    the time left fell during a restart and jumped back at the first report)."""
    from schedulearn.estimates.deadline import work_left_s1

    job = _job(batch_size=128, deadline=2000.0)
    ingest(job, [_report(t, 1, 128, progress=t / 1000) for t in range(0, 310, 10)])  # 30 % at 300
    job.state, job.alloc, job.since = JobState.running, {"n": (0,)}, 0.0
    assert work_left_s1(job, estimate(job, 305.0), 305.0) == pytest.approx(695.0, rel=1e-3)
    job.set_alloc({"n": (0, 1)}, 305.0)  # restarted on 2 GPUs at 305 s
    for now in (305.0, 315.0, 330.0):
        assert work_left_s1(job, estimate(job, now), now) == pytest.approx(700.0, rel=1e-3)
    ingest(job, [_report(320, 2, 128, progress=0.31, restart=1)])  # its first report there
    later = work_left_s1(job, estimate(job, 330.0), 330.0)
    assert later < work_left_s1(job, estimate(job, 320.0), 320.0)  # counted on from it


def test_progress_across_a_restart_is_not_a_rate():
    """The seconds between the last report of one run and the first of the next include the
    restart: they are not counted."""
    job = _job(batch_size=128)
    ingest(job, [_report(0, 1, 128, progress=0.0), _report(60, 1, 128, progress=0.06),
                 _report(300, 2, 128, progress=0.07, restart=1)])
    (span,) = job.extra["reports"]["spans"].values()
    # seconds, progress, the batch size last used, seconds x statistical efficiency (1: no statistics)
    assert span == pytest.approx([60.0, 0.06, 128, 60.0])


def test_past_progress_is_judged_at_the_efficiency_of_its_time():
    """A job whose gradient noise grows as it trains makes more progress per sample later: the
    work its past progress cost is counted at the statistical efficiency it had then (the
    statistics of each report), not at today's, which would count more work than it did."""
    job = _job(batch_size=512)
    thr = 512 / float(TRUE.step_time(1, 2, 256))  # samples per second on 2 GPUs
    work = 1e6  # the whole job, in goodput-seconds (initial-batch samples)
    p, recs = 0.0, []
    for i in range(21):  # a report a minute; the statistics are those of the minute before it
        var = 1.0 if i <= 10 else 20.0
        if i:
            p += 60 * thr * (var + 1.0) / (var + 4.0) / work  # efficiency at 4x the initial batch
        recs.append(_report(60.0 * i, 2, 512, progress=p, init_batch_size=128, grad_sqr=1.0, grad_var=var))
    ingest(job, recs)
    est = estimate(job, 1200.0)
    assert est.remaining_work() == pytest.approx((1 - p) * work, rel=0.03)
    # judged by today's efficiency (0.875 against 0.4 in the first ten minutes): far more
    (span,) = job.extra["reports"]["spans"].values()
    today = span[0] * est.goodput((2,)) / span[1]
    assert today > 1.15 * work


def test_expected_speedup_lies_between_todays_and_throughputs_early_and_is_todays_late():
    from schedulearn.estimates.deadline import EFFICIENCY_GROWTH, expected_curve

    job = _job(batch_size=128, adaptive_batch=True)
    runs = [(0, 1), (60, 1), (120, 2), (180, 2)]
    ingest(job, [_report(t, n, 128, init_batch_size=128, max_batch_size=4096, grad_sqr=1.0, grad_var=0.5,
                         progress=0.01 * i) for i, (t, n) in enumerate(runs)])
    est = estimate(job, 180.0)
    today, hope, mid = est.curve(8, 4), est.curve(8, 4, False), expected_curve(est, 8, 4)
    assert today[8] < mid[8] < hope[8]
    w = EFFICIENCY_GROWTH - est.progress
    assert mid[8] == pytest.approx(today[8] ** (1 - w) * hope[8] ** w)
    est.progress = EFFICIENCY_GROWTH
    assert expected_curve(est, 8, 4) == today


def test_work_left_without_progress_comes_from_history_or_service():
    job = _job(batch_size=128)
    job.state, job.alloc, job.since = JobState.running, {"n": (0, 1)}, 0.0
    est = estimate(job, 100.0)
    assert est.remaining_s((1,)) is None
    assert remaining_s1(job, est, 100.0) == pytest.approx(200 + 3600)  # attained 200 GPU-s, + 1 h
    assert remaining_s1(job, est, 100.0, predicted=5000) == pytest.approx(4800)



def test_time_left_from_history_ends_when_the_job_outlives_the_prediction():
    """A job that reports no progress is given the predicted work of similar jobs less its
    service; once it has run longer than they took there is no time left to tell (it showed
    `~0s left?` for the rest of its run)."""
    class Similar(History):
        def predict(self, job, similar=False):
            return 300.0

    job = _job(gpus=1)
    job.state, job.alloc, job.since = JobState.running, {"n": (0,)}, 0.0
    early = summary(job, 100.0, Similar())
    assert early["eta_basis"] == "history" and early["eta_s"] == pytest.approx(200.0)
    assert "eta_s" not in summary(job, 300.0, Similar())
    assert "eta_s" not in summary(job, 1000.0, Similar())


def test_the_runs_of_a_cell_or_a_command_are_one_job_to_the_history():
    """A notebook cell's runs are named `nb[3]`, `nb[9]`... (In [N]); what makes them one job is
    the cell (`JobSpec.cell`), and a command run again without a name is its command. One earlier
    run is the prediction there; what a user reads comes only from such similar jobs — not from
    their other jobs, whose guess still guides a policy."""
    ids = itertools.count(1)  # (the history's cache goes by job id, unique as in the engine)

    def done(spec, work):
        return Job(id=next(ids), spec=spec, submit_time=0.0, state=JobState.succeeded, attained_base=work)

    def job(**kw):
        return Job(id=next(ids), spec=JobSpec(user="ana", **kw), submit_time=0.0)

    h = History()
    run1 = JobSpec(user="ana", name="nb[3]", cell="nb.ipynb#c1", script="train()")
    h.add(done(run1, 600.0))
    h.add(done(JobSpec(user="ana", command=["python", "prep.py"]), 40.0))
    rerun = job(name="nb[9]", cell="nb.ipynb#c1", script="train(epochs=2)")
    assert features(rerun)["name"] == "nb.ipynb#c1" and "command" not in features(rerun)  # a script
    assert family(rerun) == family(Job(id=1, spec=run1, submit_time=0.0))
    assert h.predict(rerun) == h.predict(rerun, similar=True) == pytest.approx(600.0)
    new_cell = job(name="nb[10]", cell="nb.ipynb#c2", script="other()")
    assert h.predict(new_cell) is not None  # the user's jobs: a policy's guess
    assert h.predict(new_cell, similar=True) is None  # not what a user reads as their job's time
    again = job(command=["python", "prep.py", "--fast"])  # no name: its command says what it is
    assert h.predict(again, similar=True) == pytest.approx(40.0)
    assert family(rerun) != family(new_cell)
    with pytest.raises(ValueError, match="control characters"):
        JobSpec.model_validate({"script": "x", "cell": "nb#\x1b[2J"}, context={"boundary": True})


def test_what_users_see_of_an_estimate_is_always_finite_json():
    """A job that reports a progress of 1e-320 (a fraction of no use, but a number in 0..1) had
    an infinite time left, which the API wrote as `Infinity`: not JSON (the sidebar's parse of
    the whole job list fails on it; schemathesis caught it). What is not finite is not shown."""
    for reports in ([{"t": 17.0, "progress": 5e-324}],
                    [{"t": 17.0, "progress": 1e-320}, {"t": 18.0, "progress": 2e-320}]):
        job = Job(id=1, spec=JobSpec(command=["train"], gpus=1), submit_time=0.0)
        job.state, job.alloc, job.since = JobState.running, {"n": (0,)}, 0.0
        ingest(job, reports)
        out = summary(job, 20.0)
        assert "eta_s" not in out and "eta_basis" not in out, out
        json.dumps(out, allow_nan=False)
    # nor does history's median of two huge run times overflow to an infinite prediction
    pred = Predictor()
    for value in (1e200, 1e300):
        pred.add({"user": "u"}, value)
    assert pred.predict({"user": "u"}) == pytest.approx(1e250)


def test_after_its_first_progress_report_the_time_left_follows_the_pace_of_its_run():
    """One report gives progress but no rate yet. A job 5 % done after 17 s (a 300-s run) showed
    `~3s left?` from a similar 20-s job's history; it now shows what its pace so far says."""
    class Similar(History):
        def predict(self, job, similar=False):
            return 20.0

    job = Job(id=1, spec=JobSpec(command=["train"], gpus=1), submit_time=0.0)
    job.state, job.alloc, job.since = JobState.running, {"n": (0,)}, 0.0
    assert summary(job, 17.0, Similar())["eta_basis"] == "history"  # no report yet: the guess
    ingest(job, [{"t": 17.0, "progress": 0.05}])
    out = summary(job, 20.0, Similar())
    assert out["eta_basis"] == "progress" and out["eta_s"] == pytest.approx(17 * 19 - 3)
    assert summary(job, 20.0)["eta_s"] == pytest.approx(17 * 19 - 3)  # with no history too
    class Longer(History):
        def predict(self, job, similar=False):
            return 1000.0  # similar jobs say more: the guess stands

    assert summary(job, 20.0, Longer()) == {"progress": 0.05, "eta_s": 980.0, "eta_basis": "history"}
    assert "eta_s" not in summary(job, 400.0)  # past what its pace said: no time left to tell
    ingest(job, [{"t": 37.0, "progress": 0.1}])  # a second report: a rate
    assert summary(job, 37.0, Similar())["eta_s"] == pytest.approx(0.9 / (0.05 / 20), rel=0.01)


def test_a_job_whose_progress_says_done_has_no_time_left_and_is_on_track():
    """Seen live: a job whose first progress report said done (`report(progress=2)`, read as 1)
    and ran on (saving its model) read `no estimate yet`, with no time left: one report has no
    rate, and the work left was taken as unknown where (1 - progress) makes it nothing."""
    job = Job(id=1, spec=JobSpec(command=["train"], gpus=1, deadline=600.0), submit_time=0.0)
    job.state, job.alloc, job.since = JobState.running, {"n": (0,)}, 0.0
    ingest(job, [{"t": 17.0, "progress": 1.0}])
    out = summary(job, 20.0, None, 4)
    assert out["progress"] == 1.0 and out["eta_s"] == 0.0 and out["deadline_status"] == "on_track", out


# -- reports, live -----------------------------------------------------------------------------------
def test_reports_from_metrics_jsonl_fold_incrementally(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps(_report(1, 1, 64)), "not json", json.dumps({"t": 2, "loss": 1.0}), "[1, 2]"]
    path.write_text("\n".join(lines) + "\n")
    assert [r["t"] for r in load_reports(path)] == [1, 2]
    job = _job(batch_size=64)
    assert refresh(job, path) and not refresh(job, path)  # unchanged: nothing new
    assert job.extra["reports"]["max_gpus"] == 1
    with path.open("a") as f:
        f.write(json.dumps(_report(3, 2, 64)) + "\n")
    assert refresh(job, path)
    assert job.extra["reports"]["max_gpus"] == 2 and job.extra["reports_read"] == 3
    assert load_reports(tmp_path / "missing.jsonl") == []


def test_reports_are_read_from_where_the_last_read_ended(tmp_path):
    """Each refresh reads only the bytes appended since the last one (a job reporting every step
    writes 10^5 lines in hours: read whole each round, that was 0.4 s per job). Bytes already
    read are not read again, a line still being written waits for its newline, and another file
    at the path is read from its start."""
    path = tmp_path / "metrics.jsonl"
    first = json.dumps(_report(1, 1, 64, progress=0.1)) + "\n"
    path.write_text(first + json.dumps(_report(2, 1, 64, progress=0.2)) + "\n")
    job = _job(batch_size=64)
    assert refresh(job, path)
    assert job.extra["reports_read"] == 2 and job.extra["reports_offset"] == path.stat().st_size
    version = job.extra["reports"]["version"]
    with path.open("r+") as f:  # what was read is not read again: spoiling it changes nothing
        f.write("x" * (len(first) - 1))
    partial = json.dumps(_report(3, 2, 64, progress=0.3))
    with path.open("a") as f:
        f.write(partial[:20])
    assert not refresh(job, path)  # half a line: nothing yet
    assert job.extra["reports"]["version"] == version and job.extra["reports_read"] == 2
    with path.open("a") as f:
        f.write(partial[20:] + "\n")
    assert refresh(job, path)
    st = job.extra["reports"]
    assert st["version"] == version + 1 and job.extra["reports_read"] == 3
    assert st["progress"] == pytest.approx(0.3) and st["max_gpus"] == 2
    assert job.extra["reports_offset"] == path.stat().st_size

    other = tmp_path / "other.jsonl"  # the job's directory reset: a new, shorter file
    other.write_text(json.dumps(_report(4, 1, 64, progress=0.05)) + "\n")
    other.replace(path)
    assert refresh(job, path)
    assert job.extra["reports_read"] == 1 and job.extra["reports"]["progress"] == pytest.approx(0.05)


def test_a_huge_metrics_file_is_read_a_bounded_chunk_at_a_time(tmp_path, monkeypatch):
    """A job that writes far more than a round's reports (or one endless line) must not make the
    server read it all into memory at once: each refresh reads at most `READ_AT_MOST` bytes and
    the next goes on; a line longer than that is skipped whole, and the reports after it count."""
    from schedulearn.estimates import reports

    monkeypatch.setattr(reports, "READ_AT_MOST", 4096)
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps(_report(t, 1, 64, progress=t / 1000)) + "\n" for t in range(1, 101)]
    junk = json.dumps({"t": 101, "blob": "x" * 10_000}) + "\n"  # one line over the bound
    after = json.dumps(_report(102, 2, 64, progress=0.5)) + "\n"
    path.write_text("".join(lines) + junk + after)
    assert path.stat().st_size > 4 * 4096
    reads, seen = [], []
    real = reports.nofollow.read_bytes

    def counting(*args, **kw):
        data = real(*args, **kw)
        reads.append(len(data))
        return data

    monkeypatch.setattr(reports.nofollow, "read_bytes", counting)
    job = _job(batch_size=64)
    for _ in range(20):
        seen += [r["t"] for r in refresh(job, path)]
        if job.extra["reports_offset"] == path.stat().st_size:
            break
    assert max(reads) <= 4096 and len(reads) > 4
    assert seen == [*range(1, 101), 102]  # every report once, in order; the long line skipped
    assert job.extra["reports"]["progress"] == pytest.approx(0.5) and job.extra["reports"]["max_gpus"] == 2
    assert not refresh(job, path)  # all read: nothing new until the file changes


def test_reports_counted_by_an_earlier_version_are_not_read_again(tmp_path):
    """A job stored by a version that kept only how many reports it had read (`reports_read`)
    goes on from the report after those, once the server runs this version."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(_report(t, 1, 64, progress=t / 10)) + "\n" for t in (1, 2, 3)))
    job = _job(batch_size=64)
    job.extra["reports_read"] = 2
    assert refresh(job, path)
    assert job.extra["reports"]["version"] == 1 and job.extra["reports_read"] == 3
    assert job.extra["reports_offset"] == path.stat().st_size


def test_bad_report_fields_are_ignored_not_trusted():
    job = _job(batch_size=64)
    ingest(job, [{"t": 1, "num_gpus": "many", "step_time": -1, "batch_size": 64, "progress": math.nan},
                 {"no": "time"}])
    st = job.extra["reports"]
    assert "configs" not in st and "progress" not in st


_FIELDS = ["t", "step_time", "batch_size", "num_gpus", "num_nodes", "restart", "accum_steps",
           "compute_time", "grad_sqr", "grad_var", "init_batch_size", "max_batch_size",
           "max_local_bsz", "progress", "epoch", "epochs", "step", "total_steps"]
_ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.sampled_from(
    [0, -1, 1e-300, 1e308, 2**63, 10**30, "7", "x", []]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(_FIELDS), _ANY, max_size=4), min_size=1, max_size=10))
@example([{}, {"step_time": 2.2e-309}])  # a subnormal step time: infinite work, kept out of the store
@example([{"num_gpus": 2**63}, {"t": math.inf}])
def test_whatever_a_job_reports_the_estimates_stay_usable_and_storable(changes):
    """A training loop may write anything into its reports (`num_gpus=2**63`, `step_time=1e308`,
    `t=Infinity`): the estimator runs in the server's scheduling round, for every job, so no report
    may make it raise — the round would fail for everyone — and what it keeps must stay plain
    JSON that the store keeps (else the job's reports are lost at a restart). Before the fields
    were bounded, 86 of 300 such jobs raised OverflowError in `estimate(...).curve`."""
    job = _job(deadline=3600.0)
    ingest(job, [{"t": 10.0 * i, "step_time": 0.5, "batch_size": 64, "num_gpus": 2, "num_nodes": 1,
                  "progress": i / 20, **change} for i, change in enumerate(changes)])
    now = 10.0 * len(changes)
    est = estimate(job, now, History())
    for gain in (False, True):
        assert all(math.isfinite(s) for s in est.curve(16, 4, gain))
    summary(job, now, History(), 16, 4)
    deadline_summary(job, now, History(), 16, 4)
    kept = persisted_extra(job.extra)
    assert kept.get("reports") == job.extra["reports"]
    json.dumps(kept, allow_nan=False)


# -- history: run-time prediction and job families ---------------------------------------------------
def test_predictors_on_a_synthetic_history():
    """Durations of a job depend on its name and drift over time; the median of the recent
    similar jobs follows, the mean of all similar ones lags behind the drift and the outliers."""
    rng = np.random.default_rng(0)
    pairs = {"recent": [], "mean": []}
    recent, mean = Predictor(), MeanOfSimilar()
    for i in range(3000):
        name = f"nb{i % 5}"
        base = 100 * (1 + i % 5) * (1 + i / 1000)
        actual = base * float(rng.lognormal(0, 0.2)) * (20 if rng.random() < 0.05 else 1)
        feats = {"name": name, "user": "u", "gpus": 1}
        if i >= 1500:
            pairs["recent"].append((recent.predict(feats), actual))
            pairs["mean"].append((mean.predict(feats), actual))
        recent.add(feats, actual)
        mean.add(feats, actual)
    assert mdape(pairs["recent"]) < 0.5 * mdape(pairs["mean"])
    assert mdape([(110, 100), (50, 100), (100, 100)]) == pytest.approx(10.0)


def test_features_and_history_priors():
    spec = JobSpec(name="nb.ipynb:3", user="ana", command=["python", "train.py"], batch_size=64, epochs=5)
    job = Job(id=7, spec=spec, submit_time=0.0)
    assert features(job) == {"gpus": 1, "user": "ana", "name": "nb.ipynb:3",
                             "command": "python python train.py", "batch_size": 64, "epochs": 5}
    h = History()
    assert h.predict(job) is None and h.prior(job) is None
    done = Job(id=1, spec=spec, submit_time=0.0, state=JobState.succeeded, attained_base=900.0)
    ingest(done, [_report(1, 4, 64), _report(2, 8, 64)])
    h.add(done)
    assert h.predict(job) == pytest.approx(900.0)
    prior = h.prior(job)
    assert prior.max_gpus == 8 and len(prior.configs) == 2
    assert family(job) == family(done)
    # a re-run of the family starts trusted up to twice what the family measured
    assert estimate(job, 0.0, h).max_gpus == 16 and estimate(job, 0.0).max_gpus == 1
