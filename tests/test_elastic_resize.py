"""Resize = checkpoint-restart, with a real torchrun job on CPU driven by the engine.

An elastic job (1..2 GPUs) starts on 2 GPUs of a 2-GPU host under elastic-fifo; a second job
arrives and the policy shrinks the first to 1 GPU; when the second ends it grows back to 2.
The training (tests/jobs/elastic_train.py) is deterministic and its global batch does not depend
on the world size, so the resized run must continue its step counter where it stopped and end
with the weights of a run that was never resized.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

from schedulearn.engine import Engine, RealClock
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import JobState, virtual_cluster

from tests.conftest import assert_unresized_weights, require, wait_for

JOBS = Path(__file__).parent / "jobs"
STEPS = 40


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True



def test_torchrun_job_resized_2_1_2_continues_and_matches_an_unresized_run(tmp_path):
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")
    release = tmp_path / "release"

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=20)
        eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            a = eng.submit({"name": "elastic", "command": ["python", str(JOBS / "elastic_train.py")],
                            "launcher": "torchrun", "gpus": "auto", "min_gpus": 1, "max_gpus": 2,
                            "env": {"TRAIN_STEPS": str(STEPS), "STEP_SLEEP": "0.1"}})
            assert a.size == 0 or a.size == 2
            await wait_for(lambda: "step 3 world 2" in ex.logs(a.id), 90, "the job to train on 2 GPUs")
            b = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release)], "gpus": 1})
            await wait_for(lambda: b.state is JobState.running, 10, "the second job to start")
            assert a.size == 1 and a.state is JobState.running
            await wait_for(lambda: re.search(r"step \d+ world 1", ex.logs(a.id)), 90,
                           "the job to train on 1 GPU")
            release.touch()
            await wait_for(lambda: b.state.final, 30, "the second job to end")
            await wait_for(lambda: a.size == 2, 10, "the job to grow back")
            await wait_for(lambda: a.state.final, 150, "the resized job to finish")
            text = ex.logs(a.id)
            assert a.state is JobState.succeeded, a.reason + "\n" + text[-3000:]
            assert a.restarts == 2

            steps = [(int(s), int(w), int(r)) for s, w, r in
                     re.findall(r"^(?:\[rank\d+\]: )?step (\d+) world (\d) restart (\d)$", text, re.M)]
            numbers = [s for s, _, _ in steps]
            assert numbers == list(range(1, STEPS + 1)), numbers  # continuous: no restart from 0
            worlds = [w for i, (_, w, _) in enumerate(steps) if i == 0 or steps[i - 1][1] != w]
            assert worlds == [2, 1, 2], worlds
            assert sorted({r for _, _, r in steps}) == [0, 1, 2]
            resumed = [int(s) for s in  # (the 2-process runs' lines carry the rank prefix)
                       re.findall(r"^(?:\[rank\d+\]: )?restart \d world \d resuming at (\d+)$", text, re.M)]
            assert resumed[0] == 0 and all(s > 0 for s in resumed[1:]) and len(resumed) == 3

            final = assert_unresized_weights(tmp_path / "jobs" / str(a.id), STEPS)
            assert len(final) == 9
            metrics = (tmp_path / "jobs" / str(a.id) / "metrics.jsonl").read_text().splitlines()
            assert {json.loads(m)["num_gpus"] for m in metrics} == {1, 2}
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


def _has_horovod() -> bool:
    try:
        import horovod.torch  # noqa: F401
    except ImportError:
        return False
    return True


def test_horovod_job_shrunk_2_to_1_resumes_from_its_checkpoint(tmp_path):
    """The same helper under horovodrun; the executor's resize is called directly."""
    require(_has_horovod(), "horovod is not installed (scripts/setup.sh builds it)")
    steps = 25

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=20)
        eng = Engine(virtual_cluster(1, 2), "fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            a = eng.submit({"command": ["python", str(JOBS / "elastic_train.py")], "launcher": "horovod",
                            "gpus": 2, "env": {"TRAIN_STEPS": str(steps), "STEP_SLEEP": "0.1"}})
            await wait_for(lambda: "step 3 world 2" in ex.logs(a.id), 90, "the job to train on 2 GPUs")
            old = a.alloc
            a.set_alloc({"node0": (0,)}, time.time())  # what the engine does on a shrink
            a.restarts += 1
            ex.resize(a, old, time.time())
            await wait_for(lambda: a.state.final, 120, "the resized job to finish")
            text = ex.logs(a.id)
            assert a.state is JobState.succeeded, a.reason + "\n" + text[-3000:]
            found = re.findall(r"^(?:\[\d\]<stdout>:)?step (\d+) world (\d) restart \d$", text, re.M)
            steps_seen = [(int(s), int(w)) for s, w in found]
            assert [s for s, _ in steps_seen] == list(range(1, steps + 1))
            assert [w for i, (_, w) in enumerate(steps_seen) if i == 0 or steps_seen[i - 1][1] != w] == [2, 1]
            assert "start #1 of job 1" in text and "CUDA_VISIBLE_DEVICES=0: " in text

            assert_unresized_weights(tmp_path / "jobs" / str(a.id), steps)
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())
