"""Real jobs through the extension: the local executor on virtual GPUs, over HTTP."""

from __future__ import annotations

import asyncio
import sys

from schedulearn.model import virtual_cluster

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


async def until(api, job_id: int, state: str, timeout: float = 30.0) -> dict:
    async with asyncio.timeout(timeout):
        while True:
            code, job = await api("GET", f"jobs/{job_id}")
            assert code == 200
            if job["state"] == state:
                return job
            assert job["state"] in ("queued", "running") or job["state"] == state, job
            await asyncio.sleep(0.05)


async def test_a_real_job_runs_to_success_and_its_logs_come_back(sl_api, tmp_path):
    script = "import os\nprint('visible', os.environ.get('CUDA_VISIBLE_DEVICES'))\nprint('done')\n"
    code, job = await sl_api("POST", "jobs", {"name": "hello", "script": script, "gpus": 2})
    assert code == 201 and job["state"] == "queued"
    job = await until(sl_api, job["id"], "succeeded")
    assert job["exit_code"] == 0 and job["start_time"] <= job["end_time"]
    code, log = await sl_api("GET", f"jobs/{job['id']}/logs", raw=True)
    text = log.decode()
    assert "done" in text
    visible = [ln for ln in text.splitlines() if ln.startswith("visible")][0]
    assert len(visible.split()[1].split(",")) == 2  # it was given its 2 GPUs


async def test_a_failing_job_fails_with_its_reason(sl_api):
    code, job = await sl_api("POST", "jobs", {"script": "raise ValueError('bad learning rate')"})
    job = await until(sl_api, job["id"], "failed")
    assert job["exit_code"] != 0 and "ValueError: bad learning rate" in job["reason"]


async def test_policy_switch_over_http_changes_the_next_placement(sl_api, sl_manager):
    sl_manager.engine.set_nodes(virtual_cluster(2, 4))  # two hosts of 4 GPUs
    ids = []
    for _ in range(2):  # fifo packs: best fit on the fullest host that fits
        code, job = await sl_api("POST", "jobs", {"command": SLEEP})
        ids.append(job["id"])
    a, b = [await until(sl_api, i, "running") for i in ids]
    assert list(a["alloc"]) == list(b["alloc"]) == ["node0"]
    assert await sl_api("PUT", "policy", {"policy": "round-robin"}) == (200, {"policy": "round-robin"})
    placed = []
    for _ in range(2):  # round-robin spreads: each placement starts from the next host
        code, job = await sl_api("POST", "jobs", {"command": SLEEP})
        placed.append(list((await until(sl_api, job["id"], "running"))["alloc"]))
    # under fifo the 4th job would have filled node0 (1 GPU left there); round-robin moved on
    assert placed == [["node0"], ["node1"]]
    for job_id in range(1, 5):
        await sl_api("DELETE", f"jobs/{job_id}")
    for job_id in range(1, 5):
        await until(sl_api, job_id, "cancelled")


async def test_queued_jobs_wait_for_gpus_and_start_when_freed(sl_api):
    code, big = await sl_api("POST", "jobs", {"command": SLEEP, "gpus": 4})
    await until(sl_api, big["id"], "running")
    code, small = await sl_api("POST", "jobs", {"command": [sys.executable, "-c", "pass"]})
    await asyncio.sleep(0.5)
    assert (await sl_api("GET", f"jobs/{small['id']}"))[1]["state"] == "queued"
    await sl_api("DELETE", f"jobs/{big['id']}")
    await until(sl_api, small["id"], "succeeded")


async def test_a_job_past_its_time_limit_gets_its_grace_period_then_fails_with_124(sl_api, tmp_path):
    """`time_limit` (`--timeout`): the scheduler stops a job that has run that long, as a cancel
    does (SIGTERM, the grace period to save a checkpoint), for any job, not only a cell's."""
    script = ("import signal, sys, time\n"
              "def save(*_):\n    print('checkpoint saved', flush=True)\n    sys.exit(143)\n"
              "signal.signal(signal.SIGTERM, save)\nprint('training', flush=True)\ntime.sleep(60)\n")
    code, job = await sl_api("POST", "jobs", {"name": "capped", "script": script, "time_limit": 1.5})
    assert code == 201 and job["spec"]["time_limit"] == 1.5
    job = await until(sl_api, job["id"], "failed")
    assert job["exit_code"] == 124 and job["reason"] == "stopped at its time limit (2 s of run time)", job
    assert 1.5 <= job["run_s"] < 4, job
    code, log = await sl_api("GET", f"jobs/{job['id']}/logs", raw=True)
    assert "checkpoint saved" in log.decode(), log
    assert ": stopped at its time limit (the job fails with exit code 124) ===" in log.decode(), log
