"""`keep_job_dirs`: the directories of ended jobs are removed after a while (their log, result
and checkpoints), their records kept; a removed (or lost) directory says so. Real processes under
the local executor, the service driven directly (no HTTP)."""

from __future__ import annotations

import asyncio
import json
import shutil
import time

import pytest
from schedulearn.model import SpecError
from schedulearn.service import NotFound, SchedulerService, Settings


def manager(tmp_path, keep):
    s = Settings(executor="local", virtual_gpus=2, store_url=f"sqlite:///{tmp_path / 'm.db'}",
                 job_root=str(tmp_path / "jobs"), tick=0.05, inventory_interval=0, cancel_grace=1.0,
                 keep_job_dirs=keep)
    return SchedulerService(s)


async def ended(m, job_id, timeout=30.0):
    t0 = time.monotonic()
    while not m.engine.get(job_id).state.final:
        assert time.monotonic() - t0 < timeout, m.engine.get(job_id)
        await asyncio.sleep(0.05)
    return m.engine.get(job_id)


def test_an_ended_jobs_directory_goes_after_keep_job_dirs_its_record_stays(tmp_path):
    outside = tmp_path / "precious.txt"
    outside.write_text("not the job's")

    async def main():
        m = manager(tmp_path, keep=None)
        m.start()
        m.settings.keep_job_dirs = 1.0  # no sweep of its own: this test calls it
        script = (f"import os\nos.symlink({str(outside)!r}, 'link')\n"  # a link the job leaves
                  "from schedulearn.run import write_result\n"
                  "print('hello from the job')\nopen('checkpoints/ck.pt', 'w').write('x' * 1000)\n")
        done = await m.submit({"name": "done", "script": script}, "alice")
        long = await m.submit({"name": "long", "command": ["sleep", "60"]}, "alice")
        await ended(m, done["id"])
        d = m.executor.job_dir(done["id"])
        assert (d / "checkpoints" / "ck.pt").exists() and (d / "link").is_symlink()
        assert await m.expire_job_dirs() == []  # ended under a second ago: kept
        assert "hello from the job" in await m.logs(done["id"])
        await asyncio.sleep(1.1)
        assert await m.expire_job_dirs() == [done["id"]]
        assert not d.exists() and outside.read_text() == "not the job's"  # the link not followed
        assert m.executor.job_dir(long["id"]).exists()  # running: never removed
        job = await m.get_job(done["id"])
        assert job["state"] == "succeeded" and job["files_removed"] > 0
        listed = json.loads(await m.list_jobs_json())["jobs"]
        assert [j.get("files_removed") is not None for j in listed] == [True, False]
        for call, what in [(m.logs(done["id"]), "logs"), (m.log_page(done["id"], 0), "logs"),
                           (m.follow_logs(done["id"]), "logs"), (m.result(done["id"]), "result")]:
            with pytest.raises(NotFound) as e:
                await call
            message = str(e.value)
            assert message.startswith(f"{what}: job {done['id']}'s directory was removed on ")
            assert "UTC (keep_job_dirs: 1 s after a job ended); its log, result and checkpoints" in message
        assert await m.expire_job_dirs() == []  # once
        await m.cancel(long["id"], "alice")
        await ended(m, long["id"])
        await m.stop()

        m = manager(tmp_path, keep=None)  # the record outlives a restart, without the setting too
        assert "files_removed" in await m.get_job(done["id"])
        assert await m.expire_job_dirs() == [] and m.executor.job_dir(long["id"]).exists()
        await m.stop()

    asyncio.run(main())


def test_the_sweep_runs_by_itself_and_a_directory_removed_by_hand_says_so(tmp_path):
    async def main():
        m = manager(tmp_path, keep=0.5)
        m.start()  # sweeps every keep / 4 while it runs
        first = await m.submit({"name": "first", "command": ["true"]}, "alice")
        await ended(m, first["id"])
        t0 = time.monotonic()
        while "files_removed" not in await m.get_job(first["id"]):
            assert time.monotonic() - t0 < 10
            await asyncio.sleep(0.05)
        assert not m.executor.job_dir(first["id"]).exists()
        await m.stop()

        m = manager(tmp_path, keep=None)
        m.start()
        second = await m.submit({"name": "second", "command": ["true"]}, "alice")
        await ended(m, second["id"])
        d = m.executor.job_dir(second["id"])
        shutil.rmtree(d)
        with pytest.raises(NotFound) as e:
            await m.logs(second["id"])
        assert str(e.value) == (f"logs: job {second['id']}'s directory {d} is gone (removed outside the "
                                "scheduler); its log, result and checkpoints with it")
        blocker = await m.submit({"name": "blocker", "command": ["sleep", "60"], "gpus": 2}, "alice")
        never = await m.submit({"name": "never", "command": ["true"]}, "alice")
        await m.cancel(never["id"], "alice")  # it never ran: no directory, and none expected
        assert await m.logs(never["id"]) == ""
        await m.cancel(blocker["id"], "alice")
        await ended(m, blocker["id"])
        await m.stop()

    asyncio.run(main())


@pytest.mark.parametrize("keep", [0, -1, float("inf"), float("nan")])
def test_a_bad_keep_job_dirs_is_one_line(keep):
    with pytest.raises(SpecError, match=r"^keep_job_dirs: expected seconds > 0 \(or none: for ever\), got "):
        Settings(keep_job_dirs=keep).validate()
