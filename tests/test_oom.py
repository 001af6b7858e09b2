"""Out of memory (`schedulearn.executors.oom`): the kernel's OOM killer ends a job before the
server, and a job it ended says so. Real kernel figures (`/proc/<pid>/oom_score`) and a real OOM
kill, inside a memory cgroup of its own with a limit (cgroup v1's memory controller or v2), where
`schedulearn serve` and its job run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from schedulearn.client import Client
from schedulearn.executors import oom
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import JobSpec, virtual_cluster

from tests.conftest import require
from tests.fixtures.jupyter import ROOT, free_port, wait_http
from tests.test_server_live import wait_for


def test_a_jobs_processes_score_worse_than_the_server_for_the_oom_killer(tmp_path: Path):
    """The kernel's own score: a small job (a sleeping shell) ranks above the server (this test
    process, far larger) once its `oom_score_adj` is 500; its children inherit it."""
    ex = LocalExecutor(tmp_path / "jobs", cancel_grace=2)
    from schedulearn.engine import Engine

    e = Engine(virtual_cluster(1, 1), "fifo", ex)
    job = e.submit(JobSpec(command=["sh", "-c", "sleep 60 & wait"], gpus=1), now=0)
    e.round(0)
    try:
        pid = ex.pid(job.id)
        assert pid is not None
        procs = wait_for(lambda: _group(pid) if len(_group(pid)) >= 3 else None, what="the job's processes")
        assert {_read(f"/proc/{p}/oom_score_adj") for p in procs} == {str(oom.JOB_OOM_SCORE_ADJ)}
        assert min(int(_read(f"/proc/{p}/oom_score")) for p in procs) > int(_read("/proc/self/oom_score"))
    finally:
        ex.terminate_all(grace=1)


def _group(pgid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


def _read(path: str) -> str:
    return Path(path).read_text().strip()


# -- a real OOM kill -------------------------------------------------------------------------------
class MemoryCgroup:
    """A memory cgroup of its own under this process's, with a limit and no swap."""

    def __init__(self, limit: int):
        me = oom.counter(os.getpid())
        require(me is not None and os.geteuid() == 0,
                "no memory cgroup to make one in (as root, with cgroup v1's memory controller or v2)")
        assert me is not None
        self.v1 = me.endswith("memory.oom_control")
        self.path = Path(me).parent / f"schedulearn-test-{uuid.uuid4().hex[:8]}"
        try:
            self.path.mkdir()
            if self.v1:
                (self.path / "memory.limit_in_bytes").write_text(str(limit))
                (self.path / "memory.swappiness").write_text("0")
            else:
                (self.path / "memory.max").write_text(str(limit))
                (self.path / "memory.swap.max").write_text("0")
        except OSError as e:
            self.remove()
            require(False, f"cannot make a memory cgroup with a limit here: {e}")

    def prefix(self) -> list[str]:
        """What runs a command inside it."""
        return ["/bin/sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "in-cgroup"]

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # (its last processes are still leaving)
                time.sleep(0.1)


HOG = "import time\nx = []\nwhile True:\n    x.append(bytearray(32 << 20))\n    time.sleep(0.02)\n"


def test_a_job_the_oom_killer_ends_says_likely_out_of_memory_and_the_server_lives(tmp_path: Path):
    cg = MemoryCgroup(limit=600 << 20)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)]),
           "SCHEDULEARN_SERVE_TOKEN": "t"}
    with open(tmp_path / "serve.log", "ab") as log:
        server = subprocess.Popen(
            [*cg.prefix(), sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(port),
             "--store", f"sqlite:///{tmp_path / 's.db'}", "--job-root", str(tmp_path / "jobs"),
             "--virtual-gpus", "1", "--tick", "0.2"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_http(f"http://127.0.0.1:{port}/schedulearn/api/policy", proc=server)
        c = Client(f"http://127.0.0.1:{port}/", "t")
        hog = c.submit({"name": "hog", "command": [sys.executable, "-c", HOG]})
        done = wait_for(lambda: (j := c.job(hog["id"]))["state"] in ("failed", "succeeded") and j,
                        timeout=120, what="the job to be ended")
        assert done["state"] == "failed"
        # (nothing printed: no "last log line", not a piece of its `python -c` program either)
        assert done["reason"] == ("likely out of memory: the kernel's OOM killer ended 1 process of its "
                                  "cgroup during the run; ended by SIGKILL, not by the scheduler")
        assert server.poll() is None  # the server, in the same cgroup, was not the one ended
        after = c.submit({"name": "after", "command": ["true"]})
        ok = wait_for(lambda: (j := c.job(after["id"]))["state"] in ("failed", "succeeded") and j,
                      what="the next job")
        assert ok["state"] == "succeeded" and ok["reason"] == ""
    finally:
        server.terminate()
        server.wait(30)
        cg.remove()


def test_the_counter_and_the_note():
    path = oom.counter(os.getpid())
    if path is None:
        assert oom.note(None, 0) == ""
        return
    n = oom.count(path)
    assert isinstance(n, int) and n >= 0
    assert oom.note(path, n) == "" and oom.note(path, None) == ""
    assert oom.note(path, n - 2) == ("likely out of memory: the kernel's OOM killer ended 2 processes of its "
                                     "cgroup during the run")
    assert oom.counter(2 ** 22 + 7) is None  # (no such process)
