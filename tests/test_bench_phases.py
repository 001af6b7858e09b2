"""Several phases at once (`--shift 0,15,30,45`) and simulations side by side (`--jobs N`) in the
simulation benchmarks (`benchmarks/phases.py`): the figures are those of one phase at a time,
the mean is their mean, and bad values get a one-line error."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_deadlines, bench_pollux, phases

ROOT = Path(__file__).resolve().parent.parent
JOBS = ("name,time,application,num_replicas,batch_size,deadline\n"
        "a,10,cifar10,4,512,1500\n"
        "b,40,cifar10,8,512,700\n"
        "c,70,ncf,2,64,400\n"
        "d,95,cifar10,4,512,900\n")


def tiny(tmp_path: Path, folder: str, deadlines: bool = True) -> Path:
    """A traces folder whose workload 1 is four small jobs."""
    d = tmp_path / "pollux" / folder
    d.mkdir(parents=True)
    text = JOBS if deadlines else "\n".join(",".join(r.split(",")[:5]) for r in JOBS.splitlines()) + "\n"
    (d / "workload-1.csv").write_text(text)
    return tmp_path


def bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=600)


def test_phases_side_by_side_give_what_each_phase_gives_alone(tmp_path: Path):
    traces = tiny(tmp_path, "workloads-deadline")
    p = bench("bench_deadlines.py", "--workloads", "1", "--policies", "qoe,edf", "--shift", "0,30",
              "--jobs", "2", "--json", "--traces", str(traces))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    drop = ("wall_s",)
    got = {(r["shift"], r["policy"]): {k: v for k, v in r.items() if k not in drop} for r in out["rows"]}
    assert sorted(got) == [(0.0, "edf"), (0.0, "qoe"), (30.0, "edf"), (30.0, "qoe")]
    for (shift, policy), row in got.items():  # one at a time, in this process
        alone = bench_deadlines.one_at(traces, 1, False, shift, policy, "reported")
        assert row == {k: v for k, v in alone.items() if k not in drop}
    for m in out["means"]:
        each = [got[(s, m["policy"])]["deadline_met"] for s in (0.0, 30.0)]
        assert m["deadline_met_by_shift"] == each and m["shifts"] == [0.0, 30.0]
        assert m["deadline_met"] == pytest.approx(sum(each) / 2)
    assert "4/4 done" in p.stderr and "s left" in p.stderr


def test_the_phase_table_lists_each_phase_and_the_mean(tmp_path: Path):
    traces = tiny(tmp_path, "workloads-deadline")
    p = bench("bench_deadlines.py", "--workloads", "1", "--policies", "edf", "--shift", "0,15",
              "--traces", str(traces))
    assert p.returncode == 0, p.stderr
    assert "arrivals shifted by 15 s" in p.stdout and "mean over the 2 phases" in p.stdout
    row = next(line for line in p.stdout.splitlines()[::-1] if line.startswith("| 1 | edf |"))
    each, mean = row.split(" | ")[2], row.split(" | ")[3]
    a, b = (float(x) for x in each.removesuffix(" %").split(" / "))
    assert float(mean.removesuffix("%")) == pytest.approx((a + b) / 2, abs=0.06)


def test_pollux_benchmark_means_over_phases(tmp_path: Path):
    traces = tiny(tmp_path, "workloads", deadlines=False)
    p = bench("bench_pollux.py", "--workloads", "1", "--policies", "las,goodput", "--estimates", "reported",
              "--shift", "0,45", "--jobs", "2", "--json", "--traces", str(traces))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    jct = {(r["shift"], r["policy"]): r["avg_jct_s"] for r in out["rows"]}
    assert sorted(jct) == [(0.0, "goodput"), (0.0, "las"), (45.0, "goodput"), (45.0, "las")]
    means = {m["policy"]: m for m in out["means"]}
    assert means["las"]["avg_jct_s"] == pytest.approx((jct[(0.0, "las")] + jct[(45.0, "las")]) / 2)
    g = means["goodput"]
    assert g["vs_las"] == pytest.approx(g["avg_jct_s"] / means["las"]["avg_jct_s"])
    assert g["vs_pollux"] == pytest.approx(g["avg_jct_s"] / bench_pollux.POLLUX[1])


@pytest.mark.parametrize("script", ["bench_deadlines.py", "bench_pollux.py"])
@pytest.mark.parametrize("args, error", [
    (["--shift", "0,-5"], "--shift: expected seconds in [0, 86400), got -5"),
    (["--shift", "0,x"], "--shift: expected seconds in [0, 86400), comma-separated, got '0,x'"),
    (["--shift", "15,15"], "--shift: each phase once, got '15,15'"),
    (["--jobs", "0"], "--jobs: expected a whole number of processes from 1, got '0'"),
])
def test_bad_phases_or_jobs_get_one_line(script: str, args: list[str], error: str, tmp_path: Path):
    p = bench(script, "--workloads", "1", "--traces", str(tmp_path), *args)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1].endswith(error)


def test_run_keeps_the_order_of_the_tasks():
    tasks = [(pow, (2, k)) for k in range(6)]
    for jobs in (3, 1):
        out = io.StringIO()
        assert phases.run(tasks, jobs, out=out) == [1, 2, 4, 8, 16, 32]
        assert out.getvalue().splitlines()[-1].startswith("6/6 done")


def test_the_eta_prices_each_task_left_at_its_own_kinds_time():
    """A `goodput` simulation takes many times a rigid policy's: with one of each done (1 s and
    10 s), two `goodput` and one `fifo` left take 21 s on one process (the mean of all tasks
    done would say 16.5 s), and a kind not seen yet is priced at that mean."""
    kinds = ["fifo", "goodput", "fifo", "goodput", "goodput", "las"]
    assert phases.eta(kinds, {0: 1.0, 1: 10.0}, 1) == pytest.approx(21.0 + 5.5)
    assert phases.eta(kinds, {0: 1.0, 1: 10.0}, 2) == pytest.approx((21.0 + 5.5) / 2)
    assert phases.eta(kinds, {k: 2.0 for k in range(6)}, 4) == 0.0
    assert phases.eta(kinds, {}, 1) == 0.0
    # in flight: a `goodput` task 4 s in has 6 s left, one 12 s in none (not below 0)
    assert phases.eta(kinds, {0: 1.0, 1: 10.0}, 1, {3: 4.0}) == pytest.approx(21.0 - 4.0 + 5.5)
    assert phases.eta(kinds, {0: 1.0, 1: 10.0}, 1, {3: 12.0}) == pytest.approx(21.0 - 10.0 + 5.5)


def test_run_reads_the_eta_from_the_tasks_kinds_and_wants_one_kind_per_task():
    tasks = [(pow, (2, k)) for k in range(4)]
    out = io.StringIO()
    assert phases.run(tasks, 1, out=out, kinds=["a", "b", "a", "b"]) == [1, 2, 4, 8]
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == ["1/4 done", "2/4 done", "3/4 done", "4/4 done"]
    assert lines[-1].endswith("about 0 s left")
    with pytest.raises(ValueError, match="kinds: expected one per task"):
        phases.run(tasks, 1, kinds=["a"])


def test_the_ceilings_are_worked_out_at_each_phase(tmp_path: Path):
    traces = tiny(tmp_path, "workloads-deadline")
    p = bench("bench_deadlines.py", "--workloads", "1", "--policies", "edf", "--ceiling", "--shift", "0,30",
              "--jobs", "2", "--json", "--traces", str(traces))
    assert p.returncode == 0, p.stderr
    got = {c["shift"]: c["references"] for c in json.loads(p.stdout)["ceiling"]}
    assert got == {s: list(bench_deadlines.ceilings_at(traces, 1, False, s)) for s in (0.0, 30.0)}
