"""Host-wide GPU claims (`schedulearn.gpulocks`): two schedulers on one machine never start jobs
on the same GPU. Real `flock`s held by real processes: a claim lasts while any process of the run
holds it (a killed server's jobs keep theirs), a scheduler's inventory marks GPUs another one's
runs hold, and a run that loses the race is placed anew; two real `schedulearn serve` servers
sharing one directory, as two people's JupyterLabs on one workstation would."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedulearn import gpulocks
from schedulearn.client import Client
from schedulearn.engine import Engine
from schedulearn.executors.local import LocalExecutor
from schedulearn.gpulocks import GpuLocks, GpusTaken
from schedulearn.inventory import HostInventory
from schedulearn.model import JobSpec, JobState, Node
from schedulearn_magics import views

from tests.fixtures.jupyter import ROOT
from tests.test_server_live import Serve, wait_for

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}

#: a run (of scheduler argv[3], job argv[4]; default: job 7 of another scheduler's) claims GPU
#: argv[2] of a 2-GPU virtual node in directory argv[1], says so, and holds it until killed
HOLDER = r"""
import sys, time
from schedulearn.gpulocks import GpuLocks
from schedulearn.model import Node
gpu = Node.virtual_node("box", 2).gpus[int(sys.argv[2])]
owner, job = (sys.argv[3], int(sys.argv[4])) if len(sys.argv) > 3 else ("/home/bob/jobs", 7)
fds = GpuLocks(sys.argv[1], owner, virtual=True).claim([gpu], {"job": job, "run": 0, "user": "bob"})
print("held", flush=True)
time.sleep(300)
"""


@pytest.fixture
def holder(tmp_path: Path, started):
    """`hold(index[, owner, job])`: a process claiming that GPU of node `box` (default: job 7 of
    another scheduler, /home/bob/jobs)."""
    return lambda index, *owner_and_job: started(
        [sys.executable, "-c", HOLDER, str(tmp_path / "locks"), str(index), *owner_and_job], "held", env=ENV)


def gpus(n: int = 2) -> list:
    return Node.virtual_node("box", n).gpus


def test_a_claim_held_elsewhere_is_seen_and_refused_until_its_process_ends(tmp_path: Path, holder):
    mine = GpuLocks(tmp_path / "locks", "/home/alice/jobs", virtual=True)
    proc = holder(0)
    seen = mine.holders(gpus())
    assert list(seen) == ["virtual-box-0"]
    assert seen["virtual-box-0"]["job"] == 7 and seen["virtual-box-0"]["owner"] == "/home/bob/jobs"
    with pytest.raises(GpusTaken, match=r"GPU 0 is held by job 7 of bob, another scheduler's \(pid \d+, "
                                        r"since \d\d:\d\d, job root /home/bob/jobs\)"):
        mine.claim(gpus(), {"job": 1, "run": 0, "user": "alice"})
    assert list(mine.holders(gpus())) == ["virtual-box-0"]  # GPU 1 was not kept by the refused claim
    proc.kill()
    proc.wait()
    fds = mine.claim(gpus(), {"job": 1, "run": 0, "user": "alice"})
    assert sorted(fds) == [0, 1]
    other = GpuLocks(tmp_path / "locks", "/home/bob/jobs", virtual=True)
    assert {h["user"] for h in other.holders(gpus()).values()} == {"alice"}
    GpuLocks.release(fds.values())
    assert other.holders(gpus()) == {}


def test_a_run_that_inherited_a_claim_keeps_it_after_the_claimant_closed_its_copy(tmp_path: Path):
    """What a killed server leaves: the run's processes hold the claim; it ends with them. And
    `release` of the claimant's own copy ends it for every copy (an in-place shrink)."""
    mine = GpuLocks(tmp_path / "locks", "/srv/a", virtual=True)
    other = GpuLocks(tmp_path / "locks", "/srv/b", virtual=True)
    fds = mine.claim(gpus(), {"job": 3, "run": 0, "user": "alice"})
    run = subprocess.Popen(["sleep", "300"], pass_fds=tuple(fds.values()))
    try:
        os.close(fds.pop(0))  # the server is gone: its copy closed, not unlocked
        assert sorted(other.holders(gpus())) == ["virtual-box-0", "virtual-box-1"]
        GpuLocks.release([fds.pop(1)])  # shrunk away from GPU 1: free though the run still has it
        assert sorted(other.holders(gpus())) == ["virtual-box-0"]
    finally:
        run.kill()
        run.wait()
    assert other.holders(gpus()) == {}


def test_virtual_gpus_are_claimed_only_where_a_directory_is_given():
    assert gpulocks.from_setting("off", "/srv/jobs") is None
    default = gpulocks.from_setting("", "/srv/jobs")
    assert default is not None and str(default.directory) == gpulocks.DEFAULT_DIR
    assert default.key(gpus()[0]) is None
    real = gpus()[0]
    real.virtual, real.uuid = False, "GPU-8f3e2a"
    assert default.key(real) == "GPU-8f3e2a.lock"
    given = gpulocks.from_setting("/run/lock/sl", "/srv/jobs")
    assert given is not None and given.key(gpus()[0]) == "virtual-box-0.lock"
    with pytest.raises(ValueError, match=r"^gpu_locks: expected an absolute directory, '' \(the default, "
                                         r"/dev/shm/schedulearn-gpus\) or 'off', got 'locks'$"):
        gpulocks.from_setting("locks", "/srv/jobs")


def test_links_and_foreign_files_in_the_directory_are_never_followed_or_written(tmp_path: Path, caplog):
    """The directory is world-writable: a link planted as a GPU's claim file, or a second link to
    some file, is refused (said once in the log) and the job starts unclaimed, its target untouched."""
    d = tmp_path / "locks"
    d.mkdir(mode=0o1777)
    target = tmp_path / "precious"
    target.write_text("keep me")
    (d / "virtual-box-0.lock").symlink_to(target)
    os.link(target, d / "virtual-box-1.lock")
    locks = GpuLocks(d, "/srv/a", virtual=True)
    with caplog.at_level(logging.WARNING, "schedulearn.gpulocks"):
        assert locks.claim(gpus(), {"job": 1, "run": 0, "user": "alice"}) == {}
        assert locks.claim(gpus(), {"job": 1, "run": 0, "user": "alice"}) == {}
    assert target.read_text() == "keep me"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said  # each cause once, not at every claim
    assert all("jobs start without claiming their GPUs" in s for s in said)
    assert "a link, not a regular file: " in said[0] and "not a regular file of its own: " in said[1]


def test_the_directory_is_made_shared_and_sticky(tmp_path: Path):
    d = tmp_path / "locks"
    old = os.umask(0o077)
    try:
        fds = GpuLocks(d, "/srv/a", virtual=True).claim(gpus(1), {"job": 1, "run": 0, "user": "alice"})
    finally:
        os.umask(old)
    assert oct(d.stat().st_mode & 0o7777) == oct(0o1777)
    mode = (d / "virtual-box-0.lock").stat().st_mode & 0o777
    assert oct(mode) == oct(0o666)  # other accounts' servers write it
    GpuLocks.release(fds.values())


def test_a_start_on_a_gpu_claimed_elsewhere_requeues_the_job_and_another_takes_the_free_one(
        tmp_path: Path, holder):
    """The engine's side: the run is not started (no restart counted, it never ran), the GPU
    leaves the free pool at once (the round's next job lands on the free one), and once the
    other run ends a fresh inventory gives it back."""
    ex = LocalExecutor(tmp_path / "jobs", cancel_grace=2, inventory=HostInventory(2, "box"))
    ex.gpu_locks = GpuLocks(tmp_path / "locks", str(ex.job_root), virtual=True)
    e = Engine(ex.nodes(), "fifo", ex)
    proc = holder(0)
    try:
        first = e.submit(JobSpec(command=["sleep", "30"], gpus=1), now=0)
        second = e.submit(JobSpec(command=["sleep", "30"], gpus=1), now=0)
        e.round(1)
        assert first.state is JobState.queued and first.start_time is None and first.restarts == 0
        assert second.state is JobState.running and second.alloc == {"box": (1,)}
        log = (ex.job_dir(first.id) / "log.txt").read_text()
        assert log.startswith("=== schedulearn: run #0 not started: GPU 0 is held by job 7 of bob, "
                              "another scheduler's")
        e.set_nodes(ex.nodes())  # (the server's inventory refresh)
        assert "job 7 of bob" in e.nodes[0].gpus[0].held_by
        assert e.job_dict(first, 2)["reason"] == ("waiting: needs 1 GPU, 0 free, 1 held outside the "
                                                  "scheduler; 1st in line of 1")
        proc.kill()
        proc.wait()
        e.set_nodes(ex.nodes())
        e.round(3)
        assert first.state is JobState.running and first.alloc == {"box": (0,)}
        assert not list(tmp_path.joinpath("jobs").glob("*.old-*"))  # its folder (and log) kept
        assert "start #0" in (ex.job_dir(first.id) / "log.txt").read_text()
    finally:
        ex.terminate_all(grace=1)


def test_a_claim_of_this_schedulers_own_is_held_only_where_its_job_no_longer_runs(tmp_path: Path, holder):
    """A process of one of its own runs that outlived its job still claims the GPU: marked held
    (its own engine places nothing there); the claims of its running jobs are its books'."""
    ex = LocalExecutor(tmp_path / "jobs", cancel_grace=2, inventory=HostInventory(2, "box"))
    ex.gpu_locks = GpuLocks(tmp_path / "locks", str(ex.job_root), virtual=True)
    e = Engine(ex.nodes(), "fifo", ex)
    try:
        job = e.submit(JobSpec(command=["sleep", "30"], gpus=1), now=0)
        e.round(1)
        assert job.alloc == {"box": (0,)}
        holder(1, str(ex.job_root), "99")  # job 99 of this scheduler's: long gone from its books
        held = {g.index: g.held_by for g in ex.nodes()[0].gpus}
        assert held == {0: "", 1: "job 99 of bob, this scheduler's (a process of its run is still there)"}
    finally:
        ex.terminate_all(grace=1)


def test_an_in_place_shrink_ends_the_claims_of_the_gpus_it_gave_up(tmp_path: Path):
    ex = LocalExecutor(tmp_path / "jobs", cancel_grace=2)
    ex.gpu_locks = GpuLocks(tmp_path / "locks", str(ex.job_root), virtual=True)
    other = GpuLocks(tmp_path / "locks", "/srv/other", virtual=True)
    from schedulearn.executors.local import _Run

    fds = ex.gpu_locks.claim(gpus(), {"job": 1, "run": 0, "user": "alice"})
    run = _Run(job_id=1, restarts=0, pid=os.getpid(), claims=fds)
    ex._wait_removed(run, {}, keep={0})  # (the removed workers are gone: none here)
    assert sorted(other.holders(gpus())) == ["virtual-box-0"]
    assert list(run.claims) == [0]
    GpuLocks.release(run.claims.values())


# -- two real servers ------------------------------------------------------------------------------
def serve(home: Path, locks: Path) -> Serve:
    return Serve(home, "--token", "t", "--virtual-gpus", "2", "--tick", "0.2", "--cancel-grace", "2",
                 "--inventory-interval", "0.5", "--gpu-locks", str(locks))


def test_two_servers_on_one_machine_never_share_a_gpu_even_after_one_is_killed(tmp_path: Path):
    locks = tmp_path / "locks"
    a, b = serve(tmp_path / "a", locks), serve(tmp_path / "b", locks)
    ca, cb = Client(a.url, "t"), Client(b.url, "t")
    servers, clients = [a, b], [ca, cb]
    try:
        # alice's job on A and bob's on B, submitted at once: each server sees both GPUs free, and
        # they still end up on different ones (the one that lost the race to a GPU is placed anew)
        ja = ca.submit({"name": "alice", "command": ["sleep", "120"]})
        jb = cb.submit({"name": "bob", "command": ["sleep", "120"]})
        wait_for(lambda: ca.job(ja["id"])["state"] == cb.job(jb["id"])["state"] == "running",
                 what="both running")
        (ga,), (gb,) = ca.job(ja["id"])["alloc"]["vm"], cb.job(jb["id"])["alloc"]["vm"]
        assert {ga, gb} == {0, 1}
        held = wait_for(lambda: _held(cb), what="B's inventory marking A's GPU held")
        assert list(held) == [ga] and f"job {ja['id']} of " in held[ga] and str(a.home / "jobs") in held[ga]
        assert list(wait_for(lambda: _held(ca), what="A's inventory marking B's GPU held")) == [gb]
        cli = subprocess.run([sys.executable, "-m", "schedulearn.cli", "gpus", "--url", b.url, "--token",
                              "t"], capture_output=True, text=True, env=ENV, timeout=60)
        assert cli.returncode == 0, cli.stderr
        column = {ga: "held", gb: str(jb["id"])}
        assert [line.split()[-1] for line in cli.stdout.splitlines()[1:3]] == [column[0], column[1]]
        assert f"vm GPU {ga} held: job {ja['id']} of " in cli.stdout
        shown = views.gpus_text(cb.gpus()).splitlines()  # (`%schedulearn gpus`)
        assert f"held: job {ja['id']} of " in shown[1 + ga] and shown[1 + gb].endswith(f"job {jb['id']}")

        # A is killed: its job runs on, and still holds GPU 0 against B
        a.proc.kill()
        a.proc.wait(20)
        clients.remove(ca)
        third = cb.submit({"name": "bob-2", "command": ["sleep", "120"]})
        time.sleep(2)  # (four inventory reads)
        assert cb.job(third["id"])["state"] == "queued"
        assert "0 free, 1 held outside the scheduler" in cb.job(third["id"])["reason"]

        # A again: it adopts its job (its own claim: not held), and cancelling it frees GPU 0 for B
        a2 = serve(tmp_path / "a", locks)
        ca2 = Client(a2.url, "t")
        servers.append(a2)
        clients.append(ca2)
        assert ca2.job(ja["id"])["state"] == "running" and ca2.job(ja["id"])["alloc"] == {"vm": [ga]}
        assert list(_held(ca2)) == [gb]  # (its own job's GPU is not held: it adopted the run)
        ca2.cancel(ja["id"])
        wait_for(lambda: cb.job(third["id"])["state"] == "running", timeout=30, what="B's job on A's GPU")
        assert cb.job(third["id"])["alloc"] == {"vm": [ga]}
        assert "not started" not in cb.logs(third["id"])  # it waited: never placed on a held GPU
        both = wait_for(lambda: len(_held(ca2)) == 2 and _held(ca2), what="A seeing both held by B")
        assert sorted(both) == [0, 1]
        assert not list((b.home / "jobs").glob("*.old-*"))  # a job placed anew keeps its folder
    finally:
        for c in clients:
            for job in c.jobs():
                if job["state"] in ("queued", "running"):
                    c.cancel(job["id"])
        for c in clients:
            wait_for(lambda c=c: all(j["state"] not in ("queued", "running") for j in c.jobs()),
                     what="the jobs cancelled")
        for s in servers:
            s.stop()


def _held(c: Client) -> dict[int, str]:
    return {g["index"]: g["held_by"] for n in c.gpus()["nodes"] for g in n["gpus"] if g.get("held_by")}


def test_the_holders_text_is_json_with_who_and_since(tmp_path: Path):
    locks = GpuLocks(tmp_path / "locks", "/srv/a", virtual=True)
    fds = locks.claim(gpus(1), {"job": 5, "run": 2, "user": "carol"})
    data = json.loads((tmp_path / "locks" / "virtual-box-0.lock").read_text())
    assert data["job"] == 5 and data["run"] == 2 and data["user"] == "carol" and data["owner"] == "/srv/a"
    assert data["pid"] == os.getpid() and abs(data["since"] - time.time()) < 60
    GpuLocks.release(fds.values())


def test_what_a_claim_file_says_is_shown_only_as_plain_numbers_and_short_printable_text(tmp_path: Path):
    """Anyone can write a claim file: a terminal escape in it, or a job that is not a number,
    never reaches another user's `schedulearn gpus`."""
    text = gpulocks.describe({"job": "1; rm -rf", "user": "eve\x1b[2J\x07" + "x" * 500, "pid": True,
                              "since": "soon", "owner": "/srv/\x1b]0;pwned\x07jobs"})
    for when in (1e300, -1e300, float("nan")):  # a number, but not a time: left out, nothing raised
        assert gpulocks.describe({"job": 3, "since": when}) == "job 3, another scheduler's"
    assert text.isprintable() and "\x1b" not in text and len(text) < 450
    assert text.startswith("a job of eve?[2J?xxx") and "pid" not in text and "since" not in text
    assert text.endswith("another scheduler's (job root /srv/?]0;pwned?jobs)")
