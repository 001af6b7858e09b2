"""`SchedulearnApp`: the scheduler inside Jupyter Server.

Configuration (traitlets, e.g. `c.SchedulearnApp.virtual_gpus = 4` in jupyter_server_config.py
or `--SchedulearnApp.virtual_gpus=4`); every trait's default can also come from the environment
variable `SCHEDULEARN_<TRAIT>` (`SCHEDULEARN_VIRTUAL_GPUS=4 jupyter lab`). With `remote_url`,
the extension runs no scheduler of its own and forwards the same API to a standalone one
(`schedulearn serve`). At start it writes `schedulearn-server.json` (URL + token) into the
Jupyter runtime directory, where the CLI and the kernel magics find it.

The extension wraps a `schedulearn.service.SchedulerService` (or a `RemoteManager`); an
executor's own settings (`docker_hosts`, `default_image`, ...) are traits made from its
registration (`schedulearn.executors.registry`), each with its `SCHEDULEARN_<NAME>` variable.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_server.extension.application import ExtensionApp
from schedulearn.deadlines import parse_duration
from schedulearn.executors import registry
from schedulearn.model import SpecError
from schedulearn.service import (
    RESTART_COST,
    Manager,
    SchedulerService,
    Settings,
    Unavailable,
    check_restart_cost,
    make_job_root,
)
from traitlets import Bool, Float, Int, List, TraitError, TraitType, Unicode, default, validate

from . import runtime
from .extension import make_handlers

ENV_PREFIX = "SCHEDULEARN_"


def env(trait: str) -> str | None:
    value = os.environ.get(ENV_PREFIX + trait.upper())
    return value if value not in (None, "") else None


def _env_number(trait: str, kind: type, fallback: Any) -> Any:
    value = env(trait)
    if value is None:
        return fallback
    try:
        return kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise TraitError(f"{ENV_PREFIX}{trait.upper()}: expected {what}, got {value!r}") from None


def schedulearn_dir() -> Path:
    return Path(jupyter_data_dir()) / "schedulearn"


def _check_duration(value: str, name: str) -> str:
    """`value` (stripped) when empty or a duration (`parse_duration`), else a TraitError naming `name`."""
    value = value.strip()
    try:
        if value:
            parse_duration(value, name)
    except SpecError as e:
        raise TraitError(str(e)) from None
    return value


class _SchedulearnApp(ExtensionApp):
    """The scheduler inside Jupyter Server (`SchedulearnApp`: this, with the executors' traits)."""

    name = "schedulearn_jupyter"
    #: what the API's handlers call (set up in `initialize_settings`)
    manager: Manager | None = None
    #: the runtime files this server wrote (removed at its end)
    runtime_files: list[Path] = []
    _log_handlers: list[logging.Handler] = []  # the handlers `log_through` gave the core's loggers
    description = "Schedule deep-learning jobs on shared GPUs from Jupyter"
    load_other_extensions = True

    store_url = Unicode(
        config=True,
        help="Job store: a SQLAlchemy URL (postgresql+psycopg://... for a shared store) or a SQLite "
        "file path. Default: <jupyter data dir>/schedulearn/jobs.db. Env: SCHEDULEARN_STORE_URL.",
    )
    executor = Unicode(
        config=True, help=f"Where jobs run: {registry.describe()}. Env: SCHEDULEARN_EXECUTOR.",
    )
    virtual_gpus = Int(
        config=True,
        help="Virtual GPUs per host when NVML finds none (0: none). Env: SCHEDULEARN_VIRTUAL_GPUS.",
    )
    default_policy = Unicode(
        config=True,
        help="Policy at first start (a runtime switch is remembered in the store). "
        "Env: SCHEDULEARN_DEFAULT_POLICY.",
    )
    cancel_grace = Float(
        config=True,
        help="Seconds between SIGTERM and SIGKILL when a job is cancelled or preempted. "
        "Env: SCHEDULEARN_CANCEL_GRACE.",
    )
    job_root = Unicode(
        config=True,
        help="Directory of the jobs' working files and logs (one folder per job). "
        "Default: <jupyter data dir>/schedulearn/jobs. Env: SCHEDULEARN_JOB_ROOT.",
    )
    remote_url = Unicode(
        config=True,
        help="URL of a standalone scheduler (`schedulearn serve`) to use instead of an embedded one. "
        "Env: SCHEDULEARN_REMOTE_URL.",
    )
    remote_token = Unicode(
        config=True, help="Token for remote_url. Env: SCHEDULEARN_REMOTE_TOKEN."
    )
    tick = Float(
        config=True, help="Seconds between time-driven scheduling rounds. Env: SCHEDULEARN_TICK."
    )
    inventory_interval = Float(
        config=True, help="Seconds between GPU inventory refreshes (0: never). "
        "Env: SCHEDULEARN_INVENTORY_INTERVAL.",
    )
    restart_cost = Float(
        config=True,
        help="Seconds a job's checkpoint-restart costs on this set-up (stop, relaunch, reload, "
        "first step): what the elastic policies (goodput, qoe) charge a resize until the job's own "
        "resizes are measured, and what deadline statuses count for a new size. Default 30. "
        "Env: SCHEDULEARN_RESTART_COST.",
    )

    keep_job_dirs = Unicode(
        config=True,
        help="Remove a job's directory (its log, result, checkpoints) this long after the job ended: "
        "a duration such as 30d, 12h or 3600 (seconds); its record stays. Default: for ever. "
        "Env: SCHEDULEARN_KEEP_JOB_DIRS.",
    )

    @default("store_url")
    def _store_url(self) -> str:
        return env("store_url") or f"sqlite:///{schedulearn_dir() / 'jobs.db'}"

    @default("executor")
    def _executor(self) -> str:
        value = env("executor") or "local"
        if value not in registry.names():
            raise TraitError(f"SCHEDULEARN_EXECUTOR: expected one of {', '.join(registry.names())}, "
                             f"got {value!r}")
        return value

    @default("virtual_gpus")
    def _virtual_gpus(self) -> int:
        return _env_number("virtual_gpus", int, 0)

    @default("default_policy")
    def _default_policy(self) -> str:
        return env("default_policy") or "fifo"

    @default("cancel_grace")
    def _cancel_grace(self) -> float:
        return _env_number("cancel_grace", float, 10.0)

    @default("job_root")
    def _job_root(self) -> str:
        return env("job_root") or str(schedulearn_dir() / "jobs")

    @default("remote_url")
    def _remote_url(self) -> str:
        return env("remote_url") or ""

    @default("remote_token")
    def _remote_token(self) -> str:
        return env("remote_token") or ""

    @default("tick")
    def _tick(self) -> float:
        return _env_number("tick", float, 5.0)

    @default("restart_cost")
    def _restart_cost(self) -> float:  # (traitlets does not validate a default: checked here)
        value = _env_number("restart_cost", float, RESTART_COST)
        try:
            return check_restart_cost(value)
        except SpecError:
            raise TraitError(f"{ENV_PREFIX}RESTART_COST: expected seconds > 0 (a finite number), "
                             f"got {env('restart_cost')!r}") from None

    @default("keep_job_dirs")
    def _keep_job_dirs(self) -> str:  # (traitlets does not validate a default: checked here)
        return _check_duration(env("keep_job_dirs") or "", f"{ENV_PREFIX}KEEP_JOB_DIRS")

    @validate("keep_job_dirs")
    def _check_keep_job_dirs(self, proposal: Any) -> str:
        return _check_duration(proposal["value"], "keep_job_dirs")

    @default("inventory_interval")
    def _inventory_interval(self) -> float:
        return _env_number("inventory_interval", float, 30.0)

    @validate("executor")
    def _check_executor(self, proposal: Any) -> str:
        try:
            return registry.get(proposal["value"]).name
        except SpecError as e:
            raise TraitError(str(e)) from None

    @validate("virtual_gpus")
    def _check_virtual_gpus(self, proposal: Any) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"virtual_gpus: expected an integer >= 0, got {proposal['value']}")
        return proposal["value"]

    @validate("cancel_grace", "tick", "inventory_interval")
    def _check_seconds(self, proposal: Any) -> float:
        if proposal["value"] < 0:
            raise TraitError(f"{proposal['trait'].name}: expected seconds >= 0, got {proposal['value']}")
        return proposal["value"]

    @validate("restart_cost")
    def _check_restart_cost(self, proposal: Any) -> float:
        try:
            return check_restart_cost(proposal["value"])
        except SpecError as e:
            raise TraitError(str(e)) from None

    def scheduler_settings(self) -> Settings:
        kind = registry.get(self.executor)
        return Settings(
            store_url=self.store_url,
            executor=self.executor,
            virtual_gpus=self.virtual_gpus,
            default_policy=self.default_policy,
            cancel_grace=self.cancel_grace,
            job_root=self.job_root,
            tick=self.tick or 5.0,
            inventory_interval=self.inventory_interval,
            restart_cost=self.restart_cost,
            keep_job_dirs=parse_duration(self.keep_job_dirs, "keep_job_dirs") if self.keep_job_dirs else None,
            # (an executor registered after this class was made has no trait: its variable counts)
            options={o.name: getattr(self, o.name) if self.has_trait(o.name) else o.from_env()
                     for o in kind.options},
        )

    # -- life cycle ---------------------------------------------------------------------------
    def initialize_settings(self) -> None:
        self._log_handlers = log_through(self.log)
        manager: Manager
        if self.remote_url:
            from .remote import RemoteManager

            manager = RemoteManager(self.remote_url, self.remote_token)
            self.log.info("schedulearn: using the scheduler at %s", self.remote_url)
        else:
            from schedulearn.store import StoreError
            from schedulearn.store.lease import LeaseError

            try:
                settings = self.scheduler_settings()  # (a bad SCHEDULEARN_* variable: TraitError)
                make_job_root(settings.job_root)
                service = SchedulerService(settings)
            except (LeaseError, StoreError, SpecError, TraitError) as e:
                # Another scheduler owns the store, or a setting cannot be worked with (a store
                # it cannot open, a job root it cannot create, an unknown policy, a variable
                # that is not a number): Jupyter runs,
                # this extension schedules nothing and its API answers 503 with the reason (the
                # sidebar and the magics show it). Until 2026-12-05 only the lease did; the rest
                # failed the extension's loading with a traceback, and its API answered 404.
                self.log.error("schedulearn: no scheduler in this server: %s", e)
                then = "then restart this server" if isinstance(e, LeaseError) else (
                    "fix the setting (c.SchedulearnApp.*, or its SCHEDULEARN_* variable), "
                    "then restart this server")
                manager = Unavailable(f"{e} ({then})")
            else:
                self.log.info(
                    "schedulearn: %s executor, %d GPUs on %d node(s), %s, store %s",
                    settings.executor, service.engine.total_gpus, len(service.nodes),
                    service.policy_note(), service.store.url if service.store is not None else "memory",
                )
                if note := service.no_gpus_note():  # every submission would be refused
                    self.log.warning("schedulearn: %s", note)
                service.lease_lost.append(self._lease_lost)
                manager = service
        self.manager = manager
        self.settings["schedulearn_manager"] = manager
        manager.start(_loop(self.serverapp))
        self._write_runtime_file()

    def _lease_lost(self, reason: str) -> None:
        """The scheduler stopped: another one holds the store's lease now (see
        `SchedulerService._keep_lease`). Jupyter runs on; the API answers 503 with the reason."""
        self.manager = Unavailable(f"{reason} (restart this server once the other scheduler has stopped)")
        self.settings["schedulearn_manager"] = self.manager
        self.serverapp.web_app.settings["schedulearn_manager"] = self.manager  # (a copy at start)

    def initialize_handlers(self) -> None:
        self.handlers.extend(make_handlers())

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """The server is listening now: its real port goes into the runtime file, and kernels
        started from here on find the server through their environment."""
        self._write_runtime_file()
        info = runtime.server_info(serverapp)
        os.environ.setdefault("SCHEDULEARN_URL", info["url"])
        if info.get("token"):
            os.environ.setdefault("SCHEDULEARN_TOKEN", info["token"])

    def _write_runtime_file(self) -> None:
        try:
            self.runtime_files = runtime.write(self.serverapp)
        except OSError as e:
            self.log.warning("schedulearn: cannot write the runtime file: %s", e)
            self.runtime_files = []

    async def stop_extension(self) -> None:
        if self.manager is not None:
            await self.manager.stop()
        runtime.remove(self.runtime_files)
        core = logging.getLogger("schedulearn")
        for handler in self._log_handlers:  # (the next server in this process brings its own)
            core.removeHandler(handler)
        core.setLevel(logging.NOTSET)


def log_through(app_log: logging.Logger) -> list[logging.Handler]:
    """Hand the core's log records (`schedulearn.*`: what the store found at start, the engine's
    and the executors' lines) to Jupyter's log, formatted as its own and at its level: without
    this no INFO line of theirs was shown, and a warning reached stderr unformatted (Python's
    last-resort handler). Returns the handlers added."""
    core = logging.getLogger("schedulearn")
    added = [h for h in app_log.handlers if h not in core.handlers]
    for handler in added:
        core.addHandler(handler)
    core.setLevel(app_log.getEffectiveLevel())
    return added


def _loop(serverapp: Any) -> asyncio.AbstractEventLoop:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return serverapp.io_loop.asyncio_loop


# -- the executors' own settings, as traits ---------------------------------------------------------
def _option_trait(opt: registry.Option) -> TraitType:
    kinds = ", ".join(k.name for k in registry.kinds().values() if opt in k.options)
    text = f"{opt.help} ({kinds} executor). Env: {opt.env}"
    if isinstance(opt.default, list):
        return List(Unicode(), config=True, help=text + ", comma-separated.")
    trait = {bool: Bool, int: Int, float: Float}.get(type(opt.default), Unicode)
    return trait(config=True, help=text + ".")


def _env_default(opt: registry.Option) -> Any:
    def value(self: Any) -> Any:
        try:
            return opt.from_env()
        except ValueError as e:
            raise TraitError(str(e)) from None

    return default(opt.name)(value)


def _with_executor_options(base: type) -> type:
    """`base` with a trait (and its environment default) per executor option."""
    namespace: dict[str, Any] = {"__module__": __name__, "__doc__": base.__doc__}
    for opt in registry.options():
        namespace[opt.name] = _option_trait(opt)
        namespace[f"_default_{opt.name}"] = _env_default(opt)
    return type("SchedulearnApp", (base,), namespace)


SchedulearnApp = _with_executor_options(_SchedulearnApp)
main = launch_new_instance = SchedulearnApp.launch_instance
