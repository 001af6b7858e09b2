"""Jobs across Docker hosts: two private dockerd instances on this machine act as two hosts.

Containers use `network_mode="host"`, so both "hosts" share this machine's network and the
torchrun c10d rendezvous runs on 127.0.0.1 (the first host's address). One virtual GPU per host.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from schedulearn.engine import Engine, RealClock
from schedulearn.model import JobState

from tests.conftest import assert_unresized_weights
from tests.test_docker_executor import JOBS, executor, final, in_log, labelled, live, wait_for

STEPS = 20


def test_two_host_torchrun_job_has_the_total_world_size(dockerd_pair, tmp_path):
    a, b = dockerd_pair
    ex = executor([a, b], tmp_path / "jobs", gpus=1)

    async def main():
        eng = Engine(ex.nodes(), "fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            job = eng.submit({"command": [a.python, str(JOBS / "allreduce_world.py")],
                              "launcher": "torchrun", "gpus": 2})
            await wait_for(lambda: job.state is JobState.running, 5, "the job to start")
            assert job.alloc == {"h0": (0,), "h1": (0,)}
            assert len(labelled(a, job.id)) == 1 and len(labelled(b, job.id)) == 1  # one worker per host
            await wait_for(final(eng, job.id), 90, "the two-host job to end")
            text = ex.logs(job.id)
            assert job.state is JobState.succeeded, job.reason + "\n" + text[-2000:]
            pattern = (r"^\[(h\d)\] (?:\[rank\d+\]: )?rank (\d) WORLD_SIZE=(\d+) world=(\d+) "
                       r"allreduce_sum=(\S+) cvd=(\S+) agent_store=(\S+)$")
            lines = re.findall(pattern, text, re.M)
            assert len(lines) == 2, text[-2000:]
            assert {h for h, *_ in lines} == {"h0", "h1"} and {int(r) for _, r, *_ in lines} == {0, 1}
            for _h, _r, world_env, world, total, cvd, agent_store in lines:
                assert int(world_env) == int(world) == 2  # the total of both hosts
                assert float(total) == 3.0  # 1 + 2: the all-reduce crossed the hosts
                assert cvd == "0"
                # the workers share rank 0's agent store (bound once and kept open), no port
                # picked by bind-and-close (TORCH_DISABLE_SHARE_RDZV_TCP_STORE unset)
                assert agent_store == "True"
            assert labelled(a, job.id) == [] and labelled(b, job.id) == []
            assert eng.pool.total == 2
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


def test_a_two_host_job_ends_only_once_every_hosts_container_is_gone(dockerd_pair, tmp_path):
    """Both daemons remove finished containers slowly (a loaded machine: 2 s on the first host,
    4 s on the second). The job's end is reported only once both are gone, not when the first
    host's worker is done with its own while the second's is still being removed (CI once saw
    the job ended with the other container still there)."""
    a, b = dockerd_pair
    ex = executor([a, b], tmp_path / "jobs", gpus=1)
    remove = ex._remove

    def slow_remove(w):
        time.sleep(4.0 if w.host == "h1" else 2.0)
        remove(w)
    ex._remove = slow_remove

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"command": [a.python, str(JOBS / "allreduce_world.py")],
                              "launcher": "torchrun", "gpus": 2})
            await wait_for(lambda: job.state is JobState.running, 5, "the job to start")
            await wait_for(final(eng, job.id), 90, "the two-host job to end")
            assert job.state is JobState.succeeded, job.reason
            assert labelled(b, job.id) == [] and labelled(a, job.id) == []

    asyncio.run(main())


def test_a_failing_worker_fails_the_job_and_stops_the_other_workers(dockerd_pair, tmp_path):
    a, b = dockerd_pair
    ex = executor([a, b], tmp_path / "jobs", gpus=1, cancel_grace=2.0)

    async def main():
        eng = Engine(ex.nodes(), "fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            job = eng.submit({"command": [a.python, str(JOBS / "rank_fails.py")],
                              "launcher": "torchrun", "gpus": 2})
            await wait_for(in_log(ex, job.id, "of 2 up"), 90, "the workers to rendezvous")
            t0 = time.monotonic()
            await wait_for(final(eng, job.id), 30, "the job to fail")
            assert time.monotonic() - t0 < 25  # rank 0 sleeps 120 s: it was stopped
            assert job.state is JobState.failed
            last = re.search(r"^\[(h\d)\] (?:\[rank\d+\]: )?rank 1 of 2 up", ex.logs(job.id), re.M).group(1)
            rank = 0 if last == "h0" else 1
            assert job.reason == f"worker {rank} on {last}: RuntimeError: rank 1 fails on purpose", job.reason
            assert labelled(a, job.id) == [] and labelled(b, job.id) == []
            assert eng.pool.total == 2
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


@pytest.mark.slow
def test_elastic_job_resized_across_hosts_2_1_2_continues_its_steps(dockerd_pair, tmp_path):
    """Checkpoint-restart in containers: 2 hosts -> 1 host -> 2 hosts, steps continuous, final
    weights equal to an unresized run, and the stopped containers' exits never reported."""
    a, b = dockerd_pair
    ex = executor([a, b], tmp_path / "jobs", gpus=1, cancel_grace=20.0)

    async def main():
        eng = Engine(ex.nodes(), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            job = eng.submit({"name": "elastic", "command": [a.python, str(JOBS / "elastic_train.py")],
                              "launcher": "torchrun", "gpus": "auto", "min_gpus": 1, "max_gpus": 2,
                              "env": {"TRAIN_STEPS": str(STEPS), "STEP_SLEEP": "0.1"}})
            await wait_for(lambda: "step 3 world 2" in ex.logs(job.id), 90, "training on 2 hosts")
            other = eng.submit({"command": [a.python, str(JOBS / "show_env.py"), "release"], "gpus": 1})
            await wait_for(lambda: other.state is JobState.running, 30, "the second job to start")
            assert job.size == 1 and job.state is JobState.running
            await wait_for(lambda: re.search(r"step \d+ world 1", ex.logs(job.id)), 90, "training on 1 host")
            (ex.job_dir(other.id) / "release").touch()
            await wait_for(lambda: other.state.final, 30, "the second job to end")
            await wait_for(lambda: job.size == 2, 10, "the job to grow back")
            await wait_for(final(eng, job.id), 150, "the resized job to finish")
            text = ex.logs(job.id)
            assert job.state is JobState.succeeded, job.reason + "\n" + text[-3000:]
            assert job.restarts == 2
            found = re.findall(r"step (\d+) world (\d) restart \d$", text, re.M)
            steps = [(int(s), int(w)) for s, w in found]
            assert [s for s, _ in steps] == list(range(1, STEPS + 1))  # continuous: no restart from 0
            worlds = [w for i, (_, w) in enumerate(steps) if i == 0 or steps[i - 1][1] != w]
            assert worlds == [2, 1, 2], worlds
            assert text.count("stopped for resize") == 2  # the old runs' exits: logged, not reported
            assert_unresized_weights(ex.job_dir(job.id), STEPS)
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())
