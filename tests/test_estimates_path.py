"""What finished jobs teach later ones of their family: how a run goes (the work each stretch of
progress costs, the gradient statistics along the run) and the step times measured on each
placement; and the `qoe` policy's admission (Moore-Hodgson: the costliest job gives way).

Everything here is built from reports, as live: no ground truth reaches the estimates."""

from __future__ import annotations

import math

import pytest
from schedulearn import estimates
from schedulearn.estimates import PerfParams, estimate, ingest
from schedulearn.estimates.deadline import path_times
from schedulearn.estimates.job import efficiency_gain
from schedulearn.estimates.predict import History
from schedulearn.estimates.reports import PATH_BINS, state
from schedulearn.model import Job, JobSpec, JobState, parse_cluster
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob

TRUE = PerfParams(alpha_c=0.02, beta_c=0.004, alpha_n=0.08, beta_n=0.01, alpha_r=0.02, beta_r=0.002,
                  gamma=1.5)
B, B0, K = 256, 64, 50_000.0  # global batch, initial batch, goodput-seconds the whole run costs
EARLY, LATE = (1.0, 0.5), (1.0, 8.0)  # gradient (sqr, var): the noise grows as the loss falls


def _step(n: int) -> float:
    """Step time of batch B on n packed GPUs (4 a node) under TRUE."""
    return float(TRUE.step_time(-(-n // 4), n, math.ceil(B / n)))


def _goodput(n: int, grad: tuple[float, float]) -> float:
    return B0 * float(efficiency_gain(grad[0], grad[1], B, B0)) / _step(n)


def _spec() -> JobSpec:
    return JobSpec(name="train", user="ana", command=["train"], gpus="auto", max_gpus=16, batch_size=B)


def _run_reports(upto: float = 1.0, t0: float = 0.0, k: float = K) -> list[dict]:
    """Reports of a run of the recipe: the first half on 4 GPUs with EARLY statistics, the second
    on 8 with LATE ones, every 5 % of progress, at the pace its goodput sets (`k` per unit)."""
    out, t, p = [], t0, 0.0
    while p < upto - 1e-9:
        if p:
            n, grad = (4, EARLY) if p <= 0.5 + 1e-9 else (8, LATE)
        else:
            n, grad = 4, EARLY
        out.append({"t": t, "progress": p, "num_gpus": n, "num_nodes": -(-n // 4), "batch_size": B,
                    "step_time": _step(n), "init_batch_size": B0, "max_batch_size": B,
                    "grad_sqr": grad[0], "grad_var": grad[1]})
        n_next, g_next = (4, EARLY) if p < 0.5 - 1e-9 else (8, LATE)
        t += 0.05 * k / _goodput(n_next, g_next)
        p = round(p + 0.05, 10)
    n, grad = (8, LATE) if upto > 0.5 else (4, EARLY)
    out.append({"t": t, "progress": upto, "num_gpus": n, "num_nodes": -(-n // 4), "batch_size": B,
                "step_time": _step(n), "init_batch_size": B0, "max_batch_size": B,
                "grad_sqr": grad[0], "grad_var": grad[1]})
    return out


def family_history(spec: JobSpec | None = None, **extra) -> History:
    """A history that holds one finished run of the recipe (`_run_reports`, each report updated
    with `extra`)."""
    done = Job(id=1, spec=spec or _spec(), submit_time=0.0, state=JobState.succeeded)
    ingest(done, [{**r, **extra} for r in _run_reports()])
    done.extra["work_k"] = K
    history = History()
    history.add(done)
    return history


def test_reports_keep_the_statistics_and_the_work_of_each_stretch_of_the_run():
    job = Job(id=1, spec=_spec(), submit_time=0.0)
    ingest(job, _run_reports())
    st = state(job)
    assert sorted(int(b) for b in st["grad_path"]) == list(range(PATH_BINS))
    assert st["grad_path"]["3"] == list(EARLY) and st["grad_path"]["15"] == list(LATE)
    for b, (work, done) in st["path_work"].items():  # goodput-seconds per unit of progress: K
        assert done == pytest.approx(1 / PATH_BINS)
        assert work / done == pytest.approx(K, rel=1e-6), b


def test_a_family_tells_a_young_job_how_its_run_goes():
    """A job of the family at 5 % of its run, having seen only the EARLY statistics: its time
    left on 8 GPUs follows the family's run — K per unit of progress at the EARLY goodput until
    half-way, at the LATE one after — not today's statistics to the end."""
    history = family_history()
    young = Job(id=2, spec=_spec(), submit_time=0.0)
    ingest(young, _run_reports(upto=0.05))
    est = estimate(young, 0.0, history)
    times = path_times(young, est, 8, 4, 0.0)
    expected = K * (0.45 / _goodput(8, EARLY) + 0.5 / _goodput(8, LATE))
    assert times[8] == pytest.approx(expected, rel=0.01)
    today_only = K * 0.95 / _goodput(8, EARLY)
    assert times[8] < 0.8 * today_only  # what the job's own statistics alone would say
    # the same job without the family's history: nothing to follow
    assert path_times(young, estimate(young, 0.0), 8, 4, 0.0) is None
    # a job that failed teaches no run
    failed = Job(id=3, spec=_spec(), submit_time=0.0, state=JobState.failed)
    ingest(failed, _run_reports())
    fresh = History()
    fresh.add(failed)
    other = Job(id=4, spec=_spec(), submit_time=0.0)
    ingest(other, _run_reports(upto=0.05))
    assert path_times(other, estimate(other, 0.0, fresh), 8, 4, 0.0) is None


def test_a_job_whose_progress_costs_more_than_its_familys_follows_its_own_pace():
    """The same cell run again with twice the epochs: each unit of its progress costs twice the
    work. Its time left followed the family's work per unit for the whole run (the docstring
    said it blended in the job's own); now the job's measured stretches take over as its
    progress reaches TRUST_PROGRESS."""
    from schedulearn.estimates.deadline import TRUST_PROGRESS

    history = family_history()
    for upto, trust in ((0.05, 0.05 / TRUST_PROGRESS), (0.4, 1.0)):
        longer = Job(id=2, spec=_spec(), submit_time=0.0)
        ingest(longer, _run_reports(upto=upto, k=2 * K))
        times = path_times(longer, estimate(longer, 0.0, history), 8, 4, 0.0)
        at_family = K * ((0.5 - min(upto, 0.5)) / _goodput(8, EARLY)
                         + (1 - max(upto, 0.5)) / _goodput(8, LATE))
        assert times[8] == pytest.approx(at_family * (1 + trust), rel=0.02)
    at_family = K * (0.1 / _goodput(8, EARLY) + 0.5 / _goodput(8, LATE))
    for k in (K, 1.2 * K):  # a run like the family's (within LIKE_FAMILY): the family's
        same = Job(id=3, spec=_spec(), submit_time=0.0)
        ingest(same, _run_reports(upto=0.4, k=k))
        times = path_times(same, estimate(same, 0.0, history), 8, 4, 0.0)
        assert times[8] == pytest.approx(at_family, rel=0.01)


def test_a_job_without_statistics_of_its_own_is_judged_by_its_familys():
    """A job of the family that has reported nothing yet (queued, or before its first gradient
    statistics) is judged by the family's statistics at the start of a run (EARLY), not taken
    to scale its batch for free: its goodput at B on 8 GPUs is the throughput times EARLY's
    efficiency. Its own statistics, once reported, take over; without a family, efficiency 1."""
    history = family_history()
    young = Job(id=2, spec=_spec(), submit_time=0.0)
    ingest(young, [{"t": 1, "num_gpus": 4, "batch_size": B, "step_time": _step(4), "init_batch_size": B0,
                    "max_batch_size": B}])  # a step time, no gradient statistics yet
    est = estimate(young, 2.0, history)
    early = B0 * float(efficiency_gain(EARLY[0], EARLY[1], B, B0)) / B
    assert list(est.grad) == list(EARLY)
    assert est.goodput((4, 4)) / est.throughput((4, 4), B) == pytest.approx(early, rel=1e-9)
    assert early < 0.5
    alone = estimate(young, 2.0)  # no family
    assert alone.grad is None and alone.goodput((4, 4)) / alone.throughput((4, 4), B) == pytest.approx(1.0)
    ingest(young, [{"t": 3, "progress": 0.01, "num_gpus": 4, "batch_size": B, "step_time": _step(4),
                    "init_batch_size": B0, "max_batch_size": B, "grad_sqr": 1.0, "grad_var": 3.0}])
    own = estimate(young, 4.0, history)
    assert list(own.grad) == [1.0, 3.0]
    assert own.goodput((4, 4)) / own.throughput((4, 4), B) == pytest.approx(
        B0 * float(efficiency_gain(1.0, 3.0, B, B0)) / B, rel=1e-9)


def test_a_measured_placement_overrides_the_smooth_fit():
    """The fitted step-time model is smooth; where a (nodes, GPUs) pair was measured, its goodput
    is the measured one (here a second node 30 % slower than the model's shape allows)."""
    job = Job(id=1, spec=JobSpec(command=["x"], gpus="auto", max_gpus=16, batch_size=B), submit_time=0.0)
    slow = 1.3 * _step(8)
    ingest(job, [{"t": 1, "num_gpus": 1, "batch_size": B, "step_time": _step(1)},
                 {"t": 2, "num_gpus": 4, "batch_size": B, "step_time": _step(4)},
                 {"t": 3, "num_gpus": 8, "num_nodes": 2, "batch_size": B, "step_time": slow}])
    est = estimate(job, 0.0)
    assert est.goodput((4, 4)) == pytest.approx(B / slow, rel=1e-6)
    assert est.throughput((4, 4), B) == pytest.approx(B / slow, rel=1e-6)
    assert est.goodput((4,)) == pytest.approx(B / _step(4), rel=1e-6)


def _elastic(name: str, gpus: int, duration: float, deadline: float, most: int = 8) -> TraceJob:
    spec = JobSpec(name=name, gpus=gpus, min_gpus=1, max_gpus=most, duration=duration, deadline=deadline)
    return TraceJob(0.0, spec, name)


def test_qoe_lets_the_costliest_job_give_way_so_more_deadlines_are_met():
    """8 GPUs; by t = 600 a big job needs 8 x 550 GPU-seconds and two small ones (2 GPUs at
    most) 2 x 515 each: not all fit, and the small ones make it only if they start in the first
    round (at 60 s, 10 s to start). Earliest deadline first (`edf`, and `qoe` before its
    admission rule) starts the big one (due first) and meets at most one; `qoe` leaves the big
    one to best effort at once (it still runs to its end) and meets two."""
    trace = [_elastic("big", 8, 550, 590), _elastic("small-a", 2, 515, 600, most=2),
             _elastic("small-b", 2, 515, 600, most=2)]
    met = {}
    for policy in ("qoe", "edf"):
        r = simulate(trace, parse_cluster("1x8"), policy, interval=60, restart_penalty=10)
        jobs = {j.spec.name: j for j in r.jobs}
        met[policy] = sorted(n for n, j in jobs.items() if j.end_time <= j.spec.deadline)
        assert all(j.state.value == "succeeded" for j in jobs.values())
    assert met["qoe"] == ["small-a", "small-b"] and len(met["edf"]) < 2, met


def test_a_job_the_policy_gives_up_on_is_told_it_will_miss():
    """The same three jobs: `qoe` leaves the big one to best effort in its first round. Its
    estimate alone does not say it will miss (nothing measured yet: `unknown`), but the policy's
    decision does: its user reads `will_miss` from then on, with `given_up` naming the policy,
    long before its deadline; under `edf`, which plans for every deadline, it is never flagged
    so while it runs."""
    trace = [_elastic("big", 8, 550, 590), _elastic("small-a", 2, 515, 600, most=2),
             _elastic("small-b", 2, 515, 600, most=2)]
    seen: dict[str, list] = {}

    def watch(name):
        def attach(engine):
            def listen(e):
                if e.get("event") == "deadline" and e["job"]["name"] == "big":
                    job = engine.jobs[e["job"]["id"]]
                    alone = estimates.deadline_summary(job, engine.clock(), engine.history,
                                                       engine.total_gpus, engine.per_node)
                    seen.setdefault(name, []).append((engine.clock(), e["job"]["deadline_status"],
                                                      e["job"].get("given_up"), alone["deadline_status"]))
            engine.listeners.append(listen)
        return attach

    for policy in ("qoe", "edf"):
        simulate(trace, parse_cluster("1x8"), policy, interval=60, restart_penalty=10,
                 actions=[(0, watch(policy))])
    t, by, alone = next((t, by, alone) for t, status, by, alone in seen["qoe"] if status == "will_miss")
    assert by == "qoe" and alone != "will_miss" and t <= 60, seen["qoe"]  # (its deadline: 590)
    assert not any(s == "will_miss" for _, s, _, _ in seen.get("edf", [])), seen.get("edf")


def test_a_newcomer_its_family_says_cannot_make_it_is_not_planned():
    """A job of the family that has reported nothing yet: its time left is its family's run. No
    size finishes it by the deadline, but where its fastest size (a restart counted) needs at
    most `tolerance` (1.5x) the time left — its estimate is a guess — it is planned on the GPUs
    its user asked for; past that it is not planned at all (it took its 2 GPUs before, ahead of
    the jobs due later: earliest deadline first)."""
    from schedulearn.estimates.deadline import times_left
    from schedulearn.policies.base import RoundContext
    from schedulearn.policies.qoe import QoE

    spec = JobSpec(name="train", user="ana", command=["train"], gpus=2, max_gpus=16, batch_size=B)
    history = family_history(spec)
    now = 10.0

    def needs(left: float) -> tuple[int, float]:
        young = Job(id=2, spec=spec.model_copy(update={"deadline": now + left}), submit_time=0.0)
        return QoE().needs(young, RoundContext(now, [], [], {}, {}, {}, 16, history), 4)

    young = Job(id=2, spec=spec.model_copy(update={"deadline": now + 1e6}), submit_time=0.0)
    est = estimate(young, now, history)
    assert est.progress is None
    hope = times_left(young, est, 16, 4, now, history.predict(young), True)
    fastest = min(hope[1:]) + QoE.restart_cost
    assert needs(fastest / 1.2) == (2, pytest.approx(fastest / 1.2))  # a guess 1.2x off: it may make it
    assert needs(fastest / 1.6) == (0, 0.0)
