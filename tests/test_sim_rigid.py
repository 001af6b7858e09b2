"""Rigid-trace simulation: trace readers and their errors, metrics, virtual clock modes."""

from __future__ import annotations

import pytest
from schedulearn.model import JobSpec, SpecError, virtual_cluster
from schedulearn.sim.metrics import summarize
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob, load_trace, shifted

SMALL = "tests/data/small-trace.csv"

# tests/data/small-trace.csv under FIFO on 2 hosts x 4 GPUs, by hand:
#   a(0,4,3600) 0-3600; b(60,8,7200) waits for a: 3600-10800; c,d (1 GPU, 600 s) 10800-11400;
#   e(300,8,1800) 11400-13200; f(600,2,2400) 13200-15600, g(900,4,1200) 13200-14400,
#   h(1200,1,300) 13200-13500.
SMALL_FIFO = {"resnet-a": (0, 3600), "bert-b": (3600, 10800), "tiny-c": (10800, 11400),
              "tiny-d": (10800, 11400), "wide-e": (11400, 13200), "mid-f": (13200, 15600),
              "mid-g": (13200, 14400), "tiny-h": (13200, 13500)}
SMALL_FIFO_METRICS = {"policy": "fifo", "jobs": 8, "avg_jct_s": 11317.5, "p50_jct_s": 11790.0,
                      "p99_jct_s": 14895.0, "makespan_s": 15600.0, "avg_queue_s": 9105.0,
                      "gpu_utilization": 0.7812}


def write(tmp_path, text: str, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_small_trace_fifo_exact(monkeypatch):
    monkeypatch.chdir(__file__.rsplit("/tests/", 1)[0])
    r = simulate(load_trace(SMALL), virtual_cluster(2, 4), "fifo")
    assert {j.spec.name: (j.start_time, j.end_time) for j in r.jobs} == SMALL_FIFO
    assert r.metrics == SMALL_FIFO_METRICS
    # utilisation = busy GPU-s / (GPUs x makespan) = 97,500 / (8 x 15,600)
    assert 97_500 / (8 * 15_600) == pytest.approx(0.78125)


def test_a_shifted_trace_is_the_same_trace_later(monkeypatch):
    """`shifted` (benchmarks' `--shift`) moves every arrival and deadline, nothing else: with
    event-driven rounds the replay is the same, S seconds later; with 60 s rounds only the
    phase against the rounds changes (every job then waits for the round after its arrival)."""
    monkeypatch.chdir(__file__.rsplit("/tests/", 1)[0])
    trace = load_trace(SMALL)
    trace = [TraceJob(tj.submit_time, tj.spec.model_copy(update={"deadline": tj.submit_time + 500.0})
                      if i % 2 else tj.spec, tj.where) for i, tj in enumerate(trace)]
    later = shifted(trace, 45.0)
    assert shifted(trace, 0) == trace and later is not trace
    for a, b in zip(trace, later, strict=True):
        assert b.submit_time == a.submit_time + 45.0 and b.where == a.where
        assert b.spec.deadline == (None if a.spec.deadline is None else a.spec.deadline + 45.0)
        assert b.spec.model_copy(update={"deadline": a.spec.deadline}) == a.spec
    ends = {j.spec.name: j.end_time for j in simulate(trace, virtual_cluster(2, 4), "fifo").jobs}
    moved = {j.spec.name: j.end_time for j in simulate(later, virtual_cluster(2, 4), "fifo").jobs}
    assert moved == {name: t + 45.0 for name, t in ends.items()}
    rounds = simulate(later, virtual_cluster(2, 4), "fifo", interval=60)
    assert all(j.start_time % 60 == 0 and j.start_time >= j.submit_time for j in rounds.jobs)
    assert rounds.metrics != simulate(trace, virtual_cluster(2, 4), "fifo", interval=60).metrics


def test_metrics_definitions():
    jobs = [TraceJob(10, JobSpec(name="x", gpus=2, duration=100), "x"),
            TraceJob(20, JobSpec(name="y", gpus=2, duration=50), "y")]
    r = simulate(jobs, virtual_cluster(1, 2), "fifo")  # x 10-110, y 110-160
    m = r.metrics
    assert m["avg_jct_s"] == pytest.approx((100 + 140) / 2)
    assert m["makespan_s"] == 150  # last finish - first submit
    assert m["avg_queue_s"] == pytest.approx((0 + 90) / 2)
    assert m["gpu_utilization"] == pytest.approx((2 * 100 + 2 * 50) / (2 * 150), abs=1e-4)
    assert summarize("fifo", [], 4)["jobs"] == 0


def test_rigid_reader(tmp_path):
    path = write(tmp_path, "name,submit_time,gpus,duration\nb,30,2,10\n\na,5.5,1,7\n,40,1,1\n")
    jobs = load_trace(path)
    assert [(j.submit_time, j.spec.name, j.spec.gpus, j.spec.duration) for j in jobs] == [
        (5.5, "a", 1, 7.0), (30.0, "b", 2, 10.0), (40.0, "job5", 1, 1.0)]
    assert jobs[0].where == "t.csv:4"
    assert [j.spec.name for j in load_trace(path, limit=2)] == ["a", "b"]


@pytest.mark.parametrize("row, message", [
    ("x,zero,1,10", "t.csv:3: submit_time: expected a number, got 'zero'"),
    ("x,-1,1,10", "t.csv:3: submit_time: expected a value >= 0, got '-1'"),
    ("x,nan,1,10", "t.csv:3: submit_time: expected a number, got 'nan'"),
    ("x,0,0,10", "t.csv:3: gpus: expected a value >= 1, got '0'"),
    ("x,0,1.5,10", "t.csv:3: gpus: expected an integer, got '1.5'"),
    ("x,0,1,0", "t.csv:3: duration: expected a value > 0, got '0'"),
    ("x,0,1,inf", "t.csv:3: duration: expected a number, got 'inf'"),
    ("x,0,1,1e300", "t.csv:3: duration: expected at most 315,360,000 (seconds: 10 years), got '1e300'"),
    ("x,1e300,1,66", "t.csv:3: submit_time: expected at most 315,360,000 (seconds: 10 years), got '1e300'"),
    ("x,0,1", "t.csv:3: expected 4 fields (name,submit_time,gpus,duration), got 3"),
])
def test_malformed_rigid_rows_name_file_line_and_field(tmp_path, row, message):
    path = write(tmp_path, f"name,submit_time,gpus,duration\nok,0,1,1\n{row}\n")
    with pytest.raises(SpecError) as e:
        load_trace(path)
    assert str(e.value) == message


def test_unknown_header_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match=r"^t.csv:1: header: expected one of name,submit_time,gpus,duration"):
        load_trace(write(tmp_path, "job,when\n1,2\n"))
    with pytest.raises(SpecError, match=r"^trace: no such file '.*nope.csv'$"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(SpecError, match=r"^--start: only for Philly traces"):
        load_trace(write(tmp_path, "name,submit_time,gpus,duration\n"), start="2017-10-01")


@pytest.mark.parametrize("header", ["name,submit_time,gpus,duration",
                                    "timestamp,duration,num_gpus,gpu_time,cluster",
                                    "name,time,application,num_replicas,batch_size"])
def test_a_trace_saved_by_a_spreadsheet_reads_as_written(tmp_path, header):
    """Excel's `CSV UTF-8` begins the file with a byte-order mark and ends lines with CRLF: the
    header read `\ufeffname,...`, refused as unknown in a message that looked like the expected
    header. Every format reads it as the same file without them."""
    rows = {"name": "a,0,1,10\nb,5,2,20", "timestamp": "2017-10-01 00:00:00,10.0,1,10.0,c1",
            "name,time": "a,0,cifar10,1,128"}
    body = rows["name,time" if header.startswith("name,time") else header.split(",")[0]]
    plain = write(tmp_path, f"{header}\n{body}\n", "plain.csv")
    excel = tmp_path / "excel.csv"
    excel.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    expected = [(j.submit_time, j.spec) for j in load_trace(plain)]
    assert expected and [(j.submit_time, j.spec) for j in load_trace(excel)] == expected


def test_a_file_that_is_not_utf8_text_is_one_line_naming_it(tmp_path):
    latin = tmp_path / "latin.csv"
    latin.write_bytes("name,submit_time,gpus,duration\n\xe9t\xe9,0,1,10\n".encode("latin-1"))
    with pytest.raises(SpecError, match=r"^trace: latin.csv is not UTF-8 text \(byte 0xe9 at offset 31\); "
                                        r"expected a CSV trace$"):
        load_trace(latin)


PHILLY = ("timestamp,duration,num_gpus,gpu_time,cluster\n"
          "2017-10-03 10:00:00,100.0,2,200.0,c1\n"
          "2017-10-01 00:00:00,50.0,1,50.0,c1\n"
          "2017-10-02 00:00:30,10.0,8,80.0,c2\n")


def test_philly_reader_sorts_rebases_and_filters(tmp_path):
    path = write(tmp_path, PHILLY, "philly.csv")
    jobs = load_trace(path)
    assert [(j.submit_time, j.spec.gpus, j.spec.duration) for j in jobs] == [
        (0.0, 1, 50.0), (86_430.0, 8, 10.0), (208_800.0, 2, 100.0)]
    assert [j.where for j in jobs] == ["philly.csv:3", "philly.csv:4", "philly.csv:2"]
    later = load_trace(path, start="2017-10-02", limit=1)
    assert [(j.submit_time, j.spec.gpus) for j in later] == [(0.0, 8)]
    with pytest.raises(SpecError, match=r"^--start: timestamp: expected 'YYYY-MM-DD HH:MM:SS', got 'soon'$"):
        load_trace(path, start="soon")


def test_malformed_philly_row(tmp_path):
    path = write(tmp_path, PHILLY + "2017-13-45 00:00:00,1,1,1,c\n", "philly.csv")
    with pytest.raises(SpecError, match=r"^philly.csv:5: timestamp: expected 'YYYY-MM-DD HH:MM:SS'"):
        load_trace(path)
    path = write(tmp_path, PHILLY + "2017-10-05 00:00:00,1,two,1,c\n", "philly.csv")
    with pytest.raises(SpecError, match=r"^philly.csv:5: num_gpus: expected an integer, got 'two'$"):
        load_trace(path)


def test_real_philly_head(traces):
    jobs = load_trace(traces / "philly.csv", limit=500)
    assert len(jobs) == 500 and jobs[0].submit_time == 0
    assert all(a.submit_time <= b.submit_time for a, b in zip(jobs, jobs[1:], strict=False))
    r = simulate(jobs, virtual_cluster(8, 8), "las")
    assert r.metrics["jobs"] == 500


def test_pollux_workload_is_detected(traces):
    jobs = load_trace(traces / "pollux" / "workloads" / "workload-1.csv")
    assert len(jobs) == 160
    assert all(j.spec.application and j.spec.batch_size for j in jobs)
    assert jobs[0].where.startswith("workload-1.csv:")


def test_trace_larger_than_cluster_is_rejected():
    jobs = [TraceJob(0, JobSpec(gpus=9, duration=1), "t.csv:7")]
    with pytest.raises(SpecError, match=r"^t.csv:7: gpus: at most 8 \(the GPUs of the cluster\), got 9$"):
        simulate(jobs, virtual_cluster(2, 4), "fifo")


def test_interval_mode_starts_jobs_on_round_boundaries():
    # Rounds every 60 s: a (arrives at 10) starts at 60 and ends at 160 exactly; b (arrives at
    # 20) waits for the first round after that end, 180.
    jobs = [TraceJob(10, JobSpec(name="a", gpus=1, duration=100), "a"),
            TraceJob(20, JobSpec(name="b", gpus=1, duration=10), "b")]
    r = simulate(jobs, virtual_cluster(1, 1), "fifo", interval=60.0)
    got = {j.spec.name: (j.start_time, j.end_time) for j in r.jobs}
    assert got == {"a": (60, 160), "b": (180, 190)}
    assert r.metrics["avg_jct_s"] == pytest.approx((150 + 170) / 2)


def test_restart_penalty_delays_a_preempted_job():
    # LAS, 1 GPU, threshold 100: as in test_policies, but each (re)start costs 5 s.
    from schedulearn import policies

    las = policies.create("las")
    las.threshold = 100.0
    jobs = [TraceJob(0, JobSpec(name="L", gpus=1, duration=1000), "L"),
            TraceJob(50, JobSpec(name="S", gpus=1, duration=30), "S")]
    r = simulate(jobs, virtual_cluster(1, 1), las, restart_penalty=5.0)
    got = {j.spec.name: (j.start_time, j.end_time) for j in r.jobs}
    # L: progress from 5 s; at t=110 it is demoted (110 GPU-s attained) with 105 s done.
    # S: 110-145 (5 s penalty + 30). L resumes at 145: 5 s penalty + 895 s -> 1045.
    assert got == {"L": (0, 1045), "S": (110, 145)}
