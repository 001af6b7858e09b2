"""Resize in place: a real Horovod Elastic job on CPU under virtual GPUs, driven by the engine.

An elastic Horovod job A that asks to be resized in place (`resize: in-place`, 1..2 GPUs) starts
on GPUs 0 and 1 of a 3-GPU host under elastic-fifo; job C takes GPU 2; job B arrives and the
policy shrinks A to GPU 0 to give B GPU 1; when C ends A grows back to 2 GPUs, 0 and 2. Horovod
Elastic removes and adds the worker (tests/jobs/hvd_elastic_train.py): rank 0 keeps its
process, the step counter goes on exactly, no run is restarted (`restarts` 0 and
`SCHEDULEARN_RESTART_COUNT` 0 throughout), the worker added by the grow sees the GPUs of its
slot (forked by the run's prewarm server, with the environment an exec gives), each resize is
a `resized` event with `in_place: true` and a measured `resize_pause`, and
the model ends equal to an unresized run's.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

from schedulearn import pauses
from schedulearn.engine import Engine, RealClock
from schedulearn.executors import launch
from schedulearn.executors.launch import (
    DISCOVER_SCRIPT,
    WORKERS_DIR,
    build_workers,
    discover_script,
    elastic_files,
)
from schedulearn.executors.local import LocalExecutor
from schedulearn.gpulocks import GpuLocks
from schedulearn.model import JobSpec, JobState, virtual_cluster
from schedulearn.store.sql import SqlStore

from tests.conftest import assert_unresized_weights, require
from tests.test_elastic_resize import JOBS, _has_horovod, wait_for

STEPS = 60
PREFIX = r"^(?:\[\d+\]<stdout>:)?"
STEP = re.compile(PREFIX + r"step (\d+) world (\d) pid (\d+) restart (\d+)$", re.M)
PREWARMED = re.compile(PREFIX + r"worker pid (\d+) env (\w+) prewarmed ([01])$", re.M)
WORKER = re.compile(PREFIX + r"worker rank (\d) local (\d) size (\d) cuda (\S+) pid (\d+)$", re.M)


def test_horovod_in_place_runs_horovod_elastic_with_a_discovery_script_and_a_slot_wrapper(tmp_path):
    """The launch of a Horovod job resized in place: horovodrun in elastic mode reading the
    job's allocation from its directory; each worker's wrapper sets its GPUs from the `gpus`
    file and records its pid. Every other job keeps the plain launch (checkpoint-restart)."""
    spec = JobSpec(command=["python", "train.py"], launcher="horovod", gpus="auto", min_gpus=1, max_gpus=3,
                   resize="in-place")
    alloc = {"node0": (4, 2)}
    (w,) = build_workers(spec, 7, alloc, tmp_path, python="python", elastic_np=(1, 3))
    i = w.argv.index("--min-np")
    assert w.argv[i:i + 6] == ["--min-np", "1", "--max-np", "3", "--host-discovery-script",
                               str(tmp_path / DISCOVER_SCRIPT)]
    assert w.argv[w.argv.index("-np") + 1] == "2" and "-H" not in w.argv
    assert w.argv[w.argv.index("--network-interface") + 1] == "lo"
    (plain,) = build_workers(spec, 7, alloc, tmp_path, python="python")
    assert "--min-np" not in plain.argv and "-H" in plain.argv

    files = elastic_files(alloc)
    assert files == {"gpus": "4,2\n", "hosts": "localhost:2\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / DISCOVER_SCRIPT).write_text(discover_script(tmp_path))
    os.chmod(tmp_path / DISCOVER_SCRIPT, 0o755)
    found = subprocess.run([str(tmp_path / DISCOVER_SCRIPT)], capture_output=True, text=True).stdout
    assert found == "localhost:2\n"

    (tmp_path / WORKERS_DIR).mkdir()
    assert w.argv[:3] == ["/bin/sh", "-c", launch._WITH_PREWARM]  # the prewarm server beside horovodrun
    assert w.argv[3:6] == ["python", launch.PREWARM, str(tmp_path)] and w.argv[6:8] == ["python", "-m"]
    i = w.argv.index("/bin/sh", 3)
    shell = w.argv[i:i + 5]
    assert shell[2] == launch._SLOT_WRAPPER
    assert w.argv[i + 5:] == launch.user_command(spec, "python", tmp_path, launch.RUNNER)
    shell[3] = sys.executable  # the job's Python runs the prewarm client
    env = {"PATH": os.environ["PATH"], "SCHEDULEARN_JOB_DIR": str(tmp_path), "HOROVOD_LOCAL_RANK": "1",
           "CUDA_VISIBLE_DEVICES": "9"}
    out = subprocess.run([*shell, "/bin/sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES $$ $0 $1"', "a b", "c"],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "4,2"  # the job's GPUs in slot order, read when the worker starts
    assert (tmp_path / WORKERS_DIR / "1").read_text().strip() == out[1]  # its pid, by local rank
    assert out[2:] == ["a", "b", "c"]  # no prewarm server: the client execs the command as given


def test_horovod_elastic_job_resized_in_place_2_1_2(tmp_path):
    require(_has_horovod(), "horovod is not installed (scripts/setup.sh builds it)")
    release_b, release_c = tmp_path / "release-b", tmp_path / "release-c"

    async def main():
        store = SqlStore(f"sqlite:///{tmp_path}/jobs.db")
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=20)
        ex.gpu_locks = GpuLocks(tmp_path / "locks", str(ex.job_root), virtual=True)  # host-wide claims
        outside = GpuLocks(tmp_path / "locks", "another scheduler", virtual=True)
        eng = Engine(virtual_cluster(1, 3), "elastic-fifo", executor=ex, store=store)

        def claims() -> dict[int, int]:  # GPU -> the job claiming it, as another scheduler sees it
            return {int(u.rsplit("-", 1)[1]): h["job"] for u, h in outside.holders(eng.nodes[0].gpus).items()}

        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            a = eng.submit({"name": "hvd-elastic", "command": ["python", str(JOBS / "hvd_elastic_train.py")],
                            "launcher": "horovod", "gpus": "auto", "min_gpus": 1, "max_gpus": 2,
                            "resize": "in-place", "env": {"TRAIN_STEPS": str(STEPS), "STEP_SLEEP": "0.15"}})
            await wait_for(lambda: re.search(r"step [3-9] world 2", ex.logs(a.id)), 120,
                           "the job to train on 2 GPUs")
            assert a.alloc == {"node0": (0, 1)}
            c = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release_c)],
                            "gpus": 1})
            await wait_for(lambda: c.state is JobState.running, 30, "job C to start on the free GPU")
            assert a.size == 2 and c.alloc == {"node0": (2,)}
            b = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release_b)],
                            "gpus": 1})
            await wait_for(lambda: b.state is JobState.running, 60, "job B to start (A shrunk in place)")
            assert a.size == 1 and a.alloc == {"node0": (0,)} and b.alloc == {"node0": (1,)}
            assert claims() == {0: a.id, 1: b.id, 2: c.id}  # (the shrink gave up A's claim on GPU 1)
            await wait_for(lambda: re.search(r"step \d+ world 1", ex.logs(a.id)), 90, "A to train on 1 GPU")
            await wait_for(lambda: len(pauses.measured(a, True)) == 1, 30, "the shrink's pause measured")
            release_c.touch()
            await wait_for(lambda: c.state.final, 30, "job C to end")
            await wait_for(lambda: a.size == 2, 20, "A to grow back (in place)")
            assert a.alloc == {"node0": (0, 2)}  # its worker keeps GPU 0; the new slot is GPU 2
            assert claims() == {0: a.id, 1: b.id, 2: a.id}  # (the grow claimed GPU 2)
            await wait_for(lambda: a.state.final, 180, "the resized job to finish")
            text = ex.logs(a.id)
            assert a.state is JobState.succeeded, a.reason + "\n" + text[-4000:]
            assert a.restarts == 0 and a.extra[pauses.IN_PLACE_KEY] == 2
            assert text.count("=== schedulearn: start #") == 1  # one launch: nothing restarted

            steps = [(int(s), int(w), int(p), int(r)) for s, w, p, r in STEP.findall(text)]
            assert [s for s, *_ in steps] == list(range(1, STEPS + 1)), steps  # not a step lost or repeated
            worlds = [w for i, (_, w, _, _) in enumerate(steps) if i == 0 or steps[i - 1][1] != w]
            assert worlds == [2, 1, 2], worlds
            assert len({p for _, _, p, _ in steps}) == 1  # rank 0 kept its process throughout
            assert {r for *_, r in steps} == {0}  # SCHEDULEARN_RESTART_COUNT never changed

            workers = [(int(r), int(lr), int(n), cuda, int(p)) for r, lr, n, cuda, p in WORKER.findall(text)]
            rank0 = steps[0][2]
            assert {(r, lr, cuda) for r, lr, _, cuda, p in workers if p == rank0} == {(0, 0, "0,1")}
            others = [(lr, n, cuda, p) for r, lr, n, cuda, p in workers if p != rank0]
            started = {p: cuda for lr, n, cuda, p in others}
            assert len(started) == 2, others  # the first second worker, and the one the grow added
            first, added = list(started)
            assert started[first] == "0,1" and started[added] == "0,2"  # slot 1: GPU 1, then GPU 2
            assert all(lr == 1 for lr, *_ in others)
            # the added worker was forked by the run's prewarm server (no cold start), with exactly
            # the environment its slot's first worker, started by exec, had (GPUs apart)
            assert "schedulearn prewarm: ready" in text and "prewarm: cold start" not in text
            how = {int(p): (env, int(pre)) for p, env, pre in PREWARMED.findall(text)}
            assert how[added][1] == 1 and how[rank0][1] == 0, how
            assert how[added][0] == how[first][0], how
            shrink = ("resized in place: 2 -> 1 GPUs, CUDA_VISIBLE_DEVICES=0; Horovod Elastic ends the 1 "
                      "removed worker with 'has been removed from elastic job' and exit code 134: "
                      "expected, not an error ===")
            assert shrink in text
            assert "resized in place: 1 -> 2 GPUs, CUDA_VISIBLE_DEVICES=0,2 ===" in text  # (a grow: no note)
            # what the note says comes next: the removed worker's abort, after the shrink's marker
            after = text[text.index(shrink):text.index("resized in place: 1 -> 2 GPUs")]
            assert "has been removed from elastic job" in after, after
            assert "exit with status code 134" in after, after

            events = store.events(a.id)
            resized = [e["data"] for e in events if e["kind"] == "resized"]
            assert [(d["gpus"], d["in_place"], d["run"]) for d in resized] == [(1, True, 0), (2, True, 0)]
            measured = [e["data"] for e in events if e["kind"] == "resize_pause"]
            assert [(d["from"], d["to"], d["in_place"]) for d in measured] == [(2, 1, True), (1, 2, True)]
            assert all(0 < d["pause_s"] < 30 and d["first_step_t"] > d["last_step_t"] for d in measured)
            assert pauses.measured(a, True) == [d["pause_s"] for d in measured]
            assert pauses.price(a, 30.0) < 30.0  # the goodput policy's price of its next resize

            assert_unresized_weights(tmp_path / "jobs" / str(a.id), STEPS)
            release_b.touch()
            await wait_for(lambda: b.state.final, 30, "job B to end")
            assert b.state is JobState.succeeded and c.state is JobState.succeeded
            assert claims() == {}
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task
            store.close()

    asyncio.run(main())
