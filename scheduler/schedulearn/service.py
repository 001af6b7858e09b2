"""The scheduler as a service, with no HTTP in sight (dask-labextension style).

`SchedulerService` owns the engine, its store, its executor (made from `Settings` through the
executor registry, `executors.registry`) and the executor's nodes; it runs the engine's round
loop as a task on the event loop, fans the engine's events out to subscribers (`events`), and
answers the API's questions with plain dicts. Both servers wrap one: the Jupyter extension
(`schedulearn_jupyter.app`) and the standalone `schedulearn serve` (`schedulearn_jupyter.serve`),
whose handlers (`schedulearn_jupyter.handlers`) see only the `Manager` protocol below; the
extension's `RemoteManager` implements it by forwarding to a standalone server.

Errors are `ApiError`s carrying the HTTP status the handlers answer with and a one-line message
naming the field. Every API call is a coroutine, so that a handler awaits any manager alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import json
import logging
import math
import os
import shlex
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import deadlines, policies
from .accounts import NoAccount, UserMap, check_can_switch
from .engine import FILES_REMOVED, Engine, JobFinished, JobNotFound, RealClock, StoreWriteFailed
from .events import EventHub, EventStream, Subscription
from .executors import registry
from .executors.base import Executor
from .inventory import HostInventory
from .model import CONTROL, SIMULATION_ONLY, Job, JobSpec, JobState, Node, SpecError

if TYPE_CHECKING:
    from .store import SqlStore

log = logging.getLogger("schedulearn.server")

STATES = tuple(s.value for s in JobState)


# -- errors the API answers with ------------------------------------------------------------------
class ApiError(Exception):
    """An answer other than success: `status` is the HTTP status, the message one line."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class NotFound(ApiError):
    status = 404


class Forbidden(ApiError):
    status = 403


class Conflict(ApiError):
    status = 409


def store_failure(e: BaseException) -> bool:
    """Whether `e` is the store refusing an operation (`schedulearn.store.StoreError`, also as
    the cause of an engine error): answered 503, nothing was changed."""
    return isinstance(e, StoreWriteFailed) or any(
        type(x).__name__ == "StoreError" and type(x).__module__.startswith("schedulearn.store")
        for x in (e, e.__cause__) if x is not None)


# -- settings -------------------------------------------------------------------------------------
#: `restart_cost`'s default: seconds a checkpoint-restart costs (Pollux's figure)
RESTART_COST = 30.0
#: Seconds between checks that the store's lease is still this server's (`Lease.renew`).
LEASE_CHECK_S = 5.0


def check_restart_cost(value: Any) -> float:
    """`restart_cost` as a number of seconds > 0 (finite), or `SpecError` (one line)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not (math.isfinite(seconds) and seconds > 0):
        raise SpecError(f"restart_cost: expected seconds > 0 (a finite number), got {value!r}")
    return seconds


@dataclass
class Settings:
    """What the server extension's traits (or `schedulearn serve`'s flags) configure."""

    store_url: str = ""  # '' = no store (jobs live in memory); the servers default to a SQLite file
    executor: str = "local"  # a name in the executor registry
    virtual_gpus: int = 0
    default_policy: str = "fifo"
    cancel_grace: float = 10.0
    job_root: str = ""
    tick: float = 5.0
    inventory_interval: float = 30.0
    #: seconds a checkpoint-restart costs on this set-up: the elastic policies' `restart_cost`
    #: (what they charge a resize until the job's own pauses are measured) and the deadline
    #: statuses' (`Engine.restart_cost`)
    restart_cost: float = RESTART_COST
    node_name: str = field(default_factory=socket.gethostname)
    #: a user may cancel only their own jobs (jobs without a user are anyone's)
    check_owner: bool = True
    #: the shared set-up (`schedulearn serve --tokens`): a job's environment values, script, log
    #: and result are its user's alone (others see it in the queue, its command included, as `ps`
    #: shows a process; not what `/proc/<pid>/environ` or its private directory hold)
    private_jobs: bool = False
    #: the shared set-up: each user's jobs run as the OS account this maps them to (the server
    #: must be root); None: every job runs as the server's account
    user_map: UserMap | None = None
    #: the users who may switch the policy; None: everyone (the single-user set-up)
    admins: list[str] | None = None
    #: the executor's own settings by name (`registry.Option`s of its kind), e.g. `docker_hosts`
    options: dict[str, Any] = field(default_factory=dict)
    #: seconds a job's directory (log, result, checkpoints) is kept after the job ended; None:
    #: for ever. The job's record stays (`ls`, the history run-time predictions learn from).
    keep_job_dirs: float | None = None

    def validate(self) -> None:
        kind = registry.get(self.executor)  # SpecError naming the executors when unknown
        allowed = [o.name for o in kind.options]
        for name in self.options:
            if name not in allowed:
                raise SpecError(f"{name}: not a setting of the {kind.name} executor "
                                f"(its settings: {', '.join(allowed) or 'none'})")
        if self.virtual_gpus < 0:
            raise SpecError(f"virtual_gpus: expected an integer >= 0, got {self.virtual_gpus}")
        if not math.isfinite(self.cancel_grace) or self.cancel_grace < 0:
            raise SpecError(f"cancel_grace: expected seconds >= 0, got {self.cancel_grace}")
        if not math.isfinite(self.tick) or self.tick <= 0:
            raise SpecError(f"tick: expected seconds > 0, got {self.tick}")
        check_restart_cost(self.restart_cost)
        if self.keep_job_dirs is not None and not (0 < self.keep_job_dirs < math.inf):
            raise SpecError(f"keep_job_dirs: expected seconds > 0 (or none: for ever), "
                            f"got {self.keep_job_dirs}")
        policies.create(self.default_policy)  # SpecError naming the policies when unknown
        if self.switches_users:
            check_can_switch()
            self.user_map.check()  # type: ignore[union-attr]

    @property
    def switches_users(self) -> bool:
        """Whether jobs run as their users' accounts (processes or containers: not simulated)."""
        return self.user_map is not None and not registry.get(self.executor).simulated

    def run_as(self) -> Any:
        """What executors take as `run_as`: user name -> `accounts.Account`, or None."""
        return self.user_map.account if self.switches_users else None  # type: ignore[union-attr]


@functools.cache
def default_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return os.environ.get("USER", "") or "user"


def make_store(url: str) -> SqlStore:
    from .store import SqlStore

    return SqlStore(url)


# -- what both servers' handlers call -------------------------------------------------------------
class Manager(Protocol):
    """The API as coroutines: `SchedulerService` (embedded), `schedulearn_jupyter.remote.
    RemoteManager` (a standalone server's), `Unavailable` (none: every call answers 503)."""

    #: why this manager answers every call with 503; None when it works
    unavailable: str | None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None: ...
    async def stop(self) -> None: ...
    async def policies(self) -> list[dict[str, str]]: ...
    async def policy(self, user: str = "") -> dict[str, Any]: ...
    async def set_policy(self, name: Any, user: str = "") -> dict[str, str]: ...
    async def pause(self, reason: Any, user: str = "") -> dict[str, Any]: ...
    async def resume(self, user: str = "") -> dict[str, Any]: ...
    async def gpus(self) -> dict[str, Any]: ...
    async def submit(self, data: Any, user: str) -> dict[str, Any]: ...
    async def list_jobs(self, state: str | None = None, user: str | None = None,
                        limit: Any = None, viewer: str | None = None) -> dict[str, Any]: ...
    async def list_jobs_json(self, state: str | None = None, user: str | None = None,
                             limit: Any = None, viewer: str | None = None) -> str: ...
    async def get_job(self, job_id: Any, viewer: str | None = None) -> dict[str, Any]: ...
    async def cancel(self, job_id: Any, user: str) -> dict[str, Any]: ...
    async def check_reader(self, job_id: Any, viewer: str) -> None: ...
    async def script(self, job_id: Any) -> str: ...
    async def logs(self, job_id: Any, tail: Any = None) -> str: ...
    async def log_page(self, job_id: Any, offset: Any) -> tuple[bytes, int, int]: ...
    async def follow_logs(self, job_id: Any, tail: Any = None) -> AsyncIterator[str]: ...
    async def result(self, job_id: Any) -> AsyncIterator[bytes]: ...
    async def shown(self, job_id: Any, offset: Any) -> dict[str, Any]: ...
    async def subscribe(self, viewer: str | None = None) -> EventStream: ...
    async def hello(self) -> dict[str, Any]: ...


HIDDEN = "(hidden)"


def hide_private(d: dict[str, Any]) -> dict[str, Any]:
    """A job dict as another user of a shared scheduler sees it: its environment's names without
    their values, no script nor the hash of a cell's code (`cell`), and no failure reason (a
    failed run's reason quotes its log) (`Settings.private_jobs`)."""
    spec = dict(d.get("spec") or {})
    spec["env"] = dict.fromkeys(spec.get("env") or {}, HIDDEN)
    for key in ("script", "cell"):
        if spec.get(key) is not None:
            spec[key] = HIDDEN
    out = {**d, "spec": spec, "private": True}
    if d.get("state") == "failed" and d.get("reason"):
        out["reason"] = HIDDEN
    return out


class SchedulerService:
    """The embedded scheduler: engine + store + executor + its nodes + event fan-out."""

    unavailable: str | None = None

    def __init__(self, settings: Settings, store: Any = None, executor: Executor | None = None,
                 nodes: list[Node] | None = None):
        settings.validate()
        self.settings = settings
        self.lease: Any = None
        if store is None and settings.store_url:
            # One scheduler per store: the lease first, before anything reads or recovers jobs.
            from .store.lease import acquire

            self.lease = acquire(settings.store_url)
        try:
            self.store = store if store is not None else (make_store(settings.store_url)
                                                          if settings.store_url else None)
            if executor is None:
                try:
                    executor = registry.get(settings.executor).make(settings)
                except ValueError as e:  # an executor's setting it refuses ('slurm_poll_interval: ...')
                    raise SpecError(str(e)) from None
            if executor.inventory is None:  # it runs jobs on this host: its GPUs, as the settings say
                executor.inventory = HostInventory(settings.virtual_gpus, settings.node_name)
            self.executor = executor
            self.nodes = nodes if nodes is not None else self.executor.nodes()
            self.engine = Engine(self.nodes, settings.default_policy, self.executor, self.store,
                                 restart_cost=settings.restart_cost)
        except BaseException:
            if self.lease is not None:
                self.lease.release()
            raise
        self.hub = EventHub()
        self.engine.listeners.append(self._on_engine_event)
        self._tasks: list[asyncio.Task] = []
        self._json_cache: dict[tuple[int, bool], tuple[tuple, str]] = {}  # (job id, private) -> (key, JSON)
        self._kept: set[int] = set()  # ended jobs whose directory the sweep leaves: none, or not removable
        self.started = False
        #: called with the reason once this server has lost the store's lease to another
        #: scheduler and stopped (`_keep_lease`): `serve` exits, Jupyter answers 503
        self.lease_lost: list[Any] = []
        self._stopped = False

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the round loop (and the inventory refresh) as tasks on `loop` (default: the
        running loop). Safe to call before that loop runs."""
        if self.started:
            return
        if loop is None:
            loop = asyncio.get_running_loop()
        self.hub.loop = loop
        self.started, self._stopped = True, False
        self._tasks.append(loop.create_task(self._run_engine(), name="schedulearn-engine"))
        if self.settings.inventory_interval > 0:
            self._tasks.append(loop.create_task(self._refresh_inventory(), name="schedulearn-inventory"))
        if self.settings.keep_job_dirs is not None and not registry.get(self.settings.executor).simulated:
            self._tasks.append(loop.create_task(self._expire_job_dirs(), name="schedulearn-job-dirs"))
        if self.lease is not None and self.lease.renewable:
            self._tasks.append(loop.create_task(self._keep_lease(), name="schedulearn-lease"))

    async def _keep_lease(self) -> None:
        """Check the store's lease every `LEASE_CHECK_S`: a PostgreSQL lock ends with its session
        (a database restart, a dropped connection) while this server goes on, and a second
        scheduler could then start on the store beside it. Taken again where it can be; where
        another scheduler has it now, this one stops (`_lose_lease`)."""
        from .store import StoreError
        from .store.lease import LeaseError

        unsure = False
        while True:
            await asyncio.sleep(LEASE_CHECK_S)
            try:
                retaken = await asyncio.to_thread(self.lease.renew)
            except LeaseError as e:
                await self._lose_lease(str(e))
                return
            except StoreError as e:
                if not unsure:
                    log.warning("schedulearn: cannot check the store's scheduler lease: %s", e)
                unsure = True
                continue
            except Exception:  # noqa: BLE001 - the check goes on: it is what keeps a second scheduler out
                log.exception("schedulearn: checking the store's scheduler lease failed")
                continue
            if retaken:
                log.warning("schedulearn: the store's scheduler lease ended with its database session "
                            "(a database restart or a dropped connection); taken again")
            elif unsure:
                log.info("schedulearn: the store's scheduler lease is this server's")
            unsure = False

    async def _lose_lease(self, why: str) -> None:
        """Another scheduler holds the store's lease now: stop scheduling (no round, no store
        write; its jobs run on, and the other scheduler takes them up as at any server's
        start), and tell `lease_lost`."""
        reason = (f"{why}; this server lost the lease when its database session ended, and stopped "
                  "scheduling (its jobs run on under the other scheduler)")
        log.error("schedulearn: %s", reason)
        self.unavailable = reason
        with contextlib.suppress(ValueError):
            self._tasks.remove(asyncio.current_task())  # (stop() awaits the others)
        await self.stop()
        for listener in self.lease_lost:
            try:
                listener(reason)
            except Exception:
                log.exception("schedulearn: a listener of the lost lease failed")

    async def _run_engine(self) -> None:
        while not self.engine.closed:
            try:
                await self.engine.run(RealClock(self.settings.tick))
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop itself (not a round) failed: log, breathe, go on
                log.exception("schedulearn: the round loop failed; restarting it")
                await asyncio.sleep(self.settings.tick)

    async def _refresh_inventory(self) -> None:
        while True:
            await asyncio.sleep(self.settings.inventory_interval)
            try:  # NVML calls and daemons block: read in a thread, apply on the loop
                nodes = await asyncio.to_thread(self.executor.nodes)
                self.refresh_inventory(nodes)
            except Exception:
                log.exception("schedulearn: inventory refresh failed")

    async def _expire_job_dirs(self) -> None:
        keep = self.settings.keep_job_dirs
        assert keep is not None
        while True:
            try:
                await self.expire_job_dirs()
            except Exception:
                log.exception("schedulearn: removing old job directories failed")
            await asyncio.sleep(min(3600.0, keep / 4))

    async def expire_job_dirs(self) -> list[int]:
        """Remove the directories of the jobs that ended `keep_job_dirs` ago or more (each
        recorded as `files_removed`, an event); the ids removed."""
        keep, now = self.settings.keep_job_dirs, self.engine.clock()
        if keep is None:
            return []
        due = [j.id for j in self.engine.jobs.values() if j.state.final and j.end_time is not None
               and now - j.end_time >= keep and FILES_REMOVED not in j.extra and j.id not in self._kept]
        if not due:
            return []
        removed = await asyncio.to_thread(self._remove_job_dirs, due)
        for job_id in removed:
            self.engine.files_removed(job_id, now)
        if removed:
            log.info("removed the directories of %d job(s) ended over %s ago: %s", len(removed),
                     deadlines.fmt_minutes(keep), ", ".join(map(str, removed)))
        return removed

    def _remove_job_dirs(self, ids: list[int]) -> list[int]:
        """(In a thread.) Remove each job's directory; the ids that had one and lost it. Links the
        job left inside are removed, never followed (`shutil.rmtree`)."""
        import shutil

        removed = []
        for job_id in ids:
            d = self.executor.job_dir(job_id)
            if d is None or not d.exists() or d.is_symlink():  # none (never started), or not ours
                self._kept.add(job_id)
                continue
            try:
                shutil.rmtree(d)
            except OSError as e:
                self._kept.add(job_id)  # said once; the next server start tries again
                log.warning("job %s: cannot remove its directory %s (%s); it is kept", job_id, d, e)
                continue
            removed.append(job_id)
        return removed

    def refresh_inventory(self, nodes: list[Node] | None = None) -> None:
        """Apply a fresh inventory: a changed GPU set (or GPUs newly held, or freed, outside the
        scheduler) replaces the engine's nodes, changed figures (memory, utilisation) are updated
        in place; either is pushed as an event."""
        nodes = self.executor.nodes() if nodes is None else nodes
        if _shape(nodes) != _shape(self.engine.nodes):
            self.engine.set_nodes(nodes)  # the engine emits an inventory event
            return
        changed = False
        for old, new in zip(self.engine.nodes, nodes, strict=True):
            for g_old, g_new in zip(old.gpus, new.gpus, strict=True):
                now = (g_new.memory_used_mb, g_new.utilization, g_new.memory_total_mb)
                if now != (g_old.memory_used_mb, g_old.utilization, g_old.memory_total_mb):
                    g_old.memory_used_mb, g_old.utilization, g_old.memory_total_mb = now
                    changed = True
        if changed:
            self._on_engine_event({"type": "inventory"})

    async def stop(self) -> None:
        if self._stopped:  # (a lost lease stops it before its server does)
            return
        self._stopped = True
        tasks, self._tasks = self._tasks, []
        self.engine.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.hub.close()
        if self.store is not None:
            self.store.close()
        if self.lease is not None:
            self.lease.release()  # after the store's last write
        self.started = False

    def _on_engine_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "inventory":
            event = {**event, **self._gpus()}
        self.hub.publish(event)

    def policy_note(self) -> str:
        """`policy qoe` for the start-up log; where a switch kept in the store overrides the
        configured policy, it says so (the configured one applies only to a new store)."""
        name = self.engine.policy.name
        if name == self.settings.default_policy:
            return f"policy {name}"
        return (f"policy {name} (kept in the store from an earlier start or a switch; the configured "
                f"{self.settings.default_policy} applies only to a new store)")

    def no_gpus_note(self) -> str | None:
        """Why this scheduler has no GPUs and what to do, or None when it has some: a machine
        without NVIDIA GPUs (a laptop) runs jobs only on declared virtual GPUs."""
        if self.engine.total_gpus:
            return None
        inventory = self.executor.inventory
        if isinstance(inventory, HostInventory):
            why = inventory.nvml_error or "NVML found none"
            return (f"this scheduler has no GPUs: none on this host ({why}) and no virtual GPUs "
                    f"declared; to run jobs without GPUs, start it with SCHEDULEARN_VIRTUAL_GPUS=4 "
                    f"(serve --virtual-gpus 4, c.SchedulearnApp.virtual_gpus = 4)")
        return f"this scheduler has no GPUs: its {self.settings.executor} executor's nodes have none now"

    # -- the API ------------------------------------------------------------------------------
    async def policies(self) -> list[dict[str, str]]:
        return policies.available()

    def can_switch(self, user: str) -> bool:
        """Whether `user` may switch the policy: an admin, or anyone where no admins are set."""
        admins = self.settings.admins
        return admins is None or user in admins

    def is_admin(self, user: str) -> bool:
        """Whether `user` is one of the named admins (`--admins`), who may also cancel anyone's
        job; where none are named (one user) a job of another user stays theirs."""
        return user in (self.settings.admins or [])

    async def policy(self, user: str = "") -> dict[str, Any]:
        return {"policy": self.engine.policy.name, "can_switch": self.can_switch(user), "user": user,
                "admin": self.is_admin(user), "plans_deadlines": self.engine.policy.plans_deadlines,
                "paused": self.engine.paused}

    async def set_policy(self, name: Any, user: str = "") -> dict[str, str]:
        if not self.can_switch(user):
            raise Forbidden(f"policy: only the scheduler's admins may switch it "
                            f"({', '.join(self.settings.admins or []) or 'none configured'}); "
                            f"you are {user!r}")
        if not isinstance(name, str):
            names = ", ".join(p["name"] for p in policies.available())
            raise ApiError(f"policy: expected one of {names}, got {name!r}")
        try:
            policy = self.engine.set_policy(name)
        except SpecError as e:
            raise ApiError(str(e)) from None
        log.info("schedulearn: policy switched to %s by %s", policy.name, user or "?")
        return {"policy": policy.name}

    async def pause(self, reason: Any, user: str = "") -> dict[str, Any]:
        """Pause scheduling (`Engine.pause`): an admin's action, as switching the policy is."""
        self._check_admin("pause", user)
        reason = "" if reason is None else reason
        if not isinstance(reason, str) or len(reason) > 200 or CONTROL.search(reason):
            raise ApiError(f"reason: expected one line of text (at most 200 characters), got {reason!r:.80}")
        paused = self.engine.pause(user, reason.strip())
        log.info("schedulearn: scheduling paused by %s%s", user or "?", f": {reason}" if reason else "")
        return {"paused": paused}

    async def resume(self, user: str = "") -> dict[str, Any]:
        self._check_admin("resume", user)
        if self.engine.paused is not None:
            self.engine.resume(user)
            log.info("schedulearn: scheduling resumed by %s", user or "?")
        return {"paused": None}

    def _check_admin(self, what: str, user: str) -> None:
        if not self.can_switch(user):
            raise Forbidden(f"{what}: only the scheduler's admins may pause or resume it "
                            f"({', '.join(self.settings.admins or []) or 'none configured'}); "
                            f"you are {user!r}")

    async def gpus(self) -> dict[str, Any]:
        return self._gpus()

    def _gpus(self) -> dict[str, Any]:
        owner: dict[tuple[str, int], int] = {}
        for job in self.engine.active.values():
            for alloc in (job.alloc, job.releasing):  # GPUs being released are not free yet
                for node, indices in alloc.items():
                    for i in indices:
                        owner[(node, i)] = job.id
        return {"nodes": [
            {
                "name": n.name,
                "virtual": n.virtual,
                "healthy": n.healthy,
                "gpus": [
                    {
                        "index": g.index, "uuid": g.uuid, "name": g.name,
                        "memory_total_mb": g.memory_total_mb, "memory_used_mb": g.memory_used_mb,
                        "utilization": g.utilization, "job_id": owner.get((n.name, g.index)),
                        "held_by": g.held_by or None,
                    }
                    for g in n.gpus
                ],
            }
            for n in self.engine.nodes
        ], "executor": self.settings.executor, **({"note": note} if (note := self.no_gpus_note()) else {})}

    async def submit(self, data: Any, user: str) -> dict[str, Any]:
        """Queue a job from a JobSpec dict; the caller's user name is recorded on it."""
        if not isinstance(data, dict):
            raise ApiError("body: expected a JSON object (a JobSpec)")
        data = {**data, "user": user}
        if self.settings.switches_users:
            try:  # the job would run as this account: refuse now rather than fail at start
                self.settings.user_map.account(user)  # type: ignore[union-attr]
            except NoAccount as e:
                raise Forbidden(str(e)) from None
        for key, value in self.executor.spec_defaults().items():  # e.g. the default image
            if not data.get(key):
                data[key] = value
        try:
            if "deadline" in data:  # `2h`, `18:00`, ISO 8601: against the server's clock
                data["deadline"] = deadlines.resolve(data["deadline"], self.engine.clock())
            spec = JobSpec.parse(data)
            if note := self.no_gpus_note():  # (the engine's 'gpus: at most 0' says less)
                raise SpecError(f"gpus: {note}")
            self._check_runnable(spec)
            _check_storable(spec)
            job = self.engine.submit(spec)
        except SpecError as e:
            raise ApiError(str(e)) from None
        except RuntimeError as e:  # the store refused it (StoreError): nothing was written
            log.error("schedulearn: submit failed: %s", e)
            raise ApiError(str(e), 503) from None
        # (set_policy and cancel raise the store's `StoreError` unchanged: routes answer it 503)
        return self.engine.job_dict(job, self.engine.clock())

    def _check_runnable(self, spec: JobSpec) -> None:
        """A live server cannot run a simulated job: its simulation-only fields are refused; and
        what the executor itself could never run."""
        self.executor.check_spec(spec)
        if self.executor.simulated:
            return
        for name in SIMULATION_ONLY:
            if getattr(spec, name) is not None:
                raise SpecError(f"{name}: a simulation-only field, allowed with the 'sim' executor only "
                                f"(this server runs jobs with the {self.settings.executor!r} executor); "
                                "give a command or a script")

    async def list_jobs(self, state: str | None = None, user: str | None = None,
                        limit: Any = None, viewer: str | None = None) -> dict[str, Any]:
        now = self.engine.clock()
        return {"jobs": [self._shown(self.engine.job_dict(j, now), viewer)
                         for j in self._select(state, user, limit)]}

    def _hidden_from(self, owner: str, viewer: str | None) -> bool:
        """Whether a job of `owner` keeps its private parts from `viewer` (None: the server)."""
        return bool(self.settings.private_jobs and viewer is not None and owner and viewer != owner)

    def _shown(self, d: dict[str, Any], viewer: str | None) -> dict[str, Any]:
        return hide_private(d) if self._hidden_from(d.get("user", ""), viewer) else d

    async def list_jobs_json(self, state: str | None = None, user: str | None = None,
                             limit: Any = None, viewer: str | None = None) -> str:
        """`list_jobs` as JSON text, from per-job fragments cached while a job does not change
        (queued and finished jobs' dicts do not depend on the time): listing 10,000 jobs costs
        a join instead of 10,000 `to_dict`s and a 4 MB `json.dumps`."""
        now = self.engine.clock()
        cache = self._json_cache
        parts = []
        for j in self._select(state, user, limit):
            hidden = self._hidden_from(j.spec.user, viewer)
            if j.state is JobState.running:
                d = self.engine.job_dict(j, now)
                parts.append(json.dumps(hide_private(d) if hidden else d))
                continue
            queued = j.state is JobState.queued and j.stopping is None
            reason = self.engine.waiting_reason(j) if queued else j.reason  # a wait's changes
            key = (j.state, j.restarts, j.start_time, j.end_time, j.exit_code, reason, j.attained_base,
                   j.run_base, len(j.alloc), FILES_REMOVED in j.extra)
            hit = cache.get((j.id, hidden))
            if hit is None or hit[0] != key:
                d = self.engine.job_dict(j, now)
                hit = cache[(j.id, hidden)] = (key, json.dumps(hide_private(d) if hidden else d))
            parts.append(hit[1])
        return '{"jobs": [' + ", ".join(parts) + "]}"

    def _select(self, state: str | None, user: str | None, limit: Any) -> list[Job]:
        if state is not None and state not in STATES:
            raise ApiError(f"state: expected one of {', '.join(STATES)}, got {state!r}")
        n = _as_count("limit", limit)
        jobs = self.engine.jobs.values()  # in id order (restored sorted, then appended)
        if state is not None:
            if state in ("queued", "starting", "running"):
                jobs = (j for j in self.engine.active.values() if j.state.value == state)
            else:
                jobs = (j for j in jobs if j.state.value == state)
        if user is not None:
            jobs = (j for j in jobs if j.spec.user == user)
        chosen = list(jobs)
        if n is not None:
            chosen = chosen[-n:] if n else []
        return chosen

    def _job(self, job_id: Any) -> Job:
        jid = _as_id(job_id)
        try:
            return self.engine.get(jid)
        except JobNotFound as e:
            raise NotFound(str(e)) from None

    async def get_job(self, job_id: Any, viewer: str | None = None) -> dict[str, Any]:
        return self._shown(self.engine.job_dict(self._job(job_id), self.engine.clock()), viewer)

    async def check_reader(self, job_id: Any, viewer: str) -> None:
        """403 unless `viewer` may read the job's log and result (`Settings.private_jobs`)."""
        job = self._job(job_id)
        if self._hidden_from(job.spec.user, viewer):
            raise Forbidden(f"job {job.id}: belongs to {job.spec.user!r}; only they may read its log, "
                            "result and script")

    async def cancel(self, job_id: Any, user: str) -> dict[str, Any]:
        """Cancel a job: its user's, or anyone's for an admin (`Settings.admins`: an operator
        stops a runaway job; its reason then names them)."""
        job = self._job(job_id)
        by = None
        if self.settings.check_owner and job.spec.user and user != job.spec.user:
            if not self.is_admin(user):
                admins = f" or the scheduler's admins ({', '.join(self.settings.admins)})" \
                    if self.settings.admins else ""
                raise Forbidden(f"job {job.id}: belongs to {job.spec.user!r}; "
                                f"only they{admins} may cancel it")
            by = user
        try:
            self.engine.cancel(job.id, by=by)
        except JobFinished as e:
            raise Conflict(str(e)) from None
        return self.engine.job_dict(job, self.engine.clock())

    async def script(self, job_id: Any) -> str:
        """The script a job runs (its spec's, which job dicts leave out: `Engine.job_dict`)."""
        job = self._job(job_id)
        script = self.engine.stored_script(job)
        if script is None:
            what = shlex.join(job.spec.command) if job.spec.command else "no program (a simulated job)"
            raise NotFound(f"script: job {job.id} runs a command, not a script: {what}")
        return script

    def _files(self, job: Job, what: str) -> None:
        """NotFound, saying why, when the job's directory (where `what` was) is gone: removed
        `keep_job_dirs` after the job ended, or by someone else."""
        if (when := job.extra.get(FILES_REMOVED)) is not None:
            kept = self.settings.keep_job_dirs
            after = f" (keep_job_dirs: {deadlines.fmt_minutes(kept)} after a job ended)" if kept else ""
            raise NotFound(f"{what}: job {job.id}'s directory was removed on {_utc(when)}"
                           f"{after}; its log, result and checkpoints with it")
        d = self.executor.job_dir(job.id)
        if job.start_time is not None and d is not None and not d.exists():
            raise NotFound(f"{what}: job {job.id}'s directory {d} is gone (removed outside the scheduler); "
                           "its log, result and checkpoints with it")

    async def logs(self, job_id: Any, tail: Any = None) -> str:
        job = self._job(job_id)
        self._files(job, "logs")
        return self.executor.logs(job.id, _as_count("tail", tail))

    async def log_page(self, job_id: Any, offset: Any) -> tuple[bytes, int, int]:
        """The log's bytes from `offset` on (at most `joblogs.PAGE`), the offset after them, and
        the log's size: how a reader that keeps its place (the magics' text view) and the whole
        log's answer read it, a page at a time."""
        job = self._job(job_id)
        self._files(job, "logs")
        return self.executor.log_page(job.id, _as_count("offset", offset) or 0)

    async def follow_logs(self, job_id: Any, tail: Any = None) -> AsyncIterator[str]:
        """The log (its last `tail` lines, or all of it), then its lines as they come, until
        the job is over."""
        job = self._job(job_id)
        self._files(job, "logs")
        return self.executor.afollow(job.id, lambda: job.state.final, tail=_as_count("tail", tail))

    async def result(self, job_id: Any) -> AsyncIterator[bytes]:
        """The pickled result the job's own run wrote and signed (`schedulearn.results`), a block
        at a time (a model of gigabytes is never held whole here): a `result.pkl` anyone else
        put in its directory is refused (409), never handed out. Its signature is checked in a
        thread (a pass over the file), and again over the blocks handed out."""
        from .results import ForgedResult, NoResult, ResultError

        job = self._job(job_id)
        self._files(job, "result")
        try:
            signed = await asyncio.to_thread(self.executor.open_result, job.id)
            return _blocks(signed)
        except NoResult:
            raise NotFound(f"result: job {job.id} has no result (yet); state {job.state.value}") from None
        except ForgedResult as e:
            log.warning("job %s: %s", job.id, e)
            raise Conflict(str(e)) from None
        except ResultError as e:
            raise ApiError(str(e), 500) from None

    async def shown(self, job_id: Any, offset: Any) -> dict[str, Any]:
        """What a notebook cell's job has shown from byte `offset` of its live record on (its
        figures and displays as it shows them, `liveshown`): `{"items": [...], "next": offset}`."""
        job = self._job(job_id)
        self._files(job, "shown")
        items, after = await asyncio.to_thread(self.executor.shown_page, job.id,
                                               _as_count("offset", offset) or 0)
        return {"items": items, "next": after}

    async def subscribe(self, viewer: str | None = None) -> Subscription:
        def view(event: dict[str, Any]) -> dict[str, Any]:
            job = event.get("job")
            if job is not None and event.get("type") == "job" and self._hidden_from(job.get("user", ""),
                                                                                     viewer):
                return {**event, "job": hide_private(job)}
            return event

        return self.hub.subscribe(view if self.settings.private_jobs else None)

    async def hello(self) -> dict[str, Any]:
        """The first message on the events socket: where things stand."""
        return {"type": "hello", "policy": self.engine.policy.name,
                "active": [j.id for j in self.engine.active.values()], "seq": self.hub.seq}


def make_job_root(path: str) -> Path:
    """The folder the jobs' folders go under, created where missing; a `SpecError` naming the
    setting where it cannot be (seen: `--job-root /proc/x` was reported as a port that could not
    be listened on)."""
    root = Path(path)  # (as the executors read it: no ~ expansion here that they would lack)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SpecError(f"job_root: cannot create {str(root)!r} ({e.strerror or e})") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise SpecError(f"job_root: {str(root)!r} is not writable by this server's account")
    return root


class Unavailable:
    """Stands in for a service that could not start (the store's lease is another scheduler's; a
    setting it cannot work with, e.g. a store URL it cannot open or a job root it cannot create):
    every API call answers 503 with `unavailable`, the events socket is refused with it."""

    def __init__(self, reason: str):
        self.unavailable: str | None = reason

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        pass

    async def stop(self) -> None:
        pass

    def _refuse(self) -> ApiError:
        return ApiError(f"scheduler: unavailable: {self.unavailable}", 503)

    async def policies(self) -> list[dict[str, str]]:
        raise self._refuse()

    async def policy(self, user: str = "") -> dict[str, Any]:
        raise self._refuse()

    async def set_policy(self, name: Any, user: str = "") -> dict[str, str]:
        raise self._refuse()

    async def gpus(self) -> dict[str, Any]:
        raise self._refuse()

    async def submit(self, data: Any, user: str) -> dict[str, Any]:
        raise self._refuse()

    async def list_jobs(self, state: str | None = None, user: str | None = None,
                        limit: Any = None, viewer: str | None = None) -> dict[str, Any]:
        raise self._refuse()

    async def list_jobs_json(self, state: str | None = None, user: str | None = None,
                             limit: Any = None, viewer: str | None = None) -> str:
        raise self._refuse()

    async def get_job(self, job_id: Any, viewer: str | None = None) -> dict[str, Any]:
        raise self._refuse()

    async def check_reader(self, job_id: Any, viewer: str) -> None:
        raise self._refuse()

    async def cancel(self, job_id: Any, user: str) -> dict[str, Any]:
        raise self._refuse()

    async def script(self, job_id: Any) -> str:
        raise self._refuse()

    async def logs(self, job_id: Any, tail: Any = None) -> str:
        raise self._refuse()

    async def log_page(self, job_id: Any, offset: Any) -> tuple[bytes, int, int]:
        raise self._refuse()

    async def follow_logs(self, job_id: Any, tail: Any = None) -> AsyncIterator[str]:
        raise self._refuse()

    async def result(self, job_id: Any) -> AsyncIterator[bytes]:
        raise self._refuse()

    async def shown(self, job_id: Any, offset: Any) -> dict[str, Any]:
        raise self._refuse()

    async def subscribe(self, viewer: str | None = None) -> EventStream:
        raise self._refuse()

    async def hello(self) -> dict[str, Any]:
        raise self._refuse()


async def _blocks(signed: Any) -> AsyncIterator[bytes]:
    """A signed result's blocks (`results.SignedResult.blocks`), closed at the end or when the
    reader goes away; one changed on the way: `Conflict` (what was sent must be cut short)."""
    from .results import ResultError

    try:
        for block in signed.blocks():
            yield block
    except ResultError as e:
        raise Conflict(str(e)) from None
    finally:
        signed.close()


_INT64 = 2**63


def _check_storable(spec: JobSpec) -> None:
    """What a SQL store can hold: 64-bit integers, text without NUL characters (PostgreSQL
    refuses them). Anything else is bad input (400), not a store failure (5xx)."""
    for name, value in spec:
        if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
            raise SpecError(f"{name}: expected an integer between -2**63 and 2**63-1, got {value}")
        if _has_nul(value):
            raise SpecError(f"{name}: NUL characters (\\u0000) are not allowed")


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, (list, tuple)):
        return any(_has_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    return False


def _shape(nodes: list[Node]) -> list[tuple[Any, ...]]:
    """What the free pool depends on: nodes, their health, their GPUs and which are held outside."""
    return [(n.name, n.healthy, n.virtual, tuple((g.uuid or g.index, g.held_by) for g in n.gpus))
            for n in nodes]


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _as_id(value: Any) -> int:
    try:
        jid = int(value)
        if jid < 1 or str(value).strip() != str(jid):
            raise ValueError
    except (TypeError, ValueError):
        raise NotFound(f"job: no job with id {value!r}") from None
    return jid


def _as_count(name: str, value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        n = int(value)
        if n < 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ApiError(f"{name}: expected an integer >= 0, got {value!r}") from None
    return n
