"""In simulation, policies learn of a job only what it reports (`--estimates reported`, the
default), exactly as live; `--estimates oracle` differs only in what the estimator is fed."""

import json

import pytest
from schedulearn.engine import Engine
from schedulearn.estimates import Estimate, estimate
from schedulearn.model import Job, JobSpec, JobState, parse_cluster, virtual_cluster
from schedulearn.sim.apps import get_profile
from schedulearn.sim.executor import RigidModel, SimExecutor, live_model
from schedulearn.sim.oracle import OracleEstimate
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob, load_trace
from schedulearn.store import persisted_extra


class Hidden(RigidModel):
    """A job whose reports say nothing about its length: step times of a Pollux-style model
    (compute 0.01 + 0.005 m s per micro-batch of m, 0.02 s to synchronise), no progress. Its
    true work (seconds on one GPU) is set per job and never reported."""

    def __init__(self, work: float):
        self.work = work

    @staticmethod
    def step(r: int) -> tuple[float, float]:
        compute = 0.01 + 0.005 * 64 / r
        return compute + (0.02 if r > 1 else 0.0), compute

    def advance(self, progress, shape, bsz, dt):
        rate = self.step(1)[0] / self.step(sum(shape))[0]  # 1-GPU seconds per second
        need = self.work - progress
        if rate * dt >= need:
            return self.work, need / rate
        return progress + rate * dt, None

    def report(self, progress, shape, bsz):
        step, compute = self.step(sum(shape))
        return {"step_time": step, "compute_time": compute, "batch_size": 64}


def _twins(short_first: bool, estimates: str):
    """Two jobs with the same spec and the same reports; one has 10x the work of the other."""
    works = {1: 2_000.0, 2: 20_000.0} if short_first else {1: 20_000.0, 2: 2_000.0}
    spec = JobSpec(name="twin", gpus=1, min_gpus=1, max_gpus=8, duration=1.0)
    trace = [TraceJob(0.0, spec, "t:1"), TraceJob(0.0, spec, "t:2")]
    ex = SimExecutor(restart_penalty=30, model=lambda job: Hidden(works[job.id]), estimates=estimates)
    r = simulate(trace, parse_cluster("1x8"), "goodput", interval=60, executor=ex, record=True)
    first_end = min(j.end_time for j in r.jobs)
    sizes = [(t, jid, sum(len(v) for v in alloc.values())) for t, jid, alloc in r.history if t < first_end]
    return sizes, r


def test_a_policy_cannot_reach_the_true_remaining_work():
    """Swapping the hidden work of two identical-looking jobs changes nothing the policy decides
    until one ends (reported); fed the truth (oracle), the shorter job gets more GPUs."""
    a, ra = _twins(True, "reported")
    b, rb = _twins(False, "reported")
    assert a == b and len(a) >= 2
    assert any(n > 1 for _, _, n in a)  # it did size them (the decisions are not trivial)
    for run in (ra, rb):
        for job in run.jobs:
            assert "_oracle" not in job.extra
            assert "grad" not in job.extra["reports"] and "progress" not in job.extra["reports"]
    oa, _ = _twins(True, "oracle")
    ob, _ = _twins(False, "oracle")
    assert oa != ob
    big = {t: n for t, jid, n in oa if jid == 1}  # job 1 is the short one in run `oa`
    small = {t: n for t, jid, n in ob if jid == 1}  # ... and the long one in `ob`
    assert any(big[t] > small.get(t, 0) for t in big)


def _workload(tmp_path):
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n"
                    "a,0,cifar10,4,512\nb,30,bert,2,96\nc,90,cifar10,2,256\nd,100,ncf,1,32768\n")
    return load_trace(path)


def _run(trace, policy, estimates):
    return simulate(trace, parse_cluster("2x4"), policy, interval=60, restart_penalty=30, estimates=estimates)


def test_the_modes_differ_only_in_what_the_estimator_is_fed(tmp_path):
    """The simulated jobs run and report the same in both modes (a policy that reads no
    estimates decides the same); only the oracle's jobs carry the truth, and only there."""
    trace = _workload(tmp_path)
    reported, oracle = (_run(trace, "las", mode) for mode in ("reported", "oracle"))
    ends = [[(j.end_time, j.restarts) for j in r.jobs] for r in (reported, oracle)]
    assert ends[0] == ends[1]
    assert [j.extra["reports"] for j in reported.jobs] == [j.extra["reports"] for j in oracle.jobs]
    assert all("_oracle" in j.extra for j in oracle.jobs)

    run = _run(trace, "goodput", "reported")
    for job in run.jobs:
        assert "_oracle" not in job.extra
        json.dumps(persisted_extra(job.extra))  # what the store keeps: plain data
        private = {k: v for k, v in job.extra.items() if k.startswith("_")}
        caches = {"_estimate", "_estimate_prior", "_perf", "_perf_prior"}  # the estimator's own
        assert set(private) <= caches, set(private)
        est = estimate(job, job.end_time)
        assert type(est) is Estimate
    run = _run(trace, "goodput", "oracle")
    for job in run.jobs:
        assert isinstance(job.extra["_oracle"](job.end_time), OracleEstimate)
        assert issubclass(OracleEstimate, Estimate)  # the policy calls the same interface


def test_simulated_jobs_report_what_live_jobs_report(tmp_path):
    """Step times on the placements they ran on, gradient statistics, batch bounds, progress."""
    run = _run(_workload(tmp_path), "goodput", "reported")
    assert run.metrics["jobs"] == 4
    cifar = next(j for j in run.jobs if j.spec.name == "a")
    st = cifar.extra["reports"]
    assert st["configs"] and st["max_gpus"] >= 1
    assert st["grad"][0] > 0 and st["grad"][1] > 0
    assert (st["init_batch_size"], st["max_batch_size"]) == (128, 4096)
    assert 0 < st["progress"] <= 1 and st["spans"]
    assert cifar.extra["work_s1"] > 0  # what it needed, learnt by the history
    assert run.engine.history.count == 4


class _Link:
    """What the tests below need of the engine: the exits the executor reports."""

    def __init__(self):
        self.exits: list[tuple] = []

    def job_exited(self, job_id, code, reason="", now=None):
        self.exits.append((job_id, code, reason, now))


def _cifar(job_id: int) -> Job:
    job = Job(id=job_id, spec=JobSpec(name="c", application="cifar10", gpus=2, command=["sim"]),
              submit_time=0.0)
    job.batch_size, job.alloc = 256, {"n0": [0, 1]}
    return job


def test_a_run_that_ends_between_reports_reports_where_it_ended():
    """A live job reports every step and its last lines are read as its run ends; a simulated
    one reports once a round, and once more when its run ends: preempted between two reports,
    its progress while it waits is where it stopped (here, as after a move that found no GPUs,
    the engine has emptied its allocation by then: the progress is still that of the GPUs it
    had); done between two, its last report says done."""
    ex = SimExecutor(restart_penalty=0)
    ex.engine = link = _Link()
    job = _cifar(1)
    ex.start(job, 0.0)
    ex.advance(60.0)
    reported = job.extra["reports"]["progress"]
    assert reported > 0
    job.alloc = {}  # as `Engine._move` leaves it when no GPU is left for it
    ex.stop(job, "preempt", 100.0)
    assert link.exits == [(1, -15, "preempted", 100.0)]  # (the reason, as a live run's)
    truth = get_profile("cifar10").fraction_done(ex.progress(job, 100.0))
    assert job.extra["reports"]["progress"] == pytest.approx(truth) and truth > reported * 1.5

    done = _cifar(2)
    ex.start(done, 0.0)
    finish = ex.next_event_time()
    assert finish is not None
    ex.advance(60.0 * (finish // 60))  # its last report a round before its end
    assert done.extra["reports"]["progress"] < 1.0
    ex.advance(finish + 30.0)
    assert link.exits[-1] == (2, 0, "", finish)
    assert done.extra["reports"]["progress"] == 1.0


def test_a_live_sim_job_without_a_batch_size_starts_at_its_applications_initial_one():
    """The server's `sim` executor: a job that names an application but no batch size starts at
    the smallest batch its application accepts (before any report nothing else tells), runs,
    reports and ends; it once failed to start and left a run behind whose every step raised, so
    that no later round ran."""
    eng = Engine(virtual_cluster(1, 4), "qoe", executor=SimExecutor(model=live_model), clock=lambda: 0.0)
    job = eng.submit({"name": "c", "command": ["sim"], "application": "cifar10", "gpus": "auto",
                      "max_gpus": 4, "deadline": 4 * 3600.0}, now=0.0)
    other = eng.submit({"name": "d", "command": ["sim"], "duration": 120.0, "gpus": 1}, now=0.0)
    t = 0.0
    while not (job.state.final and other.state.final) and t < 6 * 3600:
        eng.executor.advance(t)
        eng.round(t)
        t += 60.0
    assert job.state is JobState.succeeded, job.reason
    assert other.state is JobState.succeeded
    assert job.extra["reports"]["progress"] == 1.0
    assert get_profile("cifar10").init_batch_size in {
        int(key.split(",")[2]) * int(key.split(",")[1]) for key in job.extra["reports"]["configs"]}


def test_a_run_that_fails_to_start_leaves_nothing_behind():
    """A job model that cannot run fails its job alone; the other jobs' runs go on."""
    class Broken(RigidModel):
        def advance(self, progress, shape, bsz, dt):
            raise ValueError("no such model")

    def model(job):
        kind = Broken if job.spec.name == "broken" else RigidModel
        return kind(job.spec.duration, job.spec.requested)

    eng = Engine(virtual_cluster(1, 2), "fifo", executor=SimExecutor(model=model), clock=lambda: 0.0)
    broken = eng.submit({"name": "broken", "command": ["sim"], "duration": 60.0, "gpus": 1}, now=0.0)
    fine = eng.submit({"name": "fine", "command": ["sim"], "duration": 60.0, "gpus": 1}, now=0.0)
    eng.round(0.0)
    assert broken.state is JobState.failed and "no such model" in broken.reason
    assert broken.id not in eng.executor.runs
    eng.executor.advance(120.0)
    eng.round(120.0)
    assert fine.state is JobState.succeeded


def test_unknown_estimates_mode_is_one_line():
    with pytest.raises(ValueError, match=r"^estimates: expected one of reported, oracle, got 'truth'$"):
        SimExecutor(estimates="truth")
