"""`SqlStore`: the engine's `Store` on SQLAlchemy Core — a SQLite file by default, any
SQLAlchemy URL otherwise (PostgreSQL: `postgresql+psycopg://user:pw@host/db`).

After a restart the store is the source of truth: `load_jobs` rebuilds every `Job` exactly
(spec, state, times, allocation, last allocation, GPUs being released, service accounting,
restarts, exit, batch size, `stopping`),
so an `Engine` opened on it resumes its queue in the same order and re-attaches running jobs.

What of `Job.extra` is kept: entries whose key does not start with `_` and whose value is plain
JSON (None, bool, int, finite float, str, and lists / str-keyed dicts of these) — e.g. the
simulator's `progress`. Live objects (a simulator's job model, process handles) are dropped.

Every write is one transaction: it commits whole or raises `StoreError` and leaves nothing.
`with store.transaction():` groups several writes into one (all or nothing).
SQLite runs in WAL mode with `synchronous=NORMAL`, a busy timeout and foreign keys on (set on
each new connection), with real `BEGIN`s (the sqlite3 module's implicit transactions are off).
PostgreSQL: a write that finds its connection dropped (a server restart) reconnects and runs
once more; a slow-fsync server can take `?options=-csynchronous_commit%3Doff` in the URL (the
last few commits may be lost if the server crashes; the database stays consistent).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.pool import StaticPool

from ..model import Job, JobSpec, JobState, SpecError
from . import migrate
from .schema import events as events_t
from .schema import jobs as jobs_t
from .schema import settings as settings_t

URL_ENV = "SCHEDULEARN_STORE_URL"
_STATES = tuple(s.value for s in JobState)


class StoreError(RuntimeError):
    """A store operation failed (the message is one line); nothing of it was written."""


def default_url() -> str:
    """`$SCHEDULEARN_STORE_URL`, else a SQLite file in the user's data directory."""
    url = os.environ.get(URL_ENV)
    if url:
        return url
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{base / 'schedulearn' / 'jobs.db'}"


def _normalise(url: str | None) -> str:
    if url is None:
        return default_url()
    if "://" not in url:  # a plain path: a SQLite file
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    return url


def parse_url(url: str | None) -> sa.URL:
    """The store's URL as `SqlStore` and the lease (`lease.acquire`) both read it: a plain path
    is a SQLite file, `postgres://` (libpq's and Heroku's spelling, which SQLAlchemy dropped in
    1.4) is `postgresql://`; a one-line `StoreError` where it is no URL."""
    try:
        parsed = sa.make_url(_normalise(url))
    except sa.exc.ArgumentError:
        raise StoreError(f"store: not a SQLAlchemy URL or SQLite path: {url!r}") from None
    return parsed.set(drivername="postgresql") if parsed.drivername == "postgres" else parsed


def _is_plain(v: Any) -> bool:
    if v is None or isinstance(v, (str, bool, int)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_is_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_plain(x) for k, x in v.items())
    return False


def persisted_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """The part of `Job.extra` the store keeps (see the module docstring)."""
    return {k: v for k, v in extra.items() if not k.startswith("_") and _is_plain(v)} if extra else {}


def _mutable(job: Job) -> dict[str, Any]:
    return {
        "state": job.state.value,
        "start_time": job.start_time,
        "end_time": job.end_time,
        "alloc": _alloc_json(job.alloc),
        "attained_base": job.attained_base,
        "run_base": job.run_base,
        "since": job.since,
        "restarts": job.restarts,
        "exit_code": job.exit_code,
        "reason": job.reason,
        "batch_size": job.batch_size,
        "stopping": job.stopping,
        "extra": persisted_extra(job.extra),
        "last_alloc": _alloc_json(job.last_alloc),
        "releasing": _alloc_json(job.releasing),
    }


def _alloc_json(alloc: dict[str, tuple[int, ...]]) -> dict[str, list[int]]:
    return {k: list(v) for k, v in alloc.items()}


def _alloc_of(text: str) -> dict[str, tuple[int, ...]]:
    return {} if text == "{}" else {k: tuple(v) for k, v in json.loads(text).items()}


_c = jobs_t.c
# Read JSON columns as text: the spec is then parsed and validated in one step by pydantic-core,
# and the (mostly empty) allocation and extra skip the JSON decoder. Order matters: `_job_of`.
_JOB_COLUMNS = (
    _c.id, sa.cast(_c.spec, sa.Text), _c.submit_time, _c.state, sa.cast(_c.alloc, sa.Text), _c.start_time,
    _c.end_time, _c.attained_base, _c.run_base, _c.since, _c.restarts, _c.exit_code, _c.reason,
    _c.batch_size, _c.stopping, sa.cast(_c.extra, sa.Text), sa.cast(_c.last_alloc, sa.Text),
    sa.cast(_c.releasing, sa.Text),
)
_STATE_OF = {s.value: s for s in JobState}


def _job_of(row: Any) -> Job:
    (job_id, spec, submit_time, state, alloc, start_time, end_time, attained_base, run_base, since,
     restarts, exit_code, reason, batch_size, stopping, extra, last_alloc, releasing) = row
    try:
        spec = JobSpec.model_validate_json(spec)
    except Exception as e:
        why = str(e).splitlines()[0]
        raise StoreError(f"store: job {job_id} has a spec this version cannot read: {why}") from e
    return Job(
        id=job_id,
        spec=spec,
        submit_time=submit_time,
        state=_STATE_OF[state],
        alloc=_alloc_of(alloc),
        start_time=start_time,
        end_time=end_time,
        attained_base=attained_base,
        run_base=run_base,
        since=since,
        restarts=restarts,
        exit_code=exit_code,
        reason=reason,
        batch_size=batch_size,
        stopping=stopping,
        extra={} if extra == "{}" else json.loads(extra),
        last_alloc=_alloc_of(last_alloc),
        releasing=_alloc_of(releasing),
    )


def _one_line(e: BaseException) -> str:
    orig = getattr(e, "orig", None) or e
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


# Statements built once: SQLAlchemy's compiled cache then skips their compilation.
_INSERT_JOB = sa.insert(jobs_t)
_UPDATE_JOB = (
    sa.update(jobs_t)
    .where(jobs_t.c.id == sa.bindparam("_id"))
    .values({c: sa.bindparam(c) for c in (
        "state", "start_time", "end_time", "alloc", "attained_base", "run_base", "since", "restarts",
        "exit_code", "reason", "batch_size", "stopping", "extra", "last_alloc", "releasing")})
)
_INSERT_EVENT = sa.insert(events_t)
_SELECT_JOBS = sa.select(*_JOB_COLUMNS).order_by(jobs_t.c.id)
_GET_SETTING = sa.select(settings_t.c.value).where(settings_t.c.key == sa.bindparam("key"))
_UPDATE_SETTING = (
    sa.update(settings_t).where(settings_t.c.key == sa.bindparam("_key")).values(value=sa.bindparam("value"))
)
_INSERT_SETTING = sa.insert(settings_t)


class SqlStore:
    """The persistent job store. `url`: a SQLAlchemy URL or a SQLite file path; `None` gives
    `default_url()`. Opening upgrades the schema to the newest migration."""

    def __init__(self, url: str | None = None, *, busy_timeout: float = 10.0):
        parsed = parse_url(url)
        self._sqlite = parsed.get_backend_name() == "sqlite"
        self._memory = False
        kwargs: dict[str, Any] = {}
        if self._sqlite:
            db = parsed.database
            if db in (None, "", ":memory:") or (parsed.query.get("mode") == "memory"):
                self._memory = True
                kwargs.update(poolclass=StaticPool, connect_args={"check_same_thread": False})
            else:
                try:
                    Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise StoreError(f"store: cannot open {parsed}: {e.strerror}: {e.filename}") from e
        else:
            kwargs.update(pool_pre_ping=True)  # reads after a server restart: no stale connection
        shown = parsed.render_as_string(hide_password=True)
        try:
            self._engine = sa.create_engine(parsed, **kwargs)
        except sa.exc.NoSuchModuleError:
            raise StoreError(f"store: unknown database {parsed.drivername!r} in {shown}; use a SQLite "
                             f"path or sqlite:///PATH, or postgresql://USER@HOST/DB") from None
        except ImportError as e:
            raise StoreError(f"store: cannot open {shown}: its driver {e.name or parsed.drivername!r} is "
                             f"not installed (PostgreSQL: pip install 'schedulearn[postgres]', "
                             f"postgresql://USER@HOST/DB)") from None
        except Exception as e:
            raise StoreError(f"store: cannot open {shown}: {_one_line(e)}") from e
        if self._sqlite:
            _sqlite_setup(self._engine, busy_timeout)
        self.url: str = parsed.render_as_string(hide_password=True)
        self._lock = threading.RLock()
        self._held: sa.Connection | None = None  # the writer's connection
        self._tx: sa.Connection | None = None  # set inside transaction()
        self._tx_thread: int | None = None
        self._closed = False
        try:
            with self.transaction() as conn:
                migrate.upgrade(conn)
        except migrate.SchemaError as e:
            self.close()
            raise StoreError(str(e)) from None
        except StoreError as e:
            self.close()
            cause = e.__cause__ if e.__cause__ is not None else e
            raise StoreError(f"store: cannot open {self.url}: {_one_line(cause)}") from cause

    def __repr__(self) -> str:
        return f"SqlStore({self.url!r})"

    # -- transactions ------------------------------------------------------------------------
    # All writes go through one held connection under a re-entrant lock: SQLite serialises
    # writers anyway, and checking a pooled connection out and back in per write costs more
    # than the write. Reads use pooled connections (WAL readers do not block the writer),
    # except inside `transaction()` (they see its writes) and for in-memory SQLite.
    @contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """Group the writes made inside into one transaction: all are kept or none."""
        with self._lock:
            if self._tx is not None:
                yield self._tx  # nested: joins the outer transaction
                return
            try:
                conn = self._conn()
                with self._begin(conn):
                    self._tx, self._tx_thread = conn, threading.get_ident()
                    try:
                        yield conn
                    finally:
                        self._tx, self._tx_thread = None, None
            except sa.exc.SQLAlchemyError as e:
                raise StoreError(f"store: transaction failed, nothing written: {_one_line(e)}") from e

    def _conn(self) -> sa.Connection:
        if self._closed:
            raise StoreError(f"store: {self.url} is closed")
        if self._held is None:
            self._held = self._engine.connect()
        return self._held

    @contextmanager
    def _begin(self, conn: sa.Connection) -> Iterator[None]:
        with conn.begin():
            if self._sqlite:
                # sqlite3's implicit transactions are off (see `_sqlite_setup`): BEGIN here.
                # IMMEDIATE takes the write lock now: a deferred transaction that upgrades from
                # read to write can fail with SQLITE_BUSY at once, whatever the busy timeout.
                conn.connection.driver_connection.execute("BEGIN IMMEDIATE")
            yield

    def _write(self, what: str, stmt: Any, params: Any) -> sa.CursorResult:
        with self._lock:
            try:
                if self._tx is not None:
                    return self._tx.execute(stmt, params)
                for retry in (True, False):
                    conn = self._conn()
                    committing = False
                    try:
                        with self._begin(conn):
                            result = conn.execute(stmt, params)
                            committing = True
                        return result
                    except sa.exc.DBAPIError as e:
                        # The server went away before the statement ran (a PostgreSQL restart,
                        # a dropped connection): nothing was written, and the connection
                        # reconnects on its next use, so try once more. A COMMIT whose answer
                        # was lost is not retried: it may have been applied.
                        if not (retry and e.connection_invalidated and not committing):
                            raise
                raise AssertionError("unreachable")
            except sa.exc.SQLAlchemyError as e:
                raise StoreError(f"store: {what} failed, nothing written: {_one_line(e)}") from e

    def _read(self, stmt: Any, params: Any = None) -> list[Any]:
        try:
            if self._memory or (self._tx_thread == threading.get_ident()):
                with self._lock:
                    conn = self._tx if self._tx is not None else self._conn()
                    if self._tx is not None:
                        return conn.execute(stmt, params).all()
                    with conn.begin():
                        return conn.execute(stmt, params).all()
            if self._closed:
                raise StoreError(f"store: {self.url} is closed")
            with self._engine.connect() as c:
                return c.execute(stmt, params).all()
        except sa.exc.SQLAlchemyError as e:
            raise StoreError(f"store: read failed: {_one_line(e)}") from e

    # -- the engine's Store protocol ------------------------------------------------------------
    def load_jobs(self) -> list[Job]:
        """Every job, in id (= arrival) order."""
        return [_job_of(r) for r in self._read(_SELECT_JOBS)]

    def add_job(self, job: Job) -> None:
        row = _mutable(job)
        row.update(
            id=job.id,
            submit_time=job.submit_time,
            spec=job.spec.model_dump(mode="json", exclude_defaults=True),
            user=job.spec.user,
            name=job.spec.name,
        )
        self._write(f"add job {job.id}", _INSERT_JOB, row)

    def update_job(self, job: Job) -> None:
        row = _mutable(job)
        row["_id"] = job.id
        if self._write(f"update job {job.id}", _UPDATE_JOB, row).rowcount != 1:
            raise StoreError(f"store: update job {job.id} failed, nothing written: no such job")

    def add_event(self, job_id: int | None, kind: str, data: dict[str, Any], t: float) -> None:
        self._write(
            f"add event {kind!r}", _INSERT_EVENT, {"job_id": job_id, "kind": kind, "data": data or {}, "t": t}
        )

    def get_policy(self) -> str | None:
        return self.get_setting("policy")

    def set_policy(self, name: str) -> None:
        self.set_setting("policy", name)

    # -- more ----------------------------------------------------------------------------------
    def get_setting(self, key: str) -> str | None:
        rows = self._read(_GET_SETTING, {"key": key})
        return rows[0][0] if rows else None

    def set_setting(self, key: str, value: str) -> None:
        with self.transaction():
            if self._write(f"set {key}", _UPDATE_SETTING, {"_key": key, "value": value}).rowcount == 0:
                self._write(f"set {key}", _INSERT_SETTING, {"key": key, "value": value})

    def get_job(self, job_id: int) -> Job | None:
        rows = self._read(sa.select(*_JOB_COLUMNS).where(jobs_t.c.id == job_id))
        return _job_of(rows[0]) if rows else None

    def list_jobs(
        self,
        state: str | JobState | Iterable[str | JobState] | None = None,
        user: str | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        """Jobs in id order, filtered by state(s) and user; with `limit`, the newest `limit` of
        them (still in id order)."""
        q = sa.select(*_JOB_COLUMNS)
        if state is not None:
            states = [state] if isinstance(state, (str, JobState)) else list(state)
            names = []
            for s in states:
                v = s.value if isinstance(s, JobState) else s
                if v not in _STATES:
                    raise SpecError(f"state: expected one of {', '.join(_STATES)}, got {s!r}")
                names.append(v)
            q = q.where(jobs_t.c.state.in_(names))
        if user is not None:
            q = q.where(jobs_t.c.user == user)
        if limit is not None:
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
                raise SpecError(f"limit: expected an integer >= 0, got {limit!r}")
            rows = self._read(q.order_by(jobs_t.c.id.desc()).limit(limit))
            rows.reverse()
        else:
            rows = self._read(q.order_by(jobs_t.c.id))
        return [_job_of(r) for r in rows]

    def events(self, job_id: int | None = None, after: int | None = None) -> list[dict[str, Any]]:
        """Events in the order they were recorded: `{id, job_id, kind, data, t}`; those of one job
        with `job_id`, those after event id `after` (for polling) with `after`."""
        q = sa.select(events_t).order_by(events_t.c.id)
        if job_id is not None:
            q = q.where(events_t.c.job_id == job_id)
        if after is not None:
            q = q.where(events_t.c.id > after)
        return [r._asdict() for r in self._read(q)]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._held is not None:
                    self._held.close()
                    self._held = None
                self._engine.dispose()

    def __enter__(self) -> SqlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sqlite_setup(engine: sa.Engine, busy_timeout: float) -> None:
    ms = int(busy_timeout * 1000)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, record: Any) -> None:
        dbapi_conn.isolation_level = None  # no implicit transactions: `SqlStore._begin` emits BEGIN
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={ms}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()
