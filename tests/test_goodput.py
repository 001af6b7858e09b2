"""The goodput policy and its speed-up estimates."""


import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedulearn import pauses
from schedulearn.engine import Engine
from schedulearn.estimates import estimate
from schedulearn.model import Job, JobSpec, parse_cluster
from schedulearn.policies import create
from schedulearn.policies.goodput import Goodput
from schedulearn.sim.executor import SimExecutor
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob

APPS = {"cifar10": 512, "bert": 96, "deepspeech2": 160, "yolov3": 64, "imagenet": 3200}


@st.composite
def spec_strategy(draw, cluster_gpus):
    kind = draw(st.sampled_from(["rigid", "elastic", "auto", "app"]))
    if kind == "rigid":
        return JobSpec(gpus=draw(st.integers(1, cluster_gpus)), duration=100.0)
    lo = draw(st.integers(1, cluster_gpus))
    hi = draw(st.integers(lo, cluster_gpus + 4))
    if kind == "elastic":
        return JobSpec(gpus=lo, min_gpus=lo, max_gpus=hi, duration=100.0)
    if kind == "auto":
        return JobSpec(gpus="auto", min_gpus=lo, max_gpus=hi, duration=100.0)
    app = draw(st.sampled_from(sorted(APPS)))
    return JobSpec(gpus=lo, min_gpus=1, max_gpus=hi, application=app, batch_size=APPS[app],
                   adaptive_batch=draw(st.booleans()))


class Recording(Goodput):
    """The goodput policy, keeping what it asked for in its last round."""

    def schedule(self, ctx):
        self.capacity = ctx.capacity
        self.wants = list(super().schedule(ctx))
        return self.wants


@st.composite
def round_strategy(draw):
    hosts, per = draw(st.integers(1, 5)), draw(st.integers(1, 8))
    nodes = parse_cluster(f"{hosts}x{per}")
    first = draw(st.lists(spec_strategy(hosts * per), max_size=10))
    later = draw(st.lists(spec_strategy(hosts * per), max_size=10))
    return nodes, first, later, draw(st.floats(60, 50_000))


def _check_bounds(policy):
    sizes = dict(policy.wants)
    assert len(sizes) == len(policy.wants), "a job wanted twice"
    assert sum(sizes.values()) <= policy.capacity, "over-allocated"
    for job, n in sizes.items():
        assert job.spec.min_size <= n <= job.spec.max_size(policy.capacity), (job.spec, n)
        if not job.spec.elastic:
            assert n == job.spec.requested
    return sizes


def _top(job, est, capacity):
    top = job.spec.max_size(capacity)
    return top if est.max_gpus is None else max(job.spec.min_size, min(top, est.max_gpus))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(round_strategy())
def test_first_round_never_over_allocates_respects_bounds_and_leaves_no_useful_gpu_idle(case):
    nodes, specs, _, now = case
    policy = Recording()
    engine = Engine(nodes, policy, SimExecutor())
    jobs = [engine.submit(spec, now=i) for i, spec in enumerate(specs)]
    engine.round(now)
    if not jobs:
        return
    sizes = _check_bounds(policy)
    idle = policy.capacity - sum(sizes.values())
    assert engine.pool.total == idle  # the engine placed exactly what the policy asked for
    if not idle:
        return
    per_node = max(len(n.gpus) for n in nodes)
    for job in jobs:  # every job: admitted if its minimum fits what stays idle
        assert job in sizes or job.spec.min_size > idle, (job.spec, idle)
    for job, n in sizes.items():  # no admitted job would run faster on the idle GPUs
        est = estimate(job, now, engine.history)
        top = _top(job, est, policy.capacity)
        curve = est.curve(top, per_node)
        for m in range(n + 1, min(top, n + idle) + 1):
            assert curve[m] <= curve[n] + 1e-9, (job.spec, n, m, curve[n], curve[m])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(round_strategy())
def test_later_rounds_with_running_jobs_keep_the_bounds(case):
    nodes, first, later, now = case
    policy = Recording()
    engine = Engine(nodes, policy, SimExecutor())
    for spec in first:
        engine.submit(spec, now=0.0)
    engine.round(0.0)
    for spec in later:
        engine.submit(spec, now=now / 2)
    policy.wants = []
    engine.round(now)
    if engine.active:
        _check_bounds(policy)
    assert engine.pool.total >= 0
    assert sum(j.size for j in engine.active.values()) <= engine.total_gpus


def _started_under_las(spec: JobSpec, nodes, age: float, waiting: JobSpec | None = None
                       ) -> tuple[Engine, Job]:
    """(With the simulator's true speed-ups: this is about the restart factor, not estimates.)"""
    engine = Engine(nodes, "las", SimExecutor(estimates="oracle"))
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == int(spec.gpus)
    if waiting is not None:
        engine.submit(waiting, now=max(age - 60.0, 0.0))  # not yet starving
    engine.set_policy("goodput")
    engine.executor.advance(age)
    engine.round(age)
    return engine, job


def test_young_running_job_is_not_resized_for_a_moderate_gain():
    """With a job waiting for GPUs (here one of all 8), idle GPUs are not lent: the age rule alone
    decides a resize (a job that waited hours would come first and take them all)."""
    spec = JobSpec(gpus=4, min_gpus=1, max_gpus=64, application="imagenet", batch_size=3200,
                   adaptive_batch=True)
    waiting = JobSpec(gpus=8, duration=600.0)
    _, young = _started_under_las(spec, parse_cluster("2x4"), age=60.0, waiting=waiting)
    assert young.size == 4 and young.restarts == 0
    assert young.batch_size == 3200  # untouched: no resize
    _, old = _started_under_las(spec, parse_cluster("2x4"), age=36_000.0)
    assert old.size == 8 and old.restarts == 1  # the same gain pays for a restart of a long-running job
    assert old.batch_size is None  # a simulated adaptive job picks its own batch size after a resize
    _, alone = _started_under_las(spec, parse_cluster("2x4"), age=60.0)
    assert alone.size == 8  # nobody waiting, one arrival this hour: its hours left pay for the loan


def test_restart_factor():
    p = Goodput()
    job = Job(id=1, spec=JobSpec(gpus=4, duration=10.0), submit_time=100.0)
    assert p.restart_factor(job, 100.0) == 0.0
    job.restarts = 2
    assert p.restart_factor(job, 1100.0) == pytest.approx((1000 - 2 * 90) / (1000 + 90))


def _waits(result, job_id):
    """(start, length) of the job's queued spells (from submission or a stop to the next start)."""
    waits, since = [], result.jobs[job_id - 1].submit_time
    for t, jid, alloc in sorted(result.history, key=lambda h: h[0]):
        if jid != job_id:
            continue
        if alloc and since is not None:
            waits.append((since, t - since))
            since = None
        elif not alloc:
            since = t
    return waits


def _waiting_at(result, t):
    """Jobs queued (submitted, not running, not done) just before time t."""
    n = 0
    for job in result.jobs:
        if job.submit_time >= t or (job.end_time is not None and job.end_time <= t):
            continue
        spells = _waits(result, job.id)
        n += any(s < t < s + length for s, length in spells)
    return n


def test_no_starvation_when_overloaded():
    """A 4-GPU job in the second queue while 1-GPU jobs keep the first queue non-empty at every
    round: las never fits it in until the stream ends (8 h); goodput puts it at the front once it
    has waited 30 min, behind only jobs that were already waiting when it started to wait (each
    of which then holds the front for at most 30 min)."""
    long_job = TraceJob(0.0, JobSpec(name="long", gpus=4, duration=10 * 3600.0), "t:1")
    stream = [TraceJob(4 * 3600.0 + 30.0 + 60 * i, JobSpec(name=f"s{i}", gpus=1, duration=150.0),
                       f"t:{i + 2}") for i in range(8 * 60)]
    trace = [long_job, *stream]
    runs = {p: simulate(trace, parse_cluster("1x4"), p, interval=60, restart_penalty=30, record=True)
            for p in ("las", "goodput")}
    assert max(length for _, length in _waits(runs["las"], 1)) > 7.5 * 3600
    good = runs["goodput"]
    spells = _waits(good, 1)
    assert len(spells) > 3
    for start, length in spells:
        assert length <= 1800 * (1 + _waiting_at(good, start)) + 60, (start, length)
    assert max(length for _, length in spells) < 4 * 3600
    assert all(j.end_time is not None for j in good.jobs)


def test_goodput_is_registered():
    p = create("goodput")
    assert isinstance(p, Goodput) and p.elastic and p.time_driven


# -- what the policy sees of a job -------------------------------------------------------------
def test_a_new_auto_job_grows_by_doubling_as_far_as_its_measured_speedup_pays():
    """Live: nothing measured, speed-up linear up to the minimum; each report doubles the cap."""
    from schedulearn.estimates import ingest

    spec = JobSpec(gpus="auto", max_gpus=32, duration=1e6, batch_size=256)
    engine = Engine(parse_cluster("4x8"), "goodput", SimExecutor())
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == 1
    rec = {"batch_size": 256, "step_time": 0.2, "compute_time": 0.2}
    ingest(job, [{**rec, "t": 10.0, "num_gpus": 1}])
    engine.wake()
    engine.round(10_000.0)  # old enough to pay for a restart
    assert job.size == 2  # linear speed-up believed up to twice what was measured
    # measured on 2: computing takes half as long, but synchronising costs more than that saves
    ingest(job, [{**rec, "t": 10_010.0, "num_gpus": 2, "step_time": 0.25, "compute_time": 0.1, "restart": 1}])
    engine.wake()
    engine.round(20_000.0)
    assert job.size == 1  # slower on 2 GPUs than on 1: back to 1, and no further growth


def test_a_job_switched_to_goodput_keeps_the_gpus_it_runs_on_beyond_what_it_measured():
    """A lone auto job that `elastic-fifo` grew to all 4 GPUs has measured nothing: switched to
    `goodput`, its exploration cap (twice what it measured, at least what it asked for: 1) is
    below what it runs on. It keeps its 4 (before: shrunk to 1, a restart, 3 GPUs left idle)."""
    engine = Engine(parse_cluster("1x4"), "elastic-fifo", SimExecutor())
    job = engine.submit(JobSpec(gpus="auto", max_gpus=4, duration=1e6, batch_size=256), now=0.0)
    engine.round(0.0)
    assert job.size == 4
    engine.set_policy("goodput")
    engine.executor.advance(600.0)
    engine.round(600.0)
    assert job.size == 4 and job.restarts == 0


@pytest.mark.parametrize("progress, grows", [((0.50, 0.99), False), ((0.01, 0.02), True)])
def test_a_job_seconds_from_its_end_is_not_grown(progress, grows):
    """Growing pays only where the time saved beats `hysteresis` times the restart: a job whose
    own progress says it ends on its GPUs within that (here 2 s: 0.49 of the work in 100 s, 0.01
    left) keeps them, idle GPUs and a linear speed-up notwithstanding; the same job with 9,800 s
    left grows (seen live: an auto job grew 1 -> 2 at 94 % of its work and ended 13 s later)."""
    from schedulearn.estimates import ingest

    spec = JobSpec(gpus="auto", max_gpus=32, duration=1e6, batch_size=256)
    engine = Engine(parse_cluster("1x4"), "goodput", SimExecutor())
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == 1
    rec = {"batch_size": 256, "step_time": 0.2, "compute_time": 0.2, "num_gpus": 1}
    ingest(job, [{**rec, "t": 9_900.0, "progress": progress[0]},
                 {**rec, "t": 10_000.0, "progress": progress[1]}])
    assert estimate(job, 10_000.0).progress == progress[1]
    engine.wake()
    engine.round(10_000.0)  # old enough to pay for a restart
    assert job.size == (2 if grows else 1) and job.restarts == (1 if grows else 0)


@pytest.mark.parametrize("left_s, queued, adaptive, grows", [
    (700.0, False, False, True), (60.0, False, False, False), (700.0, True, False, False),
    (300.0, False, False, True), (300.0, False, True, False)])
def test_idle_gpus_go_to_a_young_job_whose_time_left_pays_for_the_resize(left_s, queued, adaptive, grows):
    """Seen live (qoe, 4 virtual GPUs): a best-effort torchrun job reporting 11 minutes left on 1
    GPU stayed there 4.5 minutes while 1-3 GPUs stood idle: at 60 s old, the age rule prices a
    30-s restart at 0.4 of its value. Idle GPUs (nobody waiting) go to a running job whose own
    progress says the time they save pays `hysteresis` times the restart; with a job waiting for
    GPUs, or a minute left, it is left alone. With 5 minutes left it depends on the speed-up
    believed for a second GPU: a fixed batch split in two, half the time (150 s saved: it grows;
    seen live, a Horovod job with 4 minutes left on 1 GPU of 4 idle stayed there when the prior
    said 1.33x); a batch that may grow with the GPUs, Pollux's prior for it, 1.33x (75 s)."""
    from schedulearn.estimates import ingest

    engine = Engine(parse_cluster("1x4"), "goodput", SimExecutor())
    spec = JobSpec(gpus="auto", max_gpus=4, duration=1e6, batch_size=256, adaptive_batch=adaptive)
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == 1
    if queued:  # rigid, needs all four: it waits for the running job whatever its size
        engine.submit(JobSpec(gpus=4, duration=100.0), now=30.0)
    rec = {"batch_size": 256, "step_time": 1.2, "compute_time": 1.2, "num_gpus": 1, "timed_steps": 8}
    ingest(job, [{**rec, "t": t, "progress": t / (60.0 + left_s)} for t in range(10, 61, 10)])
    assert estimate(job, 60.0).remaining_s((1,)) == pytest.approx(left_s, rel=0.01)
    engine.wake()
    engine.round(60.0)
    assert job.size == (2 if grows else 1) and job.restarts == (1 if grows else 0)


@pytest.mark.parametrize("resize, grows", [("in-place", True), ("restart", False)])
def test_a_first_resize_in_place_is_priced_below_a_restart(resize, grows):
    """Seen live: a torchrun `--gpus auto --resize in-place` job with two minutes of work left,
    alone on 4 GPUs, stayed on 1 for 88 s: its first resize, measured by neither the job nor its
    family, was priced as a 30-s checkpoint-restart, which two minutes at a speed-up of 1.33 do
    not pay three times over (it then paused 5 s). Priced at `pauses.IN_PLACE_PRIOR` of it, the
    idle GPUs are lent; a job restarted to resize still waits."""
    from schedulearn.estimates import ingest

    engine = Engine(parse_cluster("1x4"), "goodput", SimExecutor(in_place_penalty=1.0))
    spec = JobSpec(gpus="auto", max_gpus=4, duration=1e6, batch_size=256, adaptive_batch=True,
                   launcher="torchrun", resize=resize)
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == 1
    rec = {"batch_size": 256, "step_time": 1.2, "compute_time": 1.2, "num_gpus": 1, "timed_steps": 8}
    ingest(job, [{**rec, "t": t, "progress": t / 140.0} for t in range(10, 21, 5)])
    assert estimate(job, 20.0).remaining_s((1,)) == pytest.approx(120.0, rel=0.01)
    assert pauses.price(job, 30.0) == (9.0 if grows else 30.0)
    engine.wake()
    engine.round(20.0)
    if grows:  # resized in place, not restarted
        assert job.size > 1 and job.restarts == 0 and job.extra[pauses.IN_PLACE_KEY] == 1
    else:
        assert job.size == 1


def test_a_job_shrunk_anyway_keeps_the_gpus_nobody_else_takes():
    """Seen live: a young job on 4 GPUs, shrunk for a newcomer that needed 1, was cut to its
    minimum (every size but its current one is worth 0 to a job that young), 2 GPUs idle, and
    grown 1 -> 3 by another restart seconds later. The restart is paid whatever the new size:
    the GPUs nobody else takes stay with it, 4 -> 3 in one."""
    engine = Engine(parse_cluster("1x4"), "goodput", SimExecutor())
    a = engine.submit(JobSpec(gpus=4, min_gpus=1, max_gpus=4, duration=3600.0), now=0.0)
    engine.round(0.0)
    assert a.size == 4
    b = engine.submit(JobSpec(gpus=1, duration=600.0), now=0.0)
    engine.round(0.0)
    assert b.size == 1 and a.size == 3 and a.restarts == 1


def test_a_job_shrunk_anyway_is_valued_without_its_restart_discount():
    """Seen live (4 virtual GPUs): a young job on all 4, shrunk for a newcomer, was cut to 1 and
    the newcomer given 3: at its age every size but its current one was worth nothing to it, yet
    the restart is paid whatever its new size. A running job the admission resizes anyway is
    valued at its full speed-up: here it keeps 3, the newcomer gets 1 (with the same cifar10
    work left, the mean JCT is lower, and no more restarts)."""
    def cifar10(name: str, at: float) -> TraceJob:
        return TraceJob(at, JobSpec(name=name, gpus=4, min_gpus=1, max_gpus=4, application="cifar10",
                                    batch_size=2048, adaptive_batch=True), name)

    trace = [cifar10("first", 0.0), cifar10("sweep", 3000.0), cifar10("new", 3060.0)]
    r = simulate(trace, parse_cluster("1x4"), "goodput", interval=60, restart_penalty=30, record=True)
    jobs = {j.spec.name: j for j in r.jobs}
    assert jobs["first"].end_time < 3000.0  # the family's run (estimates for the other two)
    sizes = [(jid, sum(map(len, alloc.values()))) for t, jid, alloc in r.history if t == 3060.0 and alloc]
    assert sizes == [(jobs["sweep"].id, 3), (jobs["new"].id, 1)], sizes
    assert jobs["sweep"].restarts == 1 and all(j.state.value == "succeeded" for j in jobs.values())


def test_a_lone_job_reporting_every_step_is_not_resized_back_and_forth():
    """Seen live: a Horovod job alone on 4 GPUs, reporting every step (as the docs' examples do),
    was grown in place 1 -> 2, shrunk 4 s later on its first five steps there (a worker joining on
    a loaded machine: no faster than on 1 GPU), grown again 1 s later, and once more 75 s later
    on three slow steps. A configuration is believed once measured for `SETTLE_S` seconds, and a
    report counts for the seconds it covers, not as a third of the average."""
    from schedulearn.estimates import ingest

    spec = JobSpec(gpus="auto", min_gpus=1, max_gpus=2, launcher="horovod", resize="in-place",
                   duration=1e6, batch_size=512)
    engine = Engine(parse_cluster("1x4"), "goodput", SimExecutor(30.0, in_place_penalty=0.5))
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == 1

    def steps(t0, n, step, gpus, times=None):
        times = times or [step] * n
        out, t = [], t0
        for s in times:
            t += s
            out.append({"t": t, "step_time": s, "batch_size": 512, "num_gpus": gpus, "progress": t / 1e5})
        return out

    ingest(job, steps(0.0, 1500, 0.2, 1))  # 300 s on 1 GPU
    engine.wake()
    engine.round(300.0)
    assert job.size == 2  # grown: the first resize of the job
    engine.resize_paused(job.id, {"pause_s": 1.4, "in_place": True, "from": 1, "to": 2}, now=301.4)
    sizes = []
    t = 301.4
    for times in ([0.2, 0.16, 0.21, 0.19, 0.27], [0.25, 0.14, 0.16, 0.17, 0.16] * 20,
                  [0.16] * 200, [0.29, 0.46, 0.34]):  # the live run's first steps on 2, then slow ones
        recs = steps(t, 0, 0, 2, times)
        ingest(job, recs)
        t = recs[-1]["t"]
        engine.wake()
        engine.round(t)
        sizes.append(job.size)
    assert sizes == [2, 2, 2, 2]
    est = estimate(job, t)
    assert est.curve(2, 4)[2] == pytest.approx(0.2 / 0.16, rel=0.1)  # what 2 GPUs measured


@pytest.mark.parametrize("policy", ["goodput", "qoe"])
def test_a_job_that_stopped_reporting_is_not_grown(policy):
    """A running `--gpus auto` job that reported its progress every 10 s on 1 GPU of 4 is grown
    into the idle GPUs; once it has gone silent (hung, or in a long evaluation) it is not — more
    GPUs would restart a hung job for nothing, and lose an evaluation's work. With a deadline it
    is behind, and `qoe` would otherwise plan it bigger."""
    from schedulearn.estimates import ingest
    from schedulearn.model import JobState
    from schedulearn.policies.base import RoundContext

    def wants(now):
        spec = JobSpec(name="j", command=["x"], gpus="auto", max_gpus=4,
                       deadline=900.0 if policy == "qoe" else None)
        job = Job(id=1, spec=spec, submit_time=0.0, state=JobState.running)
        job.set_alloc({"vm": (0,)}, 0.0)
        ingest(job, [{"t": 10.0 * k, "num_gpus": 1, "progress": 0.01 * k} for k in range(1, 31)])
        jobs = {1: job}
        ctx = RoundContext(now, parse_cluster("1x4"), [], jobs, jobs, {1: 1}, 4)
        return {j.id: n for j, n in create(policy).schedule(ctx)}

    assert wants(310.0)[1] > 1  # reporting: grown
    assert wants(600.0) == {1: 1}  # silent for 5 minutes: kept as it is
