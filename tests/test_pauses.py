"""Resize pauses: measured from a job's reports, kept per kind, priced for the goodput policy;
the engine's books of a resize in place (no restart counted) against a checkpoint-restart."""

from __future__ import annotations

import json

import pytest
from schedulearn import pauses
from schedulearn.engine import Engine
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import Job, JobSpec, JobState, SpecError, virtual_cluster
from schedulearn.policies.goodput import Goodput
from schedulearn.sim.executor import SimExecutor
from schedulearn.store.sql import SqlStore


def _steps(*rows):
    """Reports (t, num_gpus, restart) as a job writes them, one per step."""
    return [{"t": t, "step_time": 0.1, "num_gpus": n, "restart": r} for t, n, r in rows]


def test_in_place_pause_is_last_step_at_the_old_size_to_first_at_the_new():
    mark = pauses.pending(10.0, 2, 1, 0, True)
    recs = _steps((9.0, 2, 0), (9.5, 2, 0), (10.4, 2, 0), (12.0, 1, 0), (12.1, 1, 0))
    assert pauses.measure(mark, recs) == {"pause_s": 1.6, "in_place": True, "from": 2, "to": 1,
                                          "last_step_t": 10.4, "first_step_t": 12.0}
    assert pauses.measure(mark, recs[:3]) is None  # no step after it yet
    assert pauses.measure(mark, [{"t": 11.0, "progress": 0.5}, *recs[3:]]) is None  # nothing before it


def test_restart_pause_waits_for_the_new_run():
    mark = pauses.pending(10.0, 1, 2, 1, False)
    recs = _steps((9.8, 1, 0), (10.2, 1, 0))
    recs.append({"t": 20.0, "progress": 0.4, "restart": 1})  # not a step: no step time
    recs += _steps((25.0, 2, 1), (25.2, 2, 1))
    assert pauses.measure(mark, recs)["pause_s"] == pytest.approx(14.8)


def test_a_report_of_several_steps_ended_its_first_that_many_steps_earlier():
    """`elastic.Monitor` reports every few seconds: the first report after a restart covers
    `timed_steps` steps, the first of which ended (n - 1) step times before it (seen live: 17
    steps of 0.6 s, a pause read 24.3 s for some 14.7 s)."""
    mark = pauses.pending(10.0, 1, 2, 1, False)
    before = {"t": 9.0, "step_time": 1.2, "num_gpus": 1, "restart": 0, "timed_steps": 8}
    after = {"t": 33.3, "step_time": 0.6, "num_gpus": 2, "restart": 1, "timed_steps": 17}
    got = pauses.measure(mark, [before, after])
    assert got["pause_s"] == pytest.approx(33.3 - 16 * 0.6 - 9.0)
    assert got["first_step_t"] == pytest.approx(23.7)
    for odd in (1, 0, None, True, float("nan"), "17"):  # one step, or nothing to go by: its own time
        assert pauses.measure(mark, [before, {**after, "timed_steps": odd}])["pause_s"] == pytest.approx(24.3)
    many = {**after, "timed_steps": 1000}  # never before the last step before it
    assert pauses.measure(mark, [before, many])["pause_s"] == 0.0


def _progress(*rows):
    """Progress-only reports (t, progress, num_gpus, restart), as `report(progress=...)` writes."""
    return [{"t": t, "progress": p, "num_gpus": n, "restart": r} for t, p, n, r in rows]


def test_a_job_reporting_only_progress_measures_its_pause_to_where_it_was():
    """No step times: the pause runs from the last report before the resize to when the new run
    was back at that progress — its first report past it, less the work beyond it at the rate of
    the next report (seen live: such a job restarted in about 1 s was priced at the flat 30 s
    for its whole run, never measured)."""
    mark = pauses.pending(10.0, 1, 2, 1, False)
    old = _progress((8.0, 0.10, 1, 0), (9.5, 0.12, 1, 0), (10.2, 0.13, 1, 0))  # the last after the mark
    start = _progress((11.0, 0.12, 2, 1))  # the new run starts from its checkpoint: not past 0.13
    recs = [*old, *start, *_progress((12.0, 0.15, 2, 1), (13.0, 0.19, 2, 1))]
    got = pauses.measure(mark, recs)
    # back at 0.13 at 12.0 - 0.02 / 0.04 per s = 11.5 s: 1.3 s after its last report at 10.2
    assert got["pause_s"] == pytest.approx(1.3) and got["in_place"] is False and got["to"] == 2
    assert got["last_step_t"] == 10.2 and got["first_step_t"] == pytest.approx(11.5)
    assert pauses.measure(mark, recs[:-1]) is None  # one report past it: no rate yet
    assert pauses.measure(mark, recs[2:]) is not None  # the old run's last report, after the mark
    assert pauses.measure(mark, recs[3:]) is None  # none before it
    for cut in (2, 4, 5):  # read on from where the last call left them (`seen`): the same pause
        seen: dict = {}
        assert pauses.measure(mark, recs[:cut], seen=seen) is None
        assert pauses.measure(mark, recs[cut:], seen=seen)["pause_s"] == pytest.approx(1.3)
    slow = [*old, *start, *_progress((14.0, 0.135, 2, 1), (24.0, 0.335, 2, 1))]
    assert pauses.measure(mark, slow)["pause_s"] == pytest.approx(14.0 - 0.25 - 10.2)
    epochs = [{**r, "progress": None, "epoch": round(r["progress"] * 100)} for r in recs]
    assert pauses.measure(mark, epochs) is None  # its epochs in all: the spec's, given
    got = pauses.measure(mark, epochs, epochs=100)
    assert got["pause_s"] == pytest.approx(1.3)
    in_place = pauses.pending(10.0, 2, 4, 0, True)
    grown = _progress((9.0, 0.5, 2, 0), (10.5, 0.52, 4, 0), (11.0, 0.54, 4, 0))
    assert pauses.measure(in_place, grown)["pause_s"] == pytest.approx(1.5 - 0.02 / 0.04)
    stepped = [*_steps((9.0, 1, 0)), *recs]  # a job with step times: its steps tell, not its progress
    assert pauses.measure(mark, stepped) is None


def test_price_is_the_median_of_the_kind_the_next_resize_will_be():
    spec = JobSpec(command=["x"], launcher="horovod", gpus="auto", resize="in-place")
    job = Job(id=1, spec=spec, submit_time=0.0)
    assert pauses.price(job, 30.0) == 30.0 and pauses.spent(job, 30.0) == 0.0
    job.restarts = 1
    for s in (20.0, 40.0):
        pauses.record(job, {"pause_s": s, "in_place": False})
    assert pauses.price(job, 30.0) == 30.0  # never resized in place: a restart's price
    job.extra[pauses.IN_PLACE_KEY] = 3
    job.extra[pauses.PENDING_KEY] = {"t": 1}
    for s in (1.0, 9.0, 2.0):
        pauses.record(job, {"pause_s": s, "in_place": True})
    assert pauses.PENDING_KEY not in job.extra
    assert pauses.price(job, 30.0) == 2.0
    assert pauses.spent(job, 30.0) == 1 * 30.0 + 3 * 2.0
    for s in range(10):
        pauses.record(job, {"pause_s": float(s), "in_place": True})
    assert pauses.measured(job, True) == [5.0, 6.0, 7.0, 8.0, 9.0]


def test_a_job_not_measured_yet_is_priced_at_its_familys_pauses():
    """A cell run again is resized as its earlier runs were: until it measures pauses of its
    own, the median of its family's of the kind its next resize will be (in place where it asks
    and the family was resized in place); its own, once measured, win."""
    spec = JobSpec(command=["x"], launcher="horovod", gpus="auto", resize="in-place")
    job = Job(id=2, spec=spec, submit_time=0.0)
    family = {"in_place": [0.4, 0.9, 0.5], "restart": [12.0, 14.0]}
    assert pauses.price(job, 30.0, family) == 0.5
    assert pauses.price(job, 30.0, {"restart": [12.0, 14.0]}) == 13.0  # never in place: restarts
    rigid = Job(id=3, spec=JobSpec(command=["x"], launcher="horovod", gpus="auto"), submit_time=0.0)
    assert pauses.price(rigid, 30.0, family) == 13.0  # does not ask for in place
    assert pauses.price(job, 30.0, {}) == pauses.price(job, 30.0, None) == 30.0
    job.restarts, job.extra[pauses.IN_PLACE_KEY] = 1, 2
    assert pauses.spent(job, 30.0, family) == 13.0 + 2 * 0.5
    pauses.record(job, {"pause_s": 2.0, "in_place": True})
    assert pauses.price(job, 30.0, family) == 2.0 and pauses.spent(job, 30.0, family) == 13.0 + 2 * 2.0


def test_a_running_job_asking_for_in_place_with_nothing_measured_is_priced_below_a_restart():
    """Its first resize is likely in place (the executor decides): `IN_PLACE_PRIOR` of the
    default. Not its start (queued), nor where it or its family measured a pause of either kind
    (a restart measured says the executor restarts it), nor a job that does not ask."""
    spec = JobSpec(command=["x"], launcher="torchrun", gpus="auto", resize="in-place")
    job = Job(id=4, spec=spec, submit_time=0.0)
    assert pauses.price(job, 30.0) == 30.0  # queued: its next start is a start
    job.state = JobState.running
    assert pauses.price(job, 30.0) == pauses.price(job, 30.0, {}) == 9.0
    assert pauses.price(job, 30.0, {"restart": [12.0]}) == 12.0
    assert pauses.price(job, 30.0, {"in_place": [0.5]}) == 0.5
    plain = Job(id=5, spec=JobSpec(command=["x"], launcher="torchrun", gpus="auto"), submit_time=0.0)
    plain.state = JobState.running
    assert pauses.price(plain, 30.0) == 30.0
    job.restarts = 1
    pauses.record(job, {"pause_s": 14.0, "in_place": False})  # the executor restarted it
    assert pauses.price(job, 30.0) == 14.0


def test_goodput_restart_factor_uses_measured_pauses():
    p = Goodput()
    spec = JobSpec(gpus="auto", min_gpus=1, max_gpus=4, duration=100.0, resize="in-place")
    job = Job(id=1, spec=spec, submit_time=0.0)
    before = p.restart_factor(job, 1000.0)
    assert before == pytest.approx(1000 / (1000 + 90))
    job.extra[pauses.IN_PLACE_KEY] = 1
    pauses.record(job, {"pause_s": 2.0, "in_place": True})
    after = p.restart_factor(job, 1000.0)
    assert after == pytest.approx((1000 - 6) / (1000 + 6)) and after > before


def test_resize_field_validation():
    with pytest.raises(SpecError, match=r"^resize: 'in-place' needs the horovod or torchrun launcher"):
        JobSpec.parse({"command": ["x"], "gpus": "auto", "resize": "in-place"})
    with pytest.raises(SpecError, match=r"^resize: expected one of restart, in-place"):
        JobSpec.parse({"command": ["x"], "launcher": "horovod", "resize": "inplace"})
    assert JobSpec.parse({"command": ["x"], "launcher": "torchrun", "resize": "in-place"}).in_place
    assert not JobSpec.parse({"command": ["x"], "launcher": "horovod"}).in_place


def _elastic(resize: str | None):
    spec = {"gpus": "auto", "min_gpus": 1, "max_gpus": 2, "duration": 1000.0}
    return {**spec, "resize": resize} if resize else spec


@pytest.mark.parametrize("in_place", [True, False])
def test_engine_books_a_resize_in_place_as_no_restart(tmp_path, in_place):
    """Two elastic jobs on 2 GPUs: the second's arrival shrinks the first, its end grows it.
    In place (an executor that can, a job that asks): `restarts` stays 0, the resizes are
    `resized` events with `in_place` and run 0, the pending mark waits for the measurement."""
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
    eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=SimExecutor(30.0, in_place_penalty=1.0),
                 store=store)
    a = eng.submit(_elastic("in-place" if in_place else None), now=0.0)
    eng.round(0.0)
    assert a.size == 2
    b = eng.submit({"gpus": 1, "duration": 50.0}, now=10.0)
    eng.round(10.0)
    assert a.size == 1 and b.size == 1 and a.alloc == {"node0": (0,)}
    eng.executor.advance(100.0)
    eng.round(100.0)
    assert b.state.final and a.size == 2
    if in_place:
        assert a.alloc == {"node0": (0, 1)}
    resized = [e["data"] for e in store.events(a.id) if e["kind"] == "resized"]
    assert [(d["gpus"], d["in_place"], d["run"]) for d in resized] == (
        [(1, True, 0), (2, True, 0)] if in_place else [(1, False, 1), (2, False, 2)])
    assert a.restarts == (0 if in_place else 2)
    assert a.extra.get(pauses.IN_PLACE_KEY, 0) == (2 if in_place else 0)
    assert a.extra[pauses.PENDING_KEY] == pauses.pending(100.0, 1, 2, 0 if in_place else 2, in_place)
    eng.resize_paused(a.id, {"pause_s": 0.8, "in_place": in_place, "from": 1, "to": 2}, now=101.0)
    assert pauses.measured(a, in_place) == [0.8] and pauses.PENDING_KEY not in a.extra
    assert [e["data"]["pause_s"] for e in store.events(a.id) if e["kind"] == "resize_pause"] == [0.8]
    stored = store.get_job(a.id)
    assert stored.restarts == a.restarts
    assert stored.extra[pauses.RESIZE_PAUSES_KEY] == a.extra[pauses.RESIZE_PAUSES_KEY]
    store.close()


def test_a_simulated_job_reporting_only_progress_measures_its_pause_as_live():
    """An elastic rigid run in the simulator reports only its progress; its pause is measured from
    those reports (its report at the resize, then two of the new run), as a live job's is — the
    simulated restart's 12 s, which the policy is never told."""
    eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=SimExecutor(12.0, report_every=5.0))
    a = eng.submit(_elastic(None), now=0.0)
    eng.round(0.0)
    b = eng.submit({"gpus": 1, "duration": 500.0}, now=60.0)
    eng.executor.advance(60.0)
    eng.round(60.0)
    assert a.size == 1 and b.size == 1 and pauses.PENDING_KEY in a.extra
    for t in range(65, 90, 5):
        eng.executor.advance(float(t))
        if t < 80:  # reports at 75 and 80 (its pause ends at 72)
            assert pauses.PENDING_KEY in a.extra and not pauses.measured(a, False)
    assert pauses.measured(a, False) == [pytest.approx(12.0)]
    assert eng.restart_price(a) == pytest.approx(12.0)


class _Link:
    """What the local executor's `advance` calls of its engine: the running jobs, and
    `resize_paused` (recorded)."""

    def __init__(self, job):
        self.running, self.paused = {job.id: job}, []

    def resize_paused(self, job_id, pause, now):
        self.paused.append((job_id, pause["pause_s"], now))


def _live_job(tmp_path):
    """A local executor with one running job (id 1) and its `metrics.jsonl`'s path."""
    ex = LocalExecutor(tmp_path / "jobs")
    job = Job(id=1, spec=JobSpec(command=["train"], gpus=1, max_gpus=2), submit_time=0.0)
    ex.engine = link = _Link(job)
    path = ex.job_dir(1) / "metrics.jsonl"
    path.parent.mkdir(parents=True)
    return ex, job, link, path


def test_a_live_pause_is_measured_from_what_is_new_and_the_last_step_before(tmp_path):
    """Live, a resize's pause is measured from the reports read since the last round and the last
    step read before them (the job's whole `metrics.jsonl` is not read again: here its early
    bytes are spoiled once read, and the pause still comes out)."""
    ex, job, link, path = _live_job(tmp_path)

    def write(*rows):
        with path.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in _steps(*rows))

    write((1.0, 1, 0), (2.0, 1, 0))
    ex.advance(3.0)
    job.extra[pauses.PENDING_KEY] = pauses.pending(10.0, 1, 2, 1, False)  # restarted at 10 s on 2
    write((10.5, 1, 0))  # the old run's last step
    ex.advance(11.0)
    assert link.paused == []  # no step of the new run yet
    read = path.stat().st_size
    with path.open("r+") as f:
        f.write("x" * (read - 1))
    write((40.0, 2, 1))
    ex.advance(41.0)
    assert link.paused == [(1, 29.5, 41.0)]


def test_a_progress_only_pause_is_measured_from_a_bounded_window_of_the_file(tmp_path, monkeypatch):
    """A job that reports only its progress has no step read before its new reports: its pause
    is looked for first in the last lines read, a window of `READ_AT_MOST` bytes, then in each
    round's new lines only, from where the last look left it — never in the whole
    `metrics.jsonl` (which a job may grow without end: it was read whole, on the server's loop,
    each round while the pause was pending). Here the window is 4 KiB, the file 20."""
    from schedulearn import nofollow
    from schedulearn.estimates import reports

    monkeypatch.setattr(reports, "READ_AT_MOST", 4096)
    reads = []
    real = nofollow.read_bytes

    def read_bytes(path, owner=None, offset=0, limit=-1):
        reads.append((offset, limit))
        return real(path, owner, offset, limit)

    monkeypatch.setattr(nofollow, "read_bytes", read_bytes)
    ex, job, link, path = _live_job(tmp_path)

    def write(*rows):
        with path.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in _progress(*rows))

    write(*((t / 10, t / 10_000, 1, 0) for t in range(1, 400)))  # 40 s of reports, 20 KiB
    while int(job.extra.get("reports_offset") or 0) < path.stat().st_size:
        ex.advance(41.0)
    job.extra[pauses.PENDING_KEY] = pauses.pending(42.0, 1, 2, 1, False)  # restarted at 42 s on 2
    write((42.5, 0.0425, 1, 0))  # the old run's last report (p0), after the mark
    write((60.0, 0.05, 2, 1))  # the new run, past p0 by 0.0075
    ex.advance(61.0)
    assert link.paused == []  # one report past p0: no rate yet
    assert path.stat().st_size > 16_000 and reads and all(0 <= n <= 4096 for _, n in reads), reads
    write((70.0, 0.06, 2, 1))  # 0.01 in 10 s: back at p0 0.75 s before 60.0
    read_to, reads[:] = job.extra["reports_offset"], []
    ex.advance(71.0)
    assert link.paused == [(1, pytest.approx(60.0 - 7.5 - 42.5), 71.0)]
    assert reads and all(offset >= read_to for offset, _ in reads), reads  # only what is new


def test_a_cell_run_again_starts_from_its_earlier_runs_pauses(tmp_path):
    """The engine keeps what a finished job's resizes cost for the next run of its cell
    (`History.pauses_of`), through a restart of the server too: the next run's first resize is
    priced at them (`Engine.restart_price`, what `goodput` and `qoe` charge), not at the policy's
    flat 30 s; a job of another cell is not."""
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
    eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=SimExecutor(30.0, in_place_penalty=1.0),
                 store=store)
    cell = {**_elastic("in-place"), "name": "nb.ipynb[3]", "user": "alice", "launcher": "horovod"}
    a = eng.submit(cell, now=0.0)
    eng.round(0.0)
    b = eng.submit({"gpus": 1, "duration": 50.0}, now=10.0)
    eng.round(10.0)
    assert a.size == 1 and a.extra.get(pauses.IN_PLACE_KEY) == 1
    eng.resize_paused(a.id, {"pause_s": 0.6, "in_place": True, "from": 2, "to": 1}, now=11.0)
    eng.cancel(a.id, now=20.0)
    eng.executor.advance(20.0)
    eng.round(20.0)
    assert a.state.final and not b.state.final
    eng.set_policy("goodput")
    again = eng.submit(cell, now=30.0)
    other = eng.submit({**cell, "name": "nb.ipynb[4]"}, now=30.0)
    assert eng.restart_price(again) == 0.6 and eng.restart_price(other) == 30.0
    factor = eng.policy.restart_factor
    assert factor(again, 1000.0, eng.history.pauses_of(again)) == pytest.approx(970 / (970 + 3 * 0.6))
    assert factor(other, 1000.0, eng.history.pauses_of(other)) == pytest.approx(970 / (970 + 3 * 30))
    store.close()
    restored = Engine(virtual_cluster(1, 2), "goodput", executor=SimExecutor(30.0, in_place_penalty=1.0),
                      store=SqlStore(f"sqlite:///{tmp_path}/jobs.db"))
    assert restored.restart_price(restored.get(again.id)) == 0.6
    assert restored.restart_price(restored.get(other.id)) == 30.0
    restored.store.close()
