"""GPUs a process the scheduler did not start uses are held from its jobs (`schedulearn.busygpus`).

NVML is a small stand-in of the pynvml API (this machine has no NVIDIA driver) that lists, on
each GPU, the pids and memory a test gives it; the processes themselves are real (their account
and command line are read from /proc), and so are the engine, the local executor and its jobs.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from schedulearn import busygpus
from schedulearn.engine import Engine
from schedulearn.executors import registry
from schedulearn.executors.local import LocalExecutor
from schedulearn.gpulocks import GpuLocks
from schedulearn.inventory import HostInventory
from schedulearn.model import JobSpec, JobState
from schedulearn.service import Settings

GIB = 1024 ** 3


class Nvml:
    """Two plain GPUs; `procs[index]`: the (pid, bytes or None) NVML lists on it."""

    class NVMLError(Exception):
        pass

    def __init__(self):
        self.procs: dict[int, list[tuple[int, int | None]]] = {0: [], 1: []}

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA A100-SXM4-40GB"

    def nvmlDeviceGetMemoryInfo(self, h):
        used = sum(b or 0 for _, b in self.procs[h])
        return SimpleNamespace(total=40 * GIB, used=used)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=90 if self.procs[h] else 0, memory=0)

    def nvmlDeviceGetMigMode(self, h):
        raise self.NVMLError("Not Supported")

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=pid, usedGpuMemory=b) for pid, b in self.procs[h]]


@pytest.fixture
def train(tmp_path: Path, started):
    """`train()`: a real process that looks like someone's training run; killed at the end."""
    (tmp_path / "train.py").write_text("import sys, time\nprint('up', flush=True)\ntime.sleep(300)\n")
    return lambda: started([sys.executable, "train.py", "--epochs", "10"], "up", cwd=tmp_path)


def executor(tmp_path: Path, nv: Nvml) -> LocalExecutor:
    ex = LocalExecutor(tmp_path / "jobs", cancel_grace=2, inventory=HostInventory(host="box", nvml=nv))
    ex.gpu_locks = GpuLocks(tmp_path / "locks", str(ex.job_root))
    return ex


def test_what_holds_a_gpu_in_words(train, started):
    p = train()
    python = os.path.basename(sys.executable)
    said = f"process {p.pid} of {getpass.getuser()} ({python} train.py --epochs 10)"
    assert busygpus.describe(p.pid) == said
    assert busygpus.holder([(p.pid, 10_240)], 2048) == said
    assert busygpus.holder([(p.pid, None)], 2048) == said  # memory not reported: counted
    assert busygpus.holder([(p.pid, 900)], 2048) == ""  # a bare CUDA context: not
    assert busygpus.holder([(p.pid, 10_240)], 0) == ""  # 0: never
    long = busygpus.describe(os.getpid())  # (pytest's own command line: cut at 80 characters)
    assert long.startswith(f"process {os.getpid()} of ") and len(long.split(" (", 1)[1]) <= 81
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = int(gone.stdout)
    assert busygpus.describe(dead) == f"process {dead} (not visible from the server)"
    # a `python -c` script on one line (seen on a GPU: `python -c import os, sys?def wait(…`),
    # a terminal escape in an argument shown as `?`
    code = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(1)"
    # (once it printed: right after Popen, /proc/<pid>/cmdline read empty 14 times in 300 here, as
    # the exec that vfork's parent wakes at has not yet set the new arguments)
    script = started([sys.executable, "-c", code, "\x1b[2J"], "up")
    one_line = "import time print('up', flush=True) while True: time.sleep(1) ?[2J"
    assert busygpus.describe(script.pid).endswith(f"({python} -c {one_line})")
    both = busygpus.holder([(p.pid + 999_999, 4096), (p.pid, 4096)], 2048)
    assert both == said + " and 1 more"  # the lowest pid named: the same text read after read


def test_a_gpu_someone_trains_on_is_held_until_they_are_done(tmp_path: Path, train):
    """Someone's `python train.py` on GPU 0 (10 GiB): the scheduler's first job goes to GPU 1,
    the second waits, its reason saying why; once that process is gone, the next inventory read
    frees GPU 0 and the job starts there."""
    nv = Nvml()
    ex = executor(tmp_path, nv)
    theirs = train()
    nv.procs[0] = [(theirs.pid, 10 * GIB)]
    e = Engine(ex.nodes(), "fifo", ex)
    try:
        held = e.nodes[0].gpus[0].held_by
        python = os.path.basename(sys.executable)
        assert held == f"process {theirs.pid} of {getpass.getuser()} ({python} train.py --epochs 10)"
        assert e.nodes[0].gpus[1].held_by == ""
        first = e.submit(JobSpec(command=["sleep", "60"], gpus=1), now=0)
        second = e.submit(JobSpec(command=["sleep", "60"], gpus=1), now=0)
        e.round(1)
        assert first.state is JobState.running and first.alloc == {"box": (1,)}
        assert second.state is JobState.queued
        assert e.job_dict(second, 2)["reason"] == ("waiting: needs 1 GPU, 0 free, 1 held outside the "
                                                   "scheduler; 1st in line of 1")
        # the first job's own process on its GPU: its books', not held
        nv.procs[1] = [(ex._runs[first.id].pid, 20 * GIB)]
        e.set_nodes(ex.nodes())
        assert [g.held_by for g in e.nodes[0].gpus] == [held, ""]
        theirs.kill()
        theirs.wait()
        nv.procs[0] = []
        e.set_nodes(ex.nodes())  # (the server's inventory refresh)
        e.round(3)
        assert second.state is JobState.running and second.alloc == {"box": (0,)}
    finally:
        ex.terminate_all(grace=1)


def test_a_small_process_and_the_setting_at_zero_hold_nothing(tmp_path: Path, train):
    """A kernel that only opened a CUDA context (under `gpu_busy_mib`) keeps its GPU the
    scheduler's; `gpu_busy_mib` 0 turns the check off; a bad value is one line."""
    nv = Nvml()
    ex = executor(tmp_path, nv)
    kernel = train()
    nv.procs[0] = [(kernel.pid, 600 * 1024 ** 2)]
    assert [g.held_by for g in ex.nodes()[0].gpus] == ["", ""]
    nv.procs[0] = [(kernel.pid, 12 * GIB)]
    assert ex.nodes()[0].gpus[0].held_by.startswith(f"process {kernel.pid} of ")
    settings = Settings(job_root=str(tmp_path / "jobs2"), options={"gpu_busy_mib": 0})
    off = registry.get("local").make(settings)
    off.inventory = HostInventory(host="box", nvml=nv)
    assert [g.held_by for g in off.nodes()[0].gpus] == ["", ""]
    for bad in (-1, "big", True):
        settings = Settings(job_root=str(tmp_path / "jobs3"), options={"gpu_busy_mib": bad})
        with pytest.raises(ValueError, match=rf"^gpu_busy_mib: expected MiB >= 0 \(0: never\), got {bad!r}$"):
            registry.get("local").make(settings)
    assert registry.get("local").make(Settings(job_root=str(tmp_path / "j4"))).gpu_busy_mib == 2048


def test_at_start_up_the_gpus_of_its_own_runs_are_not_held(tmp_path: Path, train):
    """Read before the engine has its books (a server starting, its runs still going): a GPU
    this scheduler's claim holds is its run's; one nobody claims, with a big process, is held."""
    nv = Nvml()
    ex = executor(tmp_path, nv)
    gpus = ex.nodes()[0].gpus
    fds = ex.gpu_locks.claim(gpus[:1], {"job": 1, "run": 0, "user": "alice"})
    try:
        run, other = train(), train()
        nv.procs = {0: [(run.pid, 10 * GIB)], 1: [(other.pid, 10 * GIB)]}
        assert ex.engine is None
        held = [g.held_by for g in ex.nodes()[0].gpus]
        assert held[0] == "" and held[1].startswith(f"process {other.pid} of ")
    finally:
        GpuLocks.release(fds.values())
