"""The local executor with real processes on CPU, driven by the real engine on its asyncio loop.

Each test starts real jobs (python, torchrun, horovodrun) as process groups and waits, with a
bounded timeout, for the engine to see the state it must reach.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedulearn import joblogs
from schedulearn.engine import Engine, RealClock
from schedulearn.executors import ExecutorError
from schedulearn.executors.launch import RUNNER, build_workers, check_command, visible_devices, wrap_exit_code
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import Gpu, JobSpec, JobState, Node, virtual_cluster

from tests.conftest import require

JOBS = Path(__file__).parent / "jobs"
PY = sys.executable


def _has(module: str) -> bool:
    try:
        __import__(module)
    except Exception:  # noqa: BLE001 - missing or broken install: both mean "not here"
        return False
    return True


# -- harness -------------------------------------------------------------------------------------
async def wait_for(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


@contextlib.asynccontextmanager
async def live(root: Path, gpus: int = 4, policy: str = "fifo", grace: float = 5.0, keep_jobs: bool = False):
    ex = LocalExecutor(root, cancel_grace=grace)
    eng = Engine(virtual_cluster(1, gpus), policy, executor=ex)
    task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
    try:
        yield eng, ex
    finally:
        if not keep_jobs:
            await asyncio.to_thread(ex.terminate_all, 1.0)
        eng.close()
        await asyncio.wait_for(task, 5)


def final(eng: Engine, job_id: int):
    return lambda: eng.jobs[job_id].state.final


def in_log(ex: LocalExecutor, job_id: int, text: str):
    return lambda: text in ex.logs(job_id)


def group_gone(pgid: int) -> bool:
    """No live process left in the group (a zombie waiting for init to reap it is dead)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        state, _ppid, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
        if int(pgrp) == pgid and state not in "ZX":
            return False
    return True


class MemoryStore:
    """The store protocol, in memory: what a restarted server loads its jobs from."""

    def __init__(self, jobs):
        self.jobs = list(jobs)
        self.policy = None

    def transaction(self):
        return contextlib.nullcontext()

    def load_jobs(self):
        return self.jobs

    def add_job(self, job):
        pass

    def update_job(self, job):
        pass

    def add_event(self, job_id, kind, data, t):
        pass

    def get_policy(self):
        return self.policy

    def set_policy(self, name):
        self.policy = name

    def get_setting(self, key):
        return None

    def set_setting(self, key, value):
        pass


# -- python jobs -----------------------------------------------------------------------------------
def test_python_job_succeeds_and_log_is_read_back(tmp_path):
    (tmp_path / "elsewhere").mkdir()

    async def main():
        async with live(tmp_path / "jobs") as (eng, ex):
            job = eng.submit({"name": "hello", "script": "import os, sys\nprint('hello from the job')\n"
                                                        "print('to stderr', file=sys.stderr)\n"
                                                        "print('in', os.getcwd())\n"
                                                        "sys.stdout.write('last words')\n",  # no newline
                              "workdir": str(tmp_path / "elsewhere")})
            streamed = []

            async def stream():  # what the API's ?follow=1 does
                async for line in ex.afollow(job.id):
                    streamed.append(line)

            streamer = asyncio.create_task(stream())
            await wait_for(final(eng, job.id), 30, "the job to end")
            await asyncio.wait_for(streamer, 5)  # it ends by itself once the job is over
            assert "hello from the job\n" in streamed and streamed[-1].startswith(joblogs.MARKER + " exit")
            assert job.state is JobState.succeeded, job.reason
            assert job.exit_code == 0
            text = ex.logs(job.id)
            assert "hello from the job" in text and "to stderr" in text
            assert f"in {tmp_path / 'elsewhere'}\n" in text
            assert "\nlast words\n" + joblogs.MARKER + " exit" in text  # the marker on a line of its own
            assert (tmp_path / "jobs" / str(job.id) / "main.py").read_text().startswith("import os, sys")
            assert ex.logs(job.id, tail=1).startswith(joblogs.MARKER + " exit of run #0: code 0")
            followed = list(ex.follow(job.id, timeout=5))
            assert "hello from the job\n" in followed
            assert not ex.running()
            assert eng.pool.total == 4

    asyncio.run(main())


def test_each_job_sees_only_its_gpus(tmp_path):
    release = tmp_path / "release"

    async def main():
        async with live(tmp_path / "jobs") as (eng, ex):
            a = eng.submit({"command": ["python", str(JOBS / "show_env.py"), str(release)], "gpus": 2})
            b = eng.submit({"command": [PY, str(JOBS / "show_env.py"), str(release)], "gpus": 2})
            for j in (a, b):
                await wait_for(in_log(ex, j.id, "cwd="), 30, f"job {j.id} to print its environment")
            seen = {}
            for j in (a, b):
                text = ex.logs(j.id)
                cvd = re.search(r"^CUDA_VISIBLE_DEVICES=(.*)$", text, re.M).group(1)
                assert cvd == ",".join(str(i) for i in j.alloc["node0"])
                assert f"SCHEDULEARN_JOB_ID={j.id}\n" in text and "SCHEDULEARN_NUM_GPUS=2\n" in text
                assert f"cwd={tmp_path / 'jobs' / str(j.id)}\n" in text
                seen[j.id] = set(cvd.split(","))
            assert len(seen[a.id]) == len(seen[b.id]) == 2
            assert not seen[a.id] & seen[b.id]
            release.touch()
            for j in (a, b):
                await wait_for(final(eng, j.id), 30, f"job {j.id} to end")
                assert j.state is JobState.succeeded

    asyncio.run(main())


def test_unknown_command_fails_with_a_clear_reason(tmp_path):
    async def main():
        async with live(tmp_path) as (eng, ex):
            job = eng.submit({"command": ["no-such-program-xyz", "--flag"]})
            await wait_for(final(eng, job.id), 10, "the job to fail")
            assert job.state is JobState.failed
            assert job.reason == "command: 'no-such-program-xyz' not found on PATH"
            missing = eng.submit({"command": ["./nope.sh"], "workdir": str(tmp_path)})
            await wait_for(final(eng, missing.id), 10, "the job to fail")
            assert "'./nope.sh' does not exist" in missing.reason
            assert eng.pool.total == 4

    asyncio.run(main())


def test_crash_fails_with_the_error_as_reason(tmp_path):
    async def main():
        async with live(tmp_path) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "crash.py")], "gpus": 3})
            await wait_for(final(eng, job.id), 30, "the job to fail")
            assert job.state is JobState.failed
            assert job.exit_code == 1
            assert job.reason == "RuntimeError: boom: the model diverged at step 3"
            assert eng.pool.total == 4

    asyncio.run(main())


def test_a_silent_python_c_program_fails_with_its_exit_code_not_a_line_of_its_program(tmp_path):
    """The log's start line shows the command on one line (newlines as \\n): before, the lines
    of a `python -c` program after its first read as the job's output, and one became its reason."""
    async def main():
        async with live(tmp_path) as (eng, ex):
            job = eng.submit({"command": [PY, "-c", "import os\nos._exit(3)  # quiet"]})
            await wait_for(final(eng, job.id), 30, "the job to fail")
            assert job.state is JobState.failed and job.exit_code == 3
            assert job.reason == "exit code 3"
            first = ex.logs(job.id).splitlines()[0]
            assert first.endswith("-c 'import os\\nos._exit(3)  # quiet' ===")

    asyncio.run(main())


def test_cancel_mid_run_sends_sigterm_to_the_group(tmp_path):
    async def main():
        async with live(tmp_path, grace=10) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py")]})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to start")
            pgid = ex.pid(job.id)
            assert pgid == int(re.search(r"ready pgid=(\d+)", ex.logs(job.id)).group(1))
            t0 = time.monotonic()
            eng.cancel(job.id)
            await wait_for(final(eng, job.id), 15, "the job to be cancelled")
            assert time.monotonic() - t0 < 5  # it left on SIGTERM, not at the end of the grace
            assert job.state is JobState.cancelled and job.reason == "cancelled"
            assert "got SIGTERM" in ex.logs(job.id)
            assert group_gone(pgid)
            assert eng.pool.total == 4

    asyncio.run(main())


def test_cancel_escalates_to_sigkill_after_the_grace(tmp_path):
    async def main():
        async with live(tmp_path, grace=1.0) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py"), "ignore"]})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to start")
            pgid = ex.pid(job.id)
            t0 = time.monotonic()
            eng.cancel(job.id)
            await wait_for(final(eng, job.id), 10, "the job to be killed")
            took = time.monotonic() - t0
            assert 1.0 <= took < 4, took
            assert job.state is JobState.cancelled
            assert job.reason == "cancelled (SIGKILL after the grace period)"
            assert "got SIGTERM" in ex.logs(job.id)  # it was asked first
            assert group_gone(pgid)

    asyncio.run(main())


@pytest.mark.parametrize("launcher", ["torchrun", "horovod"])
def test_a_cancelled_job_leaves_no_worker_behind(tmp_path, launcher):
    """torchrun and horovodrun start each worker in a session of its own, outside the run's
    process group: a worker that ignores SIGTERM outlived the group's SIGKILL after the grace
    (its launcher killed before it had stopped it), held its GPU, and the GPU went to the next
    job. The executor finds the run's processes by the marks in their environment and stops
    them too, before the run ends; the job's log says so."""
    require(_has("torch"), "torch is not installed (scripts/setup.sh installs it)")
    if launcher == "horovod":
        require(_has("horovod.torch"), "horovod is not installed (scripts/setup.sh builds it)")

    async def main():
        async with live(tmp_path, grace=1.0) as (eng, ex):
            job = eng.submit({"command": ["python", str(JOBS / "sigterm_job.py"), "ignore"],
                              "launcher": launcher})
            ready = await wait_for(lambda: re.search(r"ready pgid=(\d+)", ex.logs(job.id)), 60,
                                   "the worker to start")
            worker = int(ready.group(1))  # its own session's leader
            assert worker != ex.pid(job.id)  # not in the run's process group
            eng.cancel(job.id)
            await wait_for(final(eng, job.id), 20, "the job to end")
            assert job.state is JobState.cancelled
            assert group_gone(worker), "the worker outlived its job"
            assert "left outside its process group" in ex.logs(job.id)
            assert eng.pool.total == 4

    asyncio.run(main())


def test_a_cancelled_torchrun_job_ends_quietly(tmp_path):
    """torchrun's agent raises `SignalException` when stopped: each cancel (and each resize) of a
    torchrun job wrote its 25-line traceback into the log and ended with status 1. Through the
    runner the agent stops its workers as before and ends with 143 (SIGTERM), nothing more."""
    require(_has("torch"), "torch is not installed (scripts/setup.sh installs it)")

    async def main():
        async with live(tmp_path, grace=10.0) as (eng, ex):
            job = eng.submit({"command": ["python", str(JOBS / "sigterm_job.py")], "launcher": "torchrun",
                              "gpus": 2})
            await wait_for(lambda: ex.logs(job.id).count("ready pgid=") == 2, 60, "both workers to start")
            eng.cancel(job.id)
            await wait_for(final(eng, job.id), 30, "the job to end")
            text = ex.logs(job.id)
            assert job.state is JobState.cancelled, text
            assert text.count("got SIGTERM") == 2, text  # each worker was asked, as before
            assert "Traceback" not in text and "SignalException" not in text, text
            assert "=== schedulearn: exit of run #0: code 143: cancelled ===" in text, text

    asyncio.run(main())


ORPHANING = """\
import subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                           "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                           "print('up', flush=True); time.sleep(60)"],
                          stdout=subprocess.PIPE, start_new_session=True, text=True)
worker.stdout.readline()
print(worker.pid, flush=True)
worker.wait()
"""


def test_a_shrinks_gpus_stay_held_while_a_removed_worker_lives_on_orphaned(tmp_path):
    """A shrink's GPUs are reported free once its removed workers have ended — not once they
    stop being the run's descendants: a worker whose parent ended (reparented, in a session of
    its own) still holds its GPU. It is stopped after `shrink_wait` (SIGTERM, then SIGKILL after
    the grace, as it ignores SIGTERM), and only then are the GPUs released."""
    from schedulearn.executors import local

    ex = LocalExecutor(tmp_path / "jobs", cancel_grace=1.0)
    ex.shrink_wait = 1.0
    released = []
    ex.engine = type("Engine", (), {"report_released": lambda self, job_id: released.append(
        (job_id, time.monotonic()))})()
    parent = subprocess.Popen([sys.executable, "-c", ORPHANING], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    worker = int(parent.stdout.readline())
    try:
        assert local._descends_from(worker, parent.pid)  # what the shrink records: the run's worker
        removed = {worker: local._start_time(worker)}
        parent.kill()
        parent.wait()
        assert not local._descends_from(worker, parent.pid) and local._is_process(worker, removed[worker])
        run = local._Run(job_id=5, restarts=0, pid=parent.pid)
        t0 = time.monotonic()
        ex._wait_removed(run, removed)
        assert [j for j, _ in released] == [5]
        assert released[0][1] - t0 >= ex.shrink_wait + ex.cancel_grace - 0.1  # SIGTERM ignored: SIGKILL
        assert not local._is_process(worker, removed[worker])  # stopped before the GPUs were released
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)
        parent.stdout.close()


def test_terminate_all_during_a_resize_starts_no_next_run(tmp_path):
    """`terminate_all` (shutdown, a test's teardown) while a resize waits for the old run to go:
    the next run must not start after it (it would outlive the server)."""
    async def main():
        async with live(tmp_path, grace=1.5) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py"), "ignore"]})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to start")
            pgid = ex.pid(job.id)
            old = dict(job.alloc)
            job.restarts += 1  # what the engine records before it asks the executor to resize
            ex.resize(job, old, time.time())
            await wait_for(in_log(ex, job.id, "got SIGTERM"), 10, "the old run to be asked to stop")
            await asyncio.to_thread(ex.terminate_all, 0.2)
            await asyncio.sleep(2.5)  # past the resize thread's grace: where it would relaunch
            assert group_gone(pgid)
            assert not ex.is_running(job.id), "a run started after terminate_all"
            assert "start #1" not in ex.logs(job.id), ex.logs(job.id)

    asyncio.run(main())


def test_external_kill_fails_the_job_and_frees_its_gpus_fast(tmp_path):
    async def main():
        async with live(tmp_path) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py")], "gpus": 4})
            queued = eng.submit({"command": [PY, "-c", "print('second job ran')"], "gpus": 4})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to start")
            assert queued.state is JobState.queued
            t0 = time.monotonic()
            os.killpg(ex.pid(job.id), signal.SIGKILL)
            await wait_for(final(eng, job.id), 5, "the engine to see the kill")
            assert time.monotonic() - t0 < 1.0
            assert job.state is JobState.failed
            assert job.reason.startswith("killed by SIGKILL, not by the scheduler; last log line: ready")
            await wait_for(lambda: queued.state is not JobState.queued, 1.0, "the next job to get the GPUs")
            await wait_for(final(eng, queued.id), 30, "the second job")
            assert queued.state is JobState.succeeded

    asyncio.run(main())


def _child_of(pid: int) -> int:
    """The one child of `pid` (the job's command under its exit-status wrapper)."""
    kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def test_sigkill_of_the_jobs_process_is_reported_as_sigkill(tmp_path):
    """Issue 10.4: the command killed with SIGKILL (its wrapper reports 137), or the wrapper
    itself: the reason names SIGKILL, never SIGHUP."""
    async def main():
        async with live(tmp_path) as (eng, ex):
            a = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py")], "gpus": 2})
            b = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py")], "gpus": 2})
            await wait_for(lambda: in_log(ex, a.id, "ready")() and in_log(ex, b.id, "ready")(), 30,
                           "both jobs to start")
            os.kill(_child_of(ex.pid(a.id)), signal.SIGKILL)  # the command: `kill -9 <its pid>`
            os.kill(ex.pid(b.id), signal.SIGKILL)  # the wrapper (the pid the job's pid file names)
            await wait_for(lambda: a.state.final and b.state.final, 10, "the engine to see the kills")
            assert a.state is JobState.failed and a.exit_code == 137
            assert a.reason.startswith("ended by SIGKILL, not by the scheduler"), a.reason
            assert b.state is JobState.failed and b.exit_code == -9
            assert b.reason.startswith("killed by SIGKILL, not by the scheduler"), b.reason
            assert "SIGHUP" not in a.reason + b.reason
            assert "exit of run #0: code 137: ended by SIGKILL" in ex.logs(a.id)
            assert eng.pool.total == 4

    asyncio.run(main())


# -- restart of the server ---------------------------------------------------------------------------
def test_restarted_server_reattaches_and_reports_the_real_exit(tmp_path):
    release = tmp_path / "release"

    async def main():
        async with live(tmp_path / "jobs", keep_jobs=True) as (eng, ex):  # the server goes away
            job = eng.submit({"command": [PY, str(JOBS / "show_env.py"), str(release), "3"], "gpus": 2})
            await wait_for(in_log(ex, job.id, "cwd="), 30, "the job to start")
            pid = ex.pid(job.id)
            saved = dataclasses.replace(job, alloc=dict(job.alloc))
        assert job.state is JobState.running  # the old executor reported nothing
        # a new server: new engine and executor over the same job root, the job from the store
        ex2 = LocalExecutor(tmp_path / "jobs")
        eng2 = Engine(virtual_cluster(1, 4), "fifo", executor=ex2, store=MemoryStore([saved]))
        task = asyncio.create_task(eng2.run(RealClock(tick=0.2)))
        try:
            job2 = eng2.get(saved.id)
            assert job2.state is JobState.running and ex2.pid(job2.id) == pid
            assert eng2.pool.total == 2  # its GPUs stay taken
            assert "re-attached to run #0" in ex2.logs(job2.id)
            release.touch()
            await wait_for(final(eng2, job2.id), 30, "the re-attached job to end")
            assert job2.state is JobState.failed and job2.exit_code == 3
            assert job2.reason == "bye 3"
            assert eng2.pool.total == 4
            assert group_gone(pid)
        finally:
            await asyncio.to_thread(ex2.terminate_all, 1.0)
            eng2.close()
            await task

    asyncio.run(main())


def test_reattached_run_killed_with_sigkill_has_an_unknown_status_not_sighup(tmp_path):
    """A re-attached run is not our child: when its wrapper is killed (`kill -9` of the group) no
    exit status is recorded anywhere. That is what the reason says (it once read the missing
    file as -1: "killed by SIGHUP"); the GPUs are freed at once."""
    async def main():
        async with live(tmp_path / "jobs", keep_jobs=True) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py")], "gpus": 2})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to start")
            pid = ex.pid(job.id)
            saved = dataclasses.replace(job, alloc=dict(job.alloc))
        ex2 = LocalExecutor(tmp_path / "jobs")
        eng2 = Engine(virtual_cluster(1, 4), "fifo", executor=ex2, store=MemoryStore([saved]))
        task = asyncio.create_task(eng2.run(RealClock(tick=0.2)))
        try:
            job2 = eng2.get(saved.id)
            assert job2.state is JobState.running and ex2.pid(job2.id) == pid
            os.killpg(pid, signal.SIGKILL)
            await wait_for(final(eng2, job2.id), 10, "the engine to see the kill")
            assert job2.state is JobState.failed and job2.exit_code is None
            assert "SIGHUP" not in job2.reason
            assert job2.reason.startswith(
                f"ended without recording its exit status (its wrapper, pid {pid}, was killed, e.g. by "
                "SIGKILL, not by the scheduler); exit status unknown; last log line: ready"), job2.reason
            assert "code unknown" in ex2.logs(job2.id)
            assert eng2.pool.total == 4
            assert group_gone(pid)
        finally:
            await asyncio.to_thread(ex2.terminate_all, 1.0)
            eng2.close()
            await task

    asyncio.run(main())


def test_run_killed_while_the_server_was_down_is_reported_as_unknown(tmp_path):
    async def main():
        async with live(tmp_path / "jobs", keep_jobs=True) as (eng, ex):
            job = eng.submit({"command": [PY, str(JOBS / "sigterm_job.py")], "gpus": 1})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to start")
            pid = ex.pid(job.id)
            saved = dataclasses.replace(job, alloc=dict(job.alloc))
        os.killpg(pid, signal.SIGKILL)  # while no server watches: nothing records its status
        deadline = time.monotonic() + 10
        while not group_gone(pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        eng2 = Engine(virtual_cluster(1, 4), "fifo", executor=LocalExecutor(tmp_path / "jobs"),
                      store=MemoryStore([saved]))
        job2 = eng2.get(saved.id)
        assert job2.state is JobState.failed and job2.exit_code is None
        assert job2.reason == "lost on restart: ended while the server was down; exit status unknown"
        assert eng2.pool.total == 4

    asyncio.run(main())


def test_job_whose_process_is_gone_is_lost_on_restart(tmp_path):
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    root = tmp_path / "jobs"
    stale = {1: {"pid": dead.pid, "start_time": 1},  # that process is gone
             2: {"pid": os.getpid(), "start_time": 12345}}  # pid alive but reused by another process
    jobs = []
    for job_id, info in stale.items():
        (root / str(job_id)).mkdir(parents=True)
        info["boot_id"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        (root / str(job_id) / "pid").write_text(json.dumps(info))
        from schedulearn.model import Job

        jobs.append(Job(id=job_id, spec=JobSpec(command=["x"]), submit_time=0, state=JobState.running,
                        alloc={"node0": (job_id,)}))
    ex = LocalExecutor(root)
    eng = Engine(virtual_cluster(1, 4), "fifo", executor=ex, store=MemoryStore(jobs))
    for job_id in stale:
        job = eng.get(job_id)
        assert job.state is JobState.failed and job.exit_code is None
        assert job.reason == "lost on restart: ended while the server was down; exit status unknown"
    assert eng.pool.total == 4


# -- distributed launchers ------------------------------------------------------------------------------
def test_torchrun_ddp_job_keeps_ranks_in_sync(tmp_path):
    require(_has("torch"), "torch is not installed (scripts/setup.sh installs it)")

    async def main():
        async with live(tmp_path) as (eng, ex):
            eng.submit({"command": [PY, "-c", "print(1)"], "gpus": 1})  # so the DDP job gets GPUs 1,2
            job = eng.submit({"command": ["python", str(JOBS / "ddp_sync.py")], "launcher": "torchrun",
                              "gpus": 2})
            await wait_for(final(eng, job.id), 120, "the DDP job to end")
            text = ex.logs(job.id)
            assert job.state is JobState.succeeded, job.reason + "\n" + text[-3000:]
            ranks = dict(re.findall(r"rank (\d)/2 local_rank \d cvd=[0-9,]+ checksum=(-?[0-9.]+)", text))
            assert set(ranks) == {"0", "1"}, text[-3000:]
            assert ranks["0"] == ranks["1"]
            assert "cvd=1,2 " in text

    asyncio.run(main())


def test_horovod_job_allreduces(tmp_path):
    require(_has("horovod.torch"), "horovod is not installed (scripts/setup.sh builds it)")

    async def main():
        async with live(tmp_path) as (eng, ex):
            job = eng.submit({"command": ["python", str(JOBS / "hvd_allreduce.py")], "launcher": "horovod",
                              "gpus": 2})
            await wait_for(final(eng, job.id), 120, "the Horovod job to end")
            text = ex.logs(job.id)
            assert job.state is JobState.succeeded, job.reason + "\n" + text[-3000:]
            found = re.findall(r"hvd rank (\d) size 2 allreduce_sum=(-?[0-9.]+)", text)
            assert sorted(found) == [("0", "3"), ("1", "3")], text[-3000:]

    asyncio.run(main())


def test_multi_host_torchrun_workers_rendezvous(tmp_path):
    """The argv built for two hosts (as the Docker executor runs it), both "hosts" on localhost."""
    require(_has("torch"), "torch is not installed (scripts/setup.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = JobSpec(command=["python", str(JOBS / "ddp_sync.py")], launcher="torchrun", gpus=2)
    workers = build_workers(spec, 7, {"h1": (0,), "h2": (3,)}, tmp_path, 0, python=PY,
                            addresses={"h1": "127.0.0.1", "h2": "127.0.0.1"}, rdzv_port=port)
    assert [w.node for w in workers] == ["h1", "h2"]
    assert f"--rdzv-endpoint=127.0.0.1:{port}" in workers[1].argv
    procs = []
    for w in workers:
        env = {**os.environ, **w.env}
        procs.append(subprocess.Popen(w.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, cwd=tmp_path))
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    checks = re.findall(r"rank (\d)/2 local_rank 0 cvd=(\d) checksum=(-?[0-9.]+)", "".join(outs))
    assert sorted(c[:2] for c in checks) == [("0", "0"), ("1", "3")], outs
    assert checks[0][2] == checks[1][2]


# -- the launch plan ------------------------------------------------------------------------------------
def test_launch_argv_for_each_launcher(tmp_path):
    spec = JobSpec(command=["python", "train.py", "--lr", "0.1"], launcher="torchrun", gpus=2)
    (w,) = build_workers(spec, 5, {"n": (2, 3)}, tmp_path, 4, python="/v/bin/python")
    assert w.argv == ["/v/bin/python", RUNNER, "--torchrun", "--standalone", "--nproc-per-node=2",
                      "--rdzv-conf=last_call_timeout=1", RUNNER, "train.py", "--lr", "0.1"]
    (bare,) = build_workers(spec, 5, {"n": (2, 3)}, tmp_path, 4, python="/v/bin/python", runner=None)
    assert bare.argv[:3] == ["/v/bin/python", "-m", "torch.distributed.run"]
    assert w.env["CUDA_VISIBLE_DEVICES"] == "2,3" and w.env["SCHEDULEARN_RESTART_COUNT"] == "4"
    assert w.env["SCHEDULEARN_JOB_DIR"] == str(tmp_path) and w.env["SCHEDULEARN_NUM_GPUS"] == "2"
    bash = JobSpec(command=["bash", "run.sh"], launcher="torchrun", gpus=1)
    (w,) = build_workers(bash, 5, {"n": (0,)}, tmp_path)
    assert w.argv[-3:] == ["--no-python", "bash", "run.sh"]
    hvd = JobSpec(script="print(1)", launcher="horovod", gpus=3)
    (w,) = build_workers(hvd, 5, {"n": (0, 1, 2)}, tmp_path, python="py")
    assert w.argv == ["py", "-m", "horovod.runner.launch", "-np", "3", "-H", "localhost:3", "--gloo",
                      "--network-interface", "lo", "py", "-u", RUNNER, f"{tmp_path}/main.py"]
    (w,) = build_workers(hvd, 5, {"a": (0, 1), "b": (0,)}, tmp_path, python="py", addresses={"a": "h1"})
    assert w.node == "a" and w.argv[4:9] == ["3", "-H", "h1:2,b:1", "--gloo", "py"]
    with pytest.raises(ExecutorError, match="launcher: python runs one process on one host"):
        build_workers(JobSpec(command=["x"], gpus=2), 5, {"a": (0,), "b": (0,)}, tmp_path)


def test_visible_devices_use_uuids_for_mig_and_on_request():
    node = Node("g", [Gpu(0, "GPU-aaa", virtual=False),
                      Gpu(5, "MIG-bbb", virtual=False, mig_parent="GPU-ccc"),
                      Gpu(1, "GPU-ddd", virtual=False)])
    assert visible_devices(node, (0, 5)) == "0,MIG-bbb"
    assert visible_devices(node, (0, 1), use_uuids=True) == "GPU-aaa,GPU-ddd"
    assert visible_devices(Node.virtual_node("v", 2), (0, 1), use_uuids=True) == "0,1"


def test_command_check_and_exit_code_wrapper(tmp_path):
    with pytest.raises(ExecutorError, match="command: 'nope-xyz' not found on PATH"):
        check_command(["nope-xyz"], os.environ["PATH"], tmp_path)
    check_command(["sh"], os.environ["PATH"], tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")  # a script named as a command: say how to run it
    with pytest.raises(ExecutorError) as e:
        check_command(["train.py", "--lr", "0.1"], os.environ["PATH"], tmp_path)
    assert str(e.value) == (f"command: 'train.py' not found on PATH (train.py is a Python script in "
                            f"{tmp_path}: run `-- python train.py ...`, or --script train.py)")
    for python in (sys.executable, None):  # None: the /bin/sh wrapper (an account that cannot run it)
        code = subprocess.run(wrap_exit_code(["sh", "-c", "exit 7"], tmp_path / "rc", python)).returncode
        assert code == 7 and (tmp_path / "rc").read_text().strip() == "7"
    # A command the shell cannot run is named as the job's, not as the exit-code file's.
    ran = subprocess.run(wrap_exit_code(["nope-xyz"], tmp_path / "rc2"), capture_output=True, text=True)
    assert ran.returncode == 127 and (tmp_path / "rc2").read_text().strip() == "127"
    assert ran.stderr == "schedulearn-job: nope-xyz: not found\n"
    assert str(tmp_path) not in ran.stderr
    # Killed by a signal: 128+N, as a shell says; a script without #! runs under /bin/sh.
    killed = subprocess.run(wrap_exit_code([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"],
                                           tmp_path / "rc3")).returncode
    assert killed == 137 and (tmp_path / "rc3").read_text().strip() == "137"
    bare = tmp_path / "bare"
    bare.write_text("exit 5\n")
    bare.chmod(0o755)
    assert subprocess.run(wrap_exit_code([str(bare)], tmp_path / "rc4")).returncode == 5


def test_a_stop_in_a_runs_first_milliseconds_is_never_lost(tmp_path):
    """SIGTERM to a run's group at any moment of its start ends it. Under the `/bin/sh` wrapper
    (`trap : TERM INT; "$@"`) one in ten such stops in the first 3 ms was lost: it reached the
    forked shell between fork and exec, the command ran on, and the cancel waited out the whole
    grace period for SIGKILL (`schedulearn cancel 4 5`: stopping 4 started 5 just before its
    cancel). The sweep covers the gate, the wrapper's start, the spawn and the command's start."""
    from schedulearn.executors.local import _gate

    lost, codes = [], set()
    for i in range(240):
        delay = (i % 80) * 0.0004  # 0 to 32 ms after the launch, three times
        gate = _gate(tmp_path, tmp_path / "closed", 0)
        p = subprocess.Popen([*gate, *wrap_exit_code(["sleep", "60"], tmp_path / "rc")],
                             stdin=subprocess.PIPE, start_new_session=True)
        p.stdin.write(b"go\n")
        p.stdin.close()
        time.sleep(delay)
        os.killpg(p.pid, signal.SIGTERM)
        try:
            codes.add(p.wait(5))
        except subprocess.TimeoutExpired:
            lost.append(delay)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert not lost, f"{len(lost)} of 240 stops lost, at {sorted(set(lost))} s"
    assert codes <= {-signal.SIGTERM, 128 + signal.SIGTERM}, codes  # the wrapper, or the command


def test_failure_reason_picks_the_exception_line():
    torchrun_tail = """
[rank0]: Traceback (most recent call last):
[rank0]:   File "train.py", line 3, in <module>
[rank0]: ValueError: bad shape (3, 4)
E1122 torch.distributed.elastic.multiprocessing.api: failed (exitcode: 1) local_rank: 0
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
"""
    assert joblogs.failure_reason(torchrun_tail) == "ValueError: bad shape (3, 4)"
    assert joblogs.failure_reason("a\nlast words\n\n=====\n") == "last words"
    # One rank's exception, then the other's lost connection to it: the cause, not the consequence.
    two_ranks = """
[rank1]:     raise RuntimeError("rank 1 boom")
[rank1]: RuntimeError: rank 1 boom
[rank0]:     work.wait()
[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:46282. \
This is typically caused by a remote worker crashing.
E1203 api.py:1002] failed (exitcode: 1) local_rank: 0 (pid: 3570) of binary: python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
""" + "  exitcode  : 1\n" * 60  # torchrun's summary between them and the end
    assert joblogs.failure_reason(two_ranks) == "RuntimeError: rank 1 boom"
    horovod = """
[1]<stderr>:    raise RuntimeError("rank 1 boom")
[1]<stderr>:RuntimeError: rank 1 boom
[0]<stderr>:horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was caused by \
an exception on one of the ranks
Process 0 exit with status code 1.
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job \
to be terminated. The first process to do so was:
Process name: 0
Exit code: 1
"""
    assert joblogs.failure_reason(horovod) == "RuntimeError: rank 1 boom"
    srun = """
1: [rank5]: RuntimeError: rank 5 boom
0: [rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:25231.
0:   exitcode  : 1 (pid: 9226)
srun: error: n2: task 0: Exited with exit code 1
srun: Force Terminated StepId=1.0
"""
    assert joblogs.failure_reason(srun) == "RuntimeError: rank 5 boom"  # through srun's --label too
    gone = "RuntimeError: Read error [127.0.0.1]:701: Connection reset by peer."
    assert joblogs.failure_reason(f"[rank0]: {gone}\n") == gone  # the only one: the reason still
    assert joblogs.failure_reason("") == ""


def test_job_placed_on_two_nodes_fails_clearly_with_the_local_executor(tmp_path):
    ex = LocalExecutor(tmp_path)
    eng = Engine(virtual_cluster(2, 1), "fifo", executor=ex)
    job = eng.submit({"command": ["python", "x.py"], "launcher": "torchrun", "gpus": 2})
    eng.round()
    assert job.state is JobState.failed
    assert job.reason.startswith("job 1: the local executor runs jobs on this host only, but it was placed")
    assert eng.pool.total == 2


def test_step_times_a_job_reports_reach_the_policy(tmp_path):
    """`schedulearn.elastic.report` in a real job -> metrics.jsonl -> the job's reports, picked
    up before each round; the goodput policy's estimate then trusts twice the size seen."""
    from schedulearn.estimates import REPORTS_KEY, estimate

    script = ("import time\nfrom schedulearn import elastic\n"
              "for i in range(3):\n    elastic.report(step_time=0.5 + i, batch_size=64)\n"
              "print('reported', flush=True)\ntime.sleep(60)\n")

    async def main():
        async with live(tmp_path / "jobs", gpus=4, policy="fifo") as (eng, ex):
            job = eng.submit({"name": "reporter", "script": script, "gpus": "auto", "max_gpus": 4})
            await wait_for(in_log(ex, job.id, "reported"), 60, "the job's reports")
            eng.wake()  # a round (and the executor's advance before it)
            # (a round may have read the first reports before the last was written: all three)
            await wait_for(lambda: job.extra.get(REPORTS_KEY, {}).get("version") == 3, 10,
                           "the three reports in the job")
            state = job.extra[REPORTS_KEY]
            assert state["batch_size"] == 64 and state["max_gpus"] == 1
            (count, step, _), = state["configs"].values()
            assert count == 3 and 0.5 < step < 2.5  # the running mean of the step times
            assert estimate(job, time.time()).max_gpus == 2  # 2 x the largest size reported

    asyncio.run(main())


def test_a_full_job_root_pauses_scheduling_until_it_has_space_again(tmp_path):
    """The job root's disk full (under `min_free_bytes` free, measured on the real file system
    with the threshold raised past what is free): no queued job starts — they wait, none fails —
    and everyone sees why in a pause of the scheduler's own that ends by itself once there is
    space; an admin's pause is never lifted by it. A job that ends while the disk is full says so
    first in its reason. (Before: every queued job failed in turn, `could not start: No space
    left on device`, and a job killed by the full disk gave its log's cut last line.)"""
    from schedulearn.engine import SELF_PAUSER
    from schedulearn.executors.jobdir import free_bytes

    def full(ex: LocalExecutor) -> None:
        ex.min_free_bytes = free_bytes(ex.job_root) + 2**40

    async def main():
        async with live(tmp_path / "jobs") as (eng, ex):
            ending = eng.submit({"name": "ending",
                                 "command": [PY, "-c", "import time; time.sleep(1); exit(3)"]})
            await wait_for(lambda: ending.state is JobState.running, 30, "the first job to run")
            full(ex)
            await wait_for(lambda: eng.paused is not None, 5, "the scheduler's own pause")
            assert eng.paused["by"] == SELF_PAUSER and eng.paused["until"].endswith("free again")
            assert eng.paused["reason"].startswith(f"the disk of the job root {ex.job_root} is full: under ")
            waiting = eng.submit({"name": "waiting", "command": [PY, "-c", "print('ran')"]})
            await wait_for(final(eng, ending.id), 30, "the running job to end (it runs on)")
            assert ending.state is JobState.failed and ending.reason.startswith(
                f"the disk of {ex.job_dir(ending.id)} was full as it ended ("), ending.reason
            await asyncio.sleep(1.0)  # five ticks: still waiting, with the pause as its reason
            assert waiting.state is JobState.queued and waiting.start_time is None
            assert eng.waiting_reason(waiting).startswith(
                f"waiting: scheduling paused by {SELF_PAUSER} (the disk")
            ex.min_free_bytes = 0  # space freed: it resumes by itself
            await wait_for(final(eng, waiting.id), 30, "the waiting job to run once there is space")
            assert waiting.state is JobState.succeeded and eng.paused is None
            eng.pause("carol", "driver upgrade")  # an admin's pause: the disk's state lifts nothing
            full(ex)
            eng.wake()
            await asyncio.sleep(0.5)
            ex.min_free_bytes = 0
            eng.wake()
            await asyncio.sleep(0.5)
            assert eng.paused is not None and eng.paused["by"] == "carol" and "until" not in eng.paused
            eng.resume("carol")

    asyncio.run(main())


def test_a_start_that_fails_as_the_disk_fills_leaves_the_job_waiting(tmp_path):
    """The disk fills between a round's check and a start (another writer): the start fails
    with ENOSPC, and the job goes back to the queue as it was (not started, no restart) instead
    of failing, the scheduler pauses, and the job runs once there is space."""
    import errno

    from schedulearn.engine import SELF_PAUSER
    from schedulearn.executors.jobdir import free_bytes

    async def main():
        async with live(tmp_path / "jobs") as (eng, ex):
            prepare = ex.prepare

            def filled(job, now):
                ex.min_free_bytes = free_bytes(ex.job_root) + 2**40
                raise OSError(errno.ENOSPC, "No space left on device")

            ex.prepare = filled
            seen: list[dict] = []
            eng.listeners.append(seen.append)
            job = eng.submit({"name": "unlucky", "command": [PY, "-c", "print('ran')"]})
            await wait_for(lambda: eng.paused is not None, 5, "the scheduler's own pause")
            assert job.state is JobState.queued and job.start_time is None and job.restarts == 0
            assert eng.pool.total == 4 and not job.alloc
            said = [e["job"]["reason"] for e in seen if e.get("event") == "requeued"]
            assert len(said) == 1
            assert said[0].startswith(f"waiting: scheduling paused by {SELF_PAUSER} (the disk")
            ex.prepare = prepare
            ex.min_free_bytes = 0
            await wait_for(final(eng, job.id), 30, "the job to run once there is space")
            assert job.state is JobState.succeeded and job.restarts == 0 and "ran" in ex.logs(job.id)

    asyncio.run(main())


def test_sizes_and_the_self_pause_in_words():
    from schedulearn.client import paused_text
    from schedulearn.executors.jobdir import size_text

    assert [size_text(n) for n in (0, 1023, 512 * 1024, 64 * 2**20, 1.5 * 2**30, 3 * 2**40)] == [
        "0 B", "1023 B", "512 KiB", "64 MiB", "1.5 GiB", "3072 GiB"]
    since = time.mktime((2026, 11, 29, 21, 0, 0, 0, 0, -1))
    full = {"by": "schedulearn", "since": since, "until": "it has 64 MiB free again",
            "reason": "the disk of the job root /srv/jobs is full: under 64 MiB free"}
    assert paused_text(full) == (
        "scheduling paused by schedulearn since 2026-11-29 21:00 (the disk of the job root /srv/jobs is "
        "full: under 64 MiB free): no job starts until it has 64 MiB free again")
    admins = paused_text({**full, "by": "carol", "until": None})
    assert admins.endswith("until an admin runs schedulearn resume")


def test_the_files_a_job_writes_for_the_server_are_read_a_few_bytes_at_most(tmp_path):
    """`exit_code`, `gate_closed` and the Horovod slots' pid files are written as the job (its
    wrapper, its gate, its slot wrappers): a job that puts a 64 GiB file there (sparse: no disk)
    costs the server a few bytes of reading, not a MemoryError or the OOM killer. Read whole, as
    before, each raised MemoryError."""
    from schedulearn.executors.local import _read_exit_code, _slot_pids
    from schedulearn.jobfiles import EXIT_CODE_FILE, GATE_CLOSED_FILE

    ex = LocalExecutor(tmp_path / "jobs")
    d = ex.job_dir(1)
    (d / "workers").mkdir(parents=True)
    files = ((EXIT_CODE_FILE, b"3\n"), (GATE_CLOSED_FILE, b"2\n"), ("workers/1", b"4242\n"))
    for name, text in files:
        with open(d / name, "wb") as f:
            f.write(text)
            f.truncate(64 << 30)
    assert _read_exit_code(d / EXIT_CODE_FILE) is None  # not a number: NUL bytes follow
    assert not ex._gate_closed(1, 2)
    assert _slot_pids(d / "workers", 1) == [4242]  # its first bytes
    for name, text in files:
        (d / name).write_bytes(text)
    assert _read_exit_code(d / EXIT_CODE_FILE) == 3 and ex._gate_closed(1, 2) and not ex._gate_closed(1, 1)
    assert _slot_pids(d / "workers", 1) == [4242] and _slot_pids(d / "workers", 2) == []
