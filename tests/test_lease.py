"""One scheduler per store, with real server processes on SQLite and PostgreSQL: a second
`schedulearn serve` (or Jupyter server with the extension) on a store in use refuses to start with
one line naming the holder; the lease is given back on exit and taken over after `kill -9`, also
while a job of the killed server is still running (jobs do not hold it)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from schedulearn.client import Client, ClientError
from schedulearn.store import StoreError
from schedulearn.store.lease import PG_KEY, LeaseError, _app_name, _pg_holder_row, acquire, lock_path
from sqlalchemy.pool import NullPool

from tests.fixtures.jupyter import ROOT, LiveServer, free_port
from tests.test_server_live import Serve, alive, wait_for

pytestmark = pytest.mark.slow

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)]),
       "SCHEDULEARN_SERVE_TOKEN": "t"}  # (in the environment: on the command line it is a warning line)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path: Path) -> str:
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_fresh_url")
    return f"sqlite:///{tmp_path / 'shared.db'}"


def serve_args(home: Path, store: str, port: int) -> list[str]:
    return [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(port), "--store", store,
            "--job-root", str(home / "jobs"), "--virtual-gpus", "1", "--tick", "0.2"]  # token "t": ENV


def second_serve(tmp_path: Path, store: str) -> subprocess.CompletedProcess:
    home = tmp_path / "second"
    home.mkdir(exist_ok=True)
    return subprocess.run(serve_args(home, store, free_port()), env=ENV, capture_output=True, text=True,
                          timeout=60)


def test_lease_in_one_process(tmp_path: Path, store_url: str):
    first = acquire(store_url)
    try:
        with pytest.raises(LeaseError) as e:
            acquire(store_url)
        msg = str(e.value)
        assert "\n" not in msg and "is in use by another scheduler" in msg
        if store_url.startswith("sqlite"):
            assert f"pid {os.getpid()} on {socket.gethostname()}" in msg
            held = json.loads(lock_path(tmp_path / "shared.db").read_text())
            assert held["pid"] == os.getpid()
        else:
            assert f"schedulearn {os.getpid()}@" in msg
    finally:
        first.release()
    with acquire(store_url) as again:  # given back: taken at once
        assert again.held
    assert not again.held
    assert acquire("sqlite://").held is False  # in memory: private to its process, no lease


def test_a_store_spelt_postgres_is_leased_as_postgresql(postgres_fresh_url: str):
    """`postgres://` (libpq's spelling) opens the store as `postgresql://`; its lease must be the
    same PostgreSQL lease, or a second scheduler on it would run beside the first."""
    libpq = "postgres://" + postgres_fresh_url.split("://", 1)[1]
    with acquire(postgres_fresh_url):
        with pytest.raises(LeaseError, match="is in use by another scheduler"):
            acquire(libpq)


def test_a_second_serve_refuses_to_start_naming_the_holder(tmp_path: Path, store_url: str):
    first = Serve(tmp_path / "first", "--token", "t", "--virtual-gpus", "1", "--tick", "0.2", store=store_url)
    try:
        Client(first.url, "t").submit({"command": ["true"]})
        t0 = time.monotonic()
        proc = second_serve(tmp_path, store_url)
        assert time.monotonic() - t0 < 30
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert lines[0].startswith("schedulearn serve: store: ") and "in use by another scheduler" in lines[0]
        assert str(first.proc.pid) in lines[0]  # names the holder
        # the first one is untouched and still schedules
        c = Client(first.url, "t")
        job = c.submit({"command": ["true"]})
        wait_for(lambda: c.job(job["id"])["state"] == "succeeded", what="the first server's job")
    finally:
        first.stop()
    # given back on a clean exit: a new server starts on the same store
    again = Serve(tmp_path / "third", "--token", "t", "--virtual-gpus", "1", store=store_url)
    try:
        assert len(Client(again.url, "t").jobs()) == 2
    finally:
        again.stop()


def test_kill_9_of_the_holder_frees_the_lease_even_with_its_job_running(tmp_path: Path, store_url: str):
    first = Serve(tmp_path / "first", "--token", "t", "--virtual-gpus", "1", "--tick", "0.2", store=store_url)
    c = Client(first.url, "t")
    job = c.submit({"command": SLEEP})
    wait_for(lambda: c.job(job["id"])["state"] == "running", what="the job to start")
    pid = int(json.loads((tmp_path / "first" / "jobs" / str(job["id"]) / "pid").read_text())["pid"])
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    first.stop()
    assert alive(pid), "the job outlives its server"
    # the lease went with the holder; the job's processes hold none of it
    nxt = Serve(tmp_path / "first", "--token", "t", "--virtual-gpus", "1", "--tick", "0.2", store=store_url)
    try:
        c = Client(nxt.url, "t")
        assert c.job(job["id"])["state"] == "running"  # re-attached by the new holder
        proc = second_serve(tmp_path, store_url)
        assert proc.returncode == 2 and str(nxt.proc.pid) in proc.stderr, proc.stderr
        c.cancel(job["id"])
        wait_for(lambda: c.job(job["id"])["state"] == "cancelled", what="the job to stop")
    finally:
        nxt.stop()
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)


def test_a_jupyter_server_on_a_store_in_use_starts_no_scheduler(tmp_path: Path):
    """Jupyter itself runs (notebooks are still useful); its scheduler API answers 503 naming the
    holder, and the log says so in one line."""
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    first = Serve(tmp_path / "first", "--token", "t", "--virtual-gpus", "1", store=store)
    jupyter = LiveServer(tmp_path / "jupyter", {"store_url": store, "virtual_gpus": 1,
                                                "job_root": str(tmp_path / "jjobs"), "tick": 0.2})
    try:
        said = _no_scheduler(jupyter, "in use by another scheduler")
        assert all(str(first.proc.pid) in e for e in said)
        assert Client(first.url, "t").jobs() == []  # nothing reached the store
    finally:
        jupyter.stop()
        first.stop()


@pytest.mark.parametrize("setting, variables, reason", [
    ({"job_root": "/proc/no/such/folder"}, {}, "job_root: cannot create '/proc/no/such/folder'"),
    ({"store_url": "nosuch://x"}, {}, "store: unknown database 'nosuch' in nosuch://x"),
    ({"default_policy": "nope"}, {}, "policy: unknown 'nope'; available: fifo, "),
    ({}, {"SCHEDULEARN_CANCEL_GRACE": "soon"}, "SCHEDULEARN_CANCEL_GRACE: expected a number, got 'soon'"),
])
def test_a_jupyter_server_with_a_setting_it_cannot_work_with_says_why(tmp_path: Path, monkeypatch, setting,
                                                                     variables, reason):
    """As with a store in use: Jupyter runs, the scheduler API answers 503 with the reason and
    what to do, the log says it in one line. Until 2026-12-05 the extension failed to load with a
    traceback in the log, and its API answered 404 (the sidebar: `the Schedulearn server
    extension is not enabled`)."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)  # (the server's environment is this one's)
    jupyter = LiveServer(tmp_path / "jupyter", {"virtual_gpus": 1, "job_root": str(tmp_path / "jobs"),
                                                "tick": 0.2, **setting})
    try:
        said = _no_scheduler(jupyter, reason)
        assert all("fix the setting (c.SchedulearnApp.*" in e for e in said)
    finally:
        jupyter.stop()


def _no_scheduler(jupyter: LiveServer, reason: str) -> list[str]:
    """Start `jupyter`; every API call answers 503 saying `reason` (the errors, returned), and
    once stopped its log says it in one line, without a traceback."""
    jupyter.start()
    c = Client(jupyter.url, jupyter.token)
    said = []
    for call in (c.jobs, c.gpus, lambda: c.submit({"command": ["true"]})):
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.status == 503 and reason in str(e.value), str(e.value)
        said.append(str(e.value))
    jupyter.stop()
    out = jupyter.output()
    refused = [ln for ln in out.splitlines() if reason in ln]
    assert len(refused) == 1 and "no scheduler in this server" in refused[0], out
    assert "Traceback" not in out, out
    return said


# -- a PostgreSQL lease ends with its session: renewed, or given up --------------------------------
def _terminate_sessions(url: str, where: str, params: dict) -> int:
    """End the database sessions `where` picks (as a database restart or a dropped connection
    would end them); how many."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.text(f"SELECT pid FROM pg_stat_activity WHERE {where}"), params)
            pids = [r[0] for r in found]
            for pid in pids:
                conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            return len(pids)
    finally:
        engine.dispose()


def take_from(url: str, where: str, params: dict) -> Any:
    """End the holder's lease session and take the lease, as a second scheduler starting then
    would (the holder may take it again first: then once more)."""
    for _ in range(50):
        assert _terminate_sessions(url, where, params) <= 1
        try:
            return acquire(url)
        except LeaseError:
            time.sleep(0.1)
    raise AssertionError("the lease could not be taken from its holder in 50 tries")


HOLD = ("import sys, time; from schedulearn.store.lease import acquire\n"
        "lease = acquire(sys.argv[1]); print('held', flush=True); time.sleep(120)\n")


def hold_in_another_process(url: str) -> subprocess.Popen:
    """Another scheduler's lease: a process that takes it and keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, url], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_postgresql_lease_that_ended_with_its_session_is_taken_again_or_given_up(postgres_fresh_url: str):
    """The advisory lock lives as long as its session: `renew` finds the session gone and takes
    the lock again; where another scheduler took it meanwhile, `LeaseError` names that one."""
    lease = acquire(postgres_fresh_url)
    try:
        assert lease.renewable and lease.renew() is False  # its session lives: nothing to do
        own = {"p": lease.connection.execute(sa.text("SELECT pg_backend_pid()")).scalar()}
        assert _terminate_sessions(postgres_fresh_url, "pid = :p", own) == 1
        with acquire(postgres_fresh_url):  # the lease went with the session: anyone could take it
            pass
        assert lease.renew() is True  # taken again on a new session
        with pytest.raises(LeaseError):
            acquire(postgres_fresh_url)
        own = {"p": lease.connection.execute(sa.text("SELECT pg_backend_pid()")).scalar()}
        _terminate_sessions(postgres_fresh_url, "pid = :p", own)
        # Its old session, not seen ended yet by the database (a dropped network), still holds
        # the lock: that keeps others out, and is not another scheduler's.
        ghost = sa.create_engine(postgres_fresh_url, poolclass=NullPool,
                                 connect_args={"application_name": _app_name(lease.holder)})
        with ghost.connect() as conn:
            conn.execute(sa.text("SELECT pg_advisory_lock(:a, :b)"), {"a": PG_KEY[0], "b": PG_KEY[1]})
            with pytest.raises(StoreError, match="still held by this server's previous session"):
                lease.renew()
        ghost.dispose()
        assert lease.renew() is True
        own = {"p": lease.connection.execute(sa.text("SELECT pg_backend_pid()")).scalar()}
        _terminate_sessions(postgres_fresh_url, "pid = :p", own)
        other = hold_in_another_process(postgres_fresh_url)
        try:
            with pytest.raises(LeaseError) as e:
                lease.renew()
            said = str(e.value)
            assert f"schedulearn {other.pid}@" in said and "in use by another scheduler" in said
        finally:
            other.kill()
            other.wait(10)
    finally:
        lease.release()
    assert acquire("sqlite://").renewable is False


def test_a_serve_whose_lease_ended_takes_it_again_or_stops_when_another_took_it(tmp_path: Path,
                                                                             postgres_fresh_url: str):
    """A database restart (here: its session ended by `pg_terminate_backend`) ended the lease
    and the server went on without it: a second scheduler could start on the store beside it,
    and both would start the same jobs. Now the server takes it again within seconds; where
    another scheduler took it first, the server stops scheduling and exits, in one line, and its
    running job runs on."""
    url = postgres_fresh_url
    first = Serve(tmp_path / "first", "--token", "t", "--virtual-gpus", "1", "--tick", "0.2", store=url)
    mine = "application_name LIKE :n"
    name = {"n": f"schedulearn {first.proc.pid}@%"}
    try:
        assert _terminate_sessions(url, mine, name) == 1  # the lease's session (the store's are not named)

        def holder() -> str:  # (looked up, not probed by taking it: a probe is another scheduler)
            engine = sa.create_engine(url, poolclass=NullPool)
            try:
                with engine.connect() as conn:
                    row = _pg_holder_row(conn)
            finally:
                engine.dispose()
            return row[0] if row else ""
        wait_for(lambda: holder().startswith(f"schedulearn {first.proc.pid}@"), timeout=30,
                 what="the server to take its lease again")
        c = Client(first.url, "t")
        job = c.submit({"command": SLEEP})
        wait_for(lambda: c.job(job["id"])["state"] == "running", what="the job to start")
        pid = int(json.loads((tmp_path / "first" / "jobs" / str(job["id"]) / "pid").read_text())["pid"])
        other = take_from(url, mine, name)
        try:
            assert first.proc.wait(30) == 1
            said = (tmp_path / "first" / "serve.log").read_text().strip().splitlines()
            last = said[-1]
            assert last.startswith("schedulearn serve: store: ") and "in use by another scheduler" in last
            assert last.endswith("this server lost the lease when its database session ended, and "
                                 "stopped scheduling (its jobs run on under the other scheduler)")
            assert "Traceback" not in "\n".join(said)
            assert alive(pid), "the job runs on"
        finally:
            other.release()
        nxt = Serve(tmp_path / "first", "--token", "t", "--virtual-gpus", "1", "--tick", "0.2", store=url)
        try:
            c = Client(nxt.url, "t")
            assert c.job(job["id"])["state"] == "running"  # taken up by the next scheduler
            c.cancel(job["id"])
            wait_for(lambda: c.job(job["id"])["state"] == "cancelled", what="the job to stop")
        finally:
            nxt.stop()
    finally:
        first.stop()


def test_a_jupyter_server_whose_lease_went_to_another_scheduler_stops_scheduling(tmp_path: Path,
                                                                               postgres_fresh_url: str):
    """Jupyter runs on (notebooks are still useful); its scheduler stops, and the API answers
    503 with the reason and what to do, as when the store was in use at its start."""
    url = postgres_fresh_url
    jupyter = LiveServer(tmp_path / "jupyter", {"store_url": url, "virtual_gpus": 1,
                                                "job_root": str(tmp_path / "jjobs"), "tick": 0.2})
    jupyter.start()
    other = None
    try:
        c = Client(jupyter.url, jupyter.token)
        assert c.jobs() == []
        name = {"n": f"schedulearn {jupyter.proc.pid}@%"}
        other = take_from(url, "application_name LIKE :n", name)

        def refused() -> str | None:
            try:
                c.jobs()
                return None
            except ClientError as e:
                return str(e) if e.status == 503 else None
        said = wait_for(refused, timeout=30, what="the scheduler API to answer 503")
        assert "in use by another scheduler" in said and "stopped scheduling" in said
        assert said.endswith("(restart this server once the other scheduler has stopped) (HTTP 503)"), said
        with pytest.raises(ClientError) as e:
            c.submit({"command": ["true"]})
        assert e.value.status == 503
        status = urllib.request.Request(jupyter.url + "api/status",
                                        headers={"Authorization": f"token {jupyter.token}"})
        with urllib.request.urlopen(status, timeout=10) as answer:  # Jupyter itself answers
            assert answer.status == 200
    finally:
        jupyter.stop()
        if other is not None:
            other.release()
    out = jupyter.output()
    assert len([ln for ln in out.splitlines() if "stopped scheduling" in ln]) == 1, out
    assert "Traceback" not in out, out
