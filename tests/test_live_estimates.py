"""The live loop: a real torch job that measures itself with `schedulearn.elastic.Monitor`,
under the local executor on virtual GPUs and the `goodput` policy.

The job (tests/jobs/gns_train.py, under torchrun) sleeps per sample to model a GPU's compute,
and per step for every extra replica to model synchronisation: on 1, 2, 4 GPUs a step takes
about 0.22, 0.17, 0.22 s, so 2 GPUs pay (1.3x) and 4 do not. Its reports (step times, gradient
statistics, progress) reach the policy within one round; `--gpus auto` grows it by doubling as
far as its measured speed-up pays: 1 -> 2 (believed linear), 2 -> 4 (the fit is optimistic where
it has not measured), then back to 2 once 4 is measured.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from schedulearn.engine import Engine, RealClock
from schedulearn.estimates import estimate
from schedulearn.executors.local import LocalExecutor
from schedulearn.model import JobState, virtual_cluster

from tests.conftest import require, wait_for

JOB = Path(__file__).parent / "jobs" / "gns_train.py"


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True



def _reports(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def test_reports_reach_the_policy_and_auto_grows_only_as_far_as_it_pays(tmp_path):
    require(_has_torch(), "torch is not installed (scripts/setup.sh installs it)")

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=20)
        eng = Engine(virtual_cluster(1, 4), "goodput", executor=ex)
        eng.policy.hysteresis = 0.1  # a test cannot wait the minutes a real resize must pay for
        task = asyncio.create_task(eng.run(RealClock(tick=0.5)))
        watcher = None
        try:
            env = {"STEPS": "100000", "B0": "64", "PER_SAMPLE": "0.003", "OVERHEAD": "0.02", "SYNC": "0.05",
                   "CKPT": "1", "REPORT_EVERY": "1", "SMOOTHING": "0.9", "LR": "0.001"}
            job = eng.submit({"name": "auto", "command": [sys.executable, str(JOB)], "launcher": "torchrun",
                              "gpus": "auto", "max_gpus": 4, "env": env})
            metrics = tmp_path / "jobs" / str(job.id) / "metrics.jsonl"
            sizes: list[int] = []  # every size it ran on, in order, from its first start

            async def watch():
                while True:
                    if job.size and (not sizes or sizes[-1] != job.size):
                        sizes.append(job.size)
                    await asyncio.sleep(0.05)  # a resize (stop, restart) takes seconds
            watcher = asyncio.create_task(watch())
            await wait_for(lambda: len(_reports(metrics)) >= 2, 120, "the job's first reports")
            # within one round, what it wrote is what the policy sees
            eng.wake()
            written = len(_reports(metrics))
            await wait_for(lambda: job.extra.get("reports_read", 0) >= written, 5, "the reports in the job")
            st = job.extra["reports"]
            assert st["grad"][0] > 0 and st["grad"][1] > 0 and st["configs"] and st["progress"] > 0
            # the exploration cap: twice the most GPUs it has reported on (1 at first; more if
            # the policy has already grown it: the test may look only after it has)
            assert st["max_gpus"] in (1, 2, 4)
            assert estimate(job, time.time()).max_gpus == 2 * st["max_gpus"]
            try:
                await wait_for(lambda: sizes[-3:] == [2, 4, 2] or job.state.final, 420,
                               "the job to grow to 4 GPUs and come back to 2")
            except AssertionError as e:
                raise AssertionError(f"{e}; its sizes: {sizes}") from None
            assert job.state is JobState.running, job.reason
            assert sizes == [1, 2, 4, 2], sizes
            worlds = {r["num_gpus"] for r in _reports(metrics) if "step_time" in r}
            assert worlds == {1, 2, 4}
            est = estimate(job, time.time())
            s = est.curve(4, 4)
            assert s[2] > 1.1 and s[4] < s[2], s  # measured: 2 pays, 4 does not
        finally:
            if watcher is not None:
                watcher.cancel()
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


REPORTER = """
import time
from schedulearn import elastic
for step in range(1, 41):
    time.sleep(0.05)
    elastic.report(step_time=0.05, batch_size=32, progress=step / 40)
"""


def test_a_finished_job_shows_the_progress_it_last_reported(tmp_path):
    """The reports a job wrote since the last round are read as its run ends: a job that reports
    every step and ends between two rounds is done (progress 1.0, every report read), not where
    the round before its end saw it."""

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=5)
        eng = Engine(virtual_cluster(1, 2), "fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=3600)))  # no round while it runs
        try:
            job = eng.submit({"name": "steps", "script": REPORTER, "gpus": 1})
            await wait_for(lambda: job.state.final, 60, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            metrics = tmp_path / "jobs" / str(job.id) / "metrics.jsonl"
            assert len(_reports(metrics)) == 40
            assert job.extra["reports_read"] == 40
            assert eng.job_dict(job, time.time())["progress"] == 1.0
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


HANGS = """
import time
from schedulearn import elastic
for step in range(1, 6):
    time.sleep(0.05)
    elastic.report(step_time=0.05, batch_size=32, progress=step / 100)
print("stuck", flush=True)
time.sleep(600)
"""


def test_a_job_that_stops_reporting_is_shown_silent(tmp_path):
    """A real job reports five steps and then hangs: its reports are read from its
    metrics.jsonl, and the job's view says how long it has been silent once that is past
    `SILENT_S` (asked at a later `now`: the test does not wait the 3 minutes), not before."""
    from schedulearn.estimates.job import SILENT_S

    async def main():
        ex = LocalExecutor(tmp_path / "jobs", cancel_grace=5)
        eng = Engine(virtual_cluster(1, 2), "fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            job = eng.submit({"name": "hangs", "script": HANGS, "gpus": 1})
            await wait_for(lambda: job.extra.get("reports_read") == 5 or job.state.final, 60,
                           "the job's five reports to be read")
            assert job.state is JobState.running, job.reason
            now = time.time()
            assert "silent_s" not in eng.job_dict(job, now)
            later = eng.job_dict(job, now + SILENT_S + 10)
            last = _reports(tmp_path / "jobs" / str(job.id) / "metrics.jsonl")[-1]
            assert later["silent_s"] == round(now + SILENT_S + 10 - last["t"])
            assert later["progress"] == 0.05
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())
