"""The scheduler's life inside a server, with no HTTP in sight (dask-labextension style).

`SchedulerManager` owns the engine, its store, its executor and the GPU inventory; it runs the
engine's round loop as a task on the server's event loop, fans the engine's events out to
subscribers (the `events` websocket), and answers the API's questions with plain dicts.
Errors are `ApiError`s carrying the HTTP status the handlers answer with and a one-line message
naming the field. `RemoteManager` (remote.py) answers the same calls from a standalone server.
Every API call is a coroutine so that the handlers can await either kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import getpass
import inspect
import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedulearn import policies
from schedulearn.accounts import NoAccount, UserMap, check_can_switch
from schedulearn.engine import Engine, JobFinished, JobNotFound, RealClock
from schedulearn.model import SIMULATION_ONLY, Job, JobSpec, JobState, Node, SpecError

log = logging.getLogger("schedulearn.server")

EXECUTORS = ("local", "docker", "sim")
STATES = tuple(s.value for s in JobState)
RESULT_NAME = "result.pkl"
LOG_NAME = "log.txt"


class ApiError(Exception):
    """An answer other than success: `status` is the HTTP status, the message one line."""

    status = 400

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


def store_failure(e: BaseException) -> bool:
    """Whether `e` is the store refusing an operation (`schedulearn.store.StoreError`, also as
    the cause of an engine error): answered 503, nothing was changed."""
    from schedulearn.engine import StoreWriteFailed

    return isinstance(e, StoreWriteFailed) or any(
        type(x).__name__ == "StoreError" and type(x).__module__.startswith("schedulearn.store")
        for x in (e, e.__cause__) if x is not None)


class NotFound(ApiError):
    status = 404


class Forbidden(ApiError):
    status = 403


class Conflict(ApiError):
    status = 409


@dataclass
class Settings:
    """What the server extension's traits (or `schedulearn serve`'s flags) configure."""

    store_url: str = ""  # '' = a SQLite file under the Jupyter data dir (chosen by the app)
    executor: str = "local"
    docker_hosts: list[str] = field(default_factory=list)
    virtual_gpus: int = 0
    default_policy: str = "fifo"
    default_image: str = ""
    cancel_grace: float = 10.0
    job_root: str = ""
    tick: float = 5.0
    inventory_interval: float = 30.0
    node_name: str = field(default_factory=socket.gethostname)
    #: a user may cancel only their own jobs (jobs without a user are anyone's)
    check_owner: bool = True
    #: the shared set-up: each user's jobs run as the OS account this maps them to (the server
    #: must be root); None: every job runs as the server's account
    user_map: UserMap | None = None
    #: the users who may switch the policy; None: everyone (the single-user set-up)
    admins: list[str] | None = None

    def validate(self) -> None:
        if self.executor not in EXECUTORS:
            raise SpecError(f"executor: expected one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.virtual_gpus < 0:
            raise SpecError(f"virtual_gpus: expected an integer >= 0, got {self.virtual_gpus}")
        if self.cancel_grace < 0:
            raise SpecError(f"cancel_grace: expected seconds >= 0, got {self.cancel_grace}")
        if self.tick <= 0:
            raise SpecError(f"tick: expected seconds > 0, got {self.tick}")
        policies.create(self.default_policy)  # SpecError naming the policies when unknown
        if self.switches_users:
            check_can_switch()
            self.user_map.check()  # type: ignore[union-attr]

    @property
    def switches_users(self) -> bool:
        """Whether jobs run as their users' accounts (processes or containers: not `sim`)."""
        return self.user_map is not None and self.executor != "sim"


@functools.cache
def default_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return os.environ.get("USER", "") or "user"


# -- adapters to the parts other modules own -------------------------------------------------
def discover_nodes(settings: Settings) -> list[Node]:
    """The GPU inventory: `schedulearn.inventory` when present (NVML, Docker hosts, virtual
    GPUs), else `virtual_gpus` virtual GPUs on this host."""
    try:
        from schedulearn import inventory
    except ImportError:
        inventory = None
    if inventory is not None:
        fn = getattr(inventory, "discover", None)
        if fn is not None:
            kwargs: dict[str, Any] = {}
            params = inspect.signature(fn).parameters
            for name, value in (
                ("virtual_gpus", settings.virtual_gpus),
                ("docker_hosts", settings.docker_hosts),
                ("hosts", settings.docker_hosts),
                ("node_name", settings.node_name),
                ("host", settings.node_name),
            ):
                if name in params:
                    kwargs[name] = value
            return list(fn(**kwargs))
    if settings.virtual_gpus <= 0:
        return []
    hosts = settings.docker_hosts or [settings.node_name]
    if len(hosts) == 1:
        return [Node.virtual_node(hosts[0] if not settings.docker_hosts else _host_name(hosts[0]),
                                  settings.virtual_gpus)]
    return [Node.virtual_node(_host_name(h), settings.virtual_gpus) for h in hosts]


def docker_hosts(settings: Settings) -> list[str]:
    """`docker_hosts` as the Docker executor takes them (`name=url[?gpus=N]`): a bare URL is
    named after its host, `virtual_gpus` becomes `?gpus=N` where a host declares none, and no
    hosts at all means this machine's daemon."""
    hosts = list(settings.docker_hosts) or [f"{_safe_name(settings.node_name)}=unix:///var/run/docker.sock"]
    out = []
    for h in hosts:
        if "=" not in h.split("?", 1)[0]:
            h = f"{_safe_name(_host_name(h).split(':')[0]) or 'docker'}={h}"
        if settings.virtual_gpus > 0 and "gpus=" not in h.split("?", 1)[-1]:
            h += ("&" if "?" in h else "?") + f"gpus={settings.virtual_gpus}"
        out.append(h)
    return out


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in name).strip("-._")[:63]


def _host_name(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0] or url


def make_executor(settings: Settings) -> Any:
    if settings.executor == "sim":
        return _sim_executor()
    if settings.executor == "docker":
        try:
            from schedulearn.executors.docker import DockerExecutor
        except ImportError as e:
            raise SpecError(f"executor: 'docker' is not available here ({e})") from None
        return DockerExecutor(docker_hosts(settings), settings.job_root, image=settings.default_image or None,
                              cancel_grace=settings.cancel_grace, run_as=_run_as(settings))
    try:
        from schedulearn.executors.local import LocalExecutor
    except ImportError as e:
        raise SpecError(f"executor: 'local' is not available here ({e})") from None
    return LocalExecutor(settings.job_root, settings.cancel_grace, run_as=_run_as(settings))


def _run_as(settings: Settings) -> Any:
    return settings.user_map.account if settings.switches_users else None  # type: ignore[union-attr]


def _sim_executor() -> Any:
    """Simulated runs on the wall clock: a job ends after its spec's `duration` seconds (1 s when
    it gives none, e.g. a command): demos and load tests without processes."""
    from schedulearn.sim.executor import RigidModel, SimExecutor, default_model

    def model(job: Job) -> Any:
        if job.spec.duration is not None or job.spec.application is not None:
            try:
                return default_model(job)
            except (KeyError, ValueError):
                pass
        return RigidModel(1.0, job.spec.requested)

    return SimExecutor(model=model)


def make_store(url: str) -> Any:
    from schedulearn.store import SqlStore

    return SqlStore(url)


class Subscription:
    """One subscriber's queue of events; iterate it, `close()` it when done."""

    def __init__(self, hub: EventHub, maxsize: int):
        self.hub = hub
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize)
        self.closed = False

    def put(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:  # a subscriber that does not read loses its subscription
            log.warning("events: a subscriber fell %d events behind; dropping it", self.queue.maxsize)
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.subscribers.discard(self)
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self.closed and self.queue.empty():
            raise StopAsyncIteration
        event = await self.queue.get()
        if event is None:
            raise StopAsyncIteration
        return event

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        return await asyncio.wait_for(self.__anext__(), timeout)


class EventHub:
    """Fans events out to subscribers, on the loop's thread whatever thread emits them."""

    def __init__(self, maxsize: int = 10_000):
        self.subscribers: set[Subscription] = set()
        self.maxsize = maxsize
        self.loop: asyncio.AbstractEventLoop | None = None
        self.seq = 0

    def subscribe(self) -> Subscription:
        sub = Subscription(self, self.maxsize)
        self.subscribers.add(sub)
        return sub

    def publish(self, event: dict[str, Any]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._deliver, event)
                return
        self._deliver(event)

    def _deliver(self, event: dict[str, Any]) -> None:
        self.seq += 1
        event = {**event, "seq": self.seq}
        for sub in list(self.subscribers):
            sub.put(event)

    def close(self) -> None:
        for sub in list(self.subscribers):
            sub.close()


class SchedulerManager:
    """The embedded scheduler: engine + store + executor + inventory + event fan-out."""

    remote = False

    def __init__(self, settings: Settings, store: Any = None, executor: Any = None,
                 nodes: list[Node] | None = None):
        settings.validate()
        self.settings = settings
        self.lease: Any = None
        if store is None and settings.store_url:
            # One scheduler per store: the lease first, before anything reads or recovers jobs.
            from schedulearn.store.lease import acquire

            self.lease = acquire(settings.store_url)
        try:
            self.store = store if store is not None else (make_store(settings.store_url)
                                                          if settings.store_url else None)
            self.executor = executor if executor is not None else make_executor(settings)
            self.nodes = nodes if nodes is not None else self.discover()
            self.engine = Engine(self.nodes, settings.default_policy, self.executor, self.store)
        except BaseException:
            if self.lease is not None:
                self.lease.release()
            raise
        self.hub = EventHub()
        self.engine.listeners.append(self._on_engine_event)
        self._tasks: list[asyncio.Task] = []
        self._json_cache: dict[int, tuple[tuple, str]] = {}
        self.started = False

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the round loop (and the inventory refresh) as tasks on `loop` (default: the
        running loop). Safe to call before that loop runs."""
        if self.started:
            return
        if loop is None:
            loop = asyncio.get_running_loop()
        self.hub.loop = loop
        self.started = True
        self._tasks.append(loop.create_task(self._run_engine(), name="schedulearn-engine"))
        if self.settings.inventory_interval > 0:
            self._tasks.append(loop.create_task(self._refresh_inventory(), name="schedulearn-inventory"))

    async def _run_engine(self) -> None:
        while not self.engine.closed:
            try:
                await self.engine.run(RealClock(self.settings.tick))
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop itself (not a round) failed: log, breathe, go on
                log.exception("schedulearn: the round loop failed; restarting it")
                await asyncio.sleep(self.settings.tick)

    def discover(self) -> list[Node]:
        """The nodes: the Docker executor's hosts, or this host's GPUs (NVML or virtual)."""
        from_executor = getattr(self.executor, "nodes", None)
        if callable(from_executor):
            return list(from_executor())
        return discover_nodes(self.settings)

    async def _refresh_inventory(self) -> None:
        while True:
            await asyncio.sleep(self.settings.inventory_interval)
            try:  # NVML calls block: read in a thread, apply on the loop
                nodes = await asyncio.to_thread(self.discover)
                self.refresh_inventory(nodes)
            except Exception:
                log.exception("schedulearn: inventory refresh failed")

    def refresh_inventory(self, nodes: list[Node] | None = None) -> None:
        """Apply a fresh inventory: a changed GPU set replaces the engine's nodes, changed
        figures (memory, utilisation) are updated in place; either is pushed as an event."""
        nodes = self.discover() if nodes is None else nodes
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
        tasks, self._tasks = self._tasks, []
        self.engine.close()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.hub.close()
        if self.store is not None and hasattr(self.store, "close"):
            self.store.close()
        if self.lease is not None:
            self.lease.release()  # after the store's last write
        self.started = False

    def _on_engine_event(self, event: dict[str, Any]) -> None:
        if event.get("type") == "inventory":
            event = {**event, **self._gpus()}
        self.hub.publish(event)

    # -- the API ------------------------------------------------------------------------------
    async def policies(self) -> list[dict[str, str]]:
        return policies.available()

    def can_switch(self, user: str) -> bool:
        """Whether `user` may switch the policy: an admin, or anyone where no admins are set."""
        admins = self.settings.admins
        return admins is None or user in admins

    async def policy(self, user: str = "") -> dict[str, Any]:
        return {"policy": self.engine.policy.name, "can_switch": self.can_switch(user), "user": user}

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
                    }
                    for g in n.gpus
                ],
            }
            for n in self.engine.nodes
        ]}

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
        if self.settings.executor == "docker" and not data.get("image") and self.settings.default_image:
            data["image"] = self.settings.default_image
        try:
            spec = JobSpec.parse(data)
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
        """A live server cannot run a simulated job: its simulation-only fields are refused."""
        if self.settings.executor == "sim":
            return
        for name in SIMULATION_ONLY:
            if getattr(spec, name) is not None:
                raise SpecError(f"{name}: a simulation-only field, allowed with the 'sim' executor only "
                                f"(this server runs jobs with the {self.settings.executor!r} executor); "
                                "give a command or a script")

    async def list_jobs(self, state: str | None = None, user: str | None = None,
                        limit: Any = None) -> dict[str, Any]:
        now = self.engine.clock()
        return {"jobs": [self.engine.job_dict(j, now) for j in self._select(state, user, limit)]}

    async def list_jobs_json(self, state: str | None = None, user: str | None = None,
                             limit: Any = None) -> str:
        """`list_jobs` as JSON text, from per-job fragments cached while a job does not change
        (queued and finished jobs' dicts do not depend on the time): listing 10,000 jobs costs
        a join instead of 10,000 `to_dict`s and a 4 MB `json.dumps`."""
        now = self.engine.clock()
        cache = self._json_cache
        parts = []
        for j in self._select(state, user, limit):
            if j.state is JobState.running:
                parts.append(json.dumps(self.engine.job_dict(j, now)))
                continue
            queued = j.state is JobState.queued and j.stopping is None
            reason = self.engine.waiting_reason(j) if queued else j.reason  # a wait's changes
            key = (j.state, j.restarts, j.start_time, j.end_time, j.exit_code, reason, j.attained_base,
                   j.run_base, len(j.alloc))
            hit = cache.get(j.id)
            if hit is None or hit[0] != key:
                hit = cache[j.id] = (key, json.dumps(self.engine.job_dict(j, now)))
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

    async def get_job(self, job_id: Any) -> dict[str, Any]:
        return self.engine.job_dict(self._job(job_id), self.engine.clock())

    async def cancel(self, job_id: Any, user: str) -> dict[str, Any]:
        job = self._job(job_id)
        if self.settings.check_owner and job.spec.user and user != job.spec.user:
            raise Forbidden(f"job {job.id}: belongs to {job.spec.user!r}; only they may cancel it")
        try:
            self.engine.cancel(job.id)
        except JobFinished as e:
            raise Conflict(str(e)) from None
        return self.engine.job_dict(job, self.engine.clock())

    def job_dir(self, job_id: int) -> Path:
        fn = getattr(self.executor, "job_dir", None)
        if callable(fn):
            return Path(fn(job_id))
        return Path(self.settings.job_root or ".") / str(job_id)

    async def logs(self, job_id: Any, tail: Any = None) -> str:
        job = self._job(job_id)
        n = _as_count("tail", tail)
        fn = getattr(self.executor, "logs", None)
        if callable(fn):
            text = fn(job.id, n)
            if inspect.isawaitable(text):
                text = await text
            return text or ""
        from schedulearn import joblogs

        return joblogs.tail(self.job_dir(job.id) / LOG_NAME, n)

    async def follow_logs(self, job_id: Any, tail: Any = None) -> AsyncIterator[str]:
        """The log (its last `tail` lines, or all of it), then its lines as they come, until
        the job is over."""
        job = self._job(job_id)
        n = _as_count("tail", tail)
        return self._follow(job, n)

    async def _follow(self, job: Job, n: int | None) -> AsyncIterator[str]:
        from schedulearn import joblogs

        path = self.job_dir(job.id) / LOG_NAME
        if n is not None:  # the tail now, then what comes after it
            head = joblogs.tail(path, n)
            if head:
                yield head
            async for line in joblogs.afollow(path, lambda: job.state.final, from_start=False,
                                              interval=0.1):
                yield line
            return
        async for line in joblogs.afollow(path, lambda: job.state.final, interval=0.1):
            yield line

    async def result(self, job_id: Any) -> bytes:
        """The pickled result the job's own run wrote and signed (`schedulearn.results`): a
        `result.pkl` anyone else put in its directory is refused (409), never handed out."""
        from schedulearn.results import ForgedResult, NoResult, ResultError

        job = self._job(job_id)
        reader = getattr(self.executor, "read_result", None)
        try:
            if reader is None:  # the simulator runs no programs
                raise NoResult(f"result: job {job.id} has no result")
            return reader(job.id)
        except NoResult:
            raise NotFound(f"result: job {job.id} has no result (yet); state {job.state.value}") from None
        except ForgedResult as e:
            log.warning("job %s: %s", job.id, e)
            raise Conflict(str(e)) from None
        except ResultError as e:
            raise ApiError(str(e), 500) from None

    def subscribe(self) -> Subscription:
        return self.hub.subscribe()

    async def hello(self) -> dict[str, Any]:
        """The first message on the events socket: where things stand."""
        return {"type": "hello", "policy": self.engine.policy.name,
                "active": [j.id for j in self.engine.active.values()], "seq": self.hub.seq}


class Unavailable:
    """Stands in for a manager that could not start (the store's lease is another scheduler's):
    every API call answers 503 with `reason`, the events socket is refused with it."""

    remote = False

    def __init__(self, reason: str):
        self.unavailable = reason

    def start(self, loop: Any = None) -> None:
        pass

    async def stop(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("list_jobs_json",):
            raise AttributeError(name)

        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise ApiError(f"scheduler: unavailable: {self.unavailable}", 503)

        return refuse


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
    return [(n.name, n.healthy, n.virtual, tuple(g.uuid or g.index for g in n.gpus)) for n in nodes]


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
