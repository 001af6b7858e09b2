"""The deadline workloads: every shipped file follows the recipe of traces/README.md, the tuning set
(5-8) is what `benchmarks/make_deadline_workloads.py` makes, and the benchmark's feasibility
reference (`bench_deadlines.feasible_alone`) says what the job models allow."""

from __future__ import annotations

from pathlib import Path

import pytest
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
