"""`schedulearn trace`'s conversion of past jobs into a rigid trace the simulator replays
(`schedulearn.history`); the live command is tested in tests/test_server_live.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from schedulearn import history
from schedulearn.cli import main
from schedulearn.sim.traces import RIGID_HEADER, load_trace

T0 = 1_764_000_000.0  # epoch seconds, as live


def job(id_: int, name: str, submit: float, *, state: str = "succeeded", run: float | None = 100.0,
        gpus: float = 1, deadline: float | None = None) -> dict:
    spec = {"name": name} | ({"deadline": T0 + deadline} if deadline is not None else {})
    d = {"id": id_, "name": name, "state": state, "submit_time": T0 + submit, "spec": spec,
         "start_time": None if run is None else T0 + submit + 5, "end_time": None}
    if run is not None:
        d |= {"run_s": run, "attained_gpu_s": run * gpus}
        if state != "running":
            d["end_time"] = T0 + submit + 5 + run
    return d


def test_finished_jobs_become_rows_and_the_rest_are_counted() -> None:
    jobs = [job(3, "elastic, grown", 60, gpus=2.6, run=50.04), job(1, "first", 0, gpus=2),
            job(2, "cancelled while running", 30, state="cancelled", run=10),
            job(4, "cancelled in the queue", 70, state="cancelled", run=None),
            job(5, "running", 80, state="running"), job(6, "failed", 90, state="failed", run=0.01),
            job(7, "queued", 95, state="queued", run=None)]
    trace = history.from_jobs(jobs)
    assert trace.rows == [("first", 0, 2, 100.0, None), ("cancelled while running", 30, 1, 10.0, None),
                          ("elastic, grown", 60, 3, 50.0, None), ("failed", 90, 1, 0.1, None)]
    assert trace.left_out == Counter({"not finished yet": 2, "never started": 1})
    assert (trace.first_submit, trace.last_submit) == (T0, T0 + 90)
    assert trace.jcts == pytest.approx([105.0, 15.0, 55.04, 5.01])
    # busy GPU-seconds over GPUs x (last end - first submission), as `simulate` counts GPU util
    assert trace.gpu_seconds == pytest.approx(200 + 10 + 50.04 * 2.6 + 0.01)
    assert trace.utilization(4) == pytest.approx(trace.gpu_seconds / (4 * 115.04))
    assert history.from_jobs([]).utilization(4) is None
    assert trace.header == RIGID_HEADER
    assert trace.csv_text().splitlines()[:4] == [
        "name,submit_time,gpus,duration", "first,0,2,100", "cancelled while running,30,1,10",
        '"elastic, grown",60,3,50']


def test_since_keeps_the_later_jobs_and_times_start_at_the_first_kept() -> None:
    trace = history.from_jobs([job(1, "old", 0), job(2, "new", 500.25), job(3, "newer", 600)], since=T0 + 400)
    assert [(r[0], r[1]) for r in trace.rows] == [("new", 0), ("newer", 99.8)]
    assert not trace.left_out  # older jobs are not "left out": they were not asked for
    assert not history.from_jobs([job(1, "old", 0)], since=T0 + 1).rows


def test_deadlines_add_a_column_read_back_by_the_simulator(tmp_path: Path) -> None:
    """The CSV round-trips through the simulator's reader: names, times, sizes and deadlines
    (seconds after submission there, absolute in the spec) come back as written."""
    jobs = [job(1, "tight", 0, gpus=4, deadline=300), job(2, "loose, later", 20, run=40),
            job(3, "due", 25, run=30, deadline=25 + 3600)]
    trace = history.from_jobs(jobs)
    assert trace.header == [*RIGID_HEADER, "deadline"]
    path = tmp_path / "lab.csv"
    path.write_text(trace.csv_text())
    back = load_trace(path)
    assert [(t.spec.name, t.submit_time, t.spec.gpus, t.spec.duration, t.spec.deadline) for t in back] == [
        ("tight", 0, 4, 100, 300), ("loose, later", 20, 1, 40, None), ("due", 25, 1, 30, 25 + 3600)]
    assert main(["simulate", str(path), "--policy", "fifo,qoe", "--cluster", "1x4", "--json", "-q"]) == 0


def test_the_cluster_shape_of_the_schedulers_own_gpus() -> None:
    def node(n: int) -> dict:
        return {"name": "n", "gpus": [{"index": i} for i in range(n)]}

    assert history.cluster_shape({"nodes": [node(4)]}) == ("1x4", "", 4)
    assert history.cluster_shape({"nodes": [node(8), node(8), node(0)]}) == ("2x8", "", 16)
    assert history.cluster_shape({"nodes": [node(4), node(8)]}) == ("2x8", " (its hosts have 4, 8 GPUs)", 12)
    assert history.cluster_shape({"nodes": []}) == ("", "", 0)
