"""The Docker executor with a real private dockerd and real containers, driven by the real engine.

Containers run the registry-free test image with this checkout's venv mounted read-only (see
tests/fixtures/dockerd.py). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
from schedulearn import joblogs
from schedulearn.accounts import Account, NoAccount
from schedulearn.engine import Engine, RealClock
from schedulearn.executors import registry
from schedulearn.executors.docker import LABEL_JOB, DockerExecutor
from schedulearn.executors.hosts import parse_hosts
from schedulearn.model import Job, JobSpec, JobState, SpecError
from schedulearn.service import Settings

from tests.fixtures.dockerd import ROOT

JOBS = ROOT / "tests" / "jobs"


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


def executor(daemons, root: Path, gpus: int = 4, extra_hosts: str = "", **kw) -> DockerExecutor:
    hosts = ",".join(f"h{i}={d.url}?gpus={gpus}" for i, d in enumerate(daemons))
    d = daemons[0]
    kw.setdefault("cancel_grace", 5.0)
    kw.setdefault("health_interval", 0.5)
    return DockerExecutor(hosts + extra_hosts, root, image=d.image, python=d.python, volumes=d.volumes, **kw)


@contextlib.asynccontextmanager
async def live(ex: DockerExecutor, nodes=None, store=None, keep_jobs: bool = False, policy: str = "fifo"):
    eng = Engine(ex.nodes() if nodes is None else nodes, policy, executor=ex, store=store)
    task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
    try:
        yield eng
    finally:
        if not keep_jobs:
            await asyncio.to_thread(ex.terminate_all, 1.0)
        eng.close()
        await asyncio.wait_for(task, 5)


def final(eng: Engine, job_id: int):
    return lambda: eng.jobs[job_id].state.final


def in_log(ex: DockerExecutor, job_id: int, text: str):
    return lambda: text in ex.logs(job_id)


def labelled(daemon, job_id: int) -> list:
    """The containers (any state) carrying the job's label on `daemon`. docker-py lists, then
    inspects each: one removed in between is listed again (it is gone), not an error."""
    from docker.errors import NotFound

    filters = {"label": f"{LABEL_JOB}={job_id}"}
    with contextlib.closing(daemon.client()) as c:
        for _ in range(9):
            try:
                return c.containers.list(all=True, filters=filters)
            except NotFound:
                time.sleep(0.1)
        return c.containers.list(all=True, filters=filters)


class MemoryStore:
    """The store protocol in memory: what a restarted server loads its jobs from."""

    def __init__(self, jobs):
        self.jobs, self.policy = list(jobs), None

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


def show_env(d, *args: str) -> list[str]:
    return [d.python, str(JOBS / "show_env.py"), *args]


# -- tests ---------------------------------------------------------------------------------------
def test_python_job_runs_in_a_labelled_container_that_is_removed_after(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs")

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"name": "hello", "script": (
                "import os, sys, time\nprint('hello from the container', flush=True)\n"
                "print('to stderr', file=sys.stderr, flush=True)\n"
                "while not os.path.exists('release'): time.sleep(0.05)\nprint('released')\n")})
            await wait_for(in_log(ex, job.id, "hello from the container"), 30, "the job's first line")
            running = labelled(dockerd, job.id)
            assert len(running) == 1 and running[0].status == "running"
            labels = running[0].labels
            assert labels[LABEL_JOB] == str(job.id) and labels["schedulearn.rank"] == "0"
            attrs = running[0].attrs
            assert attrs["HostConfig"]["NetworkMode"] == "host"
            assert attrs["HostConfig"]["ShmSize"] == 1 << 30
            assert attrs["HostConfig"]["Init"] is True
            assert attrs["HostConfig"]["OomScoreAdj"] == 500  # the kernel's OOM killer ends jobs first
            (ex.job_dir(job.id) / "release").touch()
            await wait_for(final(eng, job.id), 30, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            assert job.exit_code == 0
            text = ex.logs(job.id)
            for line in ("hello from the container", "to stderr", "released"):
                assert line + "\n" in text
            assert ex.logs(job.id, tail=1).startswith(joblogs.MARKER + " exit of run #0: code 0")
            assert labelled(dockerd, job.id) == []  # removed once its log was kept
            assert eng.pool.total == 4 and not ex.running()

    asyncio.run(main())


def test_each_container_sees_only_its_gpus(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs")

    async def main():
        async with live(ex) as eng:
            a = eng.submit({"command": show_env(dockerd), "gpus": 1})
            b = eng.submit({"command": show_env(dockerd), "gpus": 3})
            for job in (a, b):
                await wait_for(final(eng, job.id), 30, f"job {job.id} to end")
                assert job.state is JobState.succeeded, job.reason
            seen = {}
            for job in (a, b):
                text = ex.logs(job.id)
                seen[job.id] = next(ln.split("=", 1)[1] for ln in text.splitlines()
                                    if ln.startswith("CUDA_VISIBLE_DEVICES="))
                assert f"SCHEDULEARN_NUM_GPUS={job.spec.gpus}\n" in text
                assert f"cwd={ex.job_dir(job.id)}\n" in text  # the job directory, same path inside
            got_a = [int(i) for i in seen[a.id].split(",")]
            got_b = [int(i) for i in seen[b.id].split(",")]
            assert len(got_a) == 1 and len(got_b) == 3 and not set(got_a) & set(got_b)
            assert sorted(got_a + got_b) == [0, 1, 2, 3]

    asyncio.run(main())


def test_the_nvidia_runtimes_variable_is_the_schedulers(dockerd, tmp_path):
    """`NVIDIA_VISIBLE_DEVICES` decides, where the NVIDIA runtime is the daemon's default (or an
    older toolkit picked `all` among duplicates), which GPUs a container gets: a job (or a CUDA
    image, whose ENV says `all`, or the operator's `env`) must not set it. The executor sets it
    over theirs: the devices the container was given, or `void` for none. A spec that names it
    is refused at submission."""
    from schedulearn.executors.docker import nvidia_visible

    ex = executor([dockerd], tmp_path / "jobs", env={"NVIDIA_VISIBLE_DEVICES": "all"})
    command = [dockerd.python, "-c", "import os; print('NV=' + os.environ['NVIDIA_VISIBLE_DEVICES'])"]

    async def main():
        async with live(ex) as eng:
            with pytest.raises(SpecError, match="^env: NVIDIA_VISIBLE_DEVICES is set by the scheduler"):
                eng.submit({"command": command, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}})
            job = eng.submit({"command": command})
            await wait_for(final(eng, job.id), 30, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            assert "\nNV=void\n" in ex.logs(job.id)  # virtual GPUs: no real device

    asyncio.run(main())
    assert nvidia_visible(["1", "3"]) == "1,3"  # real ones: exactly the device requests'
    assert nvidia_visible(["GPU-0b5c", "MIG-9d1e"]) == "GPU-0b5c,MIG-9d1e"


def test_job_runs_as_the_configured_non_root_user_and_can_write_its_directory(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs", user="65534:65534")

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"script": "import os\nopen('out.txt', 'w').write('x')\n"
                                        "print(f'uid={os.getuid()} gid={os.getgid()}')\n"})
            await wait_for(final(eng, job.id), 30, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            assert "uid=65534 gid=65534\n" in ex.logs(job.id)
            assert (ex.job_dir(job.id) / "out.txt").stat().st_uid == 65534

    asyncio.run(main())


def test_each_users_job_runs_as_their_mapped_account_in_a_private_directory(dockerd, tmp_path):
    """The shared set-up's `run_as`: per job uid:gid and groups, HOME/USER/LOGNAME, a 0700
    directory owned by the account; a user without an account fails at start, never as root."""
    nobody = Account("nobodyish", 65534, 65534, (65534, 4242), "/home/nobodyish")

    def run_as(user: str) -> Account:
        if user != "alice":
            raise NoAccount(f"user: {user!r} has no OS account on this server (user_map)")
        return nobody

    ex = executor([dockerd], tmp_path / "jobs", run_as=run_as)
    probe = ("import os\nopen('out.txt', 'w').write('x')\n"
             "print(f'uid={os.getuid()} gid={os.getgid()} groups={sorted(os.getgroups())}')\n"
             "print('env', os.environ['HOME'], os.environ['USER'], os.environ['LOGNAME'])\n")

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"script": probe, "user": "alice"})
            stranger = eng.submit({"script": probe, "user": "mallory"})
            await wait_for(final(eng, job.id), 30, "the job to end")
            await wait_for(final(eng, stranger.id), 30, "the stranger's job to end")
            assert job.state is JobState.succeeded, job.reason
            log = ex.logs(job.id)
            assert "uid=65534 gid=65534 groups=[4242, 65534]\n" in log
            assert f"env {ex.job_dir(job.id)} nobodyish nobodyish\n" in log
            st = ex.job_dir(job.id).stat()
            assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o700)
            assert (ex.job_dir(job.id) / "out.txt").stat().st_uid == 65534
            assert stranger.state is JobState.failed
            assert stranger.reason == "user: 'mallory' has no OS account on this server (user_map)"
            assert not labelled(dockerd, stranger.id)  # no container was made for it

    asyncio.run(main())


def test_a_setuid_binary_in_the_image_does_not_make_a_users_job_root(dockerd, tmp_path):
    """In the shared set-up a user picks the image: one holding a setuid-root shell made their
    job root (euid 0 in a container on the host's network, with the default capabilities: raw
    sockets on the loopback, where the other users' tokens travel; any file in the volumes).
    Their containers run with `no-new-privileges`; the operator's single-user containers, as
    before, without."""
    rootsh = tmp_path / "rootsh"
    shutil.copy("/bin/bash", rootsh)
    rootsh.chmod(0o4755)  # root's, setuid
    tag = f"schedulearn-test:setuid-{uuid.uuid4().hex[:6]}"
    maker = f"sl-setuid-{uuid.uuid4().hex[:6]}"
    dockerd.docker("create", "--name", maker, dockerd.image, "true")
    try:
        dockerd.docker("cp", "-a", str(rootsh), f"{maker}:/rootsh")
        dockerd.docker("commit", maker, tag)
    finally:
        dockerd.docker("rm", "-f", maker, check=False)
    nobody = Account("nobodyish", 65534, 65534, (65534,), "/home/nobodyish")
    shared = executor([dockerd], tmp_path / "shared", run_as=lambda user: nobody)
    single = executor([dockerd], tmp_path / "single", user="65534:65534")
    ids = ["/rootsh", "-p", "-c", "echo euid=$(id -u)"]

    async def run(ex):
        async with live(ex) as eng:
            job = eng.submit({"command": ids, "image": tag, "user": "alice"})
            await wait_for(final(eng, job.id), 30, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            return ex.logs(job.id)

    try:
        assert "euid=0\n" in asyncio.run(run(single))  # the image does what it says: a setuid root shell
        assert "euid=65534\n" in asyncio.run(run(shared))
    finally:
        dockerd.docker("rmi", "-f", tag, check=False)


def test_cancel_stops_the_container_with_sigterm_then_sigkill_after_the_grace(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs", cancel_grace=1.0)

    async def main():
        async with live(ex) as eng:
            polite = eng.submit({"command": [dockerd.python, str(JOBS / "sigterm_job.py")]})
            stubborn = eng.submit({"command": [dockerd.python, str(JOBS / "sigterm_job.py"), "ignore"]})
            for job in (polite, stubborn):
                await wait_for(in_log(ex, job.id, "ready"), 30, f"job {job.id} to be ready")
            t0 = time.monotonic()
            eng.cancel(polite.id)
            eng.cancel(stubborn.id)
            await wait_for(final(eng, polite.id), 15, "the polite job to stop")
            assert polite.state is JobState.cancelled and polite.reason == "cancelled"
            assert "got SIGTERM" in ex.logs(polite.id)  # docker stop's SIGTERM reached the job
            await wait_for(final(eng, stubborn.id), 15, "the stubborn job to be killed")
            assert time.monotonic() - t0 >= 0.9  # it had its grace
            assert stubborn.state is JobState.cancelled
            assert stubborn.reason == "cancelled (SIGKILL after the grace period)"
            assert stubborn.exit_code == 137
            for job in (polite, stubborn):
                assert labelled(dockerd, job.id) == []
            assert eng.pool.total == 4

    asyncio.run(main())


def test_crash_fails_with_the_error_as_reason(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs")

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"command": [dockerd.python, str(JOBS / "crash.py")]})
            await wait_for(final(eng, job.id), 30, "the job to crash")
            assert job.state is JobState.failed and job.exit_code == 1
            assert job.reason == "RuntimeError: boom: the model diverged at step 3"
            missing = eng.submit({"command": ["/no/such/program"]})
            await wait_for(final(eng, missing.id), 30, "the missing program to fail")
            assert missing.state is JobState.failed and missing.exit_code == 127
            assert "/no/such/program" in missing.reason and "\n" not in missing.reason
            assert labelled(dockerd, job.id) == [] and labelled(dockerd, missing.id) == []

    asyncio.run(main())


def test_container_killed_from_outside_fails_with_a_reason_and_frees_its_gpus(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs")

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"command": [dockerd.python, str(JOBS / "sigterm_job.py")], "gpus": 4})
            await wait_for(in_log(ex, job.id, "ready"), 30, "the job to be ready")
            (host, cid), = ex.containers(job.id)
            await asyncio.to_thread(dockerd.docker, "kill", cid)
            t0 = time.monotonic()
            await wait_for(final(eng, job.id), 5, "the killed job to fail")
            assert time.monotonic() - t0 < 1.0
            assert job.state is JobState.failed and job.exit_code == 137
            assert job.reason.startswith(
                "killed: exit 137 (SIGKILL, not by the scheduler); last log line: ready")
            assert eng.pool.total == 4
            nxt = eng.submit({"command": show_env(dockerd), "gpus": 4})  # the GPUs are free again
            await wait_for(final(eng, nxt.id), 30, "the next job to run")
            assert nxt.state is JobState.succeeded, nxt.reason

    asyncio.run(main())


def test_a_removal_returns_only_once_the_container_is_gone(dockerd, tmp_path):
    """Two removals at once (a job's end and a cancel, or a daemon still removing what timed
    out): the daemon answers the second "removal already in progress" (409); neither returns
    while the container is still there, so a job reported ended has left nothing behind. A
    daemon that cannot be reached is not waited for."""
    from schedulearn.executors.docker import _Worker

    ex = executor([dockerd], tmp_path / "jobs")

    def remove(cid: str, job_id: int, left: list) -> None:
        ex._remove(_Worker("h0", 0, cid))
        left.append(labelled(dockerd, job_id))
    for job_id in (901, 902, 903):
        sleeper = [dockerd.python, "-c", "import time; time.sleep(120)"]
        cid = ex._create(job_id, 0, 0, "h0", dockerd.image, sleeper, {}, None, "/")
        with contextlib.closing(dockerd.client()) as c:
            c.api.start(cid)
        left: list[list] = []
        threads = [threading.Thread(target=remove, args=(cid, job_id, left)) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert left == [[], [], []]
    # a daemon that cannot be reached is not waited for (three API timeouts would be 90 s)
    gone = DockerExecutor(f"h0={dockerd.url},down=unix:///tmp/sl-no-such-dockerd.sock", tmp_path / "jobs2")
    t0 = time.monotonic()
    gone._remove(_Worker("down", 0, "0" * 64))
    assert time.monotonic() - t0 < 5.0


def test_unknown_image_fails_with_a_one_line_reason(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs")

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"command": ["true"], "image": "no-such-image:1"})
            await wait_for(final(eng, job.id), 10, "the job to fail")
            assert job.state is JobState.failed
            assert job.reason == ("image: 'no-such-image:1' not found on docker host h0 "
                                  "(pull it there first, or set docker_pull=missing: serve --docker-pull "
                                  "missing)")
            assert eng.pool.total == 4 and labelled(dockerd, job.id) == []

    asyncio.run(main())


def test_down_host_fails_its_job_is_marked_unhealthy_and_the_other_host_keeps_working(dockerd, tmp_path):
    gone = "unix:///tmp/sl-no-such-dockerd.sock"
    ex = executor([dockerd], tmp_path / "jobs", gpus=2, extra_hosts=f",down={gone}?gpus=1")
    # the inventory saw both hosts up; then "down" went away
    nodes = [h.to_node() for h in ex.hosts.values()]

    async def main():
        async with live(ex, nodes=nodes) as eng:
            job = eng.submit({"command": show_env(dockerd), "gpus": 1})  # best fit: the 1-GPU host
            await wait_for(final(eng, job.id), 10, "the job on the down host to fail")
            assert job.state is JobState.failed
            assert job.reason == (
                f"docker host down ({gone}) unreachable: FileNotFoundError: No such file or directory")
            await wait_for(lambda: not next(n for n in eng.nodes if n.name == "down").healthy, 5,
                           "the down host to be marked unhealthy")
            assert eng.pool.total == 2 and eng.total_gpus == 2
            other = eng.submit({"command": show_env(dockerd), "gpus": 1})
            await wait_for(final(eng, other.id), 30, "a job on the good host")
            assert other.state is JobState.succeeded, other.reason
            assert " on h0[" in ex.logs(other.id)
            assert "CUDA_VISIBLE_DEVICES=" in ex.logs(other.id)
            await asyncio.sleep(1.2)  # health checks run; the down host stays down
            assert not next(n for n in eng.nodes if n.name == "down").healthy

    asyncio.run(main())
    fresh = executor([dockerd], tmp_path / "jobs2", extra_hosts=f",down={gone}?gpus=1", health_interval=0)
    by_name = {n.name: n for n in fresh.nodes()}
    assert by_name["h0"].healthy and not by_name["down"].healthy
    assert parse_hosts(f"down={gone}?gpus=1")[0].address == "127.0.0.1"


def test_restarted_server_reattaches_by_labels_and_reports_the_real_exit(dockerd, tmp_path):
    root = tmp_path / "jobs"

    async def main():
        ex = executor([dockerd], root)
        async with live(ex, keep_jobs=True) as eng:  # the server goes away, the container stays
            job = eng.submit({"command": show_env(dockerd, "release", "3"), "gpus": 2})
            await wait_for(in_log(ex, job.id, "cwd="), 30, "the job to start")
            (_, cid), = ex.containers(job.id)
            saved = dataclasses.replace(job, alloc=dict(job.alloc))
        ex.close()
        assert job.state is JobState.running
        lost = Job(id=99, spec=JobSpec(command=["true"]), submit_time=0, state=JobState.running,
                   alloc={"h0": (3,)})  # its container is gone
        ex2 = executor([dockerd], root)
        async with live(ex2, store=MemoryStore([saved, lost])) as eng2:
            job2 = eng2.get(saved.id)
            assert job2.state is JobState.running and ex2.containers(job2.id) == [("h0", cid)]
            assert eng2.pool.total == 2  # its GPUs stay taken
            assert "re-attached to run #0" in ex2.logs(job2.id)
            await wait_for(final(eng2, 99), 5, "the job without a container to be lost")
            assert eng2.get(99).state is JobState.failed and eng2.get(99).reason == "lost on restart"
            (ex2.job_dir(job2.id) / "release").touch()
            await wait_for(final(eng2, job2.id), 30, "the re-attached job to end")
            assert job2.state is JobState.failed and job2.exit_code == 3
            assert job2.reason == "bye 3"
            text = ex2.logs(job2.id)
            assert text.count("CUDA_VISIBLE_DEVICES=") == 2  # start marker + job: no line copied twice
            assert text.count("bye 3\n") == 1
            assert labelled(dockerd, job2.id) == []
            assert eng2.pool.total == 4

    asyncio.run(main())


BAR = """\
import os, sys, time
print("setup", flush=True)
for i in range(200):
    sys.stdout.write(f"\\repoch 1: {i + 1}/200")
print(flush=True)
for i in range(3000):
    sys.stdout.write(f"\\rtraining {i + 1}/3000")
sys.stdout.flush()
while not os.path.exists("release"):
    time.sleep(0.05)
sys.stdout.write("\\n")
for i in range(5):
    print(f"after {i}")
sys.stdout.write("no newline at the end")
"""


def test_a_progress_bar_reaches_the_log_as_drawn_and_a_reattached_job_loses_no_line(dockerd, tmp_path):
    """A progress bar's drawings (carriage returns, no newline yet) reach the log as they come,
    as a local job's do; they were held until the line ended. Re-attached after a restart, the
    job's next lines are all there, once: the lines already written are counted at newlines
    only, as the daemon sends them again (the count cut at every carriage return too, and as
    many later lines as the bar had drawings were left out). The job's last words, though they
    end no line, are kept (the daemon's follow stream may end without them), and markers start
    lines of their own."""
    root = tmp_path / "jobs"

    async def main():
        ex = executor([dockerd], root)
        async with live(ex, keep_jobs=True) as eng:
            job = eng.submit({"script": BAR})
            # (a line not yet ended comes from the daemon in pieces of 16 KiB: the json-file driver's)
            await wait_for(in_log(ex, job.id, "\rtraining 2000/3000"), 30, "the bar's drawings")
            saved = dataclasses.replace(job, alloc=dict(job.alloc))
        ex.close()
        ex2 = executor([dockerd], root)
        async with live(ex2, store=MemoryStore([saved])) as eng2:
            job2 = eng2.get(saved.id)
            assert job2.state is JobState.running
            (ex2.job_dir(job2.id) / "release").touch()
            await wait_for(final(eng2, job2.id), 30, "the re-attached job to end")
            assert job2.state is JobState.succeeded, job2.reason
            lines = ex2.logs(job2.id).split("\n")
            assert [ln for ln in lines if ln.startswith("after")] == [f"after {i}" for i in range(5)]
            assert lines.count("setup") == 1
            assert sum(ln.endswith("epoch 1: 200/200") for ln in lines) == 1
            marks = [ln for ln in lines if joblogs.MARKER in ln]
            assert all(ln.startswith(joblogs.MARKER) for ln in marks), marks
            assert lines[-3:] == ["no newline at the end", lines[-2], ""]
            assert lines[-2].startswith(joblogs.MARKER + " exit of run #0: code 0")
            assert ex2.logs(job2.id).endswith("training 3000/3000\nafter 0\nafter 1\nafter 2\nafter 3\n"
                                              "after 4\nno newline at the end\n" + lines[-2] + "\n")

    asyncio.run(main())


RESIZABLE = """\
import os, signal, sys, time
r, cvd = os.environ["SCHEDULEARN_RESTART_COUNT"], os.environ["CUDA_VISIBLE_DEVICES"]
print(f"run restart={r} cvd={cvd}", flush=True)
def on_term(*_):
    print(f"checkpoint at restart={r}", flush=True)
    sys.exit(0)  # a clean exit: reporting it would wrongly end the job
signal.signal(signal.SIGTERM, on_term)
while not os.path.exists("release"):
    time.sleep(0.05)
print("done", flush=True)
"""


def test_resize_restarts_the_container_at_the_new_size_and_hides_the_old_exit(dockerd, tmp_path):
    ex = executor([dockerd], tmp_path / "jobs", gpus=2)

    async def main():
        eng = Engine(ex.nodes(), "elastic-fifo", executor=ex)
        task = asyncio.create_task(eng.run(RealClock(tick=0.2)))
        try:
            job = eng.submit({"script": RESIZABLE, "gpus": "auto", "min_gpus": 1, "max_gpus": 2})
            await wait_for(in_log(ex, job.id, "run restart=0 cvd=0,1"), 30, "the job on 2 GPUs")
            other = eng.submit({"command": show_env(dockerd, "release"), "gpus": 1})
            await wait_for(in_log(ex, job.id, "run restart=1 cvd="), 30, "the job restarted on 1 GPU")
            assert job.state is JobState.running and job.size == 1
            await wait_for(in_log(ex, other.id, "cwd="), 30, "the other job to start")
            (ex.job_dir(other.id) / "release").touch()
            await wait_for(final(eng, other.id), 30, "the other job to end")
            await wait_for(in_log(ex, job.id, "run restart=2 cvd=0,1"), 30, "the job back on 2 GPUs")
            assert job.state is JobState.running and job.restarts == 2
            assert len(labelled(dockerd, job.id)) == 1  # the stopped containers are gone
            (ex.job_dir(job.id) / "release").touch()
            await wait_for(final(eng, job.id), 30, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            text = ex.logs(job.id)
            assert "checkpoint at restart=0" in text and "checkpoint at restart=1" in text
            assert text.count("stopped for resize") == 2
            assert re.search(r"run restart=1 cvd=\d\n", text)
            assert labelled(dockerd, job.id) == []
        finally:
            await asyncio.to_thread(ex.terminate_all, 1.0)
            eng.close()
            await task

    asyncio.run(main())


class Died(BaseException):
    """The server's death, where a test cuts a launch short (no cleanup runs)."""


def test_a_relaunch_cut_short_between_create_and_start_is_started_again_after_a_restart(dockerd, tmp_path):
    """The server dies after a resize's new container is created and before it is started. The
    next server must not follow that container as the run (it never ran: its "exit" would end
    the job as if it had): it removes it and starts the run again."""
    root = tmp_path / "jobs"
    ex = executor([dockerd], root, gpus=2)
    real_create, relaunch = ex._create, ex._relaunch_now
    cut = threading.Event()

    def create(job_id, rank, restarts, *args):
        cid = real_create(job_id, rank, restarts, *args)
        if restarts == 1:
            cut.set()
            raise Died
        return cid

    def relaunch_until_death(*args):
        with contextlib.suppress(Died):
            relaunch(*args)

    ex._create, ex._relaunch_now = create, relaunch_until_death

    async def main():
        async with live(ex, keep_jobs=True, policy="elastic-fifo") as eng:
            job = eng.submit({"script": RESIZABLE, "gpus": "auto", "min_gpus": 1, "max_gpus": 2})
            await wait_for(in_log(ex, job.id, "run restart=0 cvd=0,1"), 30, "the job on 2 GPUs")
            other = eng.submit({"command": show_env(dockerd, "release"), "gpus": 1})
            await wait_for(cut.is_set, 30, "the resize's container to be created")
            await wait_for(in_log(ex, other.id, "cwd="), 30, "the other job to start")
            saved = [dataclasses.replace(j, alloc=dict(j.alloc)) for j in (job, other)]
        ex.close()
        assert saved[0].state is JobState.running and saved[0].restarts == 1 and saved[0].size == 1
        created = [c for c in labelled(dockerd, job.id) if c.status == "created"]
        assert len(created) == 1, labelled(dockerd, job.id)
        ex2 = executor([dockerd], root, gpus=2)
        async with live(ex2, store=MemoryStore(saved), policy="elastic-fifo") as eng2:
            job2, other2 = eng2.get(job.id), eng2.get(other.id)
            await wait_for(in_log(ex2, job2.id, "run restart=1 cvd="), 30, "run #1 to start after all")
            assert job2.state is JobState.running, (job2.state, job2.reason)
            (ex2.job_dir(other2.id) / "release").touch()
            await wait_for(final(eng2, other2.id), 30, "the other job to end")
            await wait_for(in_log(ex2, job2.id, "run restart=2 cvd=0,1"), 30, "the job back on 2 GPUs")
            (ex2.job_dir(job2.id) / "release").touch()
            await wait_for(final(eng2, job2.id), 30, "the job to end")
            assert job2.state is JobState.succeeded, job2.reason
            text = ex2.logs(job2.id)
            assert text.count("run restart=1 cvd=") == 1 and text.count("\ndone\n") == 1, text
            assert labelled(dockerd, job2.id) == []

    asyncio.run(main())


def test_the_servers_docker_settings_reach_every_container(dockerd, tmp_path):
    """`serve --executor docker --docker-volume /data:/data:ro --docker-python …` (the settings
    the extension's traits and the variables also set): a job reads the mounted data, with the
    configured interpreter, and cannot write it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "hello.txt").write_text("mounted data\n")
    settings = Settings(executor="docker", job_root=str(tmp_path / "jobs"), cancel_grace=5.0, options={
        "docker_hosts": [f"h0={dockerd.url}?gpus=2"], "default_image": dockerd.image,
        "docker_python": dockerd.python, "docker_volumes": [*dockerd.volumes, f"{data}:/data:ro"],
        "docker_pull": "never"})
    ex = registry.get("docker").make(settings)
    assert ex.python == dockerd.python and ex.volumes[-1] == f"{data}:/data:ro"

    async def main():
        async with live(ex) as eng:
            job = eng.submit({"name": "reads", "script": (
                "import sys\nprint(open('/data/hello.txt').read().strip(), sys.executable, flush=True)\n"
                "try:\n    open('/data/new.txt', 'w')\n"
                "except OSError as e:\n    print('read-only:', e.errno)\n")})
            await wait_for(final(eng, job.id), 60, "the job to end")
            assert job.state is JobState.succeeded, job.reason
            text = ex.logs(job.id)
            assert f"mounted data {dockerd.python}\n" in text and "read-only: 30\n" in text, text
            assert not (data / "new.txt").exists()
            # a command's `python` is docker_python, first on the image's PATH (the test image has
            # no python of its own on it); a PATH the job sets wins
            cmd = eng.submit({"name": "cmd", "command": ["python", "-c", "import os, sys; print('cmd', "
                                                         "sys.prefix, os.environ['PATH'], flush=True)"]})
            own = eng.submit({"name": "own", "command": ["sh", "-c", "echo own $PATH"],
                              "env": {"PATH": "/usr/bin:/bin"}})
            await wait_for(lambda: cmd.state.final and own.state.final, 60, "the jobs to end")
            assert cmd.state is JobState.succeeded, (cmd.reason, ex.logs(cmd.id))
            venv = str(Path(dockerd.python).parent)
            assert f"cmd {Path(venv).parent} {venv}:/usr/local/sbin:" in ex.logs(cmd.id), ex.logs(cmd.id)
            assert "own /usr/bin:/bin\n" in ex.logs(own.id)

    asyncio.run(main())


def test_bad_configuration_is_refused_with_one_line(tmp_path):
    for bind in ("data:/data:ro", "/data", "/data:data", "/data:/data:rox", "/a:/b:ro:x", "./d:/d"):
        if bind == "data:/data:ro":  # a volume's name is a source
            assert DockerExecutor("a=unix:///x.sock", tmp_path, volumes=[bind]).volumes == [bind]
            continue
        with pytest.raises(ValueError, match=r"^docker_volumes: expected SRC:DST\[:ro\] .+, got '"):
            DockerExecutor("a=unix:///x.sock", tmp_path, volumes=[bind])
    with pytest.raises(ValueError, match=r"^docker_pull: expected one of never, missing, got 'always'$"):
        registry.get("docker").make(Settings(executor="docker", job_root=str(tmp_path),
                                             options={"docker_pull": "always"}))
    with pytest.raises(ValueError, match=r"^pull: expected one of never, missing, got 'always'$"):
        DockerExecutor("a=unix:///x.sock", tmp_path, pull="always")
    with pytest.raises(SpecError, match=r"^docker_hosts: url of 'a' must start with one of unix://, tcp://, ssh://"):
        DockerExecutor("a=http://x", tmp_path)
    hosts = parse_hosts("a=ssh://me@gpu2?gpus=2,b=tcp://10.0.0.3:2376?address=10.9.9.9")
    assert [(h.name, h.gpus, h.address) for h in hosts] == [("a", 2, "gpu2"), ("b", None, "10.9.9.9")]


def test_nvidia_smi_csv_and_loopback_addresses_of_local_hosts():
    from schedulearn.executors.hosts import parse_nvidia_smi

    out = ("0, GPU-1111, NVIDIA H100 80GB HBM3, 81559, 3, 17\n"
           "1, GPU-2222, NVIDIA H100 80GB HBM3, 81559, [N/A], [N/A]\nNo devices were found\n")
    gpus = parse_nvidia_smi(out)
    got = [(g.index, g.uuid, g.memory_total_mb, g.memory_used_mb, g.utilization, g.virtual) for g in gpus]
    assert got == [(0, "GPU-1111", 81559, 3, 17.0, False), (1, "GPU-2222", 81559, 0, 0.0, False)]
    hosts = parse_hosts("a=unix:///a.sock,b=unix:///b.sock?address=127.0.0.2,c=unix:///c.sock,d=tcp://gpu4:2375")
    assert [h.address for h in hosts] == ["127.0.0.1", "127.0.0.2", "127.0.0.3", "gpu4"]


def test_multi_host_horovod_plan_starts_sshd_workers_and_a_horovodrun_on_the_first_host(tmp_path):
    """The plan only: running it needs sshd in the image (see docs/docker.md)."""
    from schedulearn.executors.launch import build_workers

    ex = DockerExecutor("a=unix:///a.sock?gpus=2,b=unix:///b.sock?gpus=2", tmp_path, image="img")
    spec = JobSpec(command=["python", "train.py"], launcher="horovod", gpus=4)
    alloc = {"a": (0, 1), "b": (0, 1)}
    workers = build_workers(spec, 7, alloc, tmp_path / "7", addresses={"a": "127.0.0.1", "b": "127.0.0.2"})
    plans = ex._plans(spec, workers, alloc)
    (h1, argv1, env1, dev1, side1), (h2, argv2, _env2, dev2, side2) = plans
    assert (h1, side1, h2, side2) == ("a", False, "b", True)
    assert argv1[argv1.index("-p") + 1] == "12345" and "127.0.0.1:2,127.0.0.2:2" in argv1
    assert argv2 == ["/usr/sbin/sshd", "-D", "-e", "-p", "12345"]
    assert env1["CUDA_VISIBLE_DEVICES"] == "0,1" and dev1 is None and dev2 is None  # virtual GPUs


def test_real_gpus_are_requested_by_device_id_and_renumbered_inside(tmp_path):
    import types

    from schedulearn.executors.launch import build_workers
    from schedulearn.model import Gpu, Node

    ex = DockerExecutor("g=unix:///g.sock", tmp_path, image="img")
    gpus = [Gpu(index=i, uuid=f"GPU-{i}", name="H100", virtual=False) for i in range(4)]
    ex.engine = types.SimpleNamespace(nodes=[Node("g", gpus, virtual=False)])
    spec = JobSpec(command=["python", "train.py"], gpus=2)
    workers = build_workers(spec, 1, {"g": (2, 3)}, tmp_path / "1", nodes={"g": ex.engine.nodes[0]})
    ((host, _argv, env, devices, _side),) = ex._plans(spec, workers, {"g": (2, 3)})
    assert devices == ["2", "3"]  # device_requests by NVML index
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["SCHEDULEARN_HOST_GPUS"] == "2,3"
    ex.use_uuids = True
    assert ex._devices(ex.engine.nodes[0], (2, 3)) == ["GPU-2", "GPU-3"]
