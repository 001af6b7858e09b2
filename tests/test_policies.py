"""Each policy on small hand-computed scenarios: exact start and finish times (virtual clock),
placements, and the engine driven round by round.

Scenario times are worked out in the comments; a rigid job of `gpus` x `duration` is
`gpus * duration` GPU-seconds of work, done faster on more GPUs (linear speed-up).
"""

from __future__ import annotations

import pytest
from schedulearn import policies
from schedulearn.engine import Engine
from schedulearn.model import JobSpec, JobState, Node, virtual_cluster
from schedulearn.placement import FreePool, shrink
from schedulearn.sim.executor import SimExecutor
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob


def trace(*rows) -> list[TraceJob]:
    """rows: (name, submit_time, gpus, duration[, extra spec fields])."""
    out = []
    for row in rows:
        name, t, gpus, duration, *extra = row
        spec = JobSpec(name=name, gpus=gpus, duration=duration, **(extra[0] if extra else {}))
        out.append(TraceJob(t, spec, name))
    return out


def times(result) -> dict[str, tuple[float, float]]:
    return {j.spec.name: (j.start_time, j.end_time) for j in result.jobs}


def by_name(result):
    return {j.spec.name: j for j in result.jobs}


# One host of 4 GPUs. A takes 3 GPUs for 100 s; B wants 2 (10 s later), C wants 1 (20 s later).
HOL = trace(("A", 0, 3, 100), ("B", 10, 2, 50), ("C", 20, 1, 10))


@pytest.mark.parametrize("policy", ["fifo", "round-robin", "elastic-fifo"])
def test_fifo_head_of_line_blocking(policy):
    # B cannot fit next to A (1 GPU free), and C, though it fits, waits behind B.
    r = simulate(HOL, virtual_cluster(1, 4), policy)
    assert times(r) == {"A": (0, 100), "B": (100, 150), "C": (100, 110)}
    assert r.metrics["avg_jct_s"] == pytest.approx(((100 - 0) + (150 - 10) + (110 - 20)) / 3)


def test_las_lets_a_small_job_pass():
    # LAS walks every job and starts what fits: C runs on the free GPU at once.
    r = simulate(HOL, virtual_cluster(1, 4), "las")
    assert times(r) == {"A": (0, 100), "B": (100, 150), "C": (20, 30)}


def short_las(threshold: float) -> policies.Policy:
    las = policies.create("las")
    las.threshold = threshold  # GPU-seconds; the class default is 16 GPU-hours
    return las


def test_las_preempts_a_demoted_long_job_for_a_short_one():
    # One GPU. L (1000 s) from 0; S (30 s) at 50. With a 100 GPU-s threshold, L is demoted at
    # t=100; the next 60-s tick after S's arrival is t=110: S (first queue) runs 110-140, L is
    # preempted and resumes at 140 with 1000-110 = 890 s of work left: it ends at 1030.
    jobs = trace(("L", 0, 1, 1000), ("S", 50, 1, 30))
    r = simulate(jobs, virtual_cluster(1, 1), short_las(100.0), tick=60.0)
    assert times(r) == {"L": (0, 1030), "S": (110, 140)}
    assert by_name(r)["L"].restarts == 1 and by_name(r)["S"].restarts == 0
    assert by_name(r)["L"].run_base == pytest.approx(1000)  # 110 + 890 s on the GPU
    # With the default threshold (16 GPU-hours) L is never demoted: S waits for it.
    r = simulate(jobs, virtual_cluster(1, 1), "las")
    assert times(r) == {"L": (0, 1000), "S": (1000, 1030)}


def test_las_first_queue_is_first_come_first_served():
    # Two jobs in the first queue compete for 1 GPU: the earlier one keeps it (no preemption
    # inside a queue), whatever the later one's size.
    jobs = trace(("early", 0, 1, 500), ("late", 10, 1, 5))
    r = simulate(jobs, virtual_cluster(1, 1), "las")
    assert times(r) == {"early": (0, 500), "late": (500, 505)}


def test_las_takes_gpus_from_the_host_with_most_free():
    engine = Engine([Node.virtual_node("a", 4), Node.virtual_node("b", 2)], "las",
                    executor=SimExecutor(), clock=lambda: 0.0)
    small = engine.submit(JobSpec(gpus=1, duration=10), now=0)
    engine.round(0)
    assert small.alloc == {"a": (0,)}  # best fit would have taken b


def test_elastic_fifo_grows_into_idle_gpus_and_shrinks_for_a_queued_job():
    # E asks 1 GPU (up to 4), 400 GPU-s of work; R (2 GPUs, 50 s) comes at t=20.
    # t=0: E starts on all 4 idle GPUs. t=20: E (80 done) shrinks to 2 so R can start.
    # t=70: R ends, E (80 + 2*50 = 180 done) grows back to 4: 220 left / 4 = 55 s -> 125.
    jobs = trace(("E", 0, 1, 400, {"max_gpus": 4}), ("R", 20, 2, 50))
    r = simulate(jobs, virtual_cluster(1, 4), "elastic-fifo")
    assert times(r) == {"E": (0, 125), "R": (20, 70)}
    assert by_name(r)["E"].restarts == 2  # a shrink and a grow, each a checkpoint-restart
    assert by_name(r)["E"].attained_base == pytest.approx(400)
    # Plain FIFO never resizes: E runs on its 1 GPU for 400 s.
    r = simulate(jobs, virtual_cluster(1, 4), "fifo")
    assert times(r) == {"E": (0, 400), "R": (20, 70)}
    assert by_name(r)["E"].restarts == 0


def test_elastic_fifo_shrinks_auto_job_only_as_far_as_needed_and_not_below_min():
    # E2: gpus=auto, min 2 GPUs, 400 GPU-s. R1 (1 GPU, 30 s) at 10: E2 gives 1 GPU (4 -> 3),
    # 40 done at t=10, +90 by t=40, then back to 4: 270/4 = 67.5 s -> 107.5.
    e2 = ("E2", 0, "auto", 200, {"min_gpus": 2})
    r = simulate(trace(e2, ("R1", 10, 1, 30)), virtual_cluster(1, 4), "elastic-fifo")
    assert times(r) == {"E2": (0, 107.5), "R1": (10, 40)}
    assert by_name(r)["E2"].restarts == 2
    # R3 needs 3 GPUs: E2 could give only 2 (down to its minimum): no shrink, R3 waits.
    r = simulate(trace(e2, ("R3", 10, 3, 10)), virtual_cluster(1, 4), "elastic-fifo")
    assert times(r) == {"E2": (0, 100), "R3": (100, 110)}
    assert by_name(r)["E2"].restarts == 0


def test_a_gpu_count_above_its_minimum_gives_way_down_to_it():
    # S: 2 GPUs (may run on 1), 200 GPU-s; R (3 GPUs, 50 s) comes at t=20 on a 4-GPU host.
    # elastic-fifo: t=0 S on 2 (not more: 2 is its count); t=20 S (40 done) shrinks to 1 so R
    # starts; t=70 R ends, S (40 + 50 = 90 done) back on 2: 110/2 = 55 s -> 125.
    jobs = trace(("S", 0, 2, 100, {"min_gpus": 1}), ("R", 20, 3, 50))
    r = simulate(jobs, virtual_cluster(1, 4), "elastic-fifo")
    assert times(r) == {"S": (0, 125), "R": (20, 70)}
    assert by_name(r)["S"].restarts == 2
    # fifo gives it its count and never resizes it: R waits for S's 100 s.
    assert times(simulate(jobs, virtual_cluster(1, 4), "fifo")) == {"S": (0, 100), "R": (100, 150)}


def test_elastic_fifo_engine_round_sizes():
    engine = Engine(virtual_cluster(2, 4), "elastic-fifo", executor=SimExecutor(), clock=lambda: 0.0)
    e = engine.submit(JobSpec(gpus="auto", min_gpus=1, max_gpus=6, duration=100), now=0)
    engine.round(0)
    assert e.size == 6 and len(e.alloc) == 2  # grown to its maximum on the fewest hosts
    q = engine.submit(JobSpec(gpus=4, duration=10), now=1)
    engine.round(1)
    assert e.size == 4 and q.state is JobState.running and q.size == 4
    assert e.restarts == 1
    assert not set(_gpus(e)) & set(_gpus(q))


def _scattered_then_grown(executor=None, **spec):
    """2 hosts of 4. A (3 GPUs, long) fills node0, B (3 GPUs, 10 s) node1; E (auto, 1-4 GPUs)
    grows into the two GPUs left, one on each host. B ends at t=10 and E grows to 4."""
    engine = Engine(virtual_cluster(2, 4), "elastic-fifo", executor=executor or SimExecutor(),
                    clock=lambda: 0.0)
    engine.submit(JobSpec(name="A", gpus=3, duration=1000), now=0)
    b = engine.submit(JobSpec(name="B", gpus=3, duration=10), now=0)
    e = engine.submit(JobSpec(name="E", gpus="auto", min_gpus=1, max_gpus=4, duration=1000, **spec), now=0)
    engine.round(0)
    assert e.size == 2 and len(e.alloc) == 2
    engine.executor.advance(10)
    assert b.state is JobState.succeeded
    engine.round(10)
    return engine, e


def test_a_job_resized_by_a_restart_moves_to_the_fewest_hosts():
    # Kept where it was, E would run on node0:1 + node1:3; it restarts anyway, so it is placed
    # anew: all 4 on node1.
    engine, e = _scattered_then_grown()
    assert e.size == 4 and e.restarts == 1
    assert e.alloc == {"node1": (0, 1, 2, 3)}
    assert engine.pool.total == 1 and engine.pool.count("node0") == 1  # its old GPU is free


def test_a_job_resized_in_place_keeps_its_hosts():
    # Its framework adds workers while the others keep running: E keeps node0 and adds node1's.
    engine, e = _scattered_then_grown(SimExecutor(in_place_penalty=5.0), resize="in-place",
                                      launcher="horovod")
    assert e.size == 4 and e.restarts == 0
    assert len(e.alloc) == 2 and len(e.alloc["node0"]) == 1


class _ConfirmingSim(SimExecutor):
    """A simulated executor that, like the live ones, confirms that an old run is gone
    (`engine.run_released`) before the GPUs it held return to the pool."""
    confirms_release = True


def test_a_moving_job_holds_the_gpus_it_leaves_until_its_old_run_is_gone():
    engine, e = _scattered_then_grown(_ConfirmingSim())
    assert e.alloc == {"node1": (0, 1, 2, 3)}
    assert e.releasing == {"node0": (3,)}  # the GPU it left: held for the old run, not in the pool
    assert engine.pool.total == 0
    engine.run_released(e.id, now=11)
    assert e.releasing == {} and engine.pool.total == 1


class _Scripted(policies.Policy):
    """Wants set by the test, round by round."""
    name = "scripted"
    elastic = True

    def __init__(self):
        self.wants = {}

    def schedule(self, ctx):
        by_name = {j.spec.name: j for j in ctx.jobs}  # in the order of `wants`
        return [(by_name[name], n) for name, n in self.wants.items() if name in by_name]


class _Ticking(_Scripted):
    """A scripted policy whose wants may change at any tick (a round at each)."""
    time_driven = True


class _SlowStopSim(SimExecutor):
    """Runs that stop only when the test says so (and, as in the simulator, confirm nothing)."""
    def __init__(self):
        super().__init__()
        self.stopping = []

    def stop(self, job, why, now):
        self.stopping.append((job, why, now))

    def stopped(self, only=None):
        """The runs being stopped are gone (or only `only`'s)."""
        for job, why, now in [s for s in self.stopping if only in (None, s[0])]:
            super().stop(job, why, now)
        self.stopping = [s for s in self.stopping if only not in (None, s[0])]


@pytest.mark.parametrize("q, e_wants, e_after", [
    (0, 3, {"node0": (2, 3)}),  # E stays where it is, no restart
    (1, 3, {"node0": (3,)}),  # Q, started first, took GPU 2: E restarts on GPU 3
    (2, 1, {}),  # Q took both: E is stopped and waits, holding nothing
])
def test_a_move_that_finds_too_few_free_gpus_keeps_what_is_still_free(q, e_wants, e_after):
    """One host of 4: A runs on GPUs 0,1 and E on 2,3. The policy preempts A and resizes E (a
    restart: E moves), maybe starting Q first; A's run has not stopped yet, so only E's own GPUs
    are free. E keeps those of them still free once the jobs before it took theirs. No GPU is
    ever counted twice: once A's run is gone, every GPU is a job's or free, once."""
    policy, ex = _Scripted(), _SlowStopSim()
    engine = Engine(virtual_cluster(1, 4), policy, executor=ex, clock=lambda: 0.0)
    a = engine.submit(JobSpec(name="A", gpus=2, duration=1000), now=0)
    e = engine.submit(JobSpec(name="E", gpus="auto", min_gpus=1, max_gpus=4, duration=1000), now=0)
    policy.wants = {"A": 2, "E": 2}
    engine.round(0)
    assert a.alloc == {"node0": (0, 1)} and e.alloc == {"node0": (2, 3)}
    engine.submit(JobSpec(name="Q", gpus=max(q, 1), duration=10), now=1)  # (a new round)
    policy.wants = {"Q": q, "E": e_wants} if q else {"E": e_wants}
    engine.round(1)
    assert e.alloc == e_after
    assert e.restarts == (0 if e_after == {"node0": (2, 3)} else 1)
    if not e_after:
        assert e.stopping == "preempt"
    ex.stopped()  # A's run (and E's, if stopped) gone
    assert a.state is JobState.queued and a.alloc == {}
    held = [g for j in engine.jobs.values() for g in _gpus(j)]
    assert len(held) == len(set(held)) and len(held) + engine.pool.total == 4, (held, engine.pool.total)


def test_rounds_wait_for_the_gpus_a_preemption_frees_before_the_plan_that_made_it_goes_on():
    """One host of 4: A and B on one GPU each, C on two. The policy grows C to 4, preempting A and
    B. B's run is gone first: a round then, with A's GPU still held, saw 3 GPUs, too few for C,
    and started B again on its own GPU, to preempt it again at A's exit (seen live, under `qoe`).
    Rounds wait for the preempted runs instead; once both are gone, C gets the four."""
    policy, ex = _Ticking(), _SlowStopSim()
    engine = Engine(virtual_cluster(1, 4), policy, executor=ex, clock=lambda: 0.0)
    a, b, c = (engine.submit(JobSpec(name=name, gpus="auto", max_gpus=4, duration=1000), now=0)
               for name in "ABC")
    policy.wants = {"A": 1, "B": 1, "C": 2}
    engine.round(0)
    assert (a.size, b.size, c.size) == (1, 1, 2)
    policy.wants = {"C": 4, "B": 1, "A": 1}  # (B and A only where C leaves room)
    engine.round(1, tick=True)
    assert a.stopping == b.stopping == "preempt" and c.size == 2  # C: A's and B's GPUs are not free yet
    ex.stopped(b)  # B's run is gone, A's not yet
    assert b.state is JobState.queued and engine.pool.total == 1
    engine.round(2, tick=True)
    assert b.state is JobState.queued and not b.alloc and c.size == 2  # waits for A
    ex.stopped(a)
    engine.round(3, tick=True)
    assert c.size == 4 and not a.alloc and not b.alloc
    assert (a.restarts, b.restarts) == (1, 1)  # one preemption each, no run in between


def test_rounds_wait_for_a_preempted_run_only_so_long():
    """A run that does not stop holds up rounds for `RELEASE_WAIT_S` at most: then they go on with
    the GPUs that are free."""
    from schedulearn.engine import RELEASE_WAIT_S

    policy, ex = _Ticking(), _SlowStopSim()
    engine = Engine(virtual_cluster(1, 3), policy, executor=ex, clock=lambda: 0.0)
    a, b = (engine.submit(JobSpec(name=name, gpus=1, duration=1000), now=0) for name in "AB")
    policy.wants = {"A": 1, "B": 1}
    engine.round(0)
    policy.wants = {"B": 1}
    engine.round(1, tick=True)
    assert a.stopping == "preempt"  # (and its run does not stop)
    q = engine.submit(JobSpec(name="Q", gpus=1, duration=10), now=2)
    policy.wants = {"B": 1, "Q": 1}
    engine.round(2)
    engine.round(RELEASE_WAIT_S, tick=True)
    assert q.state is JobState.queued and engine.pool.total == 1
    engine.round(1 + RELEASE_WAIT_S, tick=True)
    assert q.state is JobState.running and a.stopping == "preempt"


def test_a_restarted_engine_waits_for_a_preemption_it_finds_under_way(tmp_path, monkeypatch):
    """The server stops while a preempted job's run is still stopping: the next one issues the
    stop again, and its rounds wait for that run's GPU as the first one's would have."""
    from schedulearn.store import SqlStore

    class _Reattaching(_SlowStopSim):
        def recover(self, jobs):  # (the runs are still there: nothing to report)
            pass

    url = f"sqlite:///{tmp_path / 's.db'}"
    policy = _Ticking()
    first = Engine(virtual_cluster(1, 3), policy, executor=_SlowStopSim(), store=SqlStore(url),
                   clock=lambda: 0.0)
    a, b = (first.submit(JobSpec(name=name, gpus=1, duration=1000), now=0) for name in "AB")
    policy.wants = {"A": 1, "B": 1}
    first.round(0)
    policy.wants = {"B": 1}
    first.round(1, tick=True)
    assert a.stopping == "preempt"
    first.store.close()
    monkeypatch.setattr(policies, "_plugins", lambda: (_Ticking,))  # (the stored policy, as a plugin)
    ex = _Reattaching()
    again = Engine(virtual_cluster(1, 3), "fifo", executor=ex, store=SqlStore(url), clock=lambda: 2.0)
    policy = again.policy
    assert isinstance(policy, _Ticking)
    assert [(j.id, why) for j, why, _ in ex.stopping] == [(a.id, "preempt")]  # (the stop, again)
    q = again.submit(JobSpec(name="Q", gpus=1, duration=10), now=2)
    policy.wants = {"B": 1, "Q": 1}
    again.round(2)
    assert q.state is JobState.queued and again.pool.total == 1
    again.job_exited(a.id, -15, "", now=3)  # A's run is gone
    again.round(3)
    assert q.state is JobState.running
    again.store.close()


def _gpus(job):
    return [(n, i) for n, idx in job.alloc.items() for i in idx]


def test_round_robin_rotates_the_start_host_job_after_job():
    def placed(policy):
        engine = Engine(virtual_cluster(3, 2), policy, executor=SimExecutor(), clock=lambda: 0.0)
        jobs = [engine.submit(JobSpec(gpus=1, duration=10), now=0) for _ in range(4)]
        engine.round(0)
        return [j.alloc for j in jobs]

    assert placed("round-robin") == [{"node0": (0,)}, {"node1": (0,)}, {"node2": (0,)}, {"node0": (1,)}]
    # FIFO packs best fit instead: the second job fills node0.
    assert placed("fifo") == [{"node0": (0,)}, {"node0": (1,)}, {"node1": (0,)}, {"node1": (1,)}]


def test_round_robin_wraps_over_hosts_for_a_multi_host_job():
    engine = Engine(virtual_cluster(3, 2), "round-robin", executor=SimExecutor(), clock=lambda: 0.0)
    a = engine.submit(JobSpec(gpus=1, duration=10), now=0)
    b = engine.submit(JobSpec(gpus=4, duration=10), now=0)
    engine.round(0)
    assert a.alloc == {"node0": (0,)}
    assert b.alloc == {"node1": (0, 1), "node2": (0, 1)}  # from host 1, in inventory order


def test_fifo_driven_round_by_round():
    engine = Engine(virtual_cluster(1, 4), "fifo", executor=SimExecutor(), clock=lambda: 0.0)
    a = engine.submit(JobSpec(name="A", gpus=3, duration=100), now=0)
    b = engine.submit(JobSpec(name="B", gpus=2, duration=50), now=0)
    c = engine.submit(JobSpec(name="C", gpus=1, duration=10), now=0)
    engine.round(0)
    assert [a.state, b.state, c.state] == [JobState.running, JobState.queued, JobState.queued]
    engine.round(50)  # nothing changed: the round does nothing
    assert b.state is JobState.queued and engine.pool.total == 1
    engine.executor.advance(100)
    assert a.state is JobState.succeeded and a.end_time == 100
    engine.round(100)
    assert (b.state, b.start_time, c.state, c.start_time) == (JobState.running, 100, JobState.running, 100)
    assert engine.pool.total == 1


def test_priority_jumps_the_fifo_queue():
    engine = Engine(virtual_cluster(1, 2), "fifo", executor=SimExecutor(), clock=lambda: 0.0)
    engine.submit(JobSpec(gpus=2, duration=10), now=0)
    engine.round(0)
    low = engine.submit(JobSpec(gpus=2, duration=10), now=1)
    high = engine.submit(JobSpec(gpus=2, duration=10, priority=5), now=2)
    engine.executor.advance(10)
    engine.round(10)
    assert high.state is JobState.running and low.state is JobState.queued


def test_policy_switch_changes_later_decisions_only():
    base = simulate(HOL, virtual_cluster(1, 4), "fifo")
    switched = simulate(HOL, virtual_cluster(1, 4), "fifo",
                        actions=[(15, lambda e: e.set_policy("las"))])
    assert switched.policy == "las"
    before, after = times(base), times(switched)
    assert after["A"] == before["A"]  # started before the switch: untouched
    assert by_name(switched)["A"].restarts == 0
    assert before["C"] == (100, 110) and after["C"] == (20, 30)  # LAS decides C's start


# -- placement ---------------------------------------------------------------------------------
def pool(**free: int) -> FreePool:
    return FreePool([Node.virtual_node(name, n) for name, n in free.items()])


def test_best_fit_one_host_when_it_fits():
    p = pool(a=4, b=2, c=3)
    assert p.best_fit(2) == {"b": (0, 1)}  # the fullest host that still fits
    assert p.best_fit(3) == {"c": (0, 1, 2)}
    assert p.best_fit(1) == {"a": (0,)}  # only a has GPUs left
    assert p.total == 3


def test_best_fit_fewest_hosts_when_none_fits():
    p = pool(a=4, b=2, c=3)
    alloc = p.best_fit(5)
    assert alloc == {"a": (0, 1, 2, 3), "b": (0,)}  # the largest host, then best fit for the rest
    assert p.best_fit(5) is None and p.total == 4
    assert p.best_fit(4) == {"c": (0, 1, 2), "b": (1,)}


def test_pool_take_give_round_trip():
    p = pool(a=4, b=4)
    alloc = p.best_fit(6)
    assert sum(map(len, alloc.values())) == 6 and len(alloc) == 2 and p.total == 2
    p.give(alloc)
    assert p.total == 8 and p.free == {"a": [0, 1, 2, 3], "b": [0, 1, 2, 3]}
    p.take({"a": (1, 3)})
    assert p.free["a"] == [0, 2] and p.best_fit(2) == {"a": (0, 2)}


def test_most_free_first_and_from_host():
    p = pool(a=2, b=4, c=3)
    assert p.most_free_first(5) == {"b": (0, 1, 2, 3), "c": (0,)}
    p = pool(a=2, b=4, c=3)
    assert p.from_host(5, 2) == {"c": (0, 1, 2), "a": (0, 1)}


def test_shrink_keeps_the_hosts_where_the_job_has_most():
    assert shrink({"a": (0,), "b": (0, 1, 2)}, 2) == {"b": (0, 1)}
    assert shrink({"a": (0,), "b": (0, 1, 2)}, 4) == {"b": (0, 1, 2), "a": (0,)}
