"""Pre-warmed workers for jobs resized in place: a fork server per job, and its client.

A worker that a resize in place adds (Horovod Elastic, see docs/resize.md) starts while the
job's surviving workers wait for it at Horovod's rendezvous — and under torchrun's elastic agents
every worker of the new round starts so — so its cold start is the pause:
the interpreter, `import torch` and `horovod.torch`, and the `torch._dynamo` import that the
first `torch.optim` optimiser triggers — about 2 s on a 2-core host. This module takes that
out of the pause:

* `python -u prewarm.py serve JOB_DIR [MODULES]` — the fork server (one per run, started beside
  `horovodrun` by the launch, see `schedulearn.executors.launch`, or by the supervisor of
  torchrun's agents, `schedulearn.executors.torchrun_elastic`): it imports the modules named
  in `$SCHEDULEARN_PREWARM` (comma-separated; default MODULES, else `PRELOAD`; `0` or empty:
  none, no server) — imports only: a preload that initialised torch.distributed leaves no
  server —, then listens on `JOB_DIR/prewarm.sock` (mode 0600, peers of another uid refused).
  It exits when its parent (`horovodrun`, the supervisor) is gone, after SIGTERM to the
  workers it forked.
* `python -I -S prewarm.py fork COMMAND...` — the client, what each worker's slot wrapper
  execs instead of `COMMAND`. It hands the server its stdin/stdout/stderr (SCM_RIGHTS), its
  argv, its whole environment, cwd and umask; the server forks a worker that takes exactly
  those and runs the Python program as `python [-u] SCRIPT args` (or `-m MODULE`) would, with
  the preloaded modules already imported. The client stays as the worker's stand-in: its pid
  is the one Horovod (or the torchrun agent) started and the slot wrapper recorded, it forwards
  SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the worker, appends the worker's pid
  to the slot's `workers/<slot>` file (`$SCHEDULEARN_SLOT`, which it takes out of the
  environment, else `$HOROVOD_LOCAL_RANK`), and ends as the worker ended (its exit code, or the same
  signal). The worker dies with its client (the server kills it when the client's connection
  closes) and with the server (`PR_SET_PDEATHSIG`).

Whenever the server cannot run the command exactly as an exec would — no server (not started,
still importing, gone), a command that is not this interpreter running a script or module, an
environment that differs from the server's in anything but the per-worker variables
(`HOROVOD_*`, `NCCL_*` — read when Horovod and NCCL start, not at import —,
`CUDA_VISIBLE_DEVICES`, what torchrun's elastic agent sets per worker (`TORCHRUN_NAMES`: `RANK`,
`WORLD_SIZE`, `MASTER_PORT`, `TORCHELASTIC_RESTART_COUNT`... — read by `init_process_group`,
not at import; not `OMP_NUM_THREADS`, which torch takes at import) and the shell's `PWD`,
`OLDPWD`, `SHLVL`, `_`) — the client
execs the command itself: a plain cold start, as without this module. What the preloaded
imports themselves set in `os.environ` (torch sets `TORCHINDUCTOR_CACHE_DIR`) is set in each
worker too, as those imports would in a cold start.

What differs from a cold start, by design: the preloaded modules are imported once, with the
job's environment as the run started (a program that sets, say, `OMP_NUM_THREADS` in
`os.environ` before its own `import torch` changes nothing for those modules); the worker runs
in a session of its own whose parent is the server (not the client); Python's hash seed is the
server's. `random` and NumPy's global generator are reseeded in every worker.

Standard library only; run by its path, never imported by the job.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys

#: The server's socket, in the job directory.
SOCKET_NAME = "prewarm.sock"
#: The modules the server imports unless `$SCHEDULEARN_PREWARM` names others.
PRELOAD = "torch,torch._dynamo,horovod.torch,schedulearn.elastic"
PRELOAD_ENV = "SCHEDULEARN_PREWARM"
#: Variables allowed to differ between the server's environment and a worker's.
PER_WORKER_PREFIXES = ("HOROVOD_", "NCCL_")
#: what torch's elastic agent (torch 2.13, `LocalElasticAgent._start_workers`, its launcher and
#: `start_processes`) sets for each worker it starts — read when the worker calls
#: `init_process_group` or reports an error, not at import. `OMP_NUM_THREADS` is not among them:
#: the agent only passes its own on, and torch's thread pool takes it at import, which a fork
#: cannot redo.
TORCHRUN_NAMES = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "TORCHELASTIC_TIMER_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING"})
PER_WORKER_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "PWD", "OLDPWD", "SHLVL", "_"}) | TORCHRUN_NAMES
#: the slot whose `workers/<slot>` file the client appends its worker's pid to (torchrun's
#: agents, `executors/torchrun_elastic.py`; Horovod's workers: `HOROVOD_LOCAL_RANK`). The
#: client takes it out of the environment: the worker never sees it, forked or exec'd.
SLOT_ENV = "SCHEDULEARN_SLOT"
#: Signals the client passes on to its worker.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_HEADER = struct.Struct("!I")
#: A worker's status when the scheduler stopped it at a step boundary (`schedulearn.elastic`'s
#: `EXIT_CHECKPOINTED`, 128 + SIGTERM): it ends at once (`_end_stopped`).
STOPPED = 143


# --- the client ----------------------------------------------------------------------------
def client(argv: list[str]) -> None:  # NoReturn
    """Run `argv` in a worker forked by the job's server, else exec it."""
    import json

    job_dir = os.environ.get("SCHEDULEARN_JOB_DIR")
    slot = os.environ.pop(SLOT_ENV, None) or os.environ.get("HOROVOD_LOCAL_RANK")
    # a signal that comes before the worker's pid is known waits for it (or for the exec)
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    sock = _connect(job_dir) if job_dir and argv else None
    if sock is None:
        _exec(argv)
    try:
        req = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
                          "umask": _umask()}).encode()
        socket.send_fds(sock, [_HEADER.pack(len(req))], [0, 1, 2])
        sock.sendall(req)
        reply = _recv_line(sock)
    except OSError:
        reply = b""
    if not reply.startswith(b"ok "):
        sock.close()  # refused (the server said why on stderr) or gone: a cold start
        _exec(argv)
    pid = int(reply.split()[1])
    for sig in FORWARDED:
        signal.signal(sig, lambda s, _f, pid=pid: _kill(pid, s))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    _record(job_dir, slot, pid)
    try:
        status = _recv_line(sock)
    except OSError:
        status = b""
    _end_as(int(status.split()[1]) if status.startswith(b"exit ") else None, pid)


def _connect(job_dir: str) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(_sock_path(job_dir))
        return s
    except OSError:
        s.close()
        return None


def _sock_path(job_dir: str) -> str:
    """The socket's path, through /proc/self/cwd-free means: a job directory may be deeper than
    an AF_UNIX address holds (108 bytes), then the path goes through /proc/self/fd."""
    path = os.path.join(job_dir, SOCKET_NAME)
    if len(path.encode()) < 100:
        return path
    fd = os.open(job_dir, os.O_RDONLY | os.O_DIRECTORY)
    _keep.append(fd)
    return f"/proc/self/fd/{fd}/{SOCKET_NAME}"


_keep: list[int] = []


def _exec(argv: list[str]) -> None:  # NoReturn
    for fd in _keep:
        os.close(fd)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # what came meanwhile is delivered now
    if not argv:
        print("usage: prewarm.py fork COMMAND [ARGS...]", file=sys.stderr)
        os._exit(2)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:  # as /bin/sh's exec would say it
        print(f"{argv[0]}: {e.strerror}", file=sys.stderr)
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _recv_line(sock: socket.socket) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            break
        buf += chunk
    return buf


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _record(job_dir: str, rank: str | None, pid: int) -> None:
    """Append the worker's pid to its slot's file (the shrink waits for every pid there)."""
    if rank is None or not rank.isdigit():
        return
    try:
        fd = os.open(os.path.join(job_dir, "workers", rank), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)


def _end_as(status: int | None, pid: int) -> None:  # NoReturn
    """Exit as the worker did (`status`: a wait status); unknown (the server died): kill it."""
    if status is None:
        _kill(pid, signal.SIGKILL)
        os._exit(255)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
        signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255)


# --- the server ----------------------------------------------------------------------------
class _Request:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, umask: int, fds: list[int]):
        self.argv, self.env, self.cwd, self.umask, self.fds = argv, env, cwd, umask, fds
        self.import_env: dict[str, str | None] = {}  # what the preload changed in the environment


def serve(job_dir: str, preload: str = PRELOAD) -> _Request | None:
    """The server's loop; returns (in a forked worker only) the request that worker runs.
    `preload`: the modules to import unless `$SCHEDULEARN_PREWARM` names others."""
    import gc
    import selectors
    import time

    names = [m.strip() for m in os.environ.get(PRELOAD_ENV, preload).split(",") if m.strip() not in ("", "0")]
    if not names:
        return None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # the run's stop reaches horovodrun; we follow it
    parent = os.getppid()
    base_env = dict(os.environ)
    base_path = sys.path[1:]  # without this file's folder
    sys.path[:] = base_path
    t0 = time.monotonic()
    import importlib

    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - a module the job does not have is no error
            failed.append(f"{name} ({type(e).__name__}: {e})")
    # what the imports did to the environment (torch sets TORCHINDUCTOR_CACHE_DIR): done again
    # in every worker, as the same imports would in a cold start
    import_env = {k: os.environ.get(k) for k in set(os.environ) | set(base_env)
                  if os.environ.get(k) != base_env.get(k)}
    if failed:
        print(f"schedulearn prewarm: not preloaded: {'; '.join(failed)}", file=sys.stderr, flush=True)
    if _distributed_started():  # a fork would share its sockets and threads: no server
        print("schedulearn prewarm: not serving: a preloaded module initialised torch.distributed",
              file=sys.stderr, flush=True)
        return None
    if os.getppid() != parent:
        return None
    path = os.path.join(job_dir, SOCKET_NAME)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o077)
    try:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        listener.bind(_sock_path(job_dir))
    finally:
        os.umask(old_mask)
        for fd in _keep:
            os.close(fd)
        _keep.clear()
    listener.listen(16)
    print(f"schedulearn prewarm: ready, {len(names) - len(failed)} modules preloaded in "
          f"{time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)

    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    children: dict[int, tuple[int, socket.socket]] = {}  # pid -> (pidfd, client connection)
    server = os.getpid()
    try:
        while os.getppid() == parent:
            for key, _ in sel.select(timeout=0.2):
                what = key.data
                if what == "accept":
                    try:
                        conn, _addr = listener.accept()
                    except OSError:
                        continue
                    req = _read_request(conn, base_env)
                    if req is None:
                        conn.close()
                        continue
                    gc.freeze()  # the worker's collections (and its exit) skip what is preloaded
                    pid = os.fork()
                    if pid == 0:  # the worker: drop the server's state, run the request
                        sel.close()
                        listener.close()
                        for fd, c in children.values():
                            os.close(fd)
                            c.close()
                        conn.close()
                        req.import_env = import_env
                        return req
                    for fd in req.fds:
                        os.close(fd)
                    pidfd = os.pidfd_open(pid)
                    children[pid] = (pidfd, conn)
                    sel.register(pidfd, selectors.EVENT_READ, ("exit", pid))
                    sel.register(conn, selectors.EVENT_READ, ("client", pid))
                    _send(conn, f"ok {pid}\n")
                elif what[0] == "exit":
                    pid = what[1]
                    _, status = os.waitpid(pid, 0)
                    pidfd, conn = children.pop(pid)
                    sel.unregister(pidfd)
                    os.close(pidfd)
                    if _registered(sel, conn):
                        sel.unregister(conn)
                    _send(conn, f"exit {status}\n")
                    conn.close()
                elif not _client_alive(key.fileobj):  # its client is gone: so is the worker
                    _kill(what[1], signal.SIGKILL)
                    sel.unregister(key.fileobj)
    finally:
        if os.getpid() == server:  # not in a worker leaving the loop
            _leave(path, children)
    return None


def _distributed_started() -> bool:
    """Whether torch.distributed has a process group here (the preload may import it, never
    initialise it: each forked worker initialises its own)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:  # noqa: BLE001 - a torch without the call: nothing was initialised by us
        return False


def _leave(path: str, children: dict) -> None:
    """The server's end: its socket removed, its workers sent SIGTERM (5 s to go)."""
    import time

    try:
        os.unlink(path)
    except OSError:
        pass
    for pid in children:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while children and time.monotonic() < deadline:
        for pid in list(children):
            if os.waitpid(pid, os.WNOHANG)[0]:
                children.pop(pid)
        time.sleep(0.05)


def _send(conn: socket.socket, text: str) -> None:
    try:
        conn.sendall(text.encode())
    except OSError:
        pass


def _client_alive(conn: socket.socket) -> bool:
    """A client sends nothing after its request: readable means closed (what it might send
    is read and dropped)."""
    try:
        return conn.recv(4096, socket.MSG_DONTWAIT) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def _registered(sel, fileobj) -> bool:
    try:
        sel.get_key(fileobj)
        return True
    except KeyError:
        return False


def _read_request(conn: socket.socket, base_env: dict[str, str]) -> _Request | None:
    """The client's request, or None (said on stderr, the client then execs) where the worker
    would not be what an exec of the command gives."""
    import json

    fds: list[int] = []
    try:
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        if uid != os.geteuid():
            return None
        conn.settimeout(5)
        head, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
        if len(head) != _HEADER.size or len(fds) != 3:
            raise ValueError("bad header")
        (n,) = _HEADER.unpack(head)
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ValueError("short request")
            data += chunk
        conn.settimeout(None)
        msg = json.loads(data)
        req = _Request(list(msg["argv"]), dict(msg["env"]), str(msg["cwd"]), int(msg["umask"]), fds)
    except (OSError, ValueError, KeyError, TypeError) as e:
        for fd in fds:
            os.close(fd)
        print(f"schedulearn prewarm: bad request: {e}", file=sys.stderr, flush=True)
        return None
    why = _refusal(req, base_env)
    if why:
        print(f"schedulearn prewarm: cold start for {req.argv[:3]}: {why}", file=sys.stderr, flush=True)
        _send(conn, "no\n")
        for fd in fds:
            os.close(fd)
        return None
    return req


def _refusal(req: _Request, base_env: dict[str, str]) -> str | None:
    """Why the request cannot be served by a fork of this server (None: it can)."""
    import shutil

    if not req.argv:
        return "no command"
    exe = req.argv[0] if os.sep in req.argv[0] else shutil.which(req.argv[0], path=req.env.get("PATH", ""))
    if exe is None or os.path.abspath(exe) != os.path.abspath(sys.executable):
        return f"{req.argv[0]!r} is not this server's Python ({sys.executable})"
    try:
        _target(req.argv)
    except ValueError as e:
        return str(e)
    changed = {k for k in set(req.env) | set(base_env) if req.env.get(k) != base_env.get(k)}
    differ = sorted(k for k in changed if not (k.startswith(PER_WORKER_PREFIXES) or k in PER_WORKER_NAMES))
    if differ:
        return f"its environment differs from the server's in {', '.join(differ)}"
    return None


def _target(argv: list[str]) -> tuple[str, str, list[str]]:
    """`python [-u] SCRIPT args` -> ('script', SCRIPT, args); `python [-u] -m MOD args` ->
    ('module', MOD, args). Anything else raises ValueError."""
    i = 1
    while i < len(argv) and argv[i] == "-u":
        i += 1
    if i < len(argv) and argv[i] == "-m" and i + 1 < len(argv):
        return "module", argv[i + 1], argv[i + 2:]
    if i < len(argv) and not argv[i].startswith("-"):
        return "script", argv[i], argv[i + 1:]
    raise ValueError(f"only `python [-u] SCRIPT` or `-m MODULE` is forked, not {argv[1:3]}")


def _become(req: _Request) -> None:
    """In the forked worker: take the client's stdio, environment, cwd and umask, run the
    program as `python` would (raises what it raises; SystemExit ends the interpreter)."""
    import ctypes
    import runpy

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    parent = os.getppid()
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(req.fds):
        os.dup2(fd, target)
    for fd in req.fds:
        if fd > 2:
            os.close(fd)
    os.chdir(req.cwd)
    os.umask(req.umask)
    os.environ.clear()
    os.environ.update(req.env)
    for k, v in req.import_env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if parent == 1:
        os._exit(255)
    rng = sys.modules.get("numpy.random")
    if rng is not None:
        try:
            rng.seed()  # the global generator is the server's otherwise (`random` reseeds itself)
        except Exception:  # noqa: BLE001
            pass
    kind, name, args = _target(req.argv)
    if kind == "module":
        sys.argv = [name, *args]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [name, *args]
        sys.path.insert(0, os.path.dirname(os.path.realpath(name)))
        runpy.run_path(name, run_name="__main__")


def _end_stopped(status: int) -> None:  # NoReturn
    """End a forked worker the scheduler stopped as `multiprocessing` ends the children it
    forks: without the interpreter's teardown, which in a forked child writes to every page it
    shares with the server (each object's reference count, as modules are cleared) and took
    0.23 s of every resize in place (measured, torch loaded, 2 cores). What a teardown does
    that a program can rely on is done first: non-daemon threads are joined, atexit handlers
    run, stdout and stderr flushed. Files a program left open (not closed, no `with`) are not
    flushed for it — as a process ended by the SIGTERM this stop stands for would not flush them."""
    import atexit

    threading = sys.modules.get("threading")
    if threading is not None:
        for t in threading.enumerate():
            if t is not threading.main_thread() and not t.daemon:
                t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream
            pass
    os._exit(status)


def main(argv: list[str]) -> None:
    if len(argv) >= 1 and argv[0] == "fork":
        client(argv[1:])
    elif len(argv) in (2, 3) and argv[0] == "serve":
        req = serve(*argv[1:])
        if req is not None:
            try:
                _become(req)
            except SystemExit as e:
                if e.code == STOPPED:
                    _end_stopped(STOPPED)
                raise
    else:
        print("usage: prewarm.py serve JOB_DIR [MODULES] | fork COMMAND [ARGS...]", file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
