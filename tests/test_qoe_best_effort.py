"""The `qoe` policy beside best-effort jobs (no deadline): deadlines are planned for without
taking everything — a quarter of the GPUs is kept for the best-effort jobs' minimums, a planned
deadline job gets what it needs and no more, and no deadline is planned on GPUs a job would use
at under half of a linear speed-up. On the real engine and simulator; estimates from reports."""

from __future__ import annotations

import pytest
from schedulearn.estimates import estimate, ingest
from schedulearn.model import Job, JobSpec, JobState, parse_cluster
from schedulearn.policies.base import RoundContext
from schedulearn.policies.qoe import QoE
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob

from tests.test_deadlines import _elastic
from tests.test_estimates_path import EARLY, B, _step, family_history


def _run(trace, policy):
    r = simulate(trace, parse_cluster("1x8"), policy, interval=60, restart_penalty=10, record=True)
    return {j.spec.name: j for j in r.jobs}, r


class Spy(QoE):
    """`qoe`, recording every job it gave up in some round."""

    def __init__(self) -> None:
        super().__init__()
        self.given_up: set[int] = set()

    def admit(self, ctx, order, size, per_node):
        placed = super().admit(ctx, order, size, per_node)
        self.given_up |= self._dropped
        return placed


def _cifar10(name: str, deadline: float | None = None, gpus: int = 2) -> TraceJob:
    """A cifar10 run (Pollux's profile; adapts its batch size) on `gpus` GPUs, submitted at 0."""
    spec = JobSpec(name=name, gpus=gpus, min_gpus=1, max_gpus=16, application="cifar10", batch_size=2048,
                   adaptive_batch=True, deadline=deadline)
    return TraceJob(0.0, spec, name)


def test_a_planned_deadline_job_gets_what_it_needs_and_the_best_effort_job_the_rest():
    """Two cifar10 runs on 2x4 GPUs: `report`, due in 3,000 s, makes it on the 2 GPUs it asked
    for; `sweep` has no deadline. `goodput` shares the GPUs between them by speed-up; `qoe`
    keeps `report` at what it needs and gives `sweep` the rest: `sweep` ends sooner than under
    `goodput` (under the previous `qoe`, which let `report` grow too, later), and `report`
    still makes it."""
    trace = [_cifar10("report", deadline=3000.0), _cifar10("sweep")]
    q, g = ({j.spec.name: j for j in simulate(trace, parse_cluster("2x4"), p, interval=60,
                                                 restart_penalty=30).jobs} for p in ("qoe", "goodput"))
    assert q["report"].end_time <= q["report"].spec.deadline
    assert q["sweep"].end_time < 0.95 * g["sweep"].end_time, (q["sweep"].end_time, g["sweep"].end_time)
    assert all(j.state.value == "succeeded" for j in (*q.values(), *g.values()))


def test_deadlines_leave_a_quarter_of_the_gpus_to_best_effort_minimums():
    """Two deadline jobs that could use all 8 GPUs and a best-effort one submitted with them:
    the best-effort job starts in the first round (with at least its minimum) instead of
    waiting for the deadline jobs; both deadlines, loose enough on 6 GPUs, are met."""
    trace = [_elastic("a", 0, 4, 600, 2400), _elastic("b", 0, 4, 600, 2400),
             _elastic("notebook", 0, 1, 300)]
    jobs, r = _run(trace, "qoe")
    first = min(t for t, jid, alloc in r.history if jid == jobs["notebook"].id and alloc)
    assert first <= 60.0, first  # the first round
    assert all(jobs[n].end_time <= jobs[n].spec.deadline for n in ("a", "b"))


def test_no_deadline_is_planned_on_gpus_a_job_would_use_at_under_half_their_speed():
    """A job whose reports show 4 GPUs 3x faster than one and 8 (two nodes) 2x: planning its
    deadline on 2 or 4 GPUs is fine, on 8 (a quarter of a linear speed-up) is not, and the job,
    having reported progress, is left to best effort for good."""
    job = Job(id=1, spec=JobSpec(command=["x"], gpus=1, max_gpus=16, batch_size=256, deadline=5000.0),
              submit_time=0.0)
    ingest(job, [{"t": 1, "num_gpus": 1, "batch_size": 256, "step_time": 1.0, "progress": 0.01},
                 {"t": 2, "num_gpus": 4, "batch_size": 256, "step_time": 1 / 3, "progress": 0.02},
                 {"t": 3, "num_gpus": 8, "num_nodes": 2, "batch_size": 256, "step_time": 0.5,
                  "progress": 0.03}])
    policy, ctx = QoE(), RoundContext(10.0, [], [], {}, {}, {}, 8)
    assert policy.efficient(job, ctx, 4, 4) and job.id not in policy._dropped
    assert not policy.efficient(job, ctx, 8, 4)
    assert job.id in policy._dropped


def test_a_job_its_estimate_says_misses_narrowly_keeps_its_fastest_size():
    """An estimate from a young job's first reports errs by a fifth and more, so `qoe` gives up
    on a deadline only when the fastest size needs more than 1.5x the time left. Here 3,600
    GPU-seconds are left (a tenth of 4,000 done in 100 s on 4 GPUs; it asked for 8): 450 s on
    8 GPUs + a 30 s restart. With 400 s left (1.2x) it gets all 8; with 300 s left (1.6x),
    nothing."""
    def needs(left: float) -> tuple[int, float]:
        job = Job(id=1, spec=JobSpec(command=["x"], gpus=8, min_gpus=1, max_gpus=8, deadline=100.0 + left),
                  submit_time=0.0)
        ingest(job, [{"t": 0, "num_gpus": 4, "progress": 0.0}, {"t": 100, "num_gpus": 4, "progress": 0.1}])
        return QoE().needs(job, RoundContext(100.0, [], [], {}, {}, {}, 8), 4)

    n, secs = needs(400.0)
    assert n == 8 and secs == pytest.approx(450.0, rel=0.01)
    assert needs(300.0) == (0, 0.0)


def test_a_job_is_judged_inefficient_on_its_own_statistics_not_its_familys():
    """A young adaptive job of a family whose runs start with small gradient noise (EARLY: large
    batches barely help at first) has reported nothing yet: its estimate takes the family's
    early statistics (8 GPUs under 1x one GPU's goodput), but its efficiency rises over its run,
    so planning its deadline on 8 GPUs is judged at its throughput (6.5x: fine). Once it
    reports the same statistics itself, with progress, 8 GPUs are under half of a linear
    speed-up: no deadline planned there, and it is left to best effort for good."""
    spec = JobSpec(name="train", user="ana", command=["train"], gpus=2, max_gpus=16, batch_size=B,
                   adaptive_batch=True, deadline=5000.0)
    history = family_history(spec, max_batch_size=4096)
    young = Job(id=2, spec=spec, submit_time=0.0)
    ctx = RoundContext(10.0, [], [], {}, {}, {}, 16, history)
    est = estimate(young, 10.0, history)
    assert est.own_grad is None and list(est.grad) == list(EARLY)
    assert est.curve(8, 4)[8] < 0.5 * 8 <= est.curve(8, 4, False)[8]
    policy = QoE()
    assert policy.efficient(young, ctx, 8, 4) and young.id not in policy._dropped
    ingest(young, [{"t": 5, "progress": 0.02, "num_gpus": 2, "batch_size": B, "step_time": _step(2),
                    "init_batch_size": 64, "max_batch_size": 4096, "grad_sqr": EARLY[0],
                    "grad_var": EARLY[1]}])
    assert not policy.efficient(young, ctx, 8, 4)
    assert young.id in policy._dropped


def test_a_given_up_deadline_job_runs_on_what_the_best_effort_jobs_leave():
    """Three cifar10 runs on 2x4 GPUs: `report` due in 1,900 s, `late` asking for 6 GPUs due in
    1,000 s (it cannot make it and is given up), `sweep` without a deadline. Beside best-effort
    jobs a given-up job's value counts a tenth in the sizing: `sweep` ends well before it does
    when `late` counts in full (and within 1.2x of its end under `goodput`); `late` still
    finishes (it runs best effort, not starved), and `report` makes its deadline either way."""
    trace = [_cifar10("report", deadline=1900.0), _cifar10("late", deadline=1000.0, gpus=6),
             _cifar10("sweep")]

    class Full(Spy):
        given_up_weight = 1.0

    assert QoE.given_up_weight == 0.1
    q, full = Spy(), Full()
    tenth, whole = ({j.spec.name: j for j in simulate(trace, parse_cluster("2x4"), p, interval=60,
                                                     restart_penalty=30).jobs} for p in (q, full))
    g = {j.spec.name: j for j in simulate(trace, parse_cluster("2x4"), "goodput", interval=60,
                                          restart_penalty=30).jobs}
    assert tenth["late"].id in q.given_up and whole["late"].id in full.given_up
    assert tenth["sweep"].end_time < 0.85 * whole["sweep"].end_time, (tenth["sweep"].end_time,
                                                                      whole["sweep"].end_time)
    assert tenth["sweep"].end_time <= 1.2 * g["sweep"].end_time
    assert all(j.state.value == "succeeded" for j in (*tenth.values(), *whole.values()))
    assert all(r["report"].end_time <= r["report"].spec.deadline for r in (tenth, whole))


def test_a_given_up_deadline_job_waits_for_the_minimums_best_effort_jobs_need():
    """On 4 GPUs: `late` asks for all 4 and is due in 600 s (no size makes it: given up),
    `report` due in 2,500 s makes it on 2, `sweep0` and `sweep1` have no deadline. The 2 GPUs
    `report` leaves go to the two best-effort jobs' minimums, not to `late`, which was first in
    line: both sweeps start before `late` and end sooner on average than when `late` takes its
    minimum first (as before); `late` still finishes, and `report` makes its deadline."""
    trace = [_cifar10("late", deadline=600.0, gpus=4), _cifar10("report", deadline=2500.0),
             _cifar10("sweep0"), _cifar10("sweep1")]

    class FirstInLine(Spy):
        def rest(self, order):
            return order

    runs = {}
    for p in (Spy(), FirstInLine()):
        r = simulate(trace, parse_cluster("1x4"), p, interval=60, restart_penalty=30, record=True)
        jobs = {j.spec.name: j for j in r.jobs}
        starts = {n: min(t for t, jid, alloc in r.history if jid == j.id and alloc) for n, j in jobs.items()}
        assert jobs["late"].id in p.given_up
        assert all(j.state.value == "succeeded" for j in jobs.values())
        assert jobs["report"].end_time <= jobs["report"].spec.deadline
        runs[type(p).__name__] = jobs, starts
    (now, now_starts), (before, before_starts) = runs["Spy"], runs["FirstInLine"]
    assert max(now_starts["sweep0"], now_starts["sweep1"]) < now_starts["late"]
    assert before_starts["late"] < before_starts["sweep1"]  # the situation this rule changes
    sweeps = [sum(js[n].end_time for n in ("sweep0", "sweep1")) for js in (now, before)]
    assert sweeps[0] < 0.95 * sweeps[1], sweeps


def test_a_newcomer_similar_jobs_say_cannot_make_it_does_not_stop_a_best_effort_job():
    """On 8 GPUs a cifar10 run finishes (the history now knows the family); a rigid 8-GPU
    best-effort job starts; then another cifar10 run comes due in 2 minutes, which its family's
    run says takes far longer on any size. It is not planned: the best-effort job runs to its
    end undisturbed (before, the newcomer took the 2 GPUs it asked for and stopped it — a
    restart and a wait for a job that missed anyway), and the newcomer runs after."""
    sweep = TraceJob(1500.0, JobSpec(name="sweep", gpus=8, min_gpus=8, max_gpus=8, application="ncf",
                                     batch_size=2048), "sweep")
    first, doomed = _cifar10("first", deadline=5000.0), _cifar10("doomed")
    doomed = TraceJob(1800.0, doomed.spec.model_copy(update={"deadline": 1920.0}), "doomed")
    jobs, _ = _run([first, sweep, doomed], "qoe")
    assert jobs["first"].end_time < 1500.0  # the family's run, finished before the others come
    assert jobs["sweep"].restarts == 0 and jobs["sweep"].start_time == 1500.0
    assert jobs["doomed"].start_time >= jobs["sweep"].end_time
    assert all(j.state.value == "succeeded" for j in jobs.values())


def test_a_deadline_job_no_size_makes_it_for_runs_behind_the_best_effort_jobs():
    """Seen live (`qoe`, 4 virtual GPUs): a job due in 30 s (`will miss` at submission: no size
    makes it) took 3 GPUs of 4 from a best-effort job at full weight. Given up or not, a deadline
    job no size makes it for this round counts `given_up_weight` beside best-effort jobs and takes
    its minimum after theirs: submitted with a best-effort job of the same work on 4 GPUs, it
    gets 1 and the best-effort job 3 (before: 3 and 1); both finish."""
    first = _cifar10("first", deadline=5000.0, gpus=4)  # the family's run: estimates for the others
    sweep = TraceJob(3000.0, _cifar10("sweep", gpus=2).spec.model_copy(update={"max_gpus": 4}), "sweep")
    doomed = TraceJob(3000.0, _cifar10("doomed", gpus=2).spec.model_copy(update={"deadline": 3120.0}),
                      "doomed")
    r = simulate([first, sweep, doomed], parse_cluster("1x4"), "qoe", interval=60, restart_penalty=30,
                 record=True)
    jobs = {j.spec.name: j for j in r.jobs}
    assert jobs["first"].end_time < 3000.0
    sizes = {jid: sum(map(len, alloc.values())) for t, jid, alloc in r.history if t == 3000.0 and alloc}
    assert sizes == {jobs["sweep"].id: 3, jobs["doomed"].id: 1}, sizes
    assert jobs["sweep"].end_time < jobs["doomed"].end_time
    assert all(j.state.value == "succeeded" for j in jobs.values())


def test_a_late_job_the_admission_shrinks_keeps_its_restart_discount():
    """`goodput` values a running job the admission resized anyway at its full speed-up (the
    restart is paid whatever its new size); under `qoe`, only a best-effort job.
    On 8 GPUs: `due` (on 2, on track, hours old) and `late` (on 6, 10 s old, its deadline passed)
    run; a rigid 4-GPU deadline job arrives. `late` is shrunk to its minimum and the GPU left
    goes to `due`, which can still use it for its deadline (valued in full, `late` kept 2; every
    deadline job so valued met 19 fewer deadlines of 2,560 on workloads 1-4 at four phases)."""
    from schedulearn.model import JobState, virtual_cluster

    due = Job(id=1, spec=JobSpec(command=["x"], gpus=2, min_gpus=1, max_gpus=8, deadline=6000.0,
                                 batch_size=256), submit_time=-36_000.0, state=JobState.running)
    due.alloc = {"vm": (0, 1)}
    rec = {"batch_size": 256, "step_time": 0.2, "compute_time": 0.2, "num_gpus": 2}
    ingest(due, [{**rec, "t": 50.0, "progress": 0.05}, {**rec, "t": 100.0, "progress": 0.1}])
    late = Job(id=2, spec=JobSpec(command=["y"], gpus=6, min_gpus=1, max_gpus=8, deadline=95.0),
               submit_time=90.0, state=JobState.running)
    late.alloc = {"vm": (2, 3, 4, 5, 6, 7)}
    new = Job(id=3, spec=JobSpec(gpus=4, duration=600.0, deadline=3100.0), submit_time=100.0)
    ctx = RoundContext(100.0, virtual_cluster(1, 8), [new], {1: due, 2: late}, {1: due, 2: late, 3: new},
                       {1: 2, 2: 6}, 8)
    policy = QoE()
    sizes = {j.id: n for j, n in policy.schedule(ctx)}
    assert not policy.behind(late)  # running: it keeps its weight
    assert sizes == {1: 3, 2: 1, 3: 4}, sizes


@pytest.mark.parametrize("how", ["shrink", "stop"])
def test_gpus_on_their_way_back_count_when_deadlines_are_planned(how):
    """Seen live (`qoe`, 4 virtual GPUs): a best-effort job on all 4 was shrunk to 1 for a
    deadline job that arrived, and in the round after — the old run still exiting, its 3 GPUs
    out of the pool — the deadline job was given up for good: the admission saw the GPUs' seconds
    of 1 GPU where 4 would be back within seconds. GPUs released by a shrink or a stop count."""
    from schedulearn.model import JobState, virtual_cluster

    be = Job(id=1, spec=JobSpec(gpus="auto", max_gpus=4, duration=700.0), submit_time=0.0,
             state=JobState.running)
    if how == "shrink":  # on GPU 0 from now, 1-3 still held by its old run
        be.alloc, be.releasing = {"vm": (0,)}, {"vm": (1, 2, 3)}
    else:  # being stopped on 1-3; GPU 0 free
        be.alloc, be.stopping = {"vm": (1, 2, 3)}, "preempt"
    tight = Job(id=2, spec=JobSpec(gpus=2, max_gpus=4, duration=240.0, deadline=255.0), submit_time=75.0)
    running = {1: be} if how == "shrink" else {}
    ctx = RoundContext(77.0, virtual_cluster(1, 4), [tight], running, {1: be, 2: tight},
                       {j: x.size for j, x in running.items()}, 1)
    assert ctx.releasing == 3
    policy = QoE()
    policy.schedule(ctx)
    assert not policy.gave_up(tight)


@pytest.mark.parametrize("policy, grows", [("goodput", True), ("qoe", False)])
def test_with_deadlines_in_play_qoe_lends_no_idle_gpus(policy, grows):
    """`goodput` lends idle GPUs to a running job whose time left pays for the resize; `qoe` not
    while a deadline job is active (its plan grows as its young estimate firms up: seen live, a
    loan to a best-effort job was taken back 12 s later, a restart for nothing)."""
    from schedulearn.engine import Engine
    from schedulearn.sim.executor import SimExecutor

    engine = Engine(parse_cluster("1x4"), policy, SimExecutor())
    job = engine.submit(JobSpec(gpus="auto", max_gpus=4, duration=1e6, batch_size=256), now=0.0)
    due = engine.submit(JobSpec(gpus=1, duration=100.0, deadline=3600.0), now=0.0)
    engine.round(0.0)
    assert job.size == 1 and due.size == 1
    rec = {"batch_size": 256, "step_time": 1.2, "compute_time": 1.2, "num_gpus": 1, "timed_steps": 8}
    ingest(job, [{**rec, "t": t, "progress": t / 760.0} for t in range(10, 61, 10)])
    engine.wake()
    engine.round(60.0)
    assert job.size == (2 if grows else 1)


def test_a_deadline_job_reporting_only_progress_keeps_its_gpus_when_it_runs_late():
    """Seen live (`schedulearn serve --virtual-gpus 4 --policy qoe`): a `--gpus auto --deadline 2m`
    job that reports only its progress ran on 2 GPUs beside a best-effort job and a job past its
    deadline; a minute in, a few seconds behind, no size made it any more, and it was shrunk to
    1 GPU (a restart) while the 4th stood idle: with no step times its exploration cap was its
    request, 1. Now it keeps its 2 (`test_estimates`, `test_goodput`: the two causes)."""
    def running(i, deadline, gpus, units, now, rate=1.0):
        spec = JobSpec(name=f"j{i}", command=["x"], gpus="auto", max_gpus=4, deadline=deadline)
        job = Job(id=i, spec=spec, submit_time=0.0, state=JobState.running)
        job.set_alloc({"vm": tuple(range(gpus))}, 0.5)
        ingest(job, [{"t": 1.5 + 0.5 * k, "num_gpus": gpus, "progress": rate * gpus * (1.5 + 0.5 * k) / units}
                     for k in range(int((now - 1.5) / 0.5))])
        return job

    now = 59.0
    late = running(5, 120.0, 2, 240, now, rate=0.95)  # on 2 GPUs: ends ~7 s past its deadline
    jobs = {j.id: j for j in (late, running(6, 30.0, 1, 2000, now), running(7, None, 1, 600, now))}
    policy = QoE()
    ctx = RoundContext(now, parse_cluster("1x4"), [], jobs, jobs, {i: j.size for i, j in jobs.items()}, 4)
    n, secs = policy.needs(late, ctx, 4)
    assert n == 2 and 120.0 - now < secs < 120.0 - now + 10.0  # late by under 10 s on its 2 GPUs
    wants = {job.id: n for job, n in policy.schedule(ctx)}
    assert wants == {5: 2, 6: 1, 7: 1}, wants


@pytest.mark.parametrize("units, grows", [(240, True), (60, False)])
def test_a_deadline_job_running_behind_takes_the_gpu_nobody_takes(units, grows):
    """Seen live (`schedulearn serve --virtual-gpus 4 --policy qoe`): a `--deadline 2m` job of 240
    GPU-seconds on 1 GPU, measured there (trusted up to 2), needed 4 with no time to spare; its
    plan keeps a running job's size rather than chase such a size with a restart, and with
    deadlines in play nothing is lent, so it kept 1 GPU for 90 s beside an idle one and missed
    by 46 s. Now the GPU nobody takes goes to it (a job on track is left as it is)."""
    def running(i, deadline, units, now):
        spec = JobSpec(name=f"j{i}", command=["x"], gpus="auto", max_gpus=4, deadline=deadline)
        job = Job(id=i, spec=spec, submit_time=0.0, state=JobState.running)
        job.set_alloc({"vm": (i - 5,)}, 0.5)
        ingest(job, [{"t": 0.5 * k, "num_gpus": 1, "progress": 0.5 * k / units}
                     for k in range(1, int(2 * now))])
        return job

    now = 20.0
    late = running(5, 120.0, units, now)
    jobs = {j.id: j for j in (late, running(6, 10.0, 2000, now), running(7, None, 600, now))}
    policy = QoE()
    ctx = RoundContext(now, parse_cluster("1x4"), [], jobs, jobs, {i: j.size for i, j in jobs.items()}, 4)
    if grows:  # 4 GPUs make it with no time to spare, 2 (its cap) do not: it keeps its 1 in the plan
        assert policy.needs(late, ctx, 4)[0] == 1
    wants = {job.id: n for job, n in policy.schedule(ctx)}
    assert wants == {5: 2 if grows else 1, 6: 1, 7: 1}, wants


@pytest.mark.parametrize("hung_at", [0.3, 0.99])
def test_a_hung_job_past_its_deadline_does_not_keep_its_gpus_as_all_but_done(hung_at):
    """A job past its deadline that its estimate finishes within a restart's price keeps its GPUs
    (step 0). One that hung at 30 % of its work had its time left counted down by every second
    since its last report: 20 minutes on, it was done by the estimate and kept its 2 GPUs of 4
    for good, while a job due in 20 minutes that needs all 4 waited. Silent, it is counted as not
    working on, and is not finishing however near its end it hung (at 99 %: 3 s left on its
    GPUs); the waiting job gets the GPUs."""
    hung = Job(id=1, spec=JobSpec(name="hung", command=["x"], gpus=2, deadline=600.0), submit_time=0.0,
               state=JobState.running)
    hung.set_alloc({"vm": (0, 1)}, 0.0)
    reports = int(round(hung_at * 100))
    ingest(hung, [{"t": 10.0 * k, "num_gpus": 2, "progress": 0.01 * k} for k in range(1, reports + 1)])
    now = 1500.0
    waiting = Job(id=2, spec=JobSpec(name="due", command=["x"], gpus=4, deadline=now + 1200), submit_time=now)
    jobs = {j.id: j for j in (hung, waiting)}
    policy = QoE()
    ctx = RoundContext(now, parse_cluster("1x4"), [waiting], jobs, jobs, {1: 2}, 4)
    assert not policy.finishing(hung, ctx, 4)
    wants = {job.id: n for job, n in policy.schedule(ctx)}
    assert wants == {2: 4}, wants


@pytest.mark.parametrize("policy, beside", [("goodput", False), ("qoe", False), ("qoe", True)])
def test_a_deadline_job_on_track_is_lent_the_gpus_nobody_takes(policy, beside):
    """Seen live (`schedulearn serve --virtual-gpus 4 --policy qoe`): a lone `--gpus auto
    --deadline 10m` job of 200 s on one GPU, on track, stayed on 1 GPU of 4 for 90 s, three idle
    (with deadlines in play `qoe` lent nothing; `goodput`'s restart factor grows a job only as it
    ages). A loan to a deadline job is the loan `goodput` makes — its time left, until the next
    arrival, pays for the restart three times over; best-effort jobs still get none while
    deadlines are in play (above), and beside them no deadline job is lent any (on the mixed
    workload 2 at 45 s the best-effort jobs' JCT went from 1.24x to 1.34x `goodput`'s)."""
    from schedulearn.engine import Engine
    from schedulearn.sim.executor import SimExecutor

    engine = Engine(parse_cluster("1x4"), policy, SimExecutor())
    spec = JobSpec(gpus="auto", max_gpus=4, duration=1e6, batch_size=256, deadline=7200.0)
    job = engine.submit(spec, now=0.0)
    if beside:
        engine.submit(JobSpec(gpus=1, duration=1e6), now=0.0)
    engine.round(0.0)
    assert job.size == 1
    rec = {"batch_size": 256, "step_time": 1.2, "compute_time": 1.2, "num_gpus": 1, "timed_steps": 8}
    ingest(job, [{**rec, "t": t, "progress": t / 760.0} for t in range(10, 61, 10)])
    engine.wake()
    engine.round(60.0)
    assert job.size == (1 if beside else 2)  # 2: twice what it was measured on, as far as the
    # estimate trusts itself


def test_a_job_grown_on_trust_is_grown_again_only_once_measured_on_its_new_size():
    """Seen live (`schedulearn serve --executor slurm --policy qoe`): a job measured on 1 GPU was
    grown to 2 (twice what it was measured on), and the release of its old GPU woke a round
    1.04 s later that grew it to 4 — a second checkpoint-restart before its run on 2 had reported
    anything: `qoe` trusted twice the GPUs a job *had*, measured there or not. Now twice those it
    *reported on*, as `goodput` and Pollux: the next growth waits for the job's rate on its new
    size."""
    from schedulearn.engine import Engine
    from schedulearn.sim.executor import SimExecutor

    engine = Engine(parse_cluster("1x8"), "qoe", SimExecutor())
    spec = JobSpec(gpus="auto", max_gpus=8, duration=1e6, batch_size=256, deadline=560.0)
    job = engine.submit(spec, now=0.0)
    engine.round(0.0)
    assert job.size == 1
    rec = {"batch_size": 256, "step_time": 1.2, "compute_time": 1.2, "timed_steps": 8, "num_gpus": 1}
    ingest(job, [{**rec, "t": t, "progress": t / 1520.0} for t in range(10, 61, 10)])
    engine.wake()
    engine.round(60.0)  # 1520 GPU-s of work, 500 s left: behind on 1 GPU, grown to its cap
    assert job.size == 2 and job.restarts == 1
    engine.wake()
    engine.round(61.0)  # nothing reported from its 2 GPUs yet: 2 is all its estimate trusts
    assert job.size == 2 and job.restarts == 1  # (was: 4, and a second restart)
    on2 = {**rec, "step_time": 0.6, "compute_time": 0.6, "num_gpus": 2, "restart": 1}
    ingest(job, [{**on2, "t": t, "progress": 60 / 1520 + (t - 90) / 760} for t in range(90, 121, 10)])
    engine.wake()
    engine.round(121.0)
    assert job.size == 4 and job.restarts == 2  # its rate on 2 measured: trusted up to 4
