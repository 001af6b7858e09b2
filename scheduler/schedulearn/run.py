"""Run a Python program as a job, then end it cleanly: `python -m schedulearn.run script.py [args]`
(or `python -m schedulearn.run -m package.module [args]`).

The program runs as `__main__` exactly as `python script.py args` would run it (`sys.argv`, the
script's folder first on `sys.path`). Whatever its outcome, the runner then

1. destroys the `torch.distributed` process group if the program left one initialised, and
   shuts Horovod down if it was initialised: a gloo/NCCL process group still alive when the
   interpreter finalises has C++ threads that are destroyed while joinable, and the rank dies
   with `terminate called without an active exception` (SIGABRT) after its last line, so a
   finished job was reported failed at random;
2. flushes stdout and stderr;
3. after the program's own exit handlers, releases what the program's namespace holds
   (`release_program`): `multiprocessing`, which torch imports, keeps the `__main__` module of
   its first import alive as `__mp_main__` — the program's — so a DDP model (and through it the
   gloo process group, after `destroy_process_group()` too) lived on into the interpreter's
   finalisation and died there, SIGABRT as above, about one job in 30 on a loaded machine;
4. exits with the program's status: 0, the code of a `SystemExit` (`sys.exit(3)` -> 3, a message
   -> printed, 1), or 1 after printing an exception's traceback once (130 for Ctrl-C).

The launchers (`schedulearn.executors.launch`) run every Python script of a job through it —
the `python`, `torchrun` and `horovod` launchers alike — and the magics' cell runner embeds this
very file (see `schedulearn_magics.bundle`), so that a notebook cell ends the same way.

It also holds what a job needs to hand back a result the server will trust: `write_result`
writes `result.pkl` with an HMAC over its bytes, keyed by the per-job key the executor gives the
job in `$SCHEDULEARN_RESULT_KEY` (see `schedulearn.results`).

Standard library only, Python 3.8+ syntax, no import of the `schedulearn` package: the Docker
executor copies this file into the job's directory and runs it with the image's Python.
"""

from __future__ import annotations

import os
import sys
from typing import Any

#: The environment variable holding the job's result key (set by the executor).
RESULT_KEY_ENV = "SCHEDULEARN_RESULT_KEY"
#: The result's file name in the job directory, and the suffix of its MAC beside it.
RESULT_FILE = "result.pkl"
MAC_SUFFIX = ".hmac"

USAGE = ("usage: python -m schedulearn.run SCRIPT.py [ARGS...] | -m MODULE [ARGS...] | "
         "--torchrun TORCHRUN-ARGS...")
TORCHRUN = "--torchrun"  # the launcher's agent: `torch.distributed.run`, quiet when stopped


# --- results --------------------------------------------------------------------------------
def result_mac(key: str, data: bytes) -> str:
    """The hex HMAC-SHA256 of a result's bytes under the job's result key."""
    mac = result_hasher(key)
    mac.update(data)
    return mac.hexdigest()


def result_hasher(key: str) -> Any:
    """`result_mac` fed a block at a time (`update`, then `hexdigest`)."""
    import hashlib
    import hmac

    return hmac.new(key.encode("ascii"), digestmod=hashlib.sha256)


def write_result(data: bytes, path: str, key: str | None = None) -> None:
    """Write `data` to `path` and its MAC to `path + MAC_SUFFIX` (each atomically).

    `key` defaults to `$SCHEDULEARN_RESULT_KEY`; without one (a program started by hand) the
    result is written unsigned, and the server will not hand it out."""
    key = os.environ.get(RESULT_KEY_ENV) if key is None else key
    _write_atomic(path, data)
    if key:
        _write_atomic(path + MAC_SUFFIX, result_mac(key, data).encode("ascii"))
    else:
        try:
            os.unlink(path + MAC_SUFFIX)
        except FileNotFoundError:
            pass


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


# --- rank prefixes --------------------------------------------------------------------------
#: Set to 0 in a job's `env` to keep its ranks' lines unprefixed.
RANK_PREFIX_ENV = "SCHEDULEARN_RANK_PREFIX"


class RankPrefixed:
    """A text stream that starts each line with `[rankN]: ` and hands only whole lines to the
    file, one write each (a partial line waits for its end or a `flush()`): the ranks of a job
    share one log, and their output cut each other's lines (`...loss 11.0901rank 1/2 step 0...`)."""

    schedulearn_rank_prefix = True  # (the cell bundle embeds its own copy of this class)

    def __init__(self, stream, prefix: str):
        self._stream = stream
        self._prefix = prefix
        self._pending = ""  # the start of a line not ended yet
        self._at_line_start = True  # (false after a flushed partial line)

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in text:
            lines, _, self._pending = self._pending.rpartition("\n")
            self._emit(lines + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._emit(self._pending)
            self._pending = ""
        self._stream.flush()

    def _emit(self, text: str) -> None:
        out = []
        pieces = text.split("\n")
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            if last and not piece:
                break
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece if last else piece + "\n")
            self._at_line_start = not last
        self._stream.write("".join(out))
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def prefix_ranks() -> None:
    """Prefix stdout and stderr with the rank in a multi-process torch job (`WORLD_SIZE` > 1),
    unless `SCHEDULEARN_RANK_PREFIX=0`; Horovod's launcher prefixes its ranks' lines itself."""
    world, rank = os.environ.get("WORLD_SIZE", ""), os.environ.get("RANK", "")
    if (not world.isdigit() or int(world) < 2 or not rank.isdigit() or "HOROVOD_RANK" in os.environ
            or os.environ.get(RANK_PREFIX_ENV, "1") == "0"):
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not getattr(stream, "schedulearn_rank_prefix", False):
            setattr(sys, name, RankPrefixed(stream, f"[rank{rank}]: "))


# --- ending cleanly -------------------------------------------------------------------------
#: Seconds a rank that finished waits at exit for the other ranks to finish (see `_wait_for_ranks`).
EXIT_WAIT_ENV = "SCHEDULEARN_EXIT_WAIT"
EXIT_WAIT_DEFAULT = 300.0
_EXIT_KEY = "schedulearn/ranks-finished"


def shutdown_distributed(status: int = 0) -> None:
    """Destroy the torch process group and shut Horovod down, where the program left them
    initialised. Imports nothing the program did not import itself; never raises.

    A rank that finished well (or was stopped at a step boundary with its peers, `STOPPED`) first
    waits until every rank has finished (`_wait_for_ranks`):
    destroying a gloo group closes its sockets, and a peer still inside its last collective then
    failed with `Read error ... Connection reset by peer` (1 job in 30 on a loaded machine).
    A rank that failed does not wait: its peers may be inside a collective that waits for it, and
    closing its connections ends that collective (torchrun stops the others as it exits), where
    waiting held the whole job for `$SCHEDULEARN_EXIT_WAIT` seconds."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                if status in TOGETHER:  # ended with its peers: wait for them
                    _wait_for_ranks(dist)
                _unwrapped(dist.destroy_process_group)()  # torch's own: waited above, or failing
        except Exception as e:  # noqa: BLE001 - a broken group must not change the status
            _warn(f"destroying the torch process group failed: {type(e).__name__}: {e}")
    for name in ("horovod.torch", "horovod.tensorflow", "horovod.keras", "horovod.mxnet"):
        hvd = sys.modules.get(name)
        if hvd is None:
            continue
        try:
            if hvd.is_initialized():
                hvd.shutdown()
        except Exception as e:  # noqa: BLE001
            _warn(f"shutting {name} down failed: {type(e).__name__}: {e}")


def _wait_for_ranks(dist) -> None:
    """Check in at the group's key-value store (the rendezvous store, not the gloo/NCCL
    sockets) and wait until every rank has: then no peer is still inside a collective when this
    rank closes its connections. A rank that failed does not check in (torchrun then stops the
    others); the wait ends after `$SCHEDULEARN_EXIT_WAIT` seconds (300) or at a store error
    (the store's host has gone: the others are past the wait)."""
    import time

    world = dist.get_world_size()
    if world < 2:
        return
    try:
        limit = float(os.environ.get(EXIT_WAIT_ENV, EXIT_WAIT_DEFAULT))
    except ValueError:
        limit = EXIT_WAIT_DEFAULT
    try:
        store = dist.distributed_c10d._get_default_store()
        done = store.add(_EXIT_KEY, 1)
        start = time.monotonic()
        said = False
        while done < world and time.monotonic() - start < limit:
            if not said and time.monotonic() - start > 10:
                _warn(f"rank {dist.get_rank()} finished; waiting for {world - done} other rank(s)")
                said = True
            time.sleep(0.02)
            done = store.add(_EXIT_KEY, 0)
    except Exception:  # noqa: BLE001 - no store, or its host left: nothing left to wait for
        pass


def _failing() -> bool:
    """Whether the program is failing: an exception on its way out (in a `finally:` or an
    `except:`), other than an exit with status 0 or `STOPPED`."""
    exc = sys.exc_info()[1]
    if isinstance(exc, SystemExit):
        return (exc.code or 0) not in TOGETHER
    return exc is not None


#: The mark of `_wait_before_destroy`'s wrapper.
_WAITS = "schedulearn_waits_for_ranks"


def _unwrapped(destroy):
    """`destroy` without the runner's waiting wrapper (a cell's embedded runner runs inside the
    launcher's, and either may have wrapped torch's function)."""
    while getattr(destroy, _WAITS, False):
        destroy = destroy.__wrapped__
    return destroy


def _wait_before_destroy(dist) -> None:
    """Make the program's own `destroy_process_group()` of the default group wait for the other
    ranks first (`_wait_for_ranks`), as `shutdown_distributed` does: programs that end with it
    (DDP examples do) died at random the same way, SIGABRT or `Read error`, when one rank tore its
    connections down while another was still in its last collective. Not while the program is
    failing (`_failing`: in a `finally:` or `except:` on its way out), as for a failed rank at exit."""
    original = dist.destroy_process_group
    if getattr(original, _WAITS, False):  # a runner around this one (a cell's job) wrapped it
        return

    def destroy_process_group(group=None, *args, **kwargs):
        try:
            if group is None and not _failing() and dist.is_initialized():
                _wait_for_ranks(dist)
        except Exception:  # noqa: BLE001 - never in the way of the program's own call
            pass
        return original(group, *args, **kwargs)

    destroy_process_group.__wrapped__ = original
    destroy_process_group.__doc__ = original.__doc__
    setattr(destroy_process_group, _WAITS, True)
    for module in (dist, getattr(dist, "distributed_c10d", None)):
        if module is not None and getattr(module, "destroy_process_group", None) is original:
            module.destroy_process_group = destroy_process_group


#: Seconds a rank other than 0 waits for rank 0's store to listen before `init_process_group`
#: (see `_connect_when_listening`), and how often it looks.
MASTER_WAIT_S = 30.0
MASTER_POLL_S = 0.01


def _connect_when_listening(dist) -> None:
    """Make `init_process_group` of a rank other than 0, rendezvousing through `env://`, wait
    until rank 0's store listens at `MASTER_ADDR:MASTER_PORT` (a plain TCP connect, tried every
    `MASTER_POLL_S`) before torch's own client connects: torch's client, when it tries before
    rank 0 has started its store, backs off and retries after 0.3-0.7 s (measured, torch 2.13,
    gloo, two ranks starting together), which every start of a multi-rank job paid — and every
    resize in place, whose workers all start at once. Up to `MASTER_WAIT_S`, then torch's own
    connect (with its timeout and error) takes over."""
    original = dist.init_process_group

    def init_process_group(*args, **kwargs):
        try:
            if _env_rendezvous(args, kwargs):
                _wait_for_master(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        except Exception:  # noqa: BLE001 - never in the way of the program's own call
            pass
        return original(*args, **kwargs)

    init_process_group.__wrapped__ = original
    init_process_group.__doc__ = original.__doc__
    for module in (dist, getattr(dist, "distributed_c10d", None)):
        if module is not None and getattr(module, "init_process_group", None) is original:
            module.init_process_group = init_process_group


def _env_rendezvous(args: tuple, kwargs: dict) -> bool:
    """Whether this `init_process_group(...)` call connects to rank 0's store through `env://`
    as a rank other than 0."""
    def arg(name: str, i: int, default=None):  # (backend, init_method, timeout, world_size, rank, store)
        return kwargs.get(name, args[i] if len(args) > i else default)

    init_method = arg("init_method", 1)
    if arg("store", 5) is not None or init_method not in (None, "env://"):
        return False
    rank = arg("rank", 4, -1)
    rank = int(os.environ.get("RANK", "0")) if rank in (None, -1) else int(rank)
    return rank != 0 and bool(os.environ.get("MASTER_ADDR")) and os.environ.get("MASTER_PORT", "").isdigit()


def _wait_for_master(host: str, port: int) -> None:
    import socket
    import time

    deadline = time.monotonic() + MASTER_WAIT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return
        except socket.gaierror:  # a name that does not resolve: torch says so
            return
        except OSError:
            time.sleep(MASTER_POLL_S)


class _AfterImport:
    """A meta-path finder that calls `then(module)` once `name` has been imported by the program
    (the runner itself imports nothing it does not need)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        import importlib.util

        sys.meta_path.remove(self)  # once, and not while finding the real spec
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            try:
                self.then(module)
            except Exception as e:  # noqa: BLE001
                _warn(f"preparing {fullname} failed: {type(e).__name__}: {e}")

        loader.exec_module = exec_module
        return spec


def after_import(name: str, then) -> None:
    """Call `then(module)` when the program imports `name` (at once if it already has)."""
    if name in sys.modules:
        then(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))


def _prepare_distributed(dist) -> None:
    _wait_before_destroy(dist)
    _connect_when_listening(dist)


def flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream
            pass


def status_of(exc: BaseException | None) -> int:
    """The exit status of a program that ended with `exc` (None: it returned); prints what
    Python would print (a traceback once, or a SystemExit's message)."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    _print_traceback(exc)
    return 130 if isinstance(exc, KeyboardInterrupt) else 1


#: The status of a program stopped by the scheduler at a step boundary (`schedulearn.elastic`'s
#: `EXIT_CHECKPOINTED`: 128 + SIGTERM, as a process ended by SIGTERM).
STOPPED = 143
#: The statuses of a rank that ended together with its peers (finished, or stopped): it waits for
#: them before it closes its connections (`shutdown_distributed`).
TOGETHER = (0, STOPPED)


def finish(status: int):  # NoReturn
    """Clean up, flush and end the process with `status` (what every outcome goes through).

    A program the scheduler stopped (`STOPPED`: a resize or a preemption waits for it to end)
    freezes the garbage collector's heap first: the interpreter's teardown then skips the
    collections over everything torch allocated at import (0.46 s -> 0.13 s with torch loaded,
    measured; gc.freeze is the standard library's tool for this). Modules are still cleared,
    files closed, atexit handlers run; only objects in reference cycles are not collected at
    exit, which the interpreter never promises to do."""
    shutdown_distributed(status)
    flush()
    if status == STOPPED:
        import gc

        gc.freeze()
    raise SystemExit(status)


#: namespaces `release_program` releases besides runpy's module (`release_at_exit`)
_RELEASE: list = []


def release_at_exit(namespace: dict) -> None:
    """Have `release_program` release `namespace` too: the globals of a program that runs in
    its script's own `__main__` rather than in runpy's module (the magics' cell does)."""
    _RELEASE.append(namespace)


def release_program() -> None:
    """Release what the program's namespace holds and collect it, so that it is destroyed now,
    while the interpreter is whole, not in its finalisation — a DDP model holds its process
    group after `destroy_process_group()` too, and a gloo group destroyed in the finalisation
    aborted about one job in 30. The namespace is runpy's module for the program, which
    `multiprocessing` (torch imports it) keeps in `sys.modules` as `__mp_main__` when the
    program first imported it, and those given to `release_at_exit`; its names are deleted, the
    dunder ones kept (as the interpreter's own teardown keeps `__builtins__` to the last).
    Registered with `atexit` before the program runs, so it runs after the program's exit
    handlers (and `multiprocessing`'s), which may still use the globals. Never raises."""
    import gc

    try:
        main = sys.modules.get("__main__")
        spaces = list(_RELEASE)
        for name, module in list(sys.modules.items()):
            if module is not main and getattr(module, "__name__", None) == "__main__":
                sys.modules[name] = main  # what multiprocessing would have found in the first place
                spaces.append(vars(module))
        for space in spaces:
            for key in [k for k in space if not (k.startswith("__") and k.endswith("__"))]:
                space.pop(key, None)
        if not gc.get_freeze_count():  # a stopped program froze the heap: no collection then
            gc.collect()
    except Exception as e:  # noqa: BLE001 - at exit: nothing to do about it but say so
        _warn(f"releasing the program at exit failed: {type(e).__name__}: {e}")


def call(fn, *args, **kwargs):  # NoReturn
    """Run `fn(*args, **kwargs)` as a program: whatever happens, `finish` with its status."""
    import atexit

    atexit.register(release_program)  # before the program's: runs after them
    prefix_ranks()
    after_import("torch.distributed", _prepare_distributed)
    try:
        fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - every outcome maps to a status
        status = status_of(e)
    else:
        status = 0
    finish(status)


def _print_traceback(exc: BaseException) -> None:
    """The traceback without this runner's and runpy's frames (as `python script.py` shows it)."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_globals is globals()
                              or tb.tb_frame.f_globals.get("__name__") == "runpy"):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


def _warn(text: str) -> None:
    try:
        sys.stderr.write(f"schedulearn.run: {text}\n")
    except Exception:  # noqa: BLE001
        pass


# --- the command ----------------------------------------------------------------------------
def run_program(argv: list[str]) -> None:
    """Run `SCRIPT args` or `-m MODULE args` as `__main__` (raises what the program raises)."""
    import runpy

    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit(USAGE)
        sys.argv = [argv[1], *argv[2:]]  # runpy sets argv[0] to the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.exists(script):  # as `python missing.py` says it
        print(f"{sys.executable}: can't open file {os.path.abspath(script)!r}: "
              "[Errno 2] No such file or directory", file=sys.stderr)
        raise SystemExit(2)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def torchrun(argv: list[str]):  # NoReturn
    """`torch.distributed.run` with `argv` — the torchrun launcher's agent — ending quietly
    with 128 + N when signal N stops it (the job cancelled, preempted or resized): torchrun
    stops its workers, then raises `SignalException`, whose 25-line traceback each cancel and
    each resize of a torchrun job wrote into its log, and exits 1. `sys.path` as under `python -m
    torch.distributed.run`: the working directory first, not this file's folder (whose modules,
    `schedulearn`'s own, would shadow others of the same name)."""
    sys.path[0] = os.getcwd()
    from torch.distributed import run
    from torch.distributed.elastic.multiprocessing.api import SignalException

    try:
        run.main(argv)
    except SignalException as e:
        raise SystemExit(128 + int(e.sigval)) from None
    raise SystemExit(0)


def main(argv: list[str] | None = None):  # NoReturn
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [TORCHRUN]:
        torchrun(argv[1:])
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(2 if not argv else 0)
    call(run_program, argv)


if __name__ == "__main__":
    main()
