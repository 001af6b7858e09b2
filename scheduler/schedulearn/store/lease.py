"""One scheduler per store: the lease a server takes before it schedules from a store.

Two schedulers on one store would start the same queued jobs on the same GPUs (PostgreSQL) or
answer every submit with an error (SQLite). A server therefore takes the store's lease at start
and holds it for its life; a second one finds it taken and refuses to start with one line that
names the holder.

* SQLite: an exclusive `flock` on `<database>.lock` beside the database file; the file holds
  the holder's pid, host and start time (JSON) for the second server's message.
* PostgreSQL: a session-level advisory lock (`pg_try_advisory_lock`) on a connection of its own,
  kept open for the server's life; that connection's `application_name` names the holder
  (`pg_stat_activity` shows it to every role).

Either is released on exit, and freed by the kernel or the database server when the holder
dies, `kill -9` included: the next server takes over. A PostgreSQL lock lives as long as its
session: a database restart or a dropped connection ends it, and with it the lease, while the
server goes on. So the holder checks its session every few seconds (`Lease.renew`, from
`SchedulerService`): it takes the lock again on a new session where it can, and where another
scheduler took it meanwhile, `LeaseError` tells the server to stop scheduling. Jobs that
outlive their server do not hold it (the lock file is opened close-on-exec and executors close
inherited descriptors). An in-memory SQLite store needs no lease; other databases get none.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from .sql import StoreError, _one_line, parse_url

#: The advisory lock's key (two int4s): "schedulearn", then the scheduler lease.
PG_KEY = (0x5C4ED1, 1)
LOCK_SUFFIX = ".lock"


class LeaseError(StoreError):
    """The store's lease is held by another scheduler (the message names it)."""


class Lease:
    """A held lease; `release()` (or leaving the `with` block) gives it back."""

    def __init__(self, url: str, holder: dict[str, Any], release: Any = None, renew: Any = None):
        self.url = url
        self.holder = holder
        self._release = release
        self._renew = renew

    @property
    def renewable(self) -> bool:
        """Whether the lease can be lost while its holder lives (a database session's lock)."""
        return self._renew is not None

    def renew(self) -> bool:
        """Check that the lease is still held; where it was lost with its database session,
        take it again (True). `LeaseError` when another scheduler holds it now; `StoreError`
        when the database cannot be reached (not known: ask again later)."""
        if self._renew is None or self._release is None:
            return False
        return self._renew()

    @property
    def held(self) -> bool:
        return self._release is not None

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.url!r}, held={self.held})"


def me() -> dict[str, Any]:
    """This process as a lease holder: pid, host, start time, command."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
            "command": " ".join(sys.argv[:2])[:200]}


def acquire(url: str | None) -> Lease:
    """Take the lease of the store at `url` (as `SqlStore` takes it); `LeaseError` when another
    scheduler holds it, `StoreError` when the store cannot be reached."""
    parsed = parse_url(url)  # (postgres:// too: the lease is PostgreSQL's, not none)
    shown = parsed.render_as_string(hide_password=True)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        db = parsed.database
        if db in (None, "", ":memory:") or parsed.query.get("mode") == "memory":
            return Lease(shown, me())  # private to this process: nothing to share
        return _sqlite(shown, Path(db).expanduser().resolve())
    if backend == "postgresql":
        return _postgres(shown, parsed)
    return Lease(shown, me())


# -- SQLite: a lock file ---------------------------------------------------------------------------
def lock_path(db: Path) -> Path:
    return db.with_name(db.name + LOCK_SUFFIX)


def _sqlite(shown: str, db: Path) -> Lease:
    path = lock_path(db)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StoreError(f"store: cannot open the lock file {path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            text = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
        raise LeaseError(_busy(shown, _describe_file(text), f"lock file {path}")) from None
    except OSError as e:
        os.close(fd)
        raise StoreError(f"store: cannot lock {path}: {e.strerror}") from None
    holder = me()
    data = json.dumps(holder).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)

    def release() -> None:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # still ours: nobody reads a stale holder afterwards
        os.close(fd)  # closing the descriptor releases the flock

    return Lease(shown, holder, release)


def _describe_file(text: str) -> str:
    try:
        info = json.loads(text)
        return _describe(info["pid"], info["host"], info["started"], info.get("command"))
    except (ValueError, KeyError, TypeError):
        return "a process that has not recorded its name yet"


def _describe(pid: Any, host: Any, started: Any, command: Any = None) -> str:
    when = started
    if isinstance(started, (int, float)):
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
    text = f"pid {pid} on {host}, started {when}"
    return f"{text}: {command}" if command else text


def _busy(shown: str, holder: str, how: str) -> str:
    return (f"store: {shown} is in use by another scheduler ({holder}; {how}); stop it first, or give "
            "this server a store of its own")


# -- PostgreSQL: an advisory lock on a connection of its own ----------------------------------------
def _app_name(holder: dict[str, Any]) -> str:
    """The holder as `application_name` (at most 63 bytes): `schedulearn <pid>@<host> <start>`."""
    start = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(holder["started"]))
    host = holder["host"].encode("ascii", "replace").decode()[:24]
    return f"schedulearn {holder['pid']}@{host} {start}"


def _postgres(shown: str, parsed: sa.URL) -> Lease:
    holder = me()
    try:
        engine = sa.create_engine(parsed, poolclass=NullPool,
                                  connect_args={"application_name": _app_name(holder)})
    except Exception as e:
        raise StoreError(f"store: cannot open {shown}: {_one_line(e)}") from e
    try:
        conn = _pg_lock(engine, shown, holder)
    except BaseException:
        engine.dispose()
        raise

    released = []  # (a renewal in a thread may end after the release: it then keeps nothing)

    def release() -> None:
        released.append(True)
        with contextlib.suppress(Exception):
            lease.connection.execute(sa.text("SELECT pg_advisory_unlock(:a, :b)"),
                                     {"a": PG_KEY[0], "b": PG_KEY[1]})
        with contextlib.suppress(Exception):
            lease.connection.close()  # ending the session releases the lock in any case
        engine.dispose()

    def renew() -> bool:
        try:
            lease.connection.execute(sa.text("SELECT 1")).scalar()  # the session lives: so does its lock
            return False
        except Exception:  # noqa: BLE001 - the session is gone (a restart, a dropped connection)
            with contextlib.suppress(Exception):
                lease.connection.close()
        if released:
            return False
        conn = _pg_lock(engine, shown, holder, renewing=True)
        if released:
            conn.close()
            return False
        lease.connection = conn
        return True

    lease = Lease(shown, holder, release, renew)
    lease.connection = conn  # type: ignore[attr-defined]
    return lease


def _pg_lock(engine: sa.Engine, shown: str, holder: dict[str, Any], renewing: bool = False) -> sa.Connection:
    """A new session holding the advisory lock; `LeaseError` naming the session that holds it
    instead (`renewing`: not where that is the holder's own earlier session, which the database
    has not seen end yet and which still keeps others out: a `StoreError`, to try again later)."""
    try:
        conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    except Exception as e:
        raise StoreError(f"store: cannot {'reach' if renewing else 'open'} {shown}: {_one_line(e)}") from e
    try:
        got = conn.execute(sa.text("SELECT pg_try_advisory_lock(:a, :b)"),
                           {"a": PG_KEY[0], "b": PG_KEY[1]}).scalar()
        row = None if got else _pg_holder_row(conn)
    except Exception as e:
        conn.close()
        raise StoreError(f"store: cannot take the scheduler lease on {shown}: {_one_line(e)}") from e
    if got:
        return conn
    conn.close()
    if renewing and row is not None and row[0] == _app_name(holder):
        raise StoreError(f"store: the scheduler lease on {shown} is still held by this server's "
                         f"previous session (PostgreSQL backend {row[2]}), not ended yet")
    raise LeaseError(_busy(shown, _describe_row(row) if row else "a session that has ended meanwhile",
                           "PostgreSQL advisory lock"))


_PG_HOLDER = sa.text("""
    SELECT a.application_name, host(a.client_addr), a.pid
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :a AND l.objid = :b
      AND l.objsubid = 2 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
""")


def _pg_holder_row(conn: sa.Connection) -> Any:
    """(application_name, client address, backend pid) of the lock's holder, or None."""
    return conn.execute(_PG_HOLDER, {"a": PG_KEY[0], "b": PG_KEY[1]}).first()


def _describe_row(row: Any) -> str:
    name, addr, backend = row
    where = f" from {addr}" if addr else ""
    return f"{name or 'an unnamed session'}, PostgreSQL backend {backend}{where}"


__all__ = ["LeaseError", "Lease", "acquire", "lock_path"]
