"""The prewarm fork server and its client (schedulearn/prewarm.py), as real processes.

A server preloading `json` (fast) serves clients run as the slot wrapper runs them: the worker
it forks gets the client's stdin/stdout/stderr, argv, exact environment, cwd and umask, has the
preloaded module already imported, is a child of the server (not the client), and its pid is
appended to the slot's `workers/` file; the client ends with the worker's exit code or signal,
forwards SIGTERM, and takes its worker with it when killed. A request the server must not fork
(another environment) and a client without a server run the command by exec instead. The
server leaves when its parent does, removing its socket. A torchrun agent's worker, whose
environment differs in exactly the variables torch's elastic agent sets (checked against a real
torchrun), is forked, anything more is exec'd.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from schedulearn.executors import torchrun_elastic
from schedulearn.executors.launch import PREWARM
from schedulearn.prewarm import SOCKET_NAME, TORCHRUN_NAMES

from tests.conftest import require
from tests.test_elastic_resize import _has_torch

PROBE = """
import os, signal, sys, time
pre = "json" in sys.modules  # preloaded by the server
import json
if sys.argv[1:3] == ["sleep", "trap"]:  # before the line the test waits for
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
line = sys.stdin.readline().strip()
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "env": dict(os.environ),
                  "cwd": os.getcwd(), "umask": os.umask(0), "preloaded": pre, "stdin": line,
                  "path0": sys.path[0], "main": __name__}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def _wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Server:
    """`sh -c 'python prewarm.py serve DIR & wait'`: the server's parent is the shell, as the
    launch's is horovodrun; killing the shell is the run ending."""

    def __init__(self, tmp_path, env):
        self.dir = tmp_path / "job"
        (self.dir / "workers").mkdir(parents=True)
        self.env = env
        self.log_path = tmp_path / "server.log"
        self.log = open(self.log_path, "ab")
        self.parent = subprocess.Popen(["/bin/sh", "-c", '"$0" -u "$1" serve "$2" & wait', sys.executable,
                                        PREWARM, str(self.dir)], env=env, stdout=self.log, stderr=self.log)
        _wait(lambda: "ready" in self.text(), 30, "the server to be ready")

    def text(self) -> str:
        return self.log_path.read_text()

    def pid(self) -> int:
        out = subprocess.run(["pgrep", "-P", str(self.parent.pid)], capture_output=True, text=True).stdout
        return int(out.split()[0])

    def client(self, tmp_path, *args, env=None, **kw) -> subprocess.Popen:
        script = tmp_path / "probe.py"
        script.write_text(PROBE)
        cwd = tmp_path / "cwd"
        cwd.mkdir(exist_ok=True)
        argv = [sys.executable, "-I", "-S", PREWARM, "fork", sys.executable, "-u", str(script), *args]
        return subprocess.Popen(argv, env=env or self.worker_env(), cwd=cwd, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def worker_env(self) -> dict[str, str]:
        return {**self.env, "HOROVOD_LOCAL_RANK": "1", "HOROVOD_RANK": "1", "CUDA_VISIBLE_DEVICES": "5"}

    def close(self):
        self.parent.kill()
        self.parent.wait()
        self.log.close()


def _env(tmp_path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "SCHEDULEARN_JOB_DIR": str(tmp_path / "job"),
            "SCHEDULEARN_PREWARM": "json", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}


def test_a_forked_worker_runs_the_command_as_an_exec_would(tmp_path):
    require(hasattr(os, "pidfd_open"), "needs pidfds (Linux 5.3)")
    srv = Server(tmp_path, _env(tmp_path))
    try:
        (srv.dir / "workers" / "1").write_text("")  # the slot wrapper's (it writes its own pid)
        old = os.umask(0o027)  # the client's, the worker's
        try:
            p = srv.client(tmp_path, "3", "two words")
        finally:
            os.umask(old)
        out, err = p.communicate("hello\n", timeout=30)
        assert p.returncode == 3, err
        got = json.loads(out)
        assert got["preloaded"] and got["ppid"] == srv.pid() != p.pid  # forked by the server
        assert got["env"] == srv.worker_env()  # exactly the client's environment
        assert got["argv"] == [str(tmp_path / "probe.py"), "3", "two words"] and got["main"] == "__main__"
        assert got["cwd"] == str(tmp_path / "cwd") and got["umask"] == 0o027 and got["stdin"] == "hello"
        assert got["path0"] == str(tmp_path) and err == "to stderr\n"
        assert (srv.dir / "workers" / "1").read_text().split() == [str(got["pid"])]

        # an environment differing in more than the per-worker variables: exec'd, not forked
        p = srv.client(tmp_path, "0", env={**srv.worker_env(), "OMP_NUM_THREADS": "1"})
        out, err = p.communicate("x\n", timeout=30)
        got = json.loads(out)
        assert p.returncode == 0 and not got["preloaded"] and got["pid"] == p.pid
        assert got["env"] == {**srv.worker_env(), "OMP_NUM_THREADS": "1"}
        assert "cold start" in srv.text() and "OMP_NUM_THREADS" in srv.text()
    finally:
        srv.close()
    # its parent gone, the server leaves and removes its socket
    _wait(lambda: not (srv.dir / SOCKET_NAME).exists(), 10, "the server to leave")
    p = srv.client(tmp_path, "4")
    out, _ = p.communicate("y\n", timeout=30)
    assert p.returncode == 4 and json.loads(out)["pid"] == p.pid  # no server: exec


def test_the_client_forwards_signals_and_ends_as_its_worker(tmp_path):
    require(hasattr(os, "pidfd_open"), "needs pidfds (Linux 5.3)")
    srv = Server(tmp_path, _env(tmp_path))
    try:
        for how, code in (("die", -signal.SIGTERM), ("trap", 7)):
            p = srv.client(tmp_path, "sleep", how)
            p.stdin.write("z\n")
            p.stdin.flush()
            worker = json.loads(p.stdout.readline())["pid"]
            assert worker != p.pid and _alive(worker)
            p.send_signal(signal.SIGTERM)  # what Horovod sends to stop a worker
            assert p.wait(timeout=30) == code
            _wait(lambda w=worker: not _alive(w), 10, "the worker to end")

        p = srv.client(tmp_path, "sleep", "die")
        p.stdin.write("z\n")
        p.stdin.flush()
        worker = json.loads(p.stdout.readline())["pid"]
        p.kill()  # the client killed outright: its worker must not outlive it
        p.wait(timeout=30)
        _wait(lambda: not _alive(worker), 10, "the worker of a killed client to end")
    finally:
        srv.close()


STOPPING = """
import atexit, sys, threading, time

class Module:
    def __del__(self):
        print("teardown", flush=True)

kept = Module()  # collected by the interpreter's teardown, when there is one
atexit.register(lambda: print("atexit", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
sys.exit(int(sys.argv[1]))
"""


def test_a_forked_worker_the_scheduler_stopped_ends_without_the_interpreters_teardown(tmp_path):
    """Status 143 (the scheduler's stop at a step boundary): a forked worker joins its
    non-daemon threads and runs its atexit handlers, then ends at once (no teardown, which in a
    fork writes to every page shared with the server); any other status ends as Python does."""
    require(hasattr(os, "pidfd_open"), "needs pidfds (Linux 5.3)")
    srv = Server(tmp_path, _env(tmp_path))
    try:
        script = tmp_path / "stopping.py"
        script.write_text(STOPPING)
        for status, lines in ((143, ["thread done", "atexit"]), (0, ["thread done", "atexit", "teardown"]),
                              (3, ["thread done", "atexit", "teardown"])):
            py = sys.executable
            argv = [py, "-I", "-S", PREWARM, "fork", py, "-u", str(script), str(status)]
            p = subprocess.run(argv, env=srv.worker_env(), capture_output=True, text=True, timeout=60)
            assert p.returncode == status and p.stdout.split("\n")[:-1] == lines, (status, p.stdout, p.stderr)
        assert "cold start" not in srv.text()  # every one was forked
    finally:
        srv.close()


def _torchrun_worker_env(tmp_path) -> dict[str, str]:
    """What a worker of torchrun's elastic agent gets (torchrun_elastic.py's agents set
    SCHEDULEARN_SLOT and the GPU; torch the rest, see test below)."""
    return {**_env(tmp_path), "SCHEDULEARN_SLOT": "1", "CUDA_VISIBLE_DEVICES": "2", "RANK": "1",
            "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "1",
            "GROUP_WORLD_SIZE": "2",
            "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2", "ROLE_NAME": "default", "MASTER_ADDR": "localhost",
            "MASTER_PORT": "40001", "TORCHELASTIC_RESTART_COUNT": "3", "TORCHELASTIC_MAX_RESTARTS": "1000000",
            "TORCHELASTIC_RUN_ID": "schedulearn-1-0", "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCHELASTIC_ERROR_FILE": "/tmp/x/error.json",
            "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_a_torchrun_agents_worker_is_forked_and_its_slot_recorded(tmp_path):
    """torchrun's per-worker variables may differ from the server's; the slot (SCHEDULEARN_SLOT)
    names the `workers/` file and is taken out of the worker's environment."""
    require(hasattr(os, "pidfd_open"), "needs pidfds (Linux 5.3)")
    srv = Server(tmp_path, _env(tmp_path))
    try:
        (srv.dir / "workers" / "1").write_text("")
        env = _torchrun_worker_env(tmp_path)
        p = srv.client(tmp_path, "0", env=env)
        out, err = p.communicate("hi\n", timeout=30)
        got = json.loads(out)
        assert p.returncode == 0 and got["preloaded"] and got["ppid"] == srv.pid() != p.pid, err
        assert got["env"] == {k: v for k, v in env.items() if k != "SCHEDULEARN_SLOT"}
        assert (srv.dir / "workers" / "1").read_text().split() == [str(got["pid"])]

        # anything else that differs: exec'd (and the slot is gone from its environment too)
        for extra in ({"OMP_NUM_THREADS": "1"}, {"TORCHELASTIC_ANYTHING": "1"}, {"TORCH_NCCL_X": "1"},
                      {"MASTER_ADDRESS": "x"}, {"PYTHONPATH": "/elsewhere"}):
            p = srv.client(tmp_path, "0", env={**env, **extra})
            out, err = p.communicate("x\n", timeout=30)
            got = json.loads(out)
            assert p.returncode == 0 and not got["preloaded"] and got["pid"] == p.pid, (extra, err)
            ((name, value),) = extra.items()
            assert "SCHEDULEARN_SLOT" not in got["env"] and got["env"][name] == value
            assert f"differs from the server's in {name}" in srv.text()
    finally:
        srv.close()


def test_the_torchrun_names_are_exactly_what_torchruns_agent_sets(tmp_path):
    """A real torchrun elastic agent's worker (the in-place supervisor's agent: torchrun itself,
    its stores' ports held or picked as the product picks them): the variables it has that its
    agent's environment lacks are `TORCHRUN_NAMES` (but the watchdog's file, set only when its
    timer is on)."""
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "CUDA_VISIBLE_DEVICES": "0"}
    dump = tmp_path / "env.json"
    code = f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"
    with socket.socket() as s:  # held, as the supervisor holds it (a port let go could be taken)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        subprocess.run([sys.executable, "-u", torchrun_elastic.SCRIPT, "agent",
                        f"{torchrun_elastic.LISTEN_FD_FLAG}={s.fileno()}", "--nnodes=1:2",
                        "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
                        "--rdzv-id=x",
                        "--rdzv-conf=last_call_timeout=1,is_host=1", "--monitor-interval=0.1", "--no-python",
                        sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=120,
                       pass_fds=(s.fileno(),))
    added = set(json.loads(dump.read_text())) - set(env)
    assert added == TORCHRUN_NAMES - {"TORCHELASTIC_TIMER_FILE"}, added ^ TORCHRUN_NAMES
