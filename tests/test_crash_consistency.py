"""Crash consistency of the engine with real stores and the real local executor (issue 16 1-3, issue
10.4): a launch that fails for any reason fails that job alone and frees its GPUs (a read-only job
root on a real tmpfs; a full one pauses scheduling until it has space again); the store is written
before anything acts (`starting` before a launch, a stop before the executor stops, the policy
before memory); a `starting` job found after a restart is adopted or started again, never run twice;
the GPUs a shrink gives up, or a job placed anew leaves, stay `releasing` until the old run exited;
`last_alloc` survives the end of a job and a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedulearn.engine import Engine, RealClock
from schedulearn.executors.local import PID_FILE, LocalExecutor
from schedulearn.model import JobState, SpecError, virtual_cluster
from schedulearn.sim.executor import SimExecutor
from schedulearn.store import SqlStore, StoreError

from tests.conftest import require
from tests.test_policies import _Ticking

PY = sys.executable


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
async def live(root: Path, store: SqlStore | None = None, gpus: int = 2, policy: str = "fifo",
               grace: float = 10.0):
    ex = LocalExecutor(root, cancel_grace=grace)
    eng = Engine(virtual_cluster(1, gpus), policy, executor=ex, store=store)
    task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
    try:
        yield eng, ex
    finally:
        await asyncio.to_thread(ex.terminate_all, 1.0)
        eng.close()
        await task


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/jobs.db"
    return request.getfixturevalue("postgres_fresh_url")


# -- 1. every admitted job ends with a reason --------------------------------------------------------
@contextlib.contextmanager
def tmpfs(mnt: Path, size: str):
    """A real tmpfs of `size` mounted at `mnt` (root only) while the block runs."""
    require(os.geteuid() == 0, "mounting a tmpfs needs root")
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    require(proc.returncode == 0, f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.fixture
def tiny_fs(tmp_path):
    """A real 64 KiB tmpfs: the job root that can be made read-only or full."""
    with tmpfs(tmp_path / "tiny", "64k") as mnt:
        yield mnt


def fill(fs: Path) -> Path:
    """Fill `fs` to its last block with one file; that file."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 4096)
    finally:
        os.close(fd)
    return filler


def _remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True, capture_output=True)


def test_read_only_job_root_fails_jobs_a_full_one_pauses_and_both_recover(tiny_fs, tmp_path):
    """A read-only job root fails each launch with its reason, GPUs freed; a full one (a real
    full tmpfs) pauses scheduling instead — the jobs wait, queued in the store, GPUs free — and
    they run once there is space (`Executor.start_blocker`; the threshold is scaled to the 64 KiB
    file system)."""
    from schedulearn.engine import SELF_PAUSER

    root = tiny_fs / "jobs"

    async def main():
        store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
        async with live(root, store, gpus=2) as (eng, ex):
            ex.min_free_bytes = 16 * 1024
            # read-only: every launch fails with a reason, and the GPUs are free again
            _remount(tiny_fs, "ro")
            ro = [eng.submit({"command": [PY, "-c", "pass"], "name": f"ro{i}"}) for i in range(3)]
            await wait_for(lambda: all(j.state.final for j in ro), 20, "the read-only launches to fail")
            for j in ro:
                assert j.state is JobState.failed, j.to_dict()
                assert "Read-only file system" in j.reason and "\n" not in j.reason, j.reason
                assert j.alloc == {} and j.last_alloc, j.to_dict()
                assert store.get_job(j.id).state is JobState.failed
            assert eng.pool.total == 2 and not eng.running
            # full: the same
            _remount(tiny_fs, "rw")
            filler = fill(tiny_fs)
            full = [eng.submit({"command": [PY, "-c", "pass"], "name": f"full{i}"}) for i in range(2)]
            await wait_for(lambda: eng.paused is not None, 20, "the scheduler to pause on a full disk")
            assert eng.paused["by"] == SELF_PAUSER and str(root) in eng.paused["reason"]
            await asyncio.sleep(1.0)  # five ticks: nothing starts, nothing fails
            for j in full:
                assert j.state is JobState.queued and store.get_job(j.id).state is JobState.queued
            assert eng.pool.total == 2 and not eng.running
            # the disk is back: the waiting jobs run, and the next one
            filler.unlink()
            ok = eng.submit({"command": [PY, "-c", "print('ran fine')"], "name": "ok"})
            await wait_for(lambda: all(j.state.final for j in [*full, ok]), 30,
                           "the jobs after the disk came back")
            assert all(j.state is JobState.succeeded for j in [*full, ok]), [j.to_dict() for j in full]
            assert "ran fine" in ex.logs(ok.id) and eng.paused is None
        store.close()

    asyncio.run(main())


def test_any_launch_exception_fails_that_job_alone(tmp_path):
    """Specs the executor cannot launch (if they get past submit): the job fails with a one-line
    reason, its GPU is free in the same round, and the other jobs of the round run."""

    async def main():
        async with live(tmp_path / "jobs", gpus=4) as (eng, ex):
            bad = []
            for spec in ({"command": ["true"], "env": {"A=B": "1"}},
                         {"command": ["true", "\udfff"]},
                         {"command": ["true"], "env": {"\udfff": "1"}}):
                try:
                    bad.append(eng.submit(spec))
                except SpecError:
                    pass  # refused at submit: fine too
            good = eng.submit({"command": [PY, "-c", "import time; time.sleep(0.5)"]})
            await wait_for(lambda: good.state.final and all(j.state.final for j in bad), 20, "the round")
            assert good.state is JobState.succeeded, good.to_dict()
            for j in bad:
                assert j.state is JobState.failed and j.reason.startswith("could not start: "), j.to_dict()
                assert "\n" not in j.reason and j.alloc == {}
            assert eng.pool.total == 4

    asyncio.run(main())


# -- 2. write-ahead ------------------------------------------------------------------------------------
def test_starting_is_written_before_the_launch_and_running_after(tmp_path):
    """What the store holds while the executor launches: `starting` with the run and the GPUs."""
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
    seen = []

    class Probe(SimExecutor):
        def start(self, job, now):
            seen.append((store.get_job(job.id).state, dict(store.get_job(job.id).alloc)))
            super().start(job, now)

    eng = Engine(virtual_cluster(1, 2), "fifo", Probe(), store=store)
    job = eng.submit({"duration": 5, "gpus": 2}, now=0.0)
    eng.round(1.0)
    assert seen == [(JobState.starting, {"node0": (0, 1)})]
    assert store.get_job(job.id).state is JobState.running
    kinds = [(e["kind"], e["data"]) for e in store.events(job_id=job.id)]
    assert kinds[:3] == [("submitted", {}), ("starting", {"run": 0, "alloc": {"node0": [0, 1]}}),
                         ("started", {"gpus": 2})]
    store.close()



def test_a_closed_executor_leaves_a_later_run_of_its_job_alone(tmp_path):
    """A closed executor's watcher, waking late for a run that ended, must not end "strays" by
    the marks in their environment: the job is the next executor's, and a run of it requeued
    after a crash carries the same marks (job directory, restart count). It did, one CI run in
    many: the test below saw its requeued run killed by the first executor's watcher."""
    from schedulearn.executors.local import _Run
    from schedulearn.model import Job, JobSpec

    root, out = tmp_path / "jobs", tmp_path / "pid"
    cmd = [PY, "-c", f"import os,time; open({str(out)!r},'w').write(str(os.getpid())); time.sleep(60)"]
    old, new = LocalExecutor(root), LocalExecutor(root)
    job = Job(id=1, spec=JobSpec(command=cmd), submit_time=0.0, alloc={"node0": (0,)})
    new.start(job, time.time())
    try:
        deadline = time.monotonic() + 20
        while not (out.exists() and out.read_text()):
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
        pid = int(out.read_text())
        old.close()
        old._end_strays(_Run(job_id=1, restarts=0, pid=2**22 + 1), time.monotonic())  # its run, gone
        time.sleep(0.5)
        os.kill(pid, 0)  # alive: not ended by the closed executor
        assert "left outside its process group" not in new.logs(1)
    finally:
        new.terminate_all(1.0)

def test_restart_adopts_a_starting_job_whose_process_runs_and_requeues_one_that_never_ran(tmp_path, caplog):
    """A crash between the `starting` record and `running`: the run found by its pid file is
    adopted (one process), a launch that never opened its gate is started again."""
    url = f"sqlite:///{tmp_path}/jobs.db"
    root = tmp_path / "jobs"
    out = tmp_path / "runs.txt"
    cmd = [PY, "-c", f"import os,time; open({str(out)!r},'a').write(f'{{os.getpid()}}\\n'); time.sleep(3)"]

    async def first():
        store = SqlStore(url)
        ex = LocalExecutor(root)
        eng = Engine(virtual_cluster(1, 2), "fifo", executor=ex, store=store)
        a = eng.submit({"command": cmd, "name": "launched"})
        b = eng.submit({"command": cmd, "name": "cut-short"})
        eng.round()
        await wait_for(lambda: out.exists() and len(out.read_text().split()) == 2, 20, "both to run")
        # what a kill -9 between the records leaves: both `starting` in the store; b's process
        # never got past its gate (no pid file of its run), a's runs
        ex.close()
        b_pid = int(json.loads((root / str(b.id) / PID_FILE).read_text())["pid"])
        os.killpg(b_pid, 9)
        (root / str(b.id) / PID_FILE).unlink()
        for j in (a, b):
            j.state = JobState.starting
            store.update_job(j)
        store.close()
        return a.id, b.id

    a_id, b_id = asyncio.run(first())
    out.write_text("")

    async def second():
        store = SqlStore(url)
        with caplog.at_level(logging.INFO, logger="schedulearn.engine"):
            async with live(root, store) as (eng, ex):
                said = [r.getMessage() for r in caplog.records if r.name == "schedulearn.engine"
                        and r.getMessage().startswith("store: ")]
                a, b = eng.get(a_id), eng.get(b_id)
                assert a.state is JobState.running and ex.is_running(a_id)  # adopted at once
                # the operator's one line on what the restart found
                assert said == ["store: 2 job(s): 1 running, 1 queued"]
                await wait_for(lambda: a.state.final and b.state.final, 30, "both to end")
                assert a.state is b.state is JobState.succeeded, (a.to_dict(), b.to_dict())
                assert len(out.read_text().split()) == 1  # only b ran again; a was not duplicated
                assert "adopted" in [e["kind"] for e in store.events(job_id=a_id)]
                assert "requeued" in [e["kind"] for e in store.events(job_id=b_id)]
        store.close()

    asyncio.run(second())


# a server that dies (`os._exit`, as kill -9) right after it wrote the `pid` file of a job's run #N (0:
# its first launch; 1: its relaunch after a resize), before it opened that run's gate
CUT_BEHIND_THE_GATE = r"""
import asyncio, json, os, sys
from schedulearn.engine import Engine, RealClock
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import virtual_cluster
from schedulearn.store import SqlStore
url, root, notes = sys.argv[1:4]
cmd, run_no = json.loads(sys.argv[4]), int(sys.argv[5])
real_replace = os.replace
def replace(src, dst, *args, **kw):
    cut = os.path.basename(str(dst)) == "pid" and json.loads(open(src).read())["restarts"] == run_no
    real_replace(src, dst, *args, **kw)
    if cut:
        os._exit(9)
os.replace = replace
def started():
    return os.path.exists(notes) and '"start"' in open(notes).read()
async def main():
    eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=LocalExecutor(root), store=SqlStore(url))
    task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
    a = eng.submit({"command": cmd, "gpus": "auto", "max_gpus": 2, "name": "elastic"})
    while not (a.size == 2 and started()):
        await asyncio.sleep(0.05)
    eng.submit({"command": cmd, "gpus": 1, "name": "newcomer"})
    await asyncio.sleep(60)
    await task
asyncio.run(main())
"""

RUN_NUMBERED = """
import json, os, signal, sys, time
me = dict(job=os.environ["SCHEDULEARN_JOB_ID"], run=int(os.environ["SCHEDULEARN_RESTART_COUNT"]))
def note(what):
    with open(sys.argv[1], "a") as f:
        f.write(json.dumps(dict(what=what, **me)) + "\\n")
signal.signal(signal.SIGTERM, lambda *_: (note("term"), sys.exit(0)))
note("start")
time.sleep({"1": float(sys.argv[2]) if me["run"] == 0 else 1.5}.get(me["job"], 4))
note("end")
"""


def cut_behind_the_gate(tmp_path: Path, run_no: int, first_run_s: float):
    """Run `CUT_BEHIND_THE_GATE` to its death at job 1's run #`run_no` (job 1's run #0 lasting
    `first_run_s`); check that the gate closed unopened, saying so. The store's URL, the job root,
    job 1's directory and a reader of the runs' notes (job id -> [(what, run)])."""
    from schedulearn.jobfiles import GATE_CLOSED_FILE

    url, root, notes = f"sqlite:///{tmp_path}/jobs.db", tmp_path / "jobs", tmp_path / "notes.jsonl"
    script = tmp_path / "job.py"
    script.write_text(RUN_NUMBERED)
    cmd = [PY, str(script), str(notes), str(first_run_s)]

    def read(job_id):
        if not notes.exists():
            return []
        return [(n["what"], n["run"]) for n in map(json.loads, notes.read_text().splitlines())
                if n["job"] == str(job_id)]

    crashed = subprocess.run([PY, "-c", CUT_BEHIND_THE_GATE, url, str(root), str(notes), json.dumps(cmd),
                              str(run_no)], timeout=90, capture_output=True, text=True)
    assert crashed.returncode == 9, crashed.stderr[-3000:]
    job_dir = root / "1"
    assert json.loads((job_dir / PID_FILE).read_text())["restarts"] == run_no
    closed = job_dir / GATE_CLOSED_FILE
    # the gate writes it when it sees its pipe closed: its shell creates the file, then writes the
    # line (a read in between finds it empty), then exits -- the server reads it only once the
    # gate's process is gone (`_reattach`), the test waits for the whole line
    deadline = time.monotonic() + 10
    while not (closed.exists() and closed.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert closed.read_text().strip() == str(run_no)
    return url, root, job_dir, read


def test_a_first_launch_cut_short_behind_its_gate_runs_once_after_a_restart(tmp_path):
    """The server dies after writing the `pid` file of job 1's first run, before opening its gate
    (the job `starting` in the store): the next server finds nothing of it ran, puts it back in
    the queue, and it runs once."""
    from schedulearn.jobfiles import GATE_CLOSED_FILE

    url, root, job_dir, read = cut_behind_the_gate(tmp_path, 0, first_run_s=1.5)
    assert read(1) == []
    store = SqlStore(url)
    assert store.get_job(1).state is JobState.starting

    async def second():
        async with live(root, store, policy="elastic-fifo") as (eng, ex):
            a = eng.get(1)
            await wait_for(lambda: a.state.final, 40, "the job to end")
            assert a.state is JobState.succeeded, a.to_dict()
            assert read(1) == [("start", 0), ("end", 0)]
            assert "requeued" in [e["kind"] for e in store.events(job_id=1)]
            assert not (job_dir / GATE_CLOSED_FILE).exists()

    asyncio.run(second())
    store.close()


def test_a_relaunch_cut_short_behind_its_gate_is_started_again_after_a_restart(tmp_path):
    """elastic-fifo shrinks job 1 for a newcomer; the server dies after writing the `pid` file of
    job 1's relaunch (run #1), before opening its gate: the gate exits unrun and says so
    (`gate_closed`). The next server starts run #1 (once) instead of failing the job `lost on
    restart`, as it did when a dead run with no exit status read the same as one killed hard."""
    from schedulearn.jobfiles import GATE_CLOSED_FILE

    url, root, job_dir, read = cut_behind_the_gate(tmp_path, 1, first_run_s=60)
    assert read(1) == [("start", 0), ("term", 0)]  # run #0 stopped for the resize, #1 never ran
    store = SqlStore(url)
    a = store.get_job(1)
    assert a.state is JobState.running and a.restarts == 1 and a.size == 1, a.to_dict()

    async def second():
        async with live(root, store, policy="elastic-fifo") as (eng, ex):
            a, b = eng.get(1), eng.get(2)
            await wait_for(lambda: a.state.final and b.state.final, 40, "both jobs to end")
            assert a.state is JobState.succeeded, a.to_dict()
            assert b.state is JobState.succeeded, b.to_dict()
            runs = read(1)  # run #1 once (it may grow again, run #2, when the newcomer ends first)
            assert runs.count(("start", 1)) == 1 and runs[-1][0] == "end" and runs[-1][1] >= 1, runs
            log = (job_dir / "log.txt").read_text()
            assert "run #1 never started (the server stopped before its gate opened)" in log
            assert not (job_dir / GATE_CLOSED_FILE).exists()  # each launch removes the last one's

    asyncio.run(second())
    store.close()


def test_store_failure_leaves_policy_and_cancel_unchanged(postgres_server, postgres_fresh_url):
    """PostgreSQL stopped: switching the policy and cancelling raise `StoreError` and change
    nothing in memory; nothing starts without its `starting` record; after the restart of the
    database the cancel works and the job never runs."""
    store = SqlStore(postgres_fresh_url)
    eng = Engine(virtual_cluster(1, 1), "fifo", SimExecutor(), store=store)
    blocker = eng.submit({"duration": 10}, now=0.0)
    queued = eng.submit({"duration": 10}, now=0.0)
    eng.round(0.0)
    assert blocker.state is JobState.running and queued.state is JobState.queued
    postgres_server.pg_ctl("-m", "fast", "-w", "stop")
    try:
        with pytest.raises(StoreError):
            eng.set_policy("las")
        assert eng.policy.name == "fifo"
        with pytest.raises(StoreError):
            eng.cancel(queued.id, now=1.0)
        assert queued.state is JobState.queued and queued.id in eng.active
        with pytest.raises(StoreError):
            eng.cancel(blocker.id, now=1.0)
        assert blocker.stopping is None and blocker.id in eng.running
        # the blocker ends while the store is down: a fact, kept in memory; the queued job
        # cannot start (its `starting` record cannot be written)
        eng.executor.advance(10.0)
        assert blocker.state is JobState.succeeded
        with pytest.raises(Exception, match="store"):
            eng.round(10.0)
        assert queued.state is JobState.queued and eng.pool.total == 1
    finally:
        postgres_server.start()
    eng.cancel(queued.id, now=11.0)
    assert queued.state is JobState.cancelled
    eng.round(11.0)  # the blocker's end is stored before anything else
    again = SqlStore(postgres_fresh_url)
    assert again.get_job(blocker.id).state is JobState.succeeded
    assert again.get_job(queued.id).state is JobState.cancelled
    assert again.get_policy() == "fifo"
    eng2 = Engine(virtual_cluster(1, 1), "fifo", SimExecutor(), store=again)
    eng2.round(12.0)
    assert eng2.get(queued.id).state is JobState.cancelled and not eng2.running
    again.close()
    store.close()


# -- 3. releasing ----------------------------------------------------------------------------------------
SLOW_EXIT = """
import json, os, signal, sys, time
out = sys.argv[1]
def note(what):
    with open(out, "a") as f:
        f.write(json.dumps({"job": os.environ["SCHEDULEARN_JOB_ID"], "what": what, "t": time.time(),
                            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "pid": os.getpid()}) + "\\n")
def term(*_):
    note("term")
    time.sleep(float(os.environ.get("EXIT_DELAY", "0")))  # writing its checkpoint
    note("exit")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
note("start")
time.sleep(float(os.environ.get("RUN_FOR", "60")))
note("exit")
"""


def test_shrunk_gpus_are_releasing_until_the_old_run_exited(tmp_path):
    """elastic-fifo shrinks an elastic job for a queued one; the old run takes 2 s to exit after
    SIGTERM. The queued job must not start on the freed GPU before that exit."""
    script = tmp_path / "slow_exit.py"
    script.write_text(SLOW_EXIT)
    notes = tmp_path / "notes.jsonl"
    store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")

    def read():
        return [json.loads(x) for x in notes.read_text().splitlines()] if notes.exists() else []

    async def main():
        async with live(tmp_path / "jobs", store, gpus=2, policy="elastic-fifo") as (eng, ex):
            a = eng.submit({"command": [PY, str(script), str(notes)], "gpus": "auto", "max_gpus": 2,
                            "env": {"EXIT_DELAY": "2"}})
            await wait_for(lambda: a.size == 2 and any(n["what"] == "start" and n["gpus"] == "0,1"
                                                       for n in read()), 30, "a to run on 2 GPUs")
            seen_releasing = []
            eng.listeners.append(lambda e: seen_releasing.append(e["job"]["releasing"])
                                 if e.get("event") == "resized" else None)
            b = eng.submit({"command": [PY, str(script), str(notes)], "gpus": 1, "env": {"RUN_FOR": "0.2"}})
            await wait_for(lambda: a.size == 1 and a.releasing, 10, "a to shrink")
            assert eng.pool.total == 0 and b.state is JobState.queued  # held while the old run exits
            freed = a.to_dict()["releasing"]
            assert sum(map(len, freed.values())) == 1 and seen_releasing == [freed]
            assert store.get_job(a.id).to_dict()["releasing"] == freed
            await wait_for(lambda: b.state.final, 30, "b to run")
            assert b.state is JobState.succeeded, b.to_dict()
            assert not a.releasing
            ns = read()
            a_exit = min(n["t"] for n in ns if n["job"] == str(a.id) and n["what"] == "exit")  # the old run
            b_start = min(n["t"] for n in ns if n["job"] == str(b.id) and n["what"] == "start")
            assert b_start > a_exit, "b started on a GPU that a's old run still held"
            kinds = [e["kind"] for e in store.events(job_id=a.id)]
            assert kinds.index("resized") < kinds.index("released")
            eng.cancel(a.id)
            await wait_for(lambda: a.state.final, 30, "a to stop")

    asyncio.run(main())
    store.close()


def test_a_moving_job_holds_the_gpu_it_leaves_until_its_old_run_exited(tmp_path):
    """elastic-fifo on 3 GPUs: A (2 GPUs) ends; E (auto, on GPU 2) grows to 2 by a restart and is
    placed anew, on GPUs 0,1; its old run takes 2 s to exit. Q, queued meanwhile, must not start
    on GPU 2 before that exit: it starts in the round the release wakes."""
    script = tmp_path / "slow_exit.py"
    script.write_text(SLOW_EXIT)
    notes = tmp_path / "notes.jsonl"

    def read():
        return [json.loads(x) for x in notes.read_text().splitlines()] if notes.exists() else []

    def starts(job):
        return [n for n in read() if n["job"] == str(job.id) and n["what"] == "start"]

    async def main():
        async with live(tmp_path / "jobs", None, gpus=3, policy="elastic-fifo") as (eng, ex):
            cmd = [PY, str(script), str(notes)]
            a = eng.submit({"command": cmd, "gpus": 2, "env": {"RUN_FOR": "3"}})
            e = eng.submit({"command": cmd, "gpus": "auto", "max_gpus": 2, "env": {"EXIT_DELAY": "2"}})
            await wait_for(lambda: starts(a) and starts(e), 30, "a and e to run")
            assert starts(e)[0]["gpus"] == "2"
            q = eng.submit({"command": cmd, "gpus": 1, "env": {"RUN_FOR": "0.2"}})
            await wait_for(lambda: e.size == 2, 30, "e to grow when a ends")
            assert e.alloc == {"node0": (0, 1)} and e.releasing == {"node0": (2,)}
            assert q.state is JobState.queued and eng.pool.total == 0  # GPU 2: the old run's still
            await wait_for(lambda: q.state.final, 30, "q to run")
            assert q.state is JobState.succeeded, q.to_dict()
            e_exit = min(n["t"] for n in read() if n["job"] == str(e.id) and n["what"] == "exit")
            assert starts(q)[0]["gpus"] == "2" and starts(q)[0]["t"] > e_exit, read()
            await wait_for(lambda: len(starts(e)) == 2, 30, "e's new run")
            assert starts(e)[1]["gpus"] == "0,1"
            eng.cancel(e.id)
            await wait_for(lambda: e.state.final, 30, "e to stop")

    asyncio.run(main())


def test_a_preempted_job_is_not_started_again_while_the_run_of_another_one_frees_its_gpu(tmp_path):
    """Four GPUs: A, B on one each, C on two. The policy grows C to four, preempting A and B; A
    writes its checkpoint for 2 s after SIGTERM, B exits at once. B must not be started again in
    between (a round then saw 3 GPUs, too few for C, and gave B its own GPU back for half a
    second: seen live under `qoe`): C moves to the four once A's run is gone, B and A wait."""
    script = tmp_path / "slow_exit.py"
    script.write_text(SLOW_EXIT)
    notes = tmp_path / "notes.jsonl"

    def starts(job):
        ns = [json.loads(x) for x in notes.read_text().splitlines()] if notes.exists() else []
        return [n for n in ns if n["job"] == str(job.id) and n["what"] == "start"]

    async def main():
        policy = _Ticking()
        policy.wants = {"A": 1, "B": 1, "C": 2}
        async with live(tmp_path / "jobs", None, gpus=4, policy=policy) as (eng, ex):
            cmd = [PY, str(script), str(notes)]
            a, b, c = (eng.submit({"name": name, "command": cmd, "gpus": "auto", "max_gpus": 4,
                                   "env": {"EXIT_DELAY": delay}})
                       for name, delay in (("A", "2"), ("B", "0"), ("C", "0")))
            await wait_for(lambda: starts(a) and starts(b) and starts(c), 30, "A, B and C to run")
            policy.wants = {"C": 4, "B": 1, "A": 1}  # (B and A only where C leaves room)
            await wait_for(lambda: len(starts(c)) == 2, 30, "C's run on four GPUs")
            assert starts(c)[1]["gpus"] == "0,1,2,3"
            exits = [json.loads(x) for x in notes.read_text().splitlines()]
            a_exit = min(n["t"] for n in exits if n["job"] == str(a.id) and n["what"] == "exit")
            assert starts(c)[1]["t"] > a_exit
            await asyncio.sleep(1.0)  # (rounds at every tick)
            assert len(starts(b)) == len(starts(a)) == 1, starts(b)
            assert (a.state, b.state, a.restarts, b.restarts) == (JobState.queued, JobState.queued, 1, 1)
            eng.cancel(c.id)
            await wait_for(lambda: c.state.final, 30, "C to stop")

    asyncio.run(main())


# -- 4. last_alloc -----------------------------------------------------------------------------------------
def test_last_alloc_kept_after_the_end_and_a_restart(store_url):
    store = SqlStore(store_url)
    eng = Engine(virtual_cluster(1, 4), "fifo", SimExecutor(), store=store)
    a = eng.submit({"duration": 5, "gpus": 2}, now=0.0)
    b = eng.submit({"duration": 50, "gpus": "auto", "min_gpus": 1}, now=0.0)
    eng.round(0.0)
    assert a.to_dict()["last_alloc"] == a.to_dict()["alloc"] == {"node0": [0, 1]}
    assert b.to_dict()["last_alloc"] == {"node0": [2]}
    eng.executor.advance(5.0)
    assert a.state is JobState.succeeded and a.alloc == {}
    assert a.to_dict()["last_alloc"] == {"node0": [0, 1]}
    store.close()
    again = SqlStore(store_url)
    eng2 = Engine(virtual_cluster(1, 4), "fifo", SimExecutor(), store=again)
    assert eng2.get(a.id).to_dict()["last_alloc"] == {"node0": [0, 1]}
    assert eng2.get(b.id).to_dict()["last_alloc"] == {"node0": [2]}
    again.close()


def test_a_full_disk_under_the_store_too_pauses_in_memory(tmp_path):
    """The SQLite store on the full disk as well (a one-machine set-up): the scheduler's own pause
    cannot be stored, and holds all the same; it ends, and is stored, once there is space."""
    from schedulearn.engine import PAUSED, SELF_PAUSER

    with tmpfs(tmp_path / "disk", "2m") as disk:
        store = SqlStore(f"sqlite:///{disk}/jobs.db")
        ex = LocalExecutor(disk / "jobs")
        ex.min_free_bytes = 16 * 1024
        eng = Engine(virtual_cluster(1, 2), "fifo", executor=ex, store=store)
        try:
            filler = fill(disk)
            with pytest.raises(Exception, match="disk is full"), store.transaction():  # no write now
                store.set_setting(PAUSED, "")
            eng.round()
            assert eng.paused is not None and eng.paused["by"] == SELF_PAUSER
            filler.unlink()
            eng.round()
            assert eng.paused is None and not store.get_setting(PAUSED)
        finally:
            eng.close()
            store.close()
