"""Deadlines ("finish by"): reading them, refusing bad ones, the statuses users see, the `edf`
and `qoe` policies and the simulator's deadline metrics, on the real engine and simulator."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from schedulearn import deadlines, pauses, policies
from schedulearn.cli import build_parser, main
from schedulearn.client import ClientError
from schedulearn.client_cli import build_spec
from schedulearn.engine import Engine
from schedulearn.estimates import ingest
from schedulearn.model import Job, JobSpec, JobState, SpecError, parse_cluster
from schedulearn.policies.base import RoundContext
from schedulearn.policies.qoe import QoE
from schedulearn.sim.executor import SimExecutor
from schedulearn.sim.metrics import deadline_metrics
from schedulearn.sim.simulate import simulate
from schedulearn.sim.traces import TraceJob, load_trace
from schedulearn_magics import views

ROOT = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 11, 23, 15, 0).timestamp()  # a Monday, 15:00 local time


# -- reading what users type ---------------------------------------------------------------------
@pytest.mark.parametrize("text, after", [
    ("2h", 7200), ("90m", 5400), ("90min", 5400), ("1h30m", 5400), ("45s", 45), ("1.5h", 5400),
    ("2d", 2 * 86400), ("1d12h", 36 * 3600), ("1D 6h 30m", 30.5 * 3600), ("2 days", 2 * 86400),
    ("2 hours", 7200), ("1 hour 30 minutes", 5400), ("2 hrs", 7200), ("1 hr 5 mins", 3900),
    ("90 seconds", 90), ("30 secs", 30), ("1 day 2 hours", 26 * 3600),
    ("18:00", 3 * 3600), ("2026-11-24 18:00", 27 * 3600), ("2026-11-23T15:30", 1800),
    ("18:00:30", 3 * 3600 + 30), ("2026-11-24 18:00:30", 27 * 3600 + 30),  # seconds, as a clock shows them
    ("1w", 7 * 86400), ("2 weeks", 14 * 86400), ("1 wk 2 days", 9 * 86400),
])
def test_parse_reads_durations_times_of_day_and_dates(text, after):
    assert deadlines.parse(text, NOW) == pytest.approx(NOW + after)


@pytest.mark.parametrize("text, after", [
    ("18:00Z", 3 * 3600), ("18:00 UTC", 3 * 3600), ("18:00 +01:00", 2 * 3600), ("16:00-05:00", 6 * 3600),
    ("2026-11-24 18:00 +01:00", 26 * 3600), ("2026-11-24 18:00:00+01:00", 26 * 3600),
    ("2026-11-24T18:00Z", 27 * 3600), ("2026-11-24 18:00 UTC", 27 * 3600),
    ("2026-11-24 18:00 -0100", 28 * 3600),
])
def test_a_time_may_carry_its_utc_offset(text, after):
    """Seen live: `--deadline 2026-12-08 18:00:00+01:00` typed without quotes set the deadline to
    midnight and made the offset the job's command. With its offset a time is that instant,
    whatever the server's time zone (a time of day alone is today where the offset says)."""
    now = datetime(2026, 11, 23, 15, 0, tzinfo=timezone.utc).timestamp()
    assert deadlines.parse(text, now) == pytest.approx(now + after)


def test_times_read_to_the_second_under_ten_minutes():
    """Seen live: a deadline 89 s away read `in 1 min`, one 59.6 s away `in 60 s`."""
    f = deadlines.fmt_minutes
    assert [f(s) for s in (45, 59.6, 89, 120, -89, 599.6, 725, 3900, 2 * 86400 + 3 * 3600)] == [
        "45 s", "1 min", "1 min 29 s", "2 min", "1 min 29 s", "10 min", "12 min", "1 h 05 min", "2 d 03 h"]


@pytest.mark.parametrize("text, message", [
    ("soon", "deadline: cannot read 'soon'; expected a duration (2h, 90m, 1h30m, 2d), a time today"),
    ("", "deadline: cannot read ''"),
    ("25:00", "deadline: '25:00' is not a time of day"),
    ("18:00:60", "deadline: '18:00:60' is not a time of day"), ("18:0:00", "deadline: cannot read '18:0:00'"),
    ("14:59:59", "deadline: 14:59:59 today has passed; give a date and time (2026-11-24 14:59:59)"),
    ("14:00", "deadline: 14:00 today has passed; give a date and time (2026-11-24 14:00) or a duration"),
    ("2026-11-22 18:00", "deadline: 2026-11-22 18:00:00 is in the past (now 2026-11-23 15:00:00)"),
    ("0s", "deadline: 0s from now is no time at all; expected a time after submission"),
    ("2026-11-24", "deadline: 2026-11-24 is a date without a time of day; give one too (2026-11-24 18:00)"),
    ("800h", "deadline: 2026-12-26 23:00:00 is more than 30 days ahead; expected a time within 30 days"),
    ("31d", "deadline: 2026-12-24 15:00:00 is more than 30 days ahead"),
    ("5w", "deadline: 2026-12-28 15:00:00 is more than 30 days ahead"),
    ("2 months", "deadline: cannot read '2 months'"),
    ("18:00 +25:00", "deadline: cannot read '18:00 +25:00'"),
    ("2 hourss", "deadline: cannot read '2 hourss'"), ("1h30", "deadline: cannot read '1h30'"),
    ("-5m", "deadline: -5m is a duration back in the past; expected a time after submission"),
    ("-1h30m", "deadline: -1h30m is a duration back in the past"),
])
def test_bad_deadlines_are_one_line_naming_the_field(text, message):
    with pytest.raises(SpecError) as e:
        deadlines.parse(text, NOW)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


@pytest.mark.parametrize("value", [math.inf, math.nan, True, -5.0, "1700000000"])
def test_the_spec_takes_only_a_finite_time(value):
    with pytest.raises(SpecError, match="^deadline: expected a time in seconds since the epoch"):
        JobSpec.parse({"command": ["x"], "deadline": value})


def test_the_engine_refuses_a_deadline_in_the_past_or_too_far_and_keeps_nothing():
    engine = Engine(parse_cluster("1x4"), "qoe", executor=SimExecutor(), clock=lambda: 1000.0)
    for deadline, words in ((999.0, "is in the past"), (1000.0 + 31 * 86400, "more than 30 days ahead")):
        with pytest.raises(SpecError, match=f"^deadline: .*{words}"):
            engine.submit(JobSpec(command=["x"], deadline=deadline))
    assert engine.jobs == {}
    job = engine.submit(JobSpec(command=["x"], deadline=4600.0))
    d = engine.job_dict(job, 1000.0)
    assert d["deadline"] == 4600.0 and d["deadline_left_s"] == 3600.0
    assert d["deadline_status"] == "unknown"  # nothing measured, nothing similar finished yet


# -- what users read -----------------------------------------------------------------------------
@pytest.mark.parametrize("job, text", [
    ({"state": "running", "deadline": NOW + 3900, "deadline_status": "at_risk"},
     "deadline in 1 h 05 min, at risk"),
    ({"state": "queued", "deadline": NOW + 600, "deadline_status": "will_miss"},
     "deadline in 10 min, will miss"),
    ({"state": "running", "deadline": NOW + 30, "deadline_status": "on_track"}, "deadline in 30 s, on track"),
    ({"state": "queued", "deadline": NOW + 2 * 86400 + 3 * 3600 + 600, "deadline_status": "unknown"},
     "deadline in 2 d 03 h, no estimate yet"),
    ({"state": "running", "deadline": NOW - 180, "deadline_status": "missed"}, "deadline passed 3 min ago"),
    ({"state": "succeeded", "deadline": NOW, "deadline_status": "met"}, "deadline met"),
    ({"state": "succeeded", "deadline": NOW, "deadline_status": "missed", "missed_by_s": 721.0},
     "deadline missed by 12 min"),
    ({"state": "running"}, ""),
])
def test_deadline_text(job, text):
    assert deadlines.deadline_text(job, NOW) == text


def test_submit_says_what_the_estimate_says_of_the_deadline_at_once():
    from schedulearn.client_cli import submitted_line

    job = {"id": 5, "name": "tight", "state": "queued"}
    assert submitted_line(job, NOW) == "submitted job 5 (tight, queued)"
    doomed = {**job, "deadline": NOW + 5, "deadline_status": "will_miss"}  # similar jobs tell
    assert submitted_line(doomed, NOW) == "submitted job 5 (tight, queued; deadline in 5 s, will miss)"
    young = {**job, "spec": {"deadline": NOW + 7200}, "deadline_status": "unknown"}
    said = "submitted job 5 (tight, queued; deadline in 2 h 00 min, no estimate yet)"
    assert submitted_line(young, NOW) == said


def test_the_job_views_show_the_deadline():
    job = {"id": 3, "name": "train", "state": "running", "gpus": 2, "alloc": {"n0": [0, 1]},
           "start_time": NOW - 60, "submit_time": NOW - 90, "deadline": NOW + 1200,
           "deadline_status": "at_risk"}
    assert views.status_line(job, now=NOW) == \
        "job 3 'train': running, deadline in 20 min, at risk, 2 GPUs (n0:0,1), ran 1m00s"
    done = {**job, "state": "succeeded", "end_time": NOW, "run_s": 60.0, "deadline_status": "missed",
            "missed_by_s": 300.0}
    assert views.status_detail(done, now=NOW).startswith("deadline missed by 5 min, ")


@pytest.mark.parametrize("status, phrase", [
    ("at_risk", "deadline in 20 min, at risk"), ("will_miss", "deadline in 20 min, will miss"),
    ("missed", "deadline missed by 12 min"),
])
def test_a_job_widgets_text_view_keeps_the_deadline_past_a_long_reason(status, phrase):
    """What GitHub or nbconvert show of a job widget is its text/plain, which ipywidgets cuts to
    110 characters: the deadline comes before a queued job's waiting reason (or a failed one's
    GPUs and error), the cut is ours (at the end), and a name too long to leave the deadline
    room is shortened. The widget's header says it too."""
    from schedulearn_magics.handle import JobHandle
    from schedulearn_magics.widgets import JobWidget

    now = time.time()  # (the widget reads the wall clock)
    job = {"id": 12, "state": "queued", "gpus": 0, "alloc": {}, "submit_time": now - 3,
           "deadline": now + 1200, "deadline_status": status,
           "reason": "waiting: needs 3 GPUs, 2 free; 2nd in line of 4; the qoe policy starts it "
                     "when it comes first"}
    if status == "missed":  # it ran late and failed
        job.update(state="failed", start_time=now - 900, end_time=now, deadline=now - 720,
                   missed_by_s=720.0, last_alloc={"node0": [0, 1, 2, 3], "node1": [0, 1, 2, 3]},
                   reason="Traceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of "
                          "memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity)")
    for name in ("tight", "a-rather-long-experiment-name-" * 3):
        job["name"] = name
        assert len(views.status_line(job)) > 110  # what ipywidgets cuts
        widget = JobWidget(JobHandle(None, job))
        try:
            widget.update(job, None, None)
            text = widget._repr_mimebundle_()["text/plain"]
        finally:
            widget.close()
        assert text.startswith(f"job 12 '{name[:20]}") and phrase in text, text
        assert len(text) <= 110 and text.endswith("…"), text
        assert f"<span>{phrase}, " in widget.header.value, widget.header.value


def test_the_cli_client_reads_deadlines_before_sending_anything():
    parser = build_parser()
    args = parser.parse_args(["submit", "--deadline", "2h", "--", "true"])
    spec = build_spec(args)
    assert abs(spec["deadline"] - (datetime.now().timestamp() + 7200)) < 60
    with pytest.raises(ClientError, match="^deadline: cannot read 'tomorrowish'"):
        build_spec(parser.parse_args(["submit", "--deadline", "tomorrowish", "--", "true"]))


@pytest.mark.parametrize("argv, message", [
    (["--deadline", "-5m"], "deadline: -5m is a duration back in the past; expected a time after submission, "
                            "such as 2h or 90m from now"),
    (["--timeout", "-5m"], "--timeout: expected a duration > 0 such as 90, 90s, 10m, 2h or 1h30m, got '-5m'"),
    (["--timeout", "400d"], "--timeout: expected a duration of at most a year (365d), got '400d'"),  # (it
])  # was `time_limit: expected a number of seconds > 0 and <= 31536000 (a year), got 34560000.0`)
def test_the_cli_reads_a_value_with_a_minus_as_the_options_and_sends_nothing(capsys, argv, message):
    """`--deadline -5m` is the option's value (argparse alone would answer "expected one argument"):
    one line naming the field, exit 1 as every client error, before any server is asked (none
    listens on port 9: asking it would say so instead)."""
    assert main(["submit", "--url", "http://127.0.0.1:9", *argv, "--", "true"]) == 1
    err = capsys.readouterr().err
    assert err == f"schedulearn: {message}\n", err


def test_attach_values_leaves_the_jobs_own_argv_alone():
    assert deadlines.attach_values(["submit", "--deadline", "-5m", "--gpus", "2", "--", "run", "--deadline",
                                    "-1h"]) == ["submit", "--deadline=-5m", "--gpus", "2", "--", "run",
                                                "--deadline", "-1h"]
    assert deadlines.attach_values(["--deadline", "--gpus", "2"]) == ["--deadline", "--gpus", "2"]


def test_a_value_of_several_words_typed_without_quotes_is_one_value():
    """`--deadline 2026-11-24 18:00`, as the help and the errors write it, or `--deadline 2 hours`:
    a shell (and the magic's line) splits it, and argparse would take `18:00` for a stray
    argument."""
    attach = deadlines.attach_values
    assert attach(["--deadline", "2", "hours", "--gpus", "2"]) == ["--deadline=2 hours", "--gpus", "2"]
    assert attach(["--deadline", "1", "hour", "30", "minutes", "--", "2", "h"]) == [
        "--deadline=1 hour 30 minutes", "--", "2", "h"]
    assert attach(["--timeout", "2h", "30m", "--gpus", "2"]) == ["--timeout=2h 30m", "--gpus", "2"]
    assert attach(["--timeout", "90", "train.py"]) == ["--timeout", "90", "train.py"]
    assert attach(["--timeout", "90", "5"]) == ["--timeout", "90", "5"]
    assert attach(["submit", "--deadline", "2026-11-24", "18:00", "--gpus", "2", "--", "run", "--deadline",
                   "2026-11-24", "18:00"]) == ["submit", "--deadline=2026-11-24 18:00", "--gpus", "2", "--",
                                               "run", "--deadline", "2026-11-24", "18:00"]
    assert attach(["--deadline=2026-11-24", "9:30:15"]) == ["--deadline=2026-11-24 9:30:15"]
    assert attach(["trace", "--since", "2026-11-01", "08:00"]) == ["trace", "--since=2026-11-01 08:00"]
    # a date alone, or followed by something else, is left as it was
    assert attach(["--deadline", "2026-11-24", "--gpus", "2"]) == ["--deadline", "2026-11-24", "--gpus", "2"]
    assert attach(["--deadline", "2026-11-24", "train.py"]) == ["--deadline", "2026-11-24", "train.py"]
    assert attach(["--gpus", "2026-11-24", "18:00"]) == ["--gpus", "2026-11-24", "18:00"]
    # a UTC offset, written with or without a space, is part of its time
    assert attach(["--deadline", "2026-11-24", "18:00:00+01:00", "--", "true"]) == [
        "--deadline=2026-11-24 18:00:00+01:00", "--", "true"]
    assert attach(["--deadline", "2026-11-24", "18:00", "+01:00", "true"]) == [
        "--deadline=2026-11-24 18:00 +01:00", "true"]
    assert attach(["--deadline", "18:00", "UTC", "--gpus", "2"]) == ["--deadline=18:00 UTC", "--gpus", "2"]
    # a number and a word of time are one value, so that its error names both (not '1' alone and
    # 'month' taken for the job's command)
    assert attach(["--deadline", "1", "month", "--", "true"]) == ["--deadline=1 month", "--", "true"]
    assert attach(["--deadline", "1", "week", "train.py"]) == ["--deadline=1 week", "train.py"]
    # and the CLI then reads it as the date and time it is
    when = datetime.now() + timedelta(days=1)
    args = build_parser().parse_args(attach(["submit", "--deadline", f"{when:%Y-%m-%d}", f"{when:%H:%M}",
                                             "--", "true"]))
    assert build_spec(args)["deadline"] == when.replace(second=0, microsecond=0).timestamp()
    offset = datetime.now(timezone.utc) + timedelta(days=1)
    args = build_parser().parse_args(attach(["submit", "--deadline", f"{offset:%Y-%m-%d}",
                                             f"{offset:%H:%M}+00:00", "--", "true"]))
    assert build_spec(args)["deadline"] == offset.replace(second=0, microsecond=0).timestamp()
    assert args.argv[-1:] == ["true"]
    args = build_parser().parse_args(attach(["submit", "--timeout", "1", "hour", "30", "minutes", "--",
                                             "true"]))
    assert build_spec(args)["time_limit"] == 5400


# -- traces and metrics --------------------------------------------------------------------------
def _trace(tmp_path: Path, rows: str) -> list[TraceJob]:
    path = tmp_path / "t.csv"
    path.write_text("name,submit_time,gpus,duration,deadline\n" + rows)
    return load_trace(path)


def test_a_deadline_column_is_seconds_after_submission(tmp_path):
    trace = _trace(tmp_path, "a,10,1,60,120\nb,20,1,60,\n")
    assert [tj.spec.deadline for tj in trace] == [130.0, None]
    pollux = load_trace(ROOT / "traces/pollux/workloads-deadline/workload-1.csv")
    assert len(pollux) == 160 and all(tj.spec.deadline > tj.submit_time for tj in pollux)
    assert pollux[0].spec.deadline == pollux[0].submit_time + 1253  # cifar10-0,107,...,1253


@pytest.mark.parametrize("value", ["-5", "soon", "0"])
def test_a_bad_deadline_in_a_trace_names_file_line_and_field(tmp_path, value):
    with pytest.raises(SpecError, match=r"^t\.csv:3: deadline: "):
        _trace(tmp_path, f"a,10,1,60,120\nb,20,1,60,{value}\n")


def test_edf_runs_the_earliest_deadline_first_and_the_metrics_count_it(tmp_path):
    """Two 100 s jobs on all 4 GPUs: FIFO runs `a` first and `b` misses by 80 s; EDF runs `b`
    (due at 120) first and `a` (due at 150) misses by 50 s. Met: half; tardiness: the mean."""
    trace = _trace(tmp_path, "a,0,4,100,150\nb,0,4,100,120\n")
    fifo = simulate(trace, parse_cluster("1x4"), "fifo").metrics
    edf = simulate(trace, parse_cluster("1x4"), "edf").metrics
    assert (fifo["deadline_met"], fifo["avg_tardiness_s"]) == (0.5, 40.0)
    assert (edf["deadline_met"], edf["avg_tardiness_s"]) == (0.5, 25.0)
    assert edf["deadline_jobs"] == 2 and edf["be_avg_jct_s"] is None
    both = simulate(_trace(tmp_path, "a,0,4,100,250\nb,0,4,100,120\n"), parse_cluster("1x4"), "edf")
    assert both.metrics["deadline_met"] == 1.0 and both.metrics["avg_tardiness_s"] == 0.0


def test_edf_preempts_for_an_earlier_deadline(tmp_path):
    trace = _trace(tmp_path, "long,0,4,1000,5000\nurgent,10,4,100,300\n")
    jobs = {j.spec.name: j for j in simulate(trace, parse_cluster("1x4"), "edf").jobs}
    assert jobs["urgent"].end_time == pytest.approx(110.0)
    assert jobs["long"].restarts == 1 and jobs["long"].end_time == pytest.approx(1100.0)


def test_the_plot_marks_missed_deadlines(tmp_path):
    pytest.importorskip("matplotlib")
    from schedulearn.sim.plot import make_figure

    trace = _trace(tmp_path, "a,0,4,100,150\nb,0,4,50,120\n")
    results = [simulate(trace, parse_cluster("1x4"), p, record=True) for p in ("fifo", "edf")]
    cdf, gantt = make_figure(results, "fifo").axes
    labels = [t.get_text() for t in cdf.get_legend().get_texts()]
    assert labels == ["fifo (avg 2.08 min, deadlines met 50%)", "edf (avg 1.67 min, deadlines met 100%)"]
    (crosses,) = [ln for ln in gantt.get_lines() if ln.get_marker() == "x"]
    assert list(crosses.get_xdata()) == [120.0]  # b, due at 120, ran second under fifo
    assert "missed deadline (due)" in [t.get_text() for t in gantt.get_legend().get_texts()]


def test_no_deadlines_no_deadline_metrics():
    assert deadline_metrics([]) == {}
    r = simulate(load_trace(ROOT / "tests/data/small-trace.csv"), parse_cluster("2x4"), "fifo")
    assert "deadline_met" not in r.metrics


# -- the qoe policy ------------------------------------------------------------------------------
def _elastic(name: str, at: float, gpus: int, duration: float, deadline: float | None = None) -> TraceJob:
    """An elastic job with a linear speed-up that reports its progress: `duration` seconds on
    `gpus` GPUs, from 1 to 8."""
    spec = JobSpec(name=name, gpus=gpus, min_gpus=1, max_gpus=8, duration=duration,
                   deadline=None if deadline is None else at + deadline)
    return TraceJob(at, spec, name)


def _run(trace, policy, events=None, actions=(), **kw):
    def listen(engine):
        engine.listeners.append(lambda e: events.append((engine.clock(), e)) if events is not None else None)

    r = simulate(trace, parse_cluster("1x8"), policy, interval=60, restart_penalty=10,
                 actions=[(0, listen), *actions], **kw)
    return {j.spec.name: j for j in r.jobs}, r


def test_qoe_gives_a_tight_job_what_it_needs_and_the_rest_still_progresses():
    """`tight` asks for 2 GPUs but needs about 5 to finish 2,000 GPU-seconds in 560 s: `qoe`
    sizes it from its reported progress and it makes it; `edf` keeps it at 2 (rigid sizes) and
    `goodput` shares by speed-up and remaining work, and both miss (due in 600 s, `goodput`
    makes it by 4 s once it prices restarts at the 10 s the jobs' progress measured). The
    best-effort job keeps at least one GPU all along under `qoe` (it is never starved) and
    finishes."""
    trace = [_elastic("big", 0, 8, 2000), _elastic("tight", 120, 2, 1000, 560)]
    met = {}
    for policy in ("qoe", "goodput", "edf"):
        jobs, _ = _run(trace, policy)
        met[policy] = jobs["tight"].end_time <= jobs["tight"].spec.deadline
        if policy == "qoe":
            assert jobs["big"].state.value == "succeeded"
    assert met == {"qoe": True, "goodput": False, "edf": False}


def test_a_job_that_cannot_make_it_is_flagged_early_and_left_best_effort():
    """12,000 GPU-seconds in 600 s on at most 8 GPUs: impossible. Once it has reported its
    progress the scheduler says `will_miss` (a `deadline` event), long before the deadline;
    `qoe` then plans for the feasible job instead, which makes it."""
    events = []
    trace = [_elastic("hopeless", 0, 4, 3000, 600), _elastic("feasible", 60, 2, 1000, 900)]
    jobs, _ = _run(trace, "qoe", events)
    flagged = [t for t, e in events if e["event"] == "deadline" and e["job"]["name"] == "hopeless"
               and e["job"]["deadline_status"] == "will_miss"]
    assert flagged and flagged[0] <= 300  # (its deadline: 600)
    assert jobs["feasible"].end_time <= jobs["feasible"].spec.deadline
    assert jobs["hopeless"].state.value == "succeeded"  # best effort: it still ran to its end
    final = [e["job"] for _, e in events if e["event"] == "succeeded" and e["job"]["name"] == "hopeless"]
    assert final[0]["deadline_status"] == "missed" and final[0]["missed_by_s"] > 0


@pytest.mark.parametrize("policy", ["fifo", "edf"])
def test_a_job_that_cannot_make_it_is_told_so_under_a_policy_without_ticks(policy):
    """`fifo` and `edf` run rounds only when jobs come and go; with no other job, `hopeless`
    (3,000 s on its 4 GPUs, due in 600 s) would hear nothing until it ended. The engine looks
    at the deadline statuses at its ticks all the same (every `DEADLINE_WATCH_S`): its
    `will_miss` event comes once its reports tell, long before its deadline, and no extra
    round runs for it (the simulator looks only at rounds unless asked: `deadline_watch_s`)."""
    events = []
    jobs, r = _run([_elastic("hopeless", 0, 4, 3000, 600)], policy, events, deadline_watch_s=30)
    flagged = [t for t, e in events
               if e["event"] == "deadline" and e["job"]["deadline_status"] == "will_miss"]
    assert flagged and flagged[0] <= 300, [(t, e["job"].get("deadline_status")) for t, e in events]
    assert jobs["hopeless"].state.value == "succeeded" and jobs["hopeless"].restarts == 0
    assert len([t for t, e in events if e["event"] == "deadline"]) <= 3  # each change once
    events.clear()
    _run([_elastic("hopeless", 0, 4, 3000, 600)], policy, events)  # the simulator's default
    assert "will_miss" not in [e["job"]["deadline_status"] for _, e in events if e["event"] == "deadline"]


def test_a_rigid_job_found_to_miss_gives_way_at_the_next_tick_not_at_the_next_event(tmp_path):
    """Rigid jobs alone: `b` (all 4 GPUs, 300 s, due in 60 s) starts first, knowing nothing;
    `a` (2 GPUs, 120 s, due at 401) waits behind it. Once b's reports say it will miss, `qoe`
    leaves it to best effort and `a` runs — at a tick, with no submission or exit to trigger a
    round. Before, `qoe` asked for no tick with rigid jobs alone, and `a` ended at 420."""
    trace = _trace(tmp_path, "b,0,4,300,60\na,1,2,120,400\n")
    jobs = {j.spec.name: j for j in simulate(trace, parse_cluster("1x4"), "qoe").jobs}
    assert jobs["a"].end_time <= jobs["a"].spec.deadline, jobs["a"].end_time
    assert jobs["b"].restarts == 1 and jobs["b"].state.value == "succeeded"  # best effort


@pytest.mark.parametrize("declared, measured, status", [
    (None, None, "will_miss"),  # the policies' default: 30 s
    (5.0, None, "at_risk"),  # the policy's restart_cost: what a restart costs on this set-up
    (None, 2.0, "at_risk"),  # the job's own restarts, measured (`pauses`)
])
def test_the_status_prices_a_restart_as_the_policy_does(declared, measured, status):
    """`train` needs 600 s on all 8 GPUs (the history: a run like it) and has 615 s: it makes
    it only if its start costs less than 15 s. The status users see counts the restart at the
    price the policy plans with (`pauses.price` of the policy's `restart_cost`), not at a
    constant of its own: `will_miss` at the default 30 s, `at_risk` where the policy's cost or
    the job's measured restarts are cheaper."""
    policy = policies.create("qoe")
    if declared is not None:
        policy.restart_cost = declared
    seen = {}

    def look(engine):  # as `train` is submitted (at 1000; the round at 1020 starts it)
        def listen(e):
            if e.get("job", {}).get("id") != 2:
                return
            if e["event"] == "submitted":
                job = engine.jobs[2]
                seen["submitted"] = e["job"]["deadline_status"]
                if measured is not None:  # (then: its status just after its submission)
                    pauses.record(job, {"pause_s": measured, "in_place": False})
                seen["price"] = engine.restart_price(job)
                seen["read"] = engine.job_dict(job, job.submit_time)["deadline_status"]
            elif e["event"] == "deadline":
                seen.setdefault("event", e["job"]["deadline_status"])
        engine.listeners.append(listen)

    trace = [_elastic("train", 0, 8, 600), _elastic("train", 1000, 8, 600, 615)]
    _, r = _run(trace, policy, actions=[(0, look)])
    assert seen["read"] == seen["event"] == status, seen
    assert seen["price"] == (declared or measured or 30.0)
    if measured is None:
        assert seen["submitted"] == status, seen
    assert r.engine.jobs[2].state.value == "succeeded"


@pytest.mark.parametrize("deadline, status", [
    (1000, "on_track"),  # 600 s on its 8 GPUs, a 30 s start, a fifth of 1000 s to spare
    (700, "at_risk"),  # it makes it on its 8 GPUs only without the spare (and only if it starts now)
    (200, "will_miss"),  # no size does
])
def test_a_queued_job_reads_on_track_where_what_it_asked_for_makes_it(deadline, status):
    """At submission, from a run like it (the history): a waiting job whose requested GPUs, started
    now, finish it with a fifth of the time left to spare is on track — a 5-second job due in
    10 minutes read `at risk` while it waited for its first round. Less spare: at risk."""
    events = []
    trace = [_elastic("train", 0, 8, 600), _elastic("train", 1000, 8, 600, deadline)]
    _run(trace, "qoe", events)
    first = next(e["job"] for _, e in events if e["job"]["id"] == 2)
    assert (first["state"], first["deadline_status"]) == ("queued", status)


def test_a_queued_job_the_policy_gave_up_on_will_miss_whatever_its_estimate_says():
    """On track by its estimate (what it asked for would make it), but the policy no longer
    plans for it (it waits as best effort): its user reads `will_miss`."""
    engine = Engine(parse_cluster("1x4"), "qoe", executor=SimExecutor(), clock=lambda: 1000.0)
    job = engine.submit(JobSpec(command=["x"], deadline=4600.0))
    assert engine._verdict(job, {"deadline_status": "on_track"}) == {"deadline_status": "on_track"}
    engine.policy._dropped.add(job.id)  # what qoe's admission does to the costliest
    assert engine._verdict(job, {"deadline_status": "on_track"}) == \
        {"deadline_status": "will_miss", "given_up": "qoe"}


def test_an_infeasible_job_is_flagged_at_submission_from_similar_jobs():
    """A job like one that already ran (same name and GPUs: the history predicts its work) with
    a deadline shorter than that work on any size is `will_miss` the moment it is submitted."""
    events = []
    trace = [_elastic("train", 0, 8, 600), _elastic("train", 1000, 8, 600, 200)]
    _run(trace, "qoe", events)
    second = [(t, e["event"], e["job"]["deadline_status"]) for t, e in events if e["job"]["id"] == 2]
    (t, *_), flag = second[0], second[1]  # (submissions wait for the next 60 s round)
    assert second[0] == (t, "submitted", "will_miss") and flag == (t, "deadline", "will_miss")


def test_a_job_without_progress_that_outran_similar_jobs_has_no_estimate_not_on_track():
    """`train` reports no progress (a rigid job); the history says a run like it took some 200
    GPU-seconds. The second run truly needs 1,200 and is due 450 s after submission: it misses.
    Once it has had more service than the first run needed, the history says nothing more about
    its time left (the ETA says none): its status is `unknown` from then on — not `on_track` on a
    tenth of the prediction until the deadline passed (it read `on track` with 8 s to go, then
    `missed`)."""
    seen = []

    def watch(engine):  # what a user reads as the job runs, every 20 s
        job = engine.jobs.get(2)
        if job is not None and job.state.value == "running":
            now = engine.clock()
            seen.append((job.attained(now) >= engine.history.predict(job),
                         engine.job_dict(job, now).get("deadline_status")))

    rigid = [TraceJob(0, JobSpec(name="train", gpus=2, duration=100), "a"),
             TraceJob(300, JobSpec(name="train", gpus=2, duration=600, deadline=750), "b")]
    _, r = _run(rigid, "qoe", actions=[(310 + 20 * k, watch) for k in range(21)])
    job = r.engine.jobs[2]
    assert job.state.value == "succeeded" and job.end_time > job.spec.deadline
    assert {status for outran, status in seen if outran} == {"unknown"}, seen
    assert {status for outran, status in seen if not outran} == {"on_track"}, seen  # the history's say


def test_qoe_lets_a_late_job_seconds_from_its_end_finish_before_a_newcomer_takes_its_gpus():
    """A cifar10 run on all 4 GPUs, due 300 s before it can end (it misses, and is given up);
    a second one, due an hour later, arrives a round before the first ends. At the last round the
    first has 8 s of work left, less than a restart costs it: `qoe` lets it finish, then starts
    the newcomer, which still makes its deadline, a round later. Without that rule (as before) the
    newcomer's deadline took the GPUs and the late job, a few seconds from its end, waited for
    the newcomer's whole run (20 minutes) and a restart."""
    def cifar10(name: str, at: float, due: float) -> TraceJob:
        return TraceJob(at, JobSpec(name=name, gpus=4, min_gpus=1, max_gpus=4, application="cifar10",
                                    batch_size=2048, adaptive_batch=True, deadline=due), name)

    class Before(QoE):
        def finishing(self, job, ctx, per_node):
            return False

    setup = {"interval": 35, "restart_penalty": 30}
    end = simulate([cifar10("late", 0.0, 1e6)], parse_cluster("1x4"), "qoe", **setup).jobs[0].end_time
    trace = [cifar10("late", 0.0, end - 300), cifar10("new", end - 35, end + 3000)]
    (now, before) = ({j.spec.name: j for j in simulate(trace, parse_cluster("1x4"), p, **setup).jobs}
                     for p in (QoE(), Before()))
    assert now["late"].end_time == pytest.approx(end, abs=1.0) and now["late"].restarts == 0
    assert before["late"].restarts == 1 and before["late"].end_time > end + 1000  # what it spared
    assert now["late"].end_time > now["late"].spec.deadline  # (it was late all the same)
    for run in (now, before):
        assert run["new"].end_time <= run["new"].spec.deadline
    assert now["new"].end_time <= before["new"].end_time + setup["interval"] + 1.0  # a round, at most


def test_a_late_job_without_progress_of_its_own_is_not_kept_for_its_end():
    """`train` reports no progress; a run like it took 160 GPU-seconds, the second one truly
    needs 9,600 and misses its deadline. Its time left then rests on similar jobs' runs only
    (floored at a tenth of theirs: 2 s on its 8 GPUs), which say nothing of how near its end it
    is: `urgent`, due 600 s after it arrives, gets the GPUs and makes it (it missed, by 370 s, when
    that floor kept `train` on them as if a second from its end)."""
    rigid = [TraceJob(0, JobSpec(name="train", gpus=8, duration=20), "a"),
             TraceJob(300, JobSpec(name="train", gpus=8, duration=1200, deadline=750), "b"),
             TraceJob(900, JobSpec(name="urgent", gpus=8, duration=300, deadline=1500), "c")]
    _, r = _run(rigid, "qoe")
    _, train, urgent = r.jobs
    assert urgent.end_time <= urgent.spec.deadline
    assert train.restarts == 1 and train.state.value == "succeeded"  # preempted, then finished


def _needs(left: float, progress: float = 0.1, running: int = 0, beside: bool = False,
           **rules) -> tuple[int, float]:
    """What `qoe` plans for a job (1-8 GPUs, asked for 8) that did `progress` of its work in its
    first 100 s on 4 GPUs and is due `left` seconds later; `running`: the GPUs it runs on;
    `beside`: best-effort jobs in the round; `rules`: `QoE` attributes to set."""
    job = Job(id=1, spec=JobSpec(command=["x"], gpus=8, min_gpus=1, max_gpus=8, deadline=100.0 + left),
              submit_time=0.0)
    ingest(job, [{"t": 0, "num_gpus": 4, "progress": 0.0}, {"t": 100, "num_gpus": 4, "progress": progress}])
    if running:
        job.state = JobState.running
        job.set_alloc({"node0": tuple(range(running))}, 0.0)
    policy = QoE()
    policy._beside = beside
    for k, v in rules.items():
        setattr(policy, k, v)
    return policy.needs(job, RoundContext(100.0, [], [], {}, {}, {}, 8), 4)


def test_a_running_job_its_estimate_says_misses_by_under_a_fifth_keeps_its_size():
    """900 s of work left on its 4 GPUs (3,600 GPU-seconds): due in 800 s it would end 100 s
    (an eighth of the time left) late there, within what a young estimate errs by, so it keeps
    its 4 GPUs instead of a restart on 6; due in 700 s (29 % late) it grows to 7; beside
    best-effort jobs (whose GPUs a job that misses would hold) it grows to 6 as before."""
    assert QoE.keep_within == 0.2
    assert _needs(800.0, running=4) == (4, pytest.approx(900.0, rel=0.01))
    assert _needs(800.0, running=4, keep_within=0.0)[0] == 6  # the rule before
    assert _needs(700.0, running=4)[0] == 7
    assert _needs(800.0, running=4, beside=True)[0] == 6


def test_a_running_job_that_only_a_larger_size_with_no_time_to_spare_makes_keeps_its_size():
    """Due in 550 s, 900 s of work left on its 4 GPUs: 8 GPUs would take 450 s + a 30 s restart,
    so no size leaves a fifth of the time to spare, and 7 GPUs make it with none. Growing to 7
    would be a restart planned with no margin (traced on workload 2, a job chased its deadline
    28 -> 38 -> 54 GPUs and missed); it keeps its 4. A queued job is sized as before: 7."""
    assert _needs(550.0, running=4, keep_within=0.0) == (4, pytest.approx(900.0, rel=0.01))
    assert _needs(550.0, keep_within=0.0)[0] == 7


def test_the_give_up_tolerance_narrows_to_the_time_left_at_half_the_progress():
    """Half its work done in 100 s on 4 GPUs: 50 s on 8 GPUs + a 30 s restart are left. Due in
    70 s, its fastest size needs 1.14x the time left: a young job (a tenth done, the same time
    left by its estimate) keeps its fastest size (`tolerance`, 1.5x), one at half its progress,
    whose estimate is within a tenth, is given up."""
    assert _needs(70.0, progress=0.5) == (0, 0.0)
    assert _needs(420.0, progress=0.1) == (8, pytest.approx(450.0, rel=0.01))  # 480 / 420 = 1.14x
