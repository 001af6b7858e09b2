"""The deadline workloads: every shipped file follows the recipe of traces/README.md, the tuning set
(5-8) is what `benchmarks/make_deadline_workloads.py` makes, and the benchmark's feasibility
reference (`bench_deadlines.feasible_alone`) says what the job models allow."""

from __future__ import annotations

from pathlib import Path

import pytest
from schedulearn.model import parse_cluster
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import load_trace

from benchmarks import bench_deadlines as bench
from benchmarks import make_deadline_workloads as make


@pytest.mark.parametrize("w", range(1, 9))
def test_every_deadline_is_lambda_times_the_run_alone_plus_90_s(traces: Path, w: int):
    pairs = make.lambdas(traces / "pollux" / "workloads-deadline" / f"workload-{w}.csv")
    assert len(pairs) == 160
    assert not [lam for lam, t in pairs if make.outside(lam, t)]
    lams = sorted(lam for lam, _ in pairs)  # uniform on [0.5, 1.5]: both ends reached, median ~1
    assert lams[0] < 0.55 and lams[-1] > 1.45 and 0.85 < lams[80] < 1.15


@pytest.mark.parametrize("w", make.GENERATED)
def test_the_tuning_set_is_what_the_script_makes(traces: Path, w: int):
    assert (traces / "pollux" / "workloads-deadline" / f"workload-{w}.csv").read_text() == make.make(w)


def test_a_deadline_off_the_recipe_is_caught():
    t = make.alone_s("cifar10", 4, 512)
    assert 1000 < t < 3000  # about 1,100 s on one node (the profile)
    assert not make.outside((0.5 * t + 0.4) / t, t)  # rounding to whole seconds is allowed
    assert make.outside((0.5 * t - 1) / t, t) and make.outside((1.5 * t + 1) / t, t)


def test_feasible_alone_asks_whether_some_fixed_size_makes_it_from_the_first_round(tmp_path: Path):
    def trace(deadline_s: float) -> list:
        p = tmp_path / "w.csv"
        p.write_text(f"name,time,application,num_replicas,batch_size,deadline\n"
                     f"c,100,cifar10,4,512,{round(deadline_s)}\n")
        return load_trace(p)

    spec = trace(10_000)[0].spec
    fastest = min(bench.alone_fixed_s(spec, n) for n in range(1, spec.max_size(64) + 1))
    assert fastest < bench.alone_fixed_s(spec, 4) < bench.alone_fixed_s(spec, 1)  # more GPUs help
    start = bench.first_round(100) - 100 + 30  # scheduled at 120 s, then 30 s of start
    assert bench.feasible_alone(trace(start + fastest + 2)) == 1.0
    assert bench.feasible_alone(trace(start + fastest - 2)) == 0.0
    assert bench.first_round(0) == 60 and bench.first_round(120) == 120


def test_fit_together_keeps_what_the_gpu_seconds_of_each_window_hold():
    hour = 3600.0
    # Two jobs each needing 40 of 64 GPUs for the same hour: only one fits, the cheaper stays.
    assert bench.fit_together([(0, hour, 40 * hour), (0, hour, 41 * hour)]) == 1
    # The same two an hour apart both fit; so do two that share the hour at 32 GPUs each.
    assert bench.fit_together([(0, hour, 40 * hour), (hour, 2 * hour, 41 * hour)]) == 2
    assert bench.fit_together([(0, hour, 32 * hour), (0, hour, 32 * hour)]) == 2
    # A long job due late gives way to the three short ones it would crowd out of the first hour.
    short = [(0, hour, 20 * hour)] * 3
    assert bench.fit_together([*short, (0, 1.5 * hour, 40 * hour)]) == 3
    # The costliest gives way, not the newest: without the 60-GPU-hour job three short ones fit.
    assert bench.fit_together([(0, hour, 60 * hour)] + [(0, 1.5 * hour, 20 * hour)] * 3) == 3
    # Later arrivals cannot use the GPU-seconds before they arrive: 120 of the 128 GPU-hours of
    # the two hours would do, but two jobs arriving after the first hour need 80 of its 64.
    late = [(0, 2 * hour, 40 * hour), (hour, 2 * hour, 40 * hour), (hour, 2 * hour, 40 * hour)]
    assert bench.fit_together(late) == 2
    assert bench.fit_together([(0, t1, s) for _, t1, s in late]) == 3
    assert bench.fit_together([(0, hour, float("inf"))]) == 0  # no fixed size makes it


def test_cheapest_alone_is_the_fewest_gpu_seconds_that_make_the_budget(tmp_path: Path):
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas,batch_size,deadline\nc,0,cifar10,4,512,99999\n")
    spec = load_trace(p)[0].spec
    one, four = bench.alone_fixed_s(spec, 1), bench.alone_fixed_s(spec, 4)
    assert bench.cheapest_alone(spec, one + 1) == pytest.approx(one)  # one GPU is the cheapest
    cheapest = bench.cheapest_alone(spec, four + 1)  # one GPU too slow: some size from 2 to 4
    assert one < cheapest <= 4 * four
    assert bench.cheapest_alone(spec, 1.0) == float("inf")


def test_each_job_alone_arrives_when_it_arrives_in_the_workload(tmp_path: Path):
    """The "each job alone" reference runs a job at its own arrival, so its first round comes as
    soon after it as in the workload (here 20 s, at 120 s; moved to time 0 it would wait 60 s):
    a deadline a few seconds past its run alone is met."""
    def trace(deadline_s: float) -> list:
        p = tmp_path / "w.csv"
        p.write_text(f"name,time,application,num_replicas,batch_size,deadline\n"
                     f"c,100,cifar10,4,512,{round(deadline_s)}\n")
        return load_trace(p)

    job = simulate(trace(99_999), parse_cluster("16x4"), "goodput", **bench.SETUP).jobs[0]
    jct = job.end_time - job.submit_time  # goodput reads no deadline: the same run for any
    assert bench.ceiling(trace(jct + 5)) == 1.0
    assert bench.ceiling(trace(jct - 5)) == 0.0


def test_by_app_counts_each_applications_deadlines_and_the_near_misses(tmp_path: Path):
    """`bench_deadlines.py --by-app`: one cifar10 job met, one late by 30 s (a near miss), an ncf
    job late by minutes (a miss, not near), and a job without a deadline counted nowhere."""
    p = tmp_path / "w.csv"
    head = "name,time,application,num_replicas,batch_size,deadline\n"
    p.write_text(head + "a,100,cifar10,4,512,10000\n")
    alone = bench.one(load_trace(p), 0, "edf", "reported")
    assert alone["met_by_app"] == {"cifar10": [1, 1]} and alone["near_misses"] == 0
    end = simulate(load_trace(p), parse_cluster("16x4"), "edf", **bench.SETUP).jobs[0].end_time
    p.write_text(head + "a,100,cifar10,4,512,10000\n"  # the same job twice: the same run on edf
                 f"b,100,cifar10,4,512,{round(end - 100 - 30)}\n"
                 "c,100,ncf,1,32768,1\n"  # started at 120 s, ends about 95 s past its deadline
                 "d,100,cifar10,4,512,\n")
    row = bench.one(load_trace(p), 0, "edf", "reported")
    assert row["met_by_app"] == {"cifar10": [1, 2], "ncf": [0, 1]}
    assert row["near_misses"] == 1
    assert row["deadline_jobs"] == 3 and row["deadline_met"] == pytest.approx(1 / 3, abs=1e-4)
    assert "cifar10 1/2, ncf 0/1; 1 late by under 60 s" in bench.app_lines([row])
