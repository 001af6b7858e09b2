"""The engine: decisions identical to the recorded ones, events, cancel, failures, ticks."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path

import pytest
from schedulearn import policies
from schedulearn.engine import Engine, JobFinished, JobNotFound, RealClock
from schedulearn.executors.base import Executor, ExecutorError
from schedulearn.model import Job, JobSpec, JobState, SpecError, virtual_cluster
from schedulearn.policies.elastic_fifo import ElasticFifo
from schedulearn.sim.executor import SimExecutor
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob

DATA = Path(__file__).parent / "data"


def test_decisions_match_golden():
    """Every job's start, end and restarts on fixed scenarios (random traces, 800 Philly jobs;
    all policies, LAS with a 1-hour threshold, 60-s intervals, policy switches) are exactly
    those recorded before the engine was made fast (tests/data/make_golden.py)."""
    sys.path.insert(0, str(DATA))
    try:
        import make_golden
    finally:
        sys.path.remove(str(DATA))
    golden = json.loads((DATA / "golden.json").read_text())
    got = {}
    for name, trace, hosts, gpus in make_golden.scenarios():
        for policy in make_golden.POLICIES:
            got[f"{name}/{policy}"] = make_golden.decisions(trace, hosts, gpus, policy)
        got[f"{name}/las-1h"] = make_golden.decisions(trace, hosts, gpus, make_golden.ShortLas())
        if name.startswith("random"):
            for policy in ("fifo", "elastic-fifo"):
                got[f"{name}/{policy}/interval-60"] = make_golden.decisions(
                    trace, hosts, gpus, policy, interval=60.0)
            at = trace[len(trace) // 2].submit_time
            for a, b in (("fifo", "las"), ("las", "round-robin")):
                got[f"{name}/{a}-then-{b}"] = make_golden.decisions(
                    trace, hosts, gpus, a, actions=[(at, lambda e, b=b: e.set_policy(b))])
    assert set(got) == set(golden)
    for key in golden:
        assert got[key] == golden[key], f"decisions changed in {key}"
    # The scenarios do exercise preemption, resizes and contention.
    assert sum(row[3] for row in golden["random-1-2x4/las-1h"]) > 10
    assert sum(row[3] for row in golden["random-1-2x4/elastic-fifo"]) >= 1


def engine(policy="fifo", hosts=1, gpus=4, **kw) -> Engine:
    return Engine(virtual_cluster(hosts, gpus), policy, executor=SimExecutor(), clock=lambda: 0.0, **kw)


def test_events_reach_listeners_in_order():
    e = engine()
    seen = []
    e.listeners.append(lambda ev: ev["type"] == "job" and seen.append((ev["job"]["id"], ev["event"])))
    a = e.submit(JobSpec(gpus=4, duration=10), now=0)
    b = e.submit(JobSpec(gpus=1, duration=5), now=0)
    e.round(0)
    e.executor.advance(10)
    e.round(10)
    e.executor.advance(15)
    assert seen == [(a.id, "submitted"), (b.id, "submitted"), (a.id, "started"), (a.id, "succeeded"),
                    (b.id, "started"), (b.id, "succeeded")]


def test_a_broken_listener_does_not_break_scheduling():
    e = engine()
    e.listeners.append(lambda ev: 1 / 0)
    job = e.submit(JobSpec(gpus=1, duration=10), now=0)
    e.round(0)
    assert job.state is JobState.running


def test_cancel_queued_and_running():
    e = engine(gpus=2)
    run = e.submit(JobSpec(gpus=2, duration=100), now=0)
    wait = e.submit(JobSpec(gpus=2, duration=100), now=0)
    e.round(0)
    e.cancel(wait.id, now=5)
    assert wait.state is JobState.cancelled and wait.start_time is None
    e.cancel(run.id, now=6)
    assert run.state is JobState.cancelled and run.end_time == 6 and e.pool.total == 2
    with pytest.raises(JobFinished):
        e.cancel(run.id)
    with pytest.raises(JobNotFound, match="job: no job with id 99"):
        e.get(99)
    assert not e.active and not e.running and not e._qjobs


def test_a_job_that_runs_past_its_time_limit_is_stopped_and_fails_with_124():
    """`time_limit` counts run time, all runs together (a preemption pauses the clock, the queue
    does not count): a job of 100 s with a limit of 30 s, queued 10 s behind another, preempted
    after 20 s and queued 15 s more, is stopped after its 30th second of running."""
    e = engine("las", gpus=1)
    e.policy.threshold = 20.0  # LAS demotes a job past 20 GPU-s: the newcomer preempts it
    first = e.submit(JobSpec(gpus=1, duration=10), now=0)
    limited = e.submit(JobSpec(gpus=1, duration=100, time_limit=30.0), now=0)
    seen = []
    e.listeners.append(lambda ev: ev["type"] == "job" and ev["job"]["id"] == limited.id
                       and seen.append(ev["event"]))
    e.round(0)
    e.executor.advance(10)
    e.round(10)  # first ended: limited starts
    assert first.state is JobState.succeeded and limited.state is JobState.running
    assert e.next_time_limit() == 40
    again = e.submit(JobSpec(gpus=1, duration=15), now=30)
    e.round(30, tick=True)  # limited has 20 GPU-s: demoted below the newcomer, preempted
    assert limited.state is JobState.queued and again.state is JobState.running
    assert e.next_time_limit() == math.inf  # (no clock runs while it waits)
    e.round(44, tick=True)
    assert limited.state is JobState.queued
    e.executor.advance(45)
    e.round(45)
    assert limited.state is JobState.running and e.next_time_limit() == 55
    e.round(54.5, tick=True)
    assert limited.state is JobState.running
    e.round(55, tick=True)  # 20 s + 10 s of running
    assert limited.state is JobState.failed and limited.exit_code == 124 and limited.end_time == 55
    assert limited.reason == "stopped at its time limit (30 s of run time)"
    assert seen[-2:] == ["time-limit", "failed"] and limited.run_time(55) == pytest.approx(30)
    assert not e._limited and e.pool.total == 1


def test_the_simulator_stops_a_job_at_its_time_limit_to_the_second():
    """The virtual clock stops at a time limit (it is no arrival, end or tick)."""
    jobs = [TraceJob(0, JobSpec(gpus=1, duration=500, time_limit=123.0), "capped"),
            TraceJob(0, JobSpec(gpus=1, duration=50), "free")]
    r = simulate(jobs, virtual_cluster(1, 2), "fifo")
    capped, free = sorted(r.jobs, key=lambda j: j.spec.name)
    assert (capped.state, capped.end_time, capped.exit_code) == (JobState.failed, 123.0, 124)
    assert (free.state, free.end_time) == (JobState.succeeded, 50.0)


def test_the_live_loop_wakes_at_a_time_limit_not_at_its_next_tick():
    """`RealClock` sleeps until the next tick (5 s by default) unless woken; a time limit wakes it:
    a job capped at 0.5 s ends then, not a minute later."""
    async def main() -> Job:
        e = Engine(virtual_cluster(1, 1), "fifo", executor=SimExecutor(), clock=time.time)
        loop = asyncio.create_task(e.run(RealClock(tick=60.0)))
        job = e.submit(JobSpec(gpus=1, duration=1000, time_limit=0.5))
        e.wake()
        try:
            async with asyncio.timeout(10):
                while not job.state.final:
                    await asyncio.sleep(0.02)
        finally:
            e.close()
            e.wake()
            await asyncio.wait_for(loop, 10)
        return job

    job = asyncio.run(main())
    assert job.state is JobState.failed and job.exit_code == 124
    assert 0.5 <= job.end_time - job.start_time < 1.5


def test_queued_jobs_say_what_they_need_what_is_free_and_their_place_in_line():
    e = engine(gpus=4)
    run = e.submit(JobSpec(gpus=3, duration=100), now=0)
    e.round(0)
    low = e.submit(JobSpec(gpus=2, duration=100), now=1)
    high = e.submit(JobSpec(gpus=1, duration=100, priority=5), now=2)
    last = e.submit(JobSpec(gpus=4, duration=100), now=3)
    assert e.job_dict(run, 3)["reason"] == ""  # only a queued job waits
    assert e.job_dict(high, 3)["reason"] == ("waiting: needs 1 GPU, 1 free; 1st in line of 3; the fifo "
                                             "policy starts it when it comes first")
    assert e.job_dict(low, 3)["reason"] == "waiting: needs 2 GPUs, 1 free; 2nd in line of 3"
    assert e.job_dict(last, 3)["reason"] == "waiting: needs 4 GPUs, 1 free; 3rd in line of 3"
    e.cancel(run.id, now=4)
    assert e.job_dict(last, 4)["reason"].startswith("waiting: needs 4 GPUs, 4 free; 3rd in line of 3")


def test_too_big_job_is_rejected_and_nothing_is_kept():
    e = engine(hosts=2, gpus=4)
    with pytest.raises(SpecError, match=r"^gpus: at most 8 \(the GPUs of this cluster\), got 9$"):
        e.submit(JobSpec(gpus=9, duration=1))
    with pytest.raises(SpecError, match="^gpus: at most 8"):
        e.submit(JobSpec(gpus="auto", min_gpus=9, duration=1))
    assert not e.jobs


class Holding(Executor):
    """Starts live jobs (a command) and keeps them running: where they were placed is what counts."""

    def start(self, job, now):
        pass

    def stop(self, job, why, now):
        self.engine.job_exited(job.id, None, "stopped")

    def resize(self, job, old, now):
        pass


def test_a_python_job_is_placed_on_one_host_or_waits_and_says_so():
    """A plain Python job is one process: spread over two hosts it could not start (the launcher
    refused it, and the job failed). It waits for one host with room; an elastic one takes the
    most one host has; one larger than every host is refused at submission."""
    e = Engine(virtual_cluster(2, 4), "fifo", executor=Holding(), clock=lambda: 0.0)
    a = e.submit(JobSpec(command=["a"], gpus=3), now=0)
    b = e.submit(JobSpec(command=["b"], gpus=3), now=0)
    e.round(0)
    assert a.state is b.state is JobState.running and e.pool.total == 2  # one GPU free on each host
    spread = e.submit(JobSpec(command=["d"], gpus=2, launcher="torchrun"), now=1)  # may span hosts
    e.round(1)
    assert spread.state is JobState.running and len(spread.alloc) == 2
    e.cancel(spread.id, now=2)
    c = e.submit(JobSpec(command=["c"], gpus=2), now=2)
    e.round(2)
    assert c.state is JobState.queued and c.alloc == {} and e.pool.total == 2
    assert e.job_dict(c, 2)["reason"] == ("waiting: needs 2 GPUs on one host, at most 1 free on one (2 in "
                                          "all); 1st in line of 1")
    e.set_policy("elastic-fifo")
    e.cancel(a.id, now=3)
    e.round(3)
    assert c.state is JobState.running and len(c.alloc) == 1 and c.size == 2
    # 2 GPUs free on one host, 1 on the other: an elastic one wants 3 and takes the 2
    elastic = e.submit(JobSpec(command=["e"], gpus=1, max_gpus=4), now=4)
    e.round(4)
    assert elastic.state is JobState.running and len(elastic.alloc) == 1 and elastic.size == 2
    with pytest.raises(SpecError, match=r"^gpus: a python job is one process, on one host: at most 4 GPUs "
                                        r"here \(the largest host\), got 5; the torchrun and horovod"):
        e.submit(JobSpec(command=["x"], gpus=5))
    e.submit(JobSpec(command=["x"], gpus=5, launcher="torchrun"))  # torchrun spans hosts



@pytest.mark.parametrize("policy", ["las", "goodput", "qoe", "edf"])
def test_a_python_job_no_host_can_hold_does_not_hold_back_the_jobs_behind_it(policy):
    """One GPU free on each host: a 2-GPU python job (one host) cannot start, a 2-GPU torchrun
    job behind it can. The python job used to be counted against the GPUs left (and the elastic
    policies planned for it), so the torchrun job waited for as long as the hosts stayed split."""
    e = Engine(virtual_cluster(2, 4), policy, executor=Holding(), clock=lambda: 0.0)
    a = e.submit(JobSpec(command=["a"], gpus=3), now=0)
    b = e.submit(JobSpec(command=["b"], gpus=3), now=0)
    e.round(0)
    c = e.submit(JobSpec(command=["c"], gpus=2), now=1)
    d = e.submit(JobSpec(command=["d"], gpus=2, launcher="torchrun"), now=2)
    e.round(3)
    assert (a.state, b.state, c.state, d.state) == (JobState.running, JobState.running, JobState.queued,
                                                    JobState.running)
    assert len(d.alloc) == 2 and e.pool.total == 0
    assert e.job_dict(c, 3)["reason"].startswith("waiting: needs 2 GPUs on one host, at most 0 free on one")
    e.cancel(a.id, now=4)
    e.round(4)
    assert c.state is JobState.running and len(c.alloc) == 1



def test_python_jobs_are_placed_before_the_jobs_that_may_span_hosts_on_the_host_weighed_for_them():
    """las places most-free-first: a torchrun job ahead in line took 2 GPUs of the one host
    with 4 free, and the 4-GPU python job behind it, weighed as fitting there, had nowhere to go."""
    e = Engine(virtual_cluster(2, 4), "las", executor=Holding(), clock=lambda: 0.0)
    held = e.submit(JobSpec(command=["held"], gpus=2), now=0)
    e.round(0)
    d = e.submit(JobSpec(command=["d"], gpus=2, launcher="torchrun"), now=1)
    c = e.submit(JobSpec(command=["c"], gpus=4), now=1)
    e.round(1)
    assert held.state is d.state is c.state is JobState.running
    assert len(c.alloc) == 1 and d.alloc.keys() == held.alloc.keys() and e.pool.total == 0


def test_an_elastic_python_job_grows_into_what_one_host_has_free_and_stops_no_one():
    """Elastic FIFO grows e (1 GPU, up to 4) into the idle GPUs: 4 fit the count, not one host.
    e is first in line, yet only its minimum could be promised out of y's GPUs: it takes the
    most one host has free (2, a restart) and y, after it in line, keeps running."""
    e = Engine(virtual_cluster(2, 4), "fifo", executor=Holding(), clock=lambda: 0.0)
    grows = e.submit(JobSpec(command=["e"], gpus=1, max_gpus=4), now=0)
    y = e.submit(JobSpec(command=["y"], gpus=2), now=0)
    z = e.submit(JobSpec(command=["z"], gpus=2, launcher="torchrun"), now=0)
    e.round(0)
    assert grows.alloc.keys() == y.alloc.keys() and grows.size == 1
    e.set_policy("elastic-fifo")
    e.round(1)
    assert (grows.size, len(grows.alloc), grows.restarts) == (2, 1, 1)
    assert y.state is z.state is JobState.running and y.restarts == z.restarts == 0

def test_under_fifo_the_python_job_first_in_line_still_blocks_the_line():
    e = Engine(virtual_cluster(2, 4), "elastic-fifo", executor=Holding(), clock=lambda: 0.0)
    for name in "ab":
        e.submit(JobSpec(command=[name], gpus=3), now=0)
    e.round(0)
    c = e.submit(JobSpec(command=["c"], gpus=2), now=1)
    d = e.submit(JobSpec(command=["d"], gpus=2, launcher="torchrun"), now=2)
    e.round(3)
    assert c.state is d.state is JobState.queued and e.pool.total == 2


def test_a_python_job_first_in_the_policys_order_stops_the_job_last_in_it_on_one_host():
    """edf: the job with the earliest deadline comes first. Every GPU is held; on node0 by a
    (a deadline) and b (none), on node1 by x. The python job c, with the earliest deadline, is
    promised node0, and of its jobs the one last in the policy's order, b, stops; a keeps its
    GPUs (capacity alone would have let c in with nowhere to start)."""
    e = Engine(virtual_cluster(2, 4), "edf", executor=Holding(), clock=lambda: 0.0)
    a = e.submit(JobSpec(command=["a"], gpus=2, deadline=7200), now=0)
    b = e.submit(JobSpec(command=["b"], gpus=2), now=0)
    x = e.submit(JobSpec(command=["x"], gpus=4, launcher="torchrun"), now=0)
    e.round(0)
    assert a.alloc.keys() == b.alloc.keys() == {"node0"} and x.alloc.keys() == {"node1"}
    c = e.submit(JobSpec(command=["c"], gpus=2, deadline=3600), now=1)
    e.round(1)
    assert (a.state, b.state, c.state, x.state) == (JobState.running, JobState.queued, JobState.running,
                                                    JobState.running)
    assert c.alloc.keys() == {"node0"} and b.restarts == 1

class FailingExecutor(SimExecutor):
    def start(self, job, now):
        if job.spec.name == "bad":
            raise ExecutorError("image: no such image 'nope'")
        super().start(job, now)


def test_a_job_that_cannot_start_fails_and_frees_its_gpus_for_the_next():
    e = Engine(virtual_cluster(1, 2), "fifo", executor=FailingExecutor(), clock=lambda: 0.0)
    bad = e.submit(JobSpec(name="bad", gpus=2, duration=10), now=0)
    good = e.submit(JobSpec(name="good", gpus=2, duration=10), now=0)
    e.round(0)
    assert bad.state is JobState.failed and bad.reason == "image: no such image 'nope'"
    assert good.state is JobState.queued  # the round had given the GPUs to `bad`
    e.round(0)  # the failure asked for another round
    assert good.state is JobState.running


def test_a_pause_starts_and_moves_nothing_until_resumed_and_survives_a_restart(tmp_path):
    """An operator's pause: no queued job starts, no running job is preempted or resized (LAS
    would preempt the long job for the newcomers; elastic-fifo would shrink it); running jobs
    end as ever; queued ones say why they wait; a restarted engine stays paused; a resume starts
    the queue at once."""
    from schedulearn.store import SqlStore

    url = f"sqlite:///{tmp_path / 's.db'}"
    for policy in ("las", "elastic-fifo"):
        store = SqlStore(url)
        e = engine(policy, gpus=4, store=store)
        e.set_policy(policy)
        seen = []
        e.listeners.append(lambda ev, seen=seen: ev["type"] == "paused" and seen.append(ev["paused"]))
        size = {"gpus": 4} if policy == "las" else {"gpus": "auto", "min_gpus": 1, "max_gpus": 4}
        big = e.submit(JobSpec(**size, duration=1_000_000), now=0)
        e.round(0)

        def gpus(job):
            return sum(len(g) for g in job.alloc.values())

        assert big.state is JobState.running and gpus(big) == 4
        paused = e.pause("carol", "reboot at 19:00", now=10)
        assert paused == {"by": "carol", "since": 10, "reason": "reboot at 19:00"} and seen == [paused]
        small = [e.submit(JobSpec(gpus=1, duration=5), now=20) for _ in range(2)]
        for t in (20, 400, 4000, 40_000):  # (unpaused, LAS preempts it by 40 000 s)
            e.executor.advance(t)
            e.round(t, tick=True)
            assert gpus(big) == 4 and big.restarts == 0, (policy, t)
            assert all(j.state is JobState.queued for j in small)
        why = e.waiting_reason(small[0])
        assert why.startswith("waiting: scheduling paused by carol (reboot at 19:00); "), why
        store.close()
        again = engine(policy, gpus=4, store=SqlStore(url))  # a restart
        assert again.paused == paused
        again.resume("carol", now=50_000)
        assert again.paused is None
        again.round(50_000)
        assert all(again.get(j.id).state is JobState.running for j in small), policy
        again.store.close()
        (tmp_path / "s.db").unlink()


@pytest.mark.parametrize("policy, needs", [("fifo", "needs 2 GPUs, 1 free"), ("las", "needs 2 GPUs, 1 free"),
                                            ("elastic-fifo", "needs 1 GPU, 1 free")])
def test_a_waiting_job_needs_what_the_policy_would_start_it_on(policy, needs):
    """`gpus=2, min_gpus=1`: a rigid policy starts it on its 2 GPUs, an elastic one on 1."""
    e = engine(policy, gpus=4)
    e.submit(JobSpec(gpus=3, duration=100), now=0)
    e.round(0)
    waits = e.submit(JobSpec(gpus=2, min_gpus=1, duration=100), now=1)
    assert needs in e.waiting_reason(waits)


def test_set_policy_takes_effect_at_the_next_round_and_keeps_running_jobs():
    e = engine(gpus=4)
    a = e.submit(JobSpec(gpus=3, duration=100), now=0)
    e.submit(JobSpec(gpus=2, duration=100), now=1)
    c = e.submit(JobSpec(gpus=1, duration=100), now=2)
    e.round(2)
    assert c.state is JobState.queued  # fifo: blocked behind b
    policy = e.set_policy("las")
    assert policy.name == "las" and e.policy is policy and c.state is JobState.queued
    e.round(3)
    assert c.state is JobState.running and a.state is JobState.running and a.restarts == 0
    with pytest.raises(SpecError, match="^policy: unknown 'nope'; available: fifo, elastic-fifo"):
        e.set_policy("nope")
    assert e.policy is policy


def test_las_ticks_skip_rounds_until_a_job_can_cross_the_threshold():
    las = policies.create("las")
    las.threshold = 100.0
    e = Engine(virtual_cluster(1, 1), las, executor=SimExecutor(), clock=lambda: 0.0)
    long = e.submit(JobSpec(gpus=1, duration=1000), now=0)
    e.round(0)
    short = e.submit(JobSpec(gpus=1, duration=10), now=10)
    e.round(10)
    rounds = e.rounds
    e.round(70, tick=True)  # long has 70 GPU-s: below the threshold, nothing can change
    assert e.rounds == rounds and short.state is JobState.queued
    e.round(130, tick=True)  # long crossed at t=100: demoted and preempted
    assert e.rounds == rounds + 1
    assert short.state is JobState.running and long.state is JobState.queued and long.restarts == 1


class TimedElastic(ElasticFifo):
    name = "timed-elastic"
    time_driven = True


def test_time_driven_elastic_simulation_ends():
    # Regression: needs_tick() stayed True with no job left, so the virtual clock ticked forever.
    jobs = [TraceJob(0, JobSpec(gpus="auto", duration=100), "a"),
            TraceJob(5, JobSpec(gpus=1, duration=10), "b")]
    r = simulate(jobs, virtual_cluster(1, 2), TimedElastic())
    assert all(j.state is JobState.succeeded for j in r.jobs)
    assert r.rounds < 50


def test_las_demotes_both_jobs_and_goes_back_to_arrival_order():
    # Threshold 50 GPU-s, one GPU. L (200 s) from 0, S (100 s) at 10; ticks every 60 s from 10.
    # t=70: L (70) is demoted, S runs. t=130: S (60) is demoted too; in the second queue the
    # earlier job goes first: L resumes (130 left -> ends 260), S waits, then ends 260+40 = 300.
    las = policies.create("las")
    las.threshold = 50.0
    jobs = [TraceJob(0, JobSpec(name="L", gpus=1, duration=200), "L"),
            TraceJob(10, JobSpec(name="S", gpus=1, duration=100), "S")]
    r = simulate(jobs, virtual_cluster(1, 1), las, tick=60.0)
    got = {j.spec.name: (j.start_time, j.end_time, j.restarts) for j in r.jobs}
    assert got == {"L": (0, 260, 1), "S": (70, 300, 1)}
    assert sum(j.run_base for j in r.jobs) == pytest.approx(300)  # each ran its duration exactly


@pytest.mark.parametrize("first, then", [("fifo", "las"), ("las", "round-robin"), ("las", "elastic-fifo")])
def test_policy_switch_mid_run_keeps_every_earlier_start(first, then):
    sys.path.insert(0, str(DATA))
    try:
        from make_golden import random_trace
    finally:
        sys.path.remove(str(DATA))
    trace = random_trace(2, 200, 8)
    at = trace[100].submit_time
    plain = simulate(trace, virtual_cluster(3, 8), first)
    switched = simulate(trace, virtual_cluster(3, 8), first, actions=[(at, lambda e: e.set_policy(then))])
    assert switched.policy == then
    before = {j.id: j.start_time for j in plain.jobs}
    after = {j.id: j.start_time for j in switched.jobs}
    earlier = [i for i, t in before.items() if t < at]
    assert len(earlier) > 20
    assert all(after[i] == before[i] for i in earlier)
    assert any(after[i] != before[i] for i in before if i not in earlier)  # later decisions differ


class _SlowExit(SimExecutor):
    """The simulator's executor, but a shrunk run's GPUs come back only when the test says its old
    run has exited (`Engine.run_released`), as the local, Docker and Slurm executors confirm."""

    confirms_release = True


def test_no_round_decides_while_a_shrink_gives_its_gpus_back():
    """Seen live (`qoe`, 4 virtual GPUs): a job on all 4 was shrunk to 3 for a newcomer, and a
    round one second later — the old run still exiting, its fourth GPU out of the pool — saw 3 GPUs
    for two jobs and shrank it again to 2, a second restart. Rounds wait for the release (at most
    `RELEASE_WAIT_S`), which wakes the next one."""
    from schedulearn.engine import RELEASE_WAIT_S
    from schedulearn.model import parse_cluster
    from schedulearn.policies.goodput import Goodput

    class Counting(Goodput):
        rounds = 0

        def schedule(self, ctx):
            self.rounds += 1
            return super().schedule(ctx)

    policy = Counting()
    engine = Engine(parse_cluster("1x4"), policy, _SlowExit())
    a = engine.submit(JobSpec(gpus=4, min_gpus=1, max_gpus=4, duration=3600.0), now=0.0)
    engine.round(0.0)
    b = engine.submit(JobSpec(gpus=1, duration=600.0), now=0.0)
    engine.round(0.0)
    assert (a.size, a.restarts, sum(map(len, a.releasing.values())), b.state) == (3, 1, 1, JobState.queued)
    engine.wake()
    engine.round(1.0)
    assert (a.size, a.restarts) == (3, 1)  # before: (2, 2)
    engine.run_released(a.id, 2.0)
    engine.round(2.0)
    assert (a.size, a.restarts, b.size) == (3, 1, 1)
    # a release that never comes holds the rounds back for RELEASE_WAIT_S, no longer
    engine.submit(JobSpec(gpus=4, min_gpus=1, max_gpus=4, duration=3600.0), now=3.0)
    engine.round(3.0)
    assert a.releasing
    before = policy.rounds
    engine.wake()
    engine.round(3.0 + RELEASE_WAIT_S / 2)
    assert policy.rounds == before
    engine.wake()
    engine.round(3.0 + RELEASE_WAIT_S)
    assert policy.rounds == before + 1
