"""Resize in place in Docker: a real Horovod Elastic job in real containers on two private
dockerd instances ("hosts" h0 and h1, 2 virtual GPUs each), driven by the engine.

Job B holds h0; the elastic job A (2..4 GPUs, `resize: in-place`) starts on h1: horovodrun runs
in A's container there. B ends: A grows in place onto h0 (2 -> 4, 2+2): the executor starts an
sshd container on h0, rewrites the discovery files, and horovodrun starts the new workers there
over ssh. Job C arrives: A shrinks in place back to h1 (4 -> 2) and h0's sshd container goes.
The step counter goes on exactly, rank 0 keeps its process, nothing restarts
(`restarts` 0, `SCHEDULEARN_RESTART_COUNT` 0), both resizes are measured pauses, and the model
ends equal to an unresized run's. Without an sshd in the image the executor does not try the
grow in place (a checkpoint-restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import subprocess

import pytest
from schedulearn import pauses
from schedulearn.engine import Engine, RealClock
from schedulearn.executors.docker import LABEL_JOB, DockerExecutor
from schedulearn.executors.launch import elastic_host_files
from schedulearn.model import JobState

from tests.conftest import assert_unresized_weights
from tests.fixtures.dockerd import ROOT
from tests.test_docker_executor import JOBS, wait_for

STEPS = 240
PREFIX = r"^(?:\[h\d\] )?(?:\[\d+\]<stdout>:)?"
STEP = re.compile(PREFIX + r"step (\d+) world (\d) pid (\d+) restart (\d+)$", re.M)
HOST = re.compile(PREFIX + r"worker host (\S+) rank (\d) local (\d) size (\d) cuda (\S+) restart (\d+)$",
                  re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _executor(pair, tmp_path, **kw):
    """h0 and h1, 2 virtual GPUs each, at 127.0.0.3 and 127.0.0.2: Horovod takes a host whose
    address is this machine's (127.0.0.1) for its own and would not ssh there."""
    hosts = f"h0={pair[0].url}?gpus=2&address=127.0.0.3,h1={pair[1].url}?gpus=2&address=127.0.0.2"
    a = pair[0]
    # the jobs import this checkout's schedulearn (the venv's editable install may point elsewhere)
    return DockerExecutor(hosts, tmp_path / "jobs", image=a.image, python=a.python, volumes=a.volumes,
                          cancel_grace=20.0, health_interval=0.5, horovod_ssh_port=_free_port(),
                          horovod_network_interface="lo", env={"PYTHONPATH": str(ROOT / "scheduler")}, **kw)


def labelled(daemon, job_id: int) -> list[dict]:
    """The job's containers on `daemon` (any state), listed in one call (no inspect of each:
    a container removed meanwhile is simply not there)."""
    with contextlib.closing(daemon.client()) as c:
        return c.api.containers(all=True, filters={"label": f"{LABEL_JOB}={job_id}"})


def _train(a, **extra):
    return {"name": "hvd-elastic", "command": [a.python, str(JOBS / "hvd_elastic_train.py")],
            "launcher": "horovod", "gpus": "auto", "min_gpus": 2, "max_gpus": 4, "resize": "in-place",
            "env": {"TRAIN_STEPS": str(STEPS), "STEP_SLEEP": "0.1"}, **extra}


def _holder(a, name: str) -> dict:
    return {"name": name, "command": [a.python, str(JOBS / "show_env.py"), "release"], "gpus": 2}


def test_elastic_host_files_list_every_host_and_each_hosts_gpus():
    files = elastic_host_files([("10.0.0.2", "0,1", 2), ("10.0.0.1", "3", 1)])
    assert files == {"hosts": "10.0.0.2:2\n10.0.0.1:1\n", "gpus": "0,1\n", "gpus@10.0.0.1": "3\n"}


def test_horovod_elastic_job_resized_in_place_across_two_docker_hosts(dockerd_pair, tmp_path):
    a, b = dockerd_pair
    ex = _executor(dockerd_pair, tmp_path)

    async def main():
        eng = Engine(ex.nodes(), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            hold = eng.submit(_holder(a, "hold-h0"))
            await wait_for(lambda: hold.state is JobState.running, 30, "the holder to start")
            assert hold.alloc == {"h0": (0, 1)}
            job = eng.submit(_train(a))
            await wait_for(lambda: re.search(r"step \d+ world 2", ex.logs(job.id)), 120, "training on h1")
            assert job.alloc == {"h1": (0, 1)}
            assert len(labelled(b, job.id)) == 1 and labelled(a, job.id) == []
            await wait_for(lambda: ex._sshd.get(("h0", a.image)), 30, "the sshd probe of h0")

            (ex.job_dir(hold.id) / "release").touch()
            await wait_for(lambda: job.size == 4, 30, "the job to grow onto h0")
            assert job.alloc == {"h1": (0, 1), "h0": (0, 1)} and job.restarts == 0
            await wait_for(lambda: re.search(r"step \d+ world 4", ex.logs(job.id)), 120, "training on 4 GPUs")
            sidecars = labelled(a, job.id)
            assert len(sidecars) == 1 and sidecars[0]["Command"].startswith("/usr/sbin/sshd"), sidecars
            await wait_for(lambda: len(pauses.measured(job, True)) == 1, 30, "the grow's pause measured")

            other = eng.submit(_holder(a, "c"))
            await wait_for(lambda: other.state is JobState.running, 120, "C to start (the job shrunk)")
            assert job.size == 2 and job.alloc == {"h1": (0, 1)} and other.alloc == {"h0": (0, 1)}
            await wait_for(lambda: labelled(a, job.id) == [], 60, "h0's sshd container to go")
            await wait_for(lambda: job.state.final, 240, "the resized job to finish")
            text = ex.logs(job.id)
            assert job.state is JobState.succeeded, job.reason + "\n" + text[-4000:]
            assert job.restarts == 0 and job.extra[pauses.IN_PLACE_KEY] == 2
            assert text.count("=== schedulearn: start #") == 1  # one launch: nothing restarted

            steps = [(int(s), int(w), int(p), int(r)) for s, w, p, r in STEP.findall(text)]
            assert [s for s, *_ in steps] == list(range(1, STEPS + 1)), steps  # not a step lost or repeated
            worlds = [w for i, (_, w, _, _) in enumerate(steps) if i == 0 or steps[i - 1][1] != w]
            assert worlds == [2, 4, 2], worlds
            assert len({p for _, _, p, _ in steps}) == 1  # rank 0 kept its process throughout
            assert {r for *_, r in steps} == {0}  # SCHEDULEARN_RESTART_COUNT never changed

            workers = [(h, int(r), int(lr), int(n), cuda, int(rc))
                       for h, r, lr, n, cuda, rc in HOST.findall(text)]
            assert {rc for *_, rc in workers} == {0}  # SCHEDULEARN_RESTART_COUNT of every worker
            at4 = {(r, lr, cuda, h) for h, r, lr, n, cuda, _ in workers if n == 4}
            # h1 (horovodrun's: `localhost`) first, then the two slots the grow added on h0, with
            # h0's GPUs (0,1 of h0) and Horovod's ranks of those slots
            assert at4 == {(0, 0, "0,1", "localhost"), (1, 1, "0,1", "localhost"),
                           (2, 0, "0,1", "127.0.0.3"), (3, 1, "0,1", "127.0.0.3")}, at4
            assert len([w for w in workers if w[0] == "127.0.0.3"]) == 2  # started once each, on h0
            assert "resized in place: 2 -> 4 GPUs, CUDA_VISIBLE_DEVICES=h1:0,1 h0:0,1 ===" in text
            assert ("resized in place: 4 -> 2 GPUs, CUDA_VISIBLE_DEVICES=0,1; Horovod Elastic ends the 2 "
                    "removed workers with 'has been removed from elastic job' and exit code 134: expected, "
                    "not an error ===") in text

            measured = pauses.measured(job, True)
            assert len(measured) == 2 and all(0 < p < 60 for p in measured), measured
            print(f"pauses in place (grow 2->4 across hosts, shrink 4->2): {measured}")

            assert_unresized_weights(ex.job_dir(job.id), STEPS)
            (ex.job_dir(other.id) / "release").touch()
            await wait_for(lambda: other.state.final, 30, "C to end")
            assert labelled(a, job.id) == [] and labelled(b, job.id) == []
        except AssertionError:
            for j in list(eng.jobs.values()):  # what the jobs said, for the failure report
                print(f"--- job {j.id} {j.spec.name} {j.state}: {j.reason}\n{ex.logs(j.id)[-6000:]}")
            raise
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


def test_horovod_elastic_job_resized_in_place_on_one_docker_host_4_2_4(dockerd, tmp_path):
    """One host, 4 virtual GPUs: the job starts on all 4, shrinks in place to 2 for job B (whose
    GPUs are free only once the removed workers are gone, checked in the job's container), and
    grows back to 4 when B ends: new workers forked by the run's prewarm server, no sshd."""
    ex = DockerExecutor(f"h0={dockerd.url}?gpus=4", tmp_path / "jobs", image=dockerd.image,
                        python=dockerd.python, volumes=dockerd.volumes, cancel_grace=20.0,
                        health_interval=0.5, horovod_ssh_port=_free_port(),
                        env={"PYTHONPATH": str(ROOT / "scheduler")})

    async def main():
        eng = Engine(ex.nodes(), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            job = eng.submit(_train(dockerd, env={"TRAIN_STEPS": "160", "STEP_SLEEP": "0.1"}))
            await wait_for(lambda: re.search(r"step \d+ world 4", ex.logs(job.id)), 120, "training on 4 GPUs")
            assert job.alloc == {"h0": (0, 1, 2, 3)}
            other = eng.submit(_holder(dockerd, "b"))
            await wait_for(lambda: other.state is JobState.running, 90, "B to start (the job shrunk)")
            assert job.alloc == {"h0": (0, 1)} and other.alloc == {"h0": (2, 3)}
            workers = ex.job_dir(job.id) / "workers"
            gone = [int(p) for slot in ("2", "3") for p in (workers / slot).read_text().split()]
            assert gone and ex._alive_in(ex._runs[job.id], "h0", [str(p) for p in gone]) == []
            await wait_for(lambda: re.search(r"step \d+ world 2", ex.logs(job.id)), 60, "training on 2 GPUs")
            (ex.job_dir(other.id) / "release").touch()
            await wait_for(lambda: job.size == 4, 30, "the job to grow back")
            await wait_for(lambda: job.state.final, 180, "the job to finish")
            text = ex.logs(job.id)
            assert job.state is JobState.succeeded, job.reason + "\n" + text[-4000:]
            assert job.restarts == 0 and job.extra[pauses.IN_PLACE_KEY] == 2
            steps = [(int(s), int(w), int(p)) for s, w, p, _ in STEP.findall(text)]
            assert [s for s, *_ in steps] == list(range(1, 161))
            worlds = [w for i, (_, w, _) in enumerate(steps) if i == 0 or steps[i - 1][1] != w]
            assert worlds == [4, 2, 4], worlds
            assert len({p for *_, p in steps}) == 1
            regrown = {(r, lr, cuda) for h, r, lr, n, cuda, _ in HOST.findall(text) if int(r) >= 2}
            assert regrown == {("2", "2", "0,1,2,3"), ("3", "3", "0,1,2,3")}, regrown
            assert "prewarm: cold start" not in text
            assert len(pauses.measured(job, True)) == 2
        except AssertionError:
            for j in list(eng.jobs.values()):  # what the jobs said, for the failure report
                print(f"--- job {j.id} {j.spec.name} {j.state}: {j.reason}\n{ex.logs(j.id)[-6000:]}")
            raise
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


@pytest.fixture
def no_sshd_image(dockerd_pair):
    """The test image without sshd, on both hosts (`docker commit` of a container that removed it)."""
    tag = "schedulearn-test:nosshd"
    for d in dockerd_pair:
        d.docker("rm", "-f", "sl-nosshd", check=False)
        d.docker("run", "--name", "sl-nosshd", d.image, "rm", "-f", "/usr/sbin/sshd")
        d.docker("commit", "sl-nosshd", tag)
        d.docker("rm", "-f", "sl-nosshd")
    yield tag
    for d in dockerd_pair:
        d.docker("rmi", "-f", tag, check=False)


def test_without_sshd_in_the_image_a_grow_onto_another_host_is_a_checkpoint_restart(
        dockerd_pair, no_sshd_image, tmp_path):
    a, b = dockerd_pair
    ex = _executor(dockerd_pair, tmp_path)

    async def main():
        eng = Engine(ex.nodes(), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            hold = eng.submit(_holder(a, "hold-h0"))
            await wait_for(lambda: hold.state is JobState.running, 30, "the holder to start")
            job = eng.submit(_train(a, image=no_sshd_image, env={"TRAIN_STEPS": "30", "STEP_SLEEP": "0.1"}))
            await wait_for(lambda: re.search(r"step \d+ world 2", ex.logs(job.id)), 120, "training on h1")
            await wait_for(lambda: ("h0", no_sshd_image) in ex._sshd, 30, "the sshd probe of h0")
            assert ex._sshd[("h0", no_sshd_image)] is False
            (ex.job_dir(hold.id) / "release").touch()
            await wait_for(lambda: job.size == 4, 30, "the job to grow onto h0")
            # decided by the executor: a restart (which needs an sshd on h0 as much: without one,
            # Horovod cannot span hosts at all; the point is that nothing is tried in place)
            assert job.restarts == 1 and not job.extra.get(pauses.IN_PLACE_KEY)
            assert "resized in place" not in ex.logs(job.id)
        except AssertionError:
            for j in list(eng.jobs.values()):  # what the jobs said, for the failure report
                print(f"--- job {j.id} {j.spec.name} {j.state}: {j.reason}\n{ex.logs(j.id)[-6000:]}")
            raise
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


def test_the_test_image_runs_sshd(dockerd):
    r = subprocess.run(["docker", "-H", dockerd.url, "run", "--rm", dockerd.image, "/usr/sbin/sshd", "-t"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
