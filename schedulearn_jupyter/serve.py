"""`schedulearn serve`: the scheduler as its own server, for GPUs shared by several people.

The same REST API and websocket as the Jupyter extension (at `/schedulearn/api/`), with token
authentication: one token (`--token`, `$SCHEDULEARN_SERVE_TOKEN`, or a random one printed at
start) or a JSON file of `{"<token>": "<user name>"}` (`--tokens`) so that each person's jobs
carry their name and only they (or an admin) may cancel them. The store should be PostgreSQL
for a shared set-up (`$SCHEDULEARN_STORE_URL=postgresql+psycopg://user:pass@db/schedulearn`: a
password on the command line is refused there); SQLite works for one machine.
Each user's Jupyter then points its extension at this server:
`c.SchedulearnApp.remote_url = "http://gpu-box:8765/"` and `remote_token = "<their token>"`.

With `--tokens` (the shared set-up) the tokens file must be private (mode 0600), each user's jobs
run as the OS account `--user-map` names for them (the server runs as root; see `accounts.py`),
and only the users named by `--admins` may switch the policy. `SIGHUP` reads the tokens file
again (`Tokens`): a removed token is refused from then on, and what it had open is closed.

It wraps the same `schedulearn.service.SchedulerService` as the extension, behind the same
handlers (`handlers.py`) bound to token authentication; the `schedulearn` command gets `serve`
from here through its extension hook (`schedulearn.cli.EXTENSIONS`). An executor's own settings
become flags (`--docker-host`, `--default-image`, ...) from its registration.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import logging
import math
import os
import secrets
import signal
import sys
import weakref
from pathlib import Path
from typing import Any

from schedulearn import policies
from schedulearn.deadlines import parse_duration
from schedulearn.executors import registry
from schedulearn.model import SpecError
from schedulearn.service import (
    RESTART_COST,
    SchedulerService,
    Settings,
    check_restart_cost,
    default_user,
    make_job_root,
)

log = logging.getLogger("schedulearn.serve")

TOKEN_ENV = "SCHEDULEARN_SERVE_TOKEN"
STORE_ENV = "SCHEDULEARN_STORE_URL"
DEFAULT_PORT = 8765


def add_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument("--host", default=env("SCHEDULEARN_HOST", "127.0.0.1"),
                   help="address to listen on (0.0.0.0 for every interface; default 127.0.0.1)")
    p.add_argument("--port", type=_number(int, "SCHEDULEARN_PORT", "a port 0-65535", 0, 65535),
                   default=env("SCHEDULEARN_PORT", str(DEFAULT_PORT)),
                   help="port to listen on; 0: a free one, printed "
                        f"(default: $SCHEDULEARN_PORT or {DEFAULT_PORT})")
    p.add_argument("--token", default=env(TOKEN_ENV),
                   help=f"the API token (default: ${TOKEN_ENV}, the place for it: ps shows arguments to "
                        "everyone; else a random one, printed)")
    p.add_argument("--tokens", type=Path, default=None,
                   help='JSON file {"<token>": "<user>", ...}: one token per user')
    p.add_argument("--user", default=None, help="user name for --token (default: the OS user)")
    p.add_argument("--user-map", default=env("SCHEDULEARN_USER_MAP"),
                   help="with --tokens: the OS account each user's jobs run as, 'alice=alice,bob=b.smith'; "
                        "'same' (the account named like the user) or 'server' (every job as this server's "
                        "account: no isolation). Needs root. Default: $SCHEDULEARN_USER_MAP")
    p.add_argument("--admins", default=env("SCHEDULEARN_ADMINS"),
                   help="comma-separated user names who may switch the policy, pause and resume "
                        "scheduling, and cancel anyone's job (default: "
                        "$SCHEDULEARN_ADMINS; without --tokens, the one user; with --tokens, nobody)")
    p.add_argument("--store", default=env(STORE_ENV),
                   help="store URL (postgresql+psycopg://... for a shared set-up; default: "
                        f"${STORE_ENV}, else a SQLite file in the user's data dir); a password belongs in "
                        f"${STORE_ENV} or ~/.pgpass, not here: ps shows arguments to everyone")
    p.add_argument("--executor", default=env("SCHEDULEARN_EXECUTOR", "local"),
                   type=_choice("SCHEDULEARN_EXECUTOR", registry.names),
                   help=" | ".join(registry.names()) + f" ({registry.describe()})")
    p.add_argument("--virtual-gpus", type=_number(int, "SCHEDULEARN_VIRTUAL_GPUS", "an integer >= 0", 0),
                   default=env("SCHEDULEARN_VIRTUAL_GPUS", "0"),
                   help="virtual GPUs per host when NVML finds none "
                        "(default: $SCHEDULEARN_VIRTUAL_GPUS or 0)")
    p.add_argument("--policy", default=env("SCHEDULEARN_DEFAULT_POLICY", "fifo"),
                   type=_choice("SCHEDULEARN_DEFAULT_POLICY", lambda: list(policies.policy_classes())),
                   help="policy at first start")
    p.add_argument("--cancel-grace", type=_number(float, "SCHEDULEARN_CANCEL_GRACE", "seconds >= 0", 0.0),
                   default=env("SCHEDULEARN_CANCEL_GRACE", "10"), metavar="S",
                   help="seconds a cancelled job has between SIGTERM and SIGKILL "
                        "(default: $SCHEDULEARN_CANCEL_GRACE or 10)")
    p.add_argument("--job-root", default=env("SCHEDULEARN_JOB_ROOT"),
                   help="jobs' folders (default: <data dir>/schedulearn/jobs)")
    p.add_argument("--tick", type=_number(float, "SCHEDULEARN_TICK", "seconds > 0", 0.0, strict=True),
                   default=env("SCHEDULEARN_TICK", "5"), metavar="S",
                   help="seconds between time-driven rounds (las, goodput, qoe; "
                        "default: $SCHEDULEARN_TICK or 5)")
    p.add_argument("--inventory-interval", metavar="S",
                   type=_number(float, "SCHEDULEARN_INVENTORY_INTERVAL", "seconds >= 0", 0.0),
                   default=env("SCHEDULEARN_INVENTORY_INTERVAL", "30"),
                   help="seconds between reads of the GPU inventory (GPUs that another scheduler or "
                        "Slurm took or gave back; 0: never; default: $SCHEDULEARN_INVENTORY_INTERVAL or 30)")
    p.add_argument("--restart-cost", type=_restart_cost, metavar="S",
                   default=env("SCHEDULEARN_RESTART_COST", str(RESTART_COST)),
                   help="seconds a job's checkpoint-restart costs on this set-up: what the elastic "
                        "policies charge a resize until the job's own are measured, and what deadline "
                        "statuses count (default: $SCHEDULEARN_RESTART_COST or 30)")
    p.add_argument("--keep-job-dirs", type=_duration("SCHEDULEARN_KEEP_JOB_DIRS"), metavar="DURATION",
                   default=env("SCHEDULEARN_KEEP_JOB_DIRS"),
                   help="remove a job's directory (its log, result, checkpoints) this long after the job "
                        "ended, e.g. 30d; its record stays (default: $SCHEDULEARN_KEEP_JOB_DIRS, or "
                        "for ever)")
    p.add_argument("--base-url", default="/", help="URL prefix of the API (default /)")
    p.add_argument("--log-level", type=_log_level, default=env("SCHEDULEARN_LOG_LEVEL", "info"),
                   help="debug (also every read that succeeded: clients poll), info (changes, refusals, "
                        "the scheduler's events), warning or error (default: $SCHEDULEARN_LOG_LEVEL or info)")
    for opt in registry.options():  # the executors' own settings
        kinds = ", ".join(k.name for k in registry.kinds().values() if opt in k.options)
        text = f"{opt.help} ({kinds} executor; default: ${opt.env})"
        if isinstance(opt.default, list):
            p.add_argument(opt.cli_flag, dest=opt.name, action="append", default=opt.from_env(),
                           help=text + "; repeat the flag for several")
        else:  # the variable's text is converted (and refused) only when `serve` runs
            p.add_argument(opt.cli_flag, dest=opt.name, type=_option(opt),
                           default=env(opt.env) or opt.default, help=text)


def _number(kind: type, variable: str, allowed: str, least: float, most: float = math.inf,
            strict: bool = False) -> Any:
    """An argparse type for a number flag whose default comes from `variable`: argparse converts
    a text default only when `serve` runs, so a bad variable is `serve`'s one-line usage error
    (naming the flag, the variable and what is allowed), not a traceback of every command."""
    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            value = None
        if (value is None or not math.isfinite(value) or not least <= value <= most
                or (strict and value == least)):
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r} (the flag or ${variable})")
        return value
    return convert


def _choice(variable: str, names: Any) -> Any:
    """An argparse type for a flag that names one of `names()` (executors, policies: plugins
    add theirs), whose default is `variable`: a bad one names the flag and the variable, as the
    number flags' (it said `executor: expected one of ...` of `SCHEDULEARN_EXECUTOR=kubernetes`)."""
    def convert(text: str) -> str:
        if text not in (known := list(names())):
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(known)}, got {text!r} "
                                             f"(the flag or ${variable})")
        return text
    return convert


def _duration(variable: str) -> Any:
    """An argparse type for a duration flag (`30d`, `12h`, seconds) whose default is `variable`."""
    def convert(text: str) -> float:
        try:
            return parse_duration(text, "")
        except SpecError:
            raise argparse.ArgumentTypeError(f"expected a duration > 0 such as 30d, 12h or 3600, got "
                                             f"{text!r} (the flag or ${variable})") from None
    return convert


def _option(opt: Any) -> Any:
    """An argparse type for an executor's option (`Option.parse`; its message names the variable)."""
    def convert(text: str) -> Any:
        try:
            return opt.parse(text)
        except ValueError as e:
            message = str(e).replace(f"{opt.env}: ", "", 1)
            raise argparse.ArgumentTypeError(f"{message} (the flag or ${opt.env})") from None
    return convert


LOG_LEVELS = ("debug", "info", "warning", "error")
_ACCESS = logging.getLogger("tornado.access")  # tornado's access log (`tornado.log.access_log`)


def _log_level(text: str) -> int:
    if text.strip().lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LOG_LEVELS)}, got {text!r} "
                                         "(the flag or $SCHEDULEARN_LOG_LEVEL)")
    return getattr(logging, text.strip().upper())


def access_log(handler: Any) -> None:
    """Tornado's access log line, at a level by what the request did: a read that succeeded at
    DEBUG (every client polls — a queue widget each second, a waiting cell twice a second — and at
    INFO a lab's server wrote a line for each, around the clock), a change (POST, PUT, DELETE) at
    INFO, a refusal (4xx) at WARNING, a server error at ERROR."""
    status = handler.get_status()
    if status >= 500:
        level = logging.ERROR
    elif status >= 400:
        level = logging.WARNING
    elif handler.request.method in ("GET", "HEAD", "OPTIONS"):
        level = logging.DEBUG
    else:
        level = logging.INFO
    if _ACCESS.isEnabledFor(level):
        _ACCESS.log(level, "%d %s %.2fms", status, handler._request_summary(),
                           1000.0 * handler.request.request_time())


def _restart_cost(text: str) -> float:
    try:
        return check_restart_cost(text)
    except SpecError:
        raise argparse.ArgumentTypeError(f"expected seconds > 0 (a finite number), got {text!r}") from None


def register(subparsers: Any) -> None:
    """`schedulearn serve` (the CLI's extension hook)."""
    p = subparsers.add_parser("serve", help="run the scheduler as a standalone server",
                              description=__doc__.split("\n\n")[0])
    add_arguments(p)
    p.set_defaults(func=run_from_args)


def load_tokens(args: argparse.Namespace) -> dict[str, str]:
    """token -> user name."""
    tokens: dict[str, str] = {}
    if args.tokens is not None:
        check_private(args.tokens)
        try:
            data = json.loads(args.tokens.read_text(encoding="utf-8-sig"))  # (an editor's byte-order mark)
        except (OSError, ValueError) as e:
            raise SpecError(f"tokens: cannot read a JSON object from {args.tokens} ({e})") from None
        if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                 for k, v in data.items()):
            raise SpecError(f'tokens: expected {{"<token>": "<user>", ...}} in {args.tokens}')
        tokens.update(data)
    if args.token:
        tokens[args.token] = args.user or default_user()
    return tokens


def check_private(path: Path) -> None:
    """The tokens file is every user's password: readable by its owner only."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError as e:
        raise SpecError(f"tokens: cannot read {path} ({e.strerror})") from None
    if mode & 0o077:
        raise SpecError(f"tokens: {path} is readable by others (mode {mode:04o}); run chmod 600 {path}")


def secrets_in_arguments(args: argparse.Namespace) -> list[str]:
    """What this server was given on its command line that is a secret: every account on the
    machine reads a process's arguments (`ps`, /proc/<pid>/cmdline), the jobs' accounts
    included, where its environment stays private to it. One line per secret; in the shared
    set-up (`--tokens`) each is refused (a job of bob's reading the store's password could
    rewrite alice's queued job), else said as a warning."""
    found = []
    if args.token and args.token != os.environ.get(TOKEN_ENV):
        found.append(f"token: --token is readable by every account on this machine (ps shows a process's "
                     f"arguments); give it in ${TOKEN_ENV} or the --tokens file instead")
    if args.store and args.store != os.environ.get(STORE_ENV) and _password(args.store):
        found.append(f"store: the password in --store is readable by every account on this machine (ps "
                     f"shows a process's arguments), the users' jobs included; give the URL in ${STORE_ENV}, "
                     "or the password in ~/.pgpass, instead")
    return found


def _password(url: str) -> bool:
    import sqlalchemy as sa

    try:
        return bool(sa.make_url(url).password)
    except Exception:  # noqa: BLE001 - a path, or not a URL at all: the store says what is wrong
        return False


def shared_policy(args: argparse.Namespace) -> tuple[Any, list[str] | None]:
    """(user map, admins) for these flags: the shared set-up (`--tokens`) must say which OS
    account runs each user's jobs, and only named admins may switch the policy there."""
    from schedulearn.accounts import SERVER, UserMap

    user_map = UserMap.parse(args.user_map)
    shared = args.tokens is not None
    if shared and user_map is None and not args.user_map and args.executor != "sim":
        raise SpecError(f"user_map: with --tokens each user's jobs run as their own OS account; give "
                        f"--user-map alice=alice,bob=bob (or 'same', or '{SERVER}' for no isolation), or "
                        "$SCHEDULEARN_USER_MAP")
    admins = [a.strip() for a in (args.admins or "").split(",") if a.strip()]
    return user_map, (admins if admins or shared else None)


def settings_from_args(args: argparse.Namespace) -> Settings:
    data_dir = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "schedulearn"
    if args.store:
        store = args.store
    else:
        from schedulearn.store import default_url

        store = default_url()
    user_map, admins = shared_policy(args)
    kind = registry.kinds().get(args.executor)  # (an unknown one: `Settings.validate` says so)
    return Settings(
        store_url=store,
        executor=args.executor,
        virtual_gpus=args.virtual_gpus,
        default_policy=args.policy,
        cancel_grace=args.cancel_grace,
        job_root=args.job_root or str(data_dir / "jobs"),
        tick=args.tick,
        inventory_interval=args.inventory_interval,
        restart_cost=args.restart_cost,
        keep_job_dirs=args.keep_job_dirs,
        user_map=user_map,
        admins=admins,
        private_jobs=args.tokens is not None,
        options={o.name: getattr(args, o.name) for o in kind.options} if kind else {},
    )


class Tokens:
    """The server's tokens (token -> user), and who is connected with each: a reload (`SIGHUP`,
    the tokens file edited) that removes a token closes what was opened with it — event sockets,
    followed logs, results on their way — so that a revoked token stops reading at once, not
    when its holder disconnects."""

    def __init__(self, table: dict[str, str]):
        self.table = dict(table)
        self._opened: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()  # handler -> token

    def user(self, given: str, handler: Any) -> str | None:
        for token, user in self.table.items():
            if hmac.compare_digest(given.encode(), token.encode()):
                self._opened[handler] = token
                return user
        return None

    def replace(self, table: dict[str, str]) -> int:
        """Use `table` from now on; close what removed tokens opened; how many were closed."""
        self.table = dict(table)
        closed = 0
        for handler, token in list(self._opened.items()):
            if token in self.table:
                continue
            del self._opened[handler]
            if hasattr(handler, "ws_connection"):  # an event socket
                if handler.ws_connection is not None:
                    handler.close(1008, "token: revoked")
                    closed += 1
            elif not handler._finished:  # an answer still on its way (a followed log, a result)
                handler.request.connection.close()
                closed += 1
        return closed


def reload_tokens(tokens: Tokens, load: Any, user_map: Any) -> None:
    """`SIGHUP`: read the tokens file again. A file that cannot be used (unreadable, not private,
    not JSON) changes nothing, said in one line."""
    try:
        table = load()
    except SpecError as e:
        log.error("schedulearn: tokens not reloaded (the old ones stay in force): %s", e)
        return
    before = set(tokens.table.values())
    removed = len(set(tokens.table) - set(table))
    closed = tokens.replace(table)
    users = set(table.values())
    new = f" (new: {', '.join(sorted(users - before))})" if users - before else ""
    log.info("schedulearn: tokens reloaded: users %s%s; %s removed, %s closed",
             ", ".join(sorted(users)) or "none", new, _count(removed, "token"), _count(closed, "connection"))
    if user_map is not None:
        for user, why in refused_users(user_map, users - before):
            log.warning("schedulearn: the jobs of %s will be refused: %s", user, why)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def make_app(manager: Any, tokens: Tokens, base_url: str = "/") -> Any:
    """The tornado application: the extension's handlers behind token authentication."""
    from tornado import web, websocket

    from . import handlers

    class TokenAuth:
        def get_current_user(self) -> str | None:
            header = self.request.headers.get("Authorization", "")
            scheme, _, value = header.partition(" ")
            given = value.strip() if scheme.lower() in ("token", "bearer") else ""
            given = given or self.get_query_argument("token", "")
            if not given:
                return None
            return tokens.user(given, self)

        def get_login_url(self) -> str:
            raise web.HTTPError(403, "token: missing or wrong; send 'Authorization: token <TOKEN>'")

        def _request_summary(self) -> str:  # the access log: no `?token=` in clear
            return f"{self.request.method} {handlers.redact_uri(self.request.uri)} ({self.request.remote_ip})"

    class ServeApi(TokenAuth, handlers.ApiMixin, web.RequestHandler):
        def initialize(self) -> None:
            self.manager = manager

        def user_name(self) -> str:
            return self.current_user

    class ServeEvents(TokenAuth, handlers.EventsMixin, websocket.WebSocketHandler):
        def initialize(self) -> None:
            self.manager = manager

        def user_name(self) -> str:
            return self.current_user

        async def get(self, *args: Any, **kwargs: Any) -> None:
            if not self.current_user:
                raise web.HTTPError(403)
            await super().get(*args, **kwargs)

        def check_origin(self, origin: str) -> bool:
            return True  # authenticated by token, not by cookie: any origin may connect

    def bind(mixin: type) -> type:
        return type(mixin.__name__, (mixin, ServeApi), {})

    prefix = base_url.rstrip("/") + "/" + handlers.API_PREFIX
    bound: list[tuple[str, type]] = [(f"{prefix}/{path}", bind(m)) for path, m in handlers.ROUTES]
    bound.append((f"{prefix}/events", ServeEvents))
    bound.append((r"/.*", bind(handlers.NotFoundHandler)))
    return web.Application(bound, websocket_ping_interval=30, log_function=access_log)


def private_store(store: Any) -> None:
    """A SQLite store file (and its WAL, which SQLite creates with the file's mode) readable by
    the server only: jobs, of whatever account, must not read the queue's specs and env."""
    url = store.url if store is not None else ""
    if not url.startswith("sqlite"):
        return
    from sqlalchemy import make_url

    db = make_url(url).database
    if not db or db == ":memory:":
        return
    for suffix in ("", "-wal", "-shm"):
        try:
            os.chmod(db + suffix, 0o600)
        except FileNotFoundError:
            pass


def refused_users(user_map: Any, users: Any) -> list[tuple[str, str]]:
    """(user, why) for each user of the tokens file whose jobs the user map refuses: not in it,
    no OS account of that name (`same`, or an account removed since), or root."""
    from schedulearn.accounts import NoAccount

    refused = []
    for user in sorted(set(users)):
        if user_map.account_name(user) is None:
            refused.append((user, "not in --user-map"))
            continue
        try:
            user_map.account(user)
        except NoAccount as e:
            refused.append((user, str(e).removeprefix("user_map: ")))
    return refused


def warn_unusable_accounts(manager: Any, settings: Settings, tokens: dict[str, str]) -> None:
    """A warning for each account whose jobs cannot start here (`Executor.account_problem`:
    with the local executor, this Python unreadable by it), said before a user finds out."""
    from schedulearn.accounts import NoAccount

    users_of: dict[Any, list[str]] = {}  # account -> its users (each account checked once)
    for user in sorted(set(tokens.values())):
        try:
            users_of.setdefault(settings.user_map.account(user), []).append(user)
        except NoAccount:
            pass  # said above (`refused_users`)
    for account, users in users_of.items():
        problem = manager.executor.account_problem(account)
        if problem:
            log.warning("schedulearn: the jobs of %s (OS account %s) cannot start: %s; install the "
                        "environment where the accounts can read it (docs/server.md)",
                        ", ".join(users), account.name, problem)


async def serve(settings: Settings, tokens: dict[str, str], host: str, port: int, base_url: str = "/",
                ready: Any = None, stop: asyncio.Event | None = None, reload: Any = None) -> None:
    """Run until `stop` is set (or SIGINT/SIGTERM). `ready(manager, port)` is called once it
    listens, with the port it listens on (port 0: a free one). `reload`: how to read the tokens
    again, on SIGHUP (`--tokens`)."""
    make_job_root(settings.job_root)
    manager = SchedulerService(settings)
    private_store(manager.store)
    manager.start()
    table = Tokens(tokens)
    app = make_app(manager, table, base_url)
    try:
        from tornado.httpserver import HTTPServer
        from tornado.netutil import bind_sockets

        try:
            sockets = bind_sockets(port, host)
        except OSError as e:
            raise SpecError(f"port: cannot listen on {host}:{port} ({e.strerror or e})") from None
        server = HTTPServer(app, max_body_size=64 * 1024 * 1024)
        server.add_sockets(sockets)
        port = sockets[0].getsockname()[1]
    except BaseException:
        await manager.stop()  # gives the store's lease back
        raise
    stop = stop or asyncio.Event()
    lost: list[str] = []  # the store's lease, lost to another scheduler: this server ends
    manager.lease_lost.append(lambda reason: (lost.append(reason), stop.set()))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    if reload is not None:
        try:
            loop.add_signal_handler(signal.SIGHUP, reload_tokens, table, reload, settings.user_map)
        except (NotImplementedError, RuntimeError):
            pass
    n = manager.engine.total_gpus
    log.info("schedulearn: serving %d GPU%s on http://%s:%d%s with the %s executor, %s, store %s",
             n, "" if n == 1 else "s", host, port, base_url, settings.executor, manager.policy_note(),
             manager.store.url if manager.store is not None else "memory")
    if note := manager.no_gpus_note():  # every submission would be refused
        log.warning("schedulearn: %s", note)
    if settings.switches_users:
        log.info("schedulearn: jobs run as their users' OS accounts (%s)", settings.user_map)
        for user, why in refused_users(settings.user_map, tokens.values()):
            log.warning("schedulearn: the jobs of %s will be refused: %s", user, why)
        await asyncio.to_thread(warn_unusable_accounts, manager, settings, tokens)
    if settings.admins is not None:
        log.info("schedulearn: the policy may be switched by %s", ", ".join(settings.admins) or "nobody")
    if ready is not None:
        ready(manager, port)
    try:
        await stop.wait()
    finally:
        server.stop()
        await manager.stop()
    if lost:
        raise LeaseLost(lost[0])


class LeaseLost(Exception):
    """The store's lease went to another scheduler while this server ran (`serve` exits 1)."""


def run_from_args(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    for name in ("alembic.runtime.plugins", "alembic.runtime.migration"):  # a line per plugin at import;
        logging.getLogger(name).setLevel(logging.WARNING)  # per revision (the store logs one line)
    try:
        tokens = load_tokens(args)
        exposed = secrets_in_arguments(args)
        if exposed and args.tokens is not None:
            raise SpecError(exposed[0])
        for line in exposed:
            log.warning("schedulearn: %s", line)
        generated = None
        if not tokens:
            generated = secrets.token_hex(24)
            tokens[generated] = args.user or default_user()
        settings = settings_from_args(args)
        settings.validate()
    except SpecError as e:
        print(f"schedulearn serve: {e}", file=sys.stderr)
        return 2
    shown = "localhost" if args.host in ("0.0.0.0", "::", "") else args.host

    def ready(manager: Any, port: int) -> None:  # listening, with the store's lease: say where
        print(f"schedulearn: API at http://{shown}:{port}{args.base_url.rstrip('/')}/schedulearn/api/",
              file=sys.stderr, flush=True)
        if generated:
            print(f"schedulearn: token {generated}  (export SCHEDULEARN_TOKEN={generated})", file=sys.stderr,
                  flush=True)

    from schedulearn.store import StoreError

    try:
        reload = (lambda: load_tokens(args)) if args.tokens is not None else None
        asyncio.run(serve(settings, tokens, args.host, args.port, args.base_url, ready=ready, reload=reload))
    except LeaseLost as e:
        print(f"schedulearn serve: {e}", file=sys.stderr)
        return 1
    except (SpecError, StoreError) as e:
        print(f"schedulearn serve: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # (a port that cannot be listened on is a SpecError naming it)
        print(f"schedulearn serve: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""),
              file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="schedulearn serve", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
