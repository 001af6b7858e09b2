"""Pollux workloads through the real engine: exact JCTs of a tiny workload, fidelity against the
published Tiresias numbers, bad input, determinism, the figure."""

import csv
import math
import os
import shutil
from pathlib import Path

import matplotlib.image
import pytest
from schedulearn.cli import main as cli_main
from schedulearn.model import parse_cluster
from schedulearn.sim.apps import DATA_ROOT, load_profiles
from schedulearn.sim.plot import make_figure, plot_results
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import load_trace

CIFAR = DATA_ROOT / "cifar10"
PUBLISHED_TIRESIAS = {1: 2474, 2: 5145, 3: 3876, 4: 3280}
PUBLISHED_POLLUX = {1: 2089, 2: 3323, 3: 2188, 4: 2721}


def _workload(path: Path, rows: list[str]) -> Path:
    path.write_text("name,time,application,num_replicas,batch_size\n" + "\n".join(rows) + "\n")
    return path


def _row(placement: str, local_bsz: int) -> float:
    with open(CIFAR / "placements.csv") as f:
        for r in csv.DictReader(f):
            if r["placement"] == placement and int(r["local_bsz"]) == local_bsz:
                return float(r["step_time"])
    raise AssertionError(f"no row {placement},{local_bsz}")


def _cifar_target() -> float:
    """Progress to complete: the smallest progress of epoch 100 over the validated batch sizes."""
    ends = []
    for p in CIFAR.glob("validation-*.csv"):
        with open(p) as f:
            ends.append(float(list(csv.DictReader(f))[99]["progress"]))
    return min(ends)


def _run(path, policy="las", cluster="1x4", **kw):
    return simulate(load_trace(path), parse_cluster(cluster), policy, interval=60, restart_penalty=30, **kw)


def test_tiny_workload_exact_jcts(tmp_path):
    """B = 128 is cifar10's initial batch size: efficiency 1, one progress per step; the local
    batches (32 on 4 GPUs, 64 on 2) are exact placement rows; no accumulation."""
    trace = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,100,cifar10,2,128"])
    target = _cifar_target()
    work_a = target * _row("4", 32)
    work_b = target * _row("2", 64)
    # a arrives at 0, is seen by the round at 60, loses 30 s to its (first) start.
    jct_a = 60 + 30 + work_a
    # b needs GPUs a holds until it ends; it starts at the first round after that.
    start_b = math.ceil((60 + 30 + work_a) / 60) * 60
    jct_b = start_b + 30 + work_b - 100
    for policy in ("las", "fifo"):
        r = _run(trace, policy)
        jct = {j.spec.name: j.end_time - j.submit_time for j in r.jobs}
        assert jct["a"] == pytest.approx(jct_a, abs=1e-6), policy
        assert jct["b"] == pytest.approx(jct_b, abs=1e-6), policy
        assert r.metrics["avg_jct_s"] == pytest.approx((jct_a + jct_b) / 2, abs=1e-3)
        assert r.metrics["makespan_s"] == pytest.approx(100 + jct_b, abs=1e-3)


def test_preempted_jobs_resume_where_they_stopped(tmp_path, monkeypatch):
    """las with a 800 GPU-second threshold: a (4 GPUs) is demoted at 300 when b arrives and is
    preempted; b is demoted at 540 and a (earlier in the second queue) takes the GPUs back. A
    preempted run must not end at its old finish time (a stale timer once ended runs early)."""
    from schedulearn.policies.las import LeastAttainedService

    monkeypatch.setattr(LeastAttainedService, "threshold", 800.0)
    trace = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,300,cifar10,4,128"])
    r = _run(trace)
    work = _cifar_target() * _row("4", 32)
    a, b = sorted(r.jobs, key=lambda j: j.id)
    # a: runs 60..300 (progress from 90), again from 540 (progress from 570) to the end.
    assert a.end_time == pytest.approx(570 + work - 210, abs=1e-6)
    # b: runs 300..540 (progress from 330), again from the first round after a ends.
    resume = math.ceil(a.end_time / 60) * 60
    assert b.end_time == pytest.approx(resume + 30 + work - 210, abs=1e-6)
    assert (a.restarts, b.restarts) == (1, 1)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_las_matches_published_tiresias(traces, n):
    r = _run(traces / "pollux" / "workloads" / f"workload-{n}.csv", cluster="16x4")
    assert r.metrics["jobs"] == 160
    assert r.metrics["avg_jct_s"] == pytest.approx(PUBLISHED_TIRESIAS[n], rel=0.10)


@pytest.mark.slow
def test_goodput_beats_las_and_pollux_on_workload_3(traces):
    path = traces / "pollux" / "workloads" / "workload-3.csv"
    las, good = _run(path, "las", "16x4"), _run(path, "goodput", "16x4")
    assert good.metrics["jobs"] == 160
    assert good.metrics["avg_jct_s"] <= 0.7 * las.metrics["avg_jct_s"]
    assert good.metrics["avg_jct_s"] <= 1.1 * PUBLISHED_POLLUX[3]
    assert good.metrics["p99_jct_s"] <= las.metrics["p99_jct_s"]
    assert good.metrics["makespan_s"] <= las.metrics["makespan_s"]


def test_same_input_same_result(traces):
    path = traces / "pollux" / "workloads" / "workload-1.csv"
    trace = load_trace(path, limit=40)
    runs = [simulate(trace, parse_cluster("16x4"), "goodput", interval=60, restart_penalty=30)
            for _ in range(2)]
    a, b = ([(j.spec.name, j.end_time, j.restarts) for j in r.jobs] for r in runs)
    assert a == b
    assert runs[0].metrics == runs[1].metrics
    assert runs[0].metrics["jobs"] == 40


def test_workload_jobs_are_elastic_with_pollux_caps(traces):
    jobs = {tj.spec.name: tj.spec for tj in load_trace(traces / "pollux" / "workloads" / "workload-1.csv")}
    cifar = next(s for n, s in jobs.items() if n.startswith("cifar10"))
    ncf = next(s for n, s in jobs.items() if n.startswith("ncf"))
    assert (cifar.min_gpus, cifar.max_gpus, cifar.adaptive_batch) == (1, 64, True)  # 4096 // 32 = 128 -> 64
    assert cifar.requested == int(cifar.gpus)  # rigid policies still run the user's count
    assert (ncf.max_gpus, ncf.adaptive_batch, ncf.batch_size) == (1, False, 32768)


# -- bad input ---------------------------------------------------------------------------------
def test_unknown_application_names_file_and_line(tmp_path):
    path = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,5,resnet,1,64"])
    with pytest.raises(ValueError) as err:
        load_trace(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: application: unknown 'resnet'") and "cifar10" in msg
    assert "\n" not in msg


def test_malformed_workload_row(tmp_path):
    path = _workload(tmp_path / "w.csv", ["a,0,cifar10,four,128"])
    with pytest.raises(ValueError, match=r"w\.csv:2: num_replicas: expected an integer >= 1, got 'four'$"):
        load_trace(path)


def test_missing_profile_folder(tmp_path):
    with pytest.raises(ValueError, match=r"nowhere: no such profile folder$"):
        load_profiles(tmp_path / "nowhere")


def test_malformed_profile_row(tmp_path):
    shutil.copytree(CIFAR, tmp_path / "cifar10")
    p = tmp_path / "cifar10" / "placements.csv"
    lines = p.read_text().splitlines()
    lines[3] = "1,64,abc,0.1"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError) as err:
        load_profiles(tmp_path)
    assert str(err.value) == f"{p}:4: step_time: expected a number, got 'abc'"


def test_missing_profile_column(tmp_path):
    shutil.copytree(CIFAR, tmp_path / "cifar10")
    p = tmp_path / "cifar10" / "validation-128.csv"
    p.write_text(p.read_text().replace("grad_var", "gradvar", 1))
    with pytest.raises(ValueError, match=r"validation-128\.csv:1: header: missing column 'grad_var'$"):
        load_profiles(tmp_path)


# -- the figure --------------------------------------------------------------------------------
def test_plot_is_a_png_with_cdf_and_gantt(tmp_path):
    trace = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,100,cifar10,2,128", "c,120,ncf,1,32768"])
    results = [_run(trace, p, record=True) for p in ("las", "goodput")]
    assert results[0].history and results[1].history
    fig = make_figure(results)
    assert len(fig.axes) == 2
    cdf, gantt = fig.axes
    assert len(cdf.get_lines()) == 2  # one CDF per policy
    assert gantt.get_title() == "GPU timeline: goodput"
    assert len(gantt.collections) >= 1  # bars on at least one GPU row
    out = plot_results(results, tmp_path / "fig.png", gantt_policy="las")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(out)
    assert img.shape[:2] == (900, 1100)
    with pytest.raises(ValueError, match="gantt_policy: expected one of las, goodput, got 'fifo'"):
        plot_results(results, tmp_path / "x.png", gantt_policy="fifo")
    with pytest.raises(FileNotFoundError):  # its folder gone: nothing written, nothing left over
        plot_results(results, tmp_path / "gone" / "x.png")
    svg = plot_results(results, tmp_path / "fig.SVG")
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert sorted(os.listdir(tmp_path)) == ["fig.SVG", "fig.png", "w.csv"]


def test_cli_simulate_plot(tmp_path, capsys):
    trace = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,100,cifar10,2,128"])
    out = tmp_path / "cli.png"
    code = cli_main(["simulate", str(trace), "--policy", "las,goodput", "--cluster", "1x4",
                     "--interval", "60", "--restart-penalty", "30", "--json", "--plot", str(out), "--quiet"])
    assert code == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert '"policy": "goodput"' in capsys.readouterr().out


def test_plot_labels_identical_policies_keeps_legends_off_the_curves_and_reads_as_durations(tmp_path):
    """fifo and elastic-fifo give identical results on rigid jobs here: one curve carries both
    names (no legend entry points at nothing); legends sit beside the axes; the JCT axis reads as
    durations; timeline bars carry job names and a colour key lists the jobs."""
    trace = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,100,cifar10,2,128", "c,120,ncf,1,32768"])
    results = [_run(trace, p, record=True) for p in ("fifo", "las", "goodput")]
    from schedulearn.sim.plot import fmt_duration, same_results

    groups = [names for names, _ in same_results(results)]
    fig = make_figure(results)
    cdf, gantt = fig.axes
    labels = [line.get_label() for line in cdf.get_lines()]
    assert len(labels) == len(groups)
    assert all(" = ".join(g) in lab for g, lab in zip(groups, labels, strict=True))
    assert sorted(n for g in groups for n in g) == ["fifo", "goodput", "las"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in (cdf, gantt):
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= ax.get_window_extent(renderer).x1  # beside the axes, not over the curves
    ticks = [t.get_text() for t in cdf.get_xticklabels() if t.get_text()]
    assert ticks and all(t.endswith((" s", " min", " h", " d")) for t in ticks), ticks
    names = {t.get_text() for t in gantt.texts}
    assert names & {"a", "b", "c"}, names  # job names on the bars
    key = [t.get_text() for t in gantt.get_legend().get_texts()]
    assert set(key) <= {"a", "b", "c"} and key
    assert [fmt_duration(s) for s in (45, 300, 7200, 129600, 5.80526)] == ["45 s", "5 min", "2 h", "1.5 d",
                                                                           "5.81 s"]


def test_identical_results_share_one_curve(tmp_path):
    import dataclasses

    from schedulearn.sim.plot import same_results

    trace = _workload(tmp_path / "w.csv", ["a,0,cifar10,4,128", "b,100,cifar10,2,128", "c,120,ncf,1,32768"])
    fifo, goodput = (_run(trace, p, record=True) for p in ("fifo", "goodput"))
    twin = dataclasses.replace(fifo, policy="fifo-twin")  # the same jobs, so the same JCTs
    assert sorted(j.end_time for j in fifo.jobs) != sorted(j.end_time for j in goodput.jobs)
    assert [names for names, _ in same_results([fifo, goodput, twin])] == [["fifo", "fifo-twin"], ["goodput"]]
    labels = [line.get_label() for line in make_figure([fifo, goodput, twin]).axes[0].get_lines()]
    assert labels[0].startswith("fifo = fifo-twin (avg ") and labels[1].startswith("goodput (avg ")
