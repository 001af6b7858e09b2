"""The persistent job store (schedulearn.store) on a real SQLite file and a real PostgreSQL
server (tests/fixtures/postgres.py), alone and under the engine."""

from __future__ import annotations

import dataclasses
import logging
import math
import threading

import pytest
import sqlalchemy as sa
from schedulearn import Engine, JobSpec, JobState, SpecError, virtual_cluster
from schedulearn.model import Job
from schedulearn.sim.executor import SimExecutor
from schedulearn.store import SqlStore, StoreError, migrate
from schedulearn.store.schema import VERSION_TABLE

FIELDS = [f.name for f in dataclasses.fields(Job) if f.name != "extra"]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/jobs.db"
    return request.getfixturevalue("postgres_fresh_url")


@pytest.fixture
def store(url):
    s = SqlStore(url)
    yield s
    s.close()


def assert_same_job(got: Job, want: Job) -> None:
    for name in FIELDS:
        assert getattr(got, name) == getattr(want, name), name
    assert type(got.state) is JobState
    assert all(type(v) is tuple for v in got.alloc.values())


def full_job(job_id: int = 7) -> Job:
    spec = JobSpec(
        name="train resnet", command=["python", "train.py", "--lr", "0.1"], gpus="auto", min_gpus=2,
        max_gpus=8, launcher="torchrun", image="pytorch:2.13", env={"A": "1", "B": "é ü \"q\""},
        priority=-3, user="alice", workdir="/home/alice", duration=3600.5, application="cifar10",
        batch_size=256, adaptive_batch=True,
    )
    return Job(
        id=job_id, spec=spec, submit_time=1763790000.123456, state=JobState.running,
        alloc={"node0": (0, 1, 3), "node1": (2,)}, start_time=1763790010.5, end_time=None,
        attained_base=1234.000001, run_base=99.25, since=1763790100.75, restarts=3, exit_code=None,
        reason="resized", batch_size=512, stopping="preempt",
        extra={"progress": 0.4375, "nested": {"a": [1, 2.5, None, True]}, "model": object(),
               "_private": 1, "nan": math.nan},
    )


class RecordingSim(SimExecutor):
    """A simulated executor that re-attaches to the jobs handed to it after a restart."""

    def __init__(self):
        super().__init__()
        self.recovered: list[tuple[int, dict]] = []

    def recover(self, jobs):
        for job in jobs:
            self.recovered.append((job.id, dict(job.alloc)))
            self.start(job, job.since)


# -- the store alone -----------------------------------------------------------------------------
def test_round_trip_every_field(store):
    job = full_job()
    store.add_job(job)
    (got,) = store.load_jobs()
    assert_same_job(got, job)
    assert got.spec == job.spec and got.spec.launcher.value == "torchrun"
    # JSON-able extra entries are kept; live objects, private keys and NaN are not.
    assert got.extra == {"progress": 0.4375, "nested": {"a": [1, 2.5, None, True]}}

    job.state, job.alloc, job.stopping = JobState.failed, {}, None
    job.end_time, job.exit_code, job.reason, job.restarts = 1763799999.5, -9, "killed: OOM", 4
    job.attained_base, job.run_base, job.since, job.batch_size = 2e-7, 1e12, 17.0, None
    store.update_job(job)
    (got,) = store.load_jobs()
    assert_same_job(got, job)
    assert store.get_job(job.id).reason == "killed: OOM" and store.get_job(999) is None


def test_policy_setting(store):
    assert store.get_policy() is None
    store.set_policy("las")
    store.set_policy("round-robin")
    assert store.get_policy() == "round-robin"


def test_list_jobs_filters(store):
    for i in range(1, 8):
        job = full_job(i)
        job.spec = job.spec.model_copy(update={"user": "bob" if i % 2 else "alice"})
        job.state = (JobState.queued, JobState.running, JobState.succeeded)[i % 3]
        store.add_job(job)
    assert [j.id for j in store.list_jobs()] == list(range(1, 8))
    assert [j.id for j in store.list_jobs(state="queued")] == [3, 6]
    assert [j.id for j in store.list_jobs(state=[JobState.queued, "running"])] == [1, 3, 4, 6, 7]
    assert [j.id for j in store.list_jobs(user="bob")] == [1, 3, 5, 7]
    assert [j.id for j in store.list_jobs(user="bob", state="running", limit=1)] == [7]
    assert [j.id for j in store.list_jobs(limit=3)] == [5, 6, 7]
    with pytest.raises(SpecError, match=r"^state: expected one of queued, starting, running, .*got 'done'$"):
        store.list_jobs(state="done")
    with pytest.raises(SpecError, match=r"^limit: expected an integer >= 0, got -1$"):
        store.list_jobs(limit=-1)


def test_failed_transaction_leaves_nothing(store):
    store.add_job(full_job(1))
    with pytest.raises(StoreError, match="nothing written"):
        with store.transaction():
            store.add_job(full_job(2))
            store.add_event(2, "submitted", {}, 1.0)
            store.add_job(full_job(1))  # the primary key exists: the whole transaction fails
    assert [j.id for j in store.load_jobs()] == [1]
    assert store.events() == []
    # One write violating a constraint (restarts >= 0) leaves the stored row as it was.
    bad = full_job(1)
    bad.restarts, bad.reason = -1, "must not be stored"
    with pytest.raises(StoreError, match=r"^store: update job 1 failed, nothing written: .+"):
        store.update_job(bad)
    assert_same_job(store.load_jobs()[0], full_job(1))
    with pytest.raises(StoreError, match="update job 42 failed, nothing written: no such job"):
        store.update_job(full_job(42))
    with pytest.raises(StoreError, match="add event"):
        store.add_event(42, "started", {}, 1.0)  # no such job: the foreign key refuses it
    assert store.events() == []
    # The store is still usable after the failures.
    store.add_event(1, "started", {"gpus": 4}, 2.0)
    assert [e["kind"] for e in store.events()] == ["started"]


def test_threads_writing_at_once(store):
    store.add_job(full_job(1))

    def write(k: int) -> None:
        for i in range(50):
            store.add_event(1, f"t{k}", {"i": i}, float(i))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = store.events(job_id=1)
    assert len(got) == 200
    for k in range(4):
        assert [e["data"]["i"] for e in got if e["kind"] == f"t{k}"] == list(range(50))


def test_closed_store_raises(url):
    s = SqlStore(url)
    s.close()
    with pytest.raises(StoreError, match="is closed"):
        s.add_event(None, "x", {}, 0.0)
    with pytest.raises(StoreError, match="is closed"):
        s.load_jobs()


def test_postgres_server_restart(postgres_server, postgres_fresh_url):
    s = SqlStore(postgres_fresh_url)
    s.add_job(full_job(1))
    s.load_jobs()  # a pooled read connection is now open too
    postgres_server.restart()  # drops both connections
    assert [j.id for j in s.load_jobs()] == [1]  # the reader reconnects
    s.add_event(1, "started", {}, 1.0)  # so does the writer: the write is not lost
    assert [e["kind"] for e in s.events()] == ["started"]
    s.close()


def test_unreachable_or_bad_url_is_one_clear_line(tmp_path):
    no_server = r"^store: cannot open postgresql\+psycopg://nobody@/nodb\?host=.*: .+$"
    with pytest.raises(StoreError, match=no_server):
        SqlStore(f"postgresql+psycopg://nobody@/nodb?host={tmp_path}")  # no server there
    with pytest.raises(StoreError, match=r"^store: unknown database 'nosuchdb' in nosuchdb://x; use a SQLite "
                                         r"path or sqlite:///PATH, or postgresql://USER@HOST/DB$"):
        SqlStore("nosuchdb://x")
    with pytest.raises(StoreError, match=r"^store: cannot open postgresql\+psycopg2://a@/b: its driver "
                                         r"'psycopg2' is not installed \(PostgreSQL: pip install"):
        SqlStore("postgresql+psycopg2://a@/b")  # (psycopg 3 is the one the project installs)
    with pytest.raises(StoreError, match=r"^store: not a SQLAlchemy URL or SQLite path: '://x'$"):
        SqlStore("://x")
    # postgres:// (libpq's spelling; SQLAlchemy knows only postgresql://) reaches the server
    with pytest.raises(StoreError, match=r"^store: cannot open postgresql://nobody@/nodb\?host=.*: .+$"):
        SqlStore(f"postgres://nobody@/nodb?host={tmp_path}")
    with pytest.raises(StoreError, match=r"^store: cannot open sqlite:////proc/.+: .+$"):
        SqlStore("sqlite:////proc/no/such/dir/jobs.db")


# -- the schema and its migrations -------------------------------------------------------------
def test_migrations_produce_the_schema_the_code_uses(store):
    with store._engine.connect() as conn:
        assert migrate.compare(conn) == []
        assert migrate.current(conn) == migrate.head()
        assert {"jobs", "events", "settings", VERSION_TABLE} <= set(sa.inspect(conn).get_table_names())
    again = SqlStore(store._engine.url.render_as_string(hide_password=False))  # reopen: no-op
    again.close()


def test_a_schema_change_is_logged_once(tmp_path, caplog):
    url = f"sqlite:///{tmp_path}/jobs.db"
    with caplog.at_level(logging.INFO, logger="schedulearn.store"):
        SqlStore(url).close()  # a new database
        (tmp_path / "jobs.db").unlink()
        eng = sa.create_engine(url)
        with eng.begin() as conn:
            migrate.upgrade(conn, "0001")  # one an older schedulearn made
        eng.dispose()
        SqlStore(url).close()  # upgraded
        SqlStore(url).close()  # at head: nothing to say
    said = [r.getMessage() for r in caplog.records if r.name == "schedulearn.store"]
    assert said == [f"store: schema created (revision {migrate.head()})",
                    "store: schema created (revision 0001)",
                    f"store: schema upgraded from revision 0001 to {migrate.head()}"]


def test_unknown_schema_revision_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path}/jobs.db"
    SqlStore(url).close()
    eng = sa.create_engine(url)
    with eng.begin() as conn:
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    eng.dispose()
    with pytest.raises(StoreError, match=r"schema revision '9999', unknown to this version"):
        SqlStore(url)


def test_sqlite_settings_on_every_connection(tmp_path):
    s = SqlStore(str(tmp_path / "sub" / "jobs.db"))  # a plain path; missing directories made
    assert s.url == f"sqlite:///{tmp_path}/sub/jobs.db"
    with s._engine.connect() as conn:
        pragma = lambda name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()  # noqa: E731
        assert pragma("journal_mode") == "wal"
        assert pragma("synchronous") == 1  # NORMAL
        assert pragma("busy_timeout") == 10000
        assert pragma("foreign_keys") == 1
    s.close()


def test_in_memory_sqlite():
    s = SqlStore("sqlite://")
    s.add_job(full_job(3))
    assert [j.id for j in s.load_jobs()] == [3]
    s.close()


# -- under the engine --------------------------------------------------------------------------
def test_restart_resumes_queue_and_policy(url):
    nodes = virtual_cluster(1, 4)
    a = Engine(nodes, "fifo", SimExecutor(), store=SqlStore(url))
    for i, (gpus, dur) in enumerate([(2, 100), (2, 50), (4, 10), (1, 10), (1, 10)]):
        a.submit({"name": f"j{i + 1}", "gpus": gpus, "duration": dur, "user": "u"}, now=float(i))
    a.round(5.0)  # FIFO: j1 and j2 start, j3 (4 GPUs) blocks the rest
    a.executor.advance(60.0)  # j2 ends at 55
    a.round(60.0)
    a.cancel(4, now=61.0)
    a.set_policy("las")
    a.submit({"name": "j6", "gpus": 1, "duration": 5}, now=62.0)
    assert {j.id: j.state.value for j in a.jobs.values()} == {
        1: "running", 2: "succeeded", 3: "queued", 4: "cancelled", 5: "queued", 6: "queued"}
    # A dies here (its store is never closed); B opens the same database.
    ex = RecordingSim()
    b = Engine(nodes, "fifo", ex, store=SqlStore(url))
    assert b.policy.name == "las"
    assert list(b.active) == [1, 3, 5, 6]
    assert [j.id for j in b.active.values() if j.state is JobState.queued] == [3, 5, 6]
    assert ex.recovered == [(1, {"node0": (0, 1)})]
    assert b.pool.total == 2
    assert sorted(b.jobs) == sorted(a.jobs)
    for job_id, job in a.jobs.items():
        assert_same_job(b.jobs[job_id], job)
    assert b.submit({"duration": 1}, now=70.0).id == 7
    # B goes on: every job ends, and the store agrees with B.
    t = 70.0
    while b.active and t < 1000:
        b.executor.advance(t)
        b.round(t, tick=True)
        t += 5.0
    assert not b.active
    stored = {j.id: j.state.value for j in b.store.load_jobs()}
    assert stored == {1: "succeeded", 2: "succeeded", 3: "succeeded", 4: "cancelled",
                      5: "succeeded", 6: "succeeded", 7: "succeeded"}
    assert b.store.get_job(1).end_time == pytest.approx(105.0)  # re-attached: not restarted
    b.store.close()
    a.store.close()


def test_rejected_spec_writes_nothing(store):
    eng = Engine(virtual_cluster(2, 4), "fifo", SimExecutor(), store=store)
    with pytest.raises(SpecError, match=r"^gpus: expected an integer >= 1 or 'auto'"):
        eng.submit({"gpus": 0, "duration": 1})
    with pytest.raises(SpecError, match=r"^gpus: at most 8 \(the GPUs of this cluster\), got 9$"):
        eng.submit({"gpus": 9, "duration": 1})
    with pytest.raises(SpecError, match=r"^launcher: expected one of python, torchrun, horovod"):
        eng.submit({"command": ["x"], "launcher": "mpi"})
    assert store.load_jobs() == [] and store.events() == [] and not eng.jobs
    assert eng.submit({"duration": 1}).id == 1


def test_failing_store_leaves_engine_untouched(store):
    eng = Engine(virtual_cluster(1, 2), "fifo", SimExecutor(), store=store)
    store.close()
    with pytest.raises(StoreError):
        eng.submit({"duration": 1})
    assert not eng.jobs and not eng.active


def test_events_for_a_job_life(store):
    eng = Engine(virtual_cluster(1, 2), "fifo", SimExecutor(), store=store)
    eng.submit({"gpus": 2, "duration": 30}, now=0.0)
    eng.submit({"gpus": 1, "duration": 5}, now=1.0)
    eng.round(2.0)
    eng.set_policy("las")
    eng.executor.advance(40.0)
    eng.round(40.0)
    eng.executor.advance(100.0)
    life = [(e["kind"], e["t"], e["data"]) for e in store.events(job_id=1)]
    assert life == [("submitted", 0.0, {}), ("starting", 2.0, {"run": 0, "alloc": {"node0": [0, 1]}}),
                    ("started", 2.0, {"gpus": 2}), ("succeeded", 32.0, {})]
    assert [(e["kind"], e["t"]) for e in store.events(job_id=2)] == [
        ("submitted", 1.0), ("starting", 40.0), ("started", 40.0), ("succeeded", 45.0)]
    (policy,) = [e for e in store.events() if e["job_id"] is None]
    assert policy["kind"] == "policy" and policy["data"] == {"policy": "las"}
    all_ids = [e["id"] for e in store.events()]
    assert all_ids == sorted(all_ids) and len(all_ids) == 9
    assert [e["kind"] for e in store.events(after=all_ids[-2])] == ["succeeded"]
    assert store.get_job(1).state is JobState.succeeded and store.get_job(1).end_time == 32.0


def test_a_finished_jobs_script_is_kept_in_the_store_only(url):
    """A notebook cell's script is 30 KB to 4 MB and a finished job never runs again: 10,000
    finished cells held 300 MB in the server for as long as it ran. Its size stays, the store
    gives the script back, what learns from the job still sees a script's job, and a job that
    may run again (queued, running, preempted) keeps its own."""
    from schedulearn.estimates.predict import features

    script = "print('é')\n" + "#" * 50_000 + "\n"
    size = len(script.encode())
    a = Engine(virtual_cluster(1, 2), "fifo", SimExecutor(), store=SqlStore(url))
    done = a.submit({"script": script, "duration": 5}, now=0.0)
    later = a.submit({"script": script, "duration": 50, "gpus": 2}, now=0.0)
    before = features(done)
    a.round(1.0)
    assert done.state is JobState.running and done.spec.script == script
    a.executor.advance(10.0)
    a.round(10.0)
    assert done.state is JobState.succeeded and later.state is JobState.running
    assert done.spec.script == "" and done.script_bytes == size and features(done) == before
    assert a.stored_script(done) == script and a.job_dict(done, 10.0)["script_bytes"] == size
    assert later.spec.script == script and later.script_bytes is None
    assert a.stored_script(later) == script and a.job_dict(later, 10.0)["script_bytes"] == size
    # a restart sheds the finished ones' again, and keeps the running one's
    b = Engine(virtual_cluster(1, 2), "fifo", RecordingSim(), store=SqlStore(url))
    old, running = b.get(done.id), b.get(later.id)
    assert old.spec.script == "" and old.script_bytes == size and b.stored_script(old) == script
    assert running.spec.script == script and b.stored_script(running) == script
    assert b.store.get_job(done.id).spec.script == script  # the store keeps it whole
    b.store.close()
    a.store.close()
