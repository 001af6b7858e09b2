"""`schedulearn serve --executor slurm` as a real process against the real two-node Slurm (issue 14):

* kill -9 of the server while its Slurm jobs run (three times, at random points of the jobs'
  lives and of a round that starts them): after each restart the jobs are re-attached by their
  stored Slurm ids, each runs exactly once (never submitted twice, never lost) and succeeds;
* the shared set-up: Slurm runs each user's job as their OS account (`sbatch --uid`); alice's job
  cannot read bob's job directory nor the tokens file; `GET gpus` lists the Slurm nodes.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from schedulearn.accounts import Account
from schedulearn.client import Client, ClientError
from schedulearn.executors.slurm import SlurmExecutor

from tests.fixtures.jupyter import ROOT, free_port, wait_http
from tests.fixtures.slurm import SlurmCluster
from tests.test_multiuser import PROBE, SECRET, accounts, home, python, tokens_file, wait_for  # noqa: F401

pytestmark = pytest.mark.slow

TOKEN = "slurm-token"
JOB = r"""
import json, os, sys, time
def note(**kw):
    with open(sys.argv[1], "a") as f:
        f.write(json.dumps(kw) + "\n")
me = dict(job=os.environ["SCHEDULEARN_JOB_ID"], slurm=os.environ.get("SLURM_JOB_ID"), pid=os.getpid())
note(what="start", t=time.time(), **me)
time.sleep(float(sys.argv[2]))
note(what="end", t=time.time(), **me)
"""


# `schedulearn serve` that dies by `os._exit` right after the first sbatch of a run number `N`
# returns ("sbatch:N": the Slurm job exists, held, and its id is nowhere on disk), or right before
# that job's `scontrol release` ("release:N": its id on disk, the job still held): the two windows
# of a launch's gate (run 0: the job's first launch; run 1: its relaunch after a resize); or whose
# first `scontrol release` fails ("refuse-release")
CRASHING = r"""
import os, sys
from schedulearn.cli import main
from schedulearn.executors import slurmcli
where, _, run_no = sys.argv.pop(1).partition(":")
real_run = slurmcli.SlurmCli.run
marked, refused = set(), []
def run(self, *argv, **kw):
    if argv[:2] == ("scontrol", "release"):
        if where == "release" and argv[2] in marked:
            os._exit(9)
        if where == "refuse-release" and not refused:
            refused.append(argv)
            raise slurmcli.SlurmError("scontrol: Unable to contact slurm controller (the test's)")
    out = real_run(self, *argv, **kw)
    if argv[0] == "sbatch" and any(a.startswith("--comment=") and a.endswith(":" + run_no) for a in argv):
        if where == "sbatch":
            os._exit(9)
        marked.add(out.strip().split(";")[0])
    return out
slurmcli.SlurmCli.run = run
sys.exit(main(sys.argv[1:]))
"""


class SlurmServe:
    def __init__(self, where: Path, slurm: SlurmCluster, *args: str, crash: str | None = None):
        self.home, self.slurm, self.args, self.crash = where, slurm, args, crash
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc: subprocess.Popen | None = None

    def start(self) -> SlurmServe:
        env = {**os.environ, **self.slurm.env,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
        with open(self.home / "serve.log", "ab") as log:
            prog = ["-m", "schedulearn.cli"] if self.crash is None else ["-c", CRASHING, self.crash]
            self.proc = subprocess.Popen(
                [sys.executable, *prog, "serve", "--port", str(self.port),
                 "--store", f"sqlite:///{self.home / 'serve.db'}", "--job-root", str(self.home / "jobs"),
                 "--executor", "slurm", "--tick", "0.2", "--cancel-grace", "3",
                 "--slurm-poll-interval", "0.3", *self.args],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_http(self.url + "schedulearn/api/policy", proc=self.proc)
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def job_files(tmp_path: Path) -> tuple[Path, Path]:
    """`JOB` written to `tmp_path`, and the (empty) notes file its runs write to."""
    script, notes = tmp_path / "job.py", tmp_path / "notes.jsonl"
    script.write_text(JOB)
    notes.touch()
    return script, notes


def started(notes: Path, job_id: int | None = None) -> list[str]:
    """The Slurm ids of the runs (of job `job_id`, else of every job) that started, in order."""
    return [r["slurm"] for r in map(json.loads, notes.read_text().splitlines())
            if r["what"] == "start" and (job_id is None or r["job"] == str(job_id))]


@pytest.fixture
def cluster(slurm: SlurmCluster) -> Iterator[SlurmCluster]:
    slurm.cancel_all()
    yield slurm
    slurm.cancel_all()


def test_kill_9_with_slurm_jobs_running_reattaches_and_runs_each_job_once(cluster: SlurmCluster,
                                                                          tmp_path: Path) -> None:
    script, notes = job_files(tmp_path)
    srv = SlurmServe(tmp_path, cluster, "--token", TOKEN).start()
    client = Client(srv.url, TOKEN)
    assert client.gpus()["executor"] == "slurm"  # the CLI's default workdir: where it is typed
    with pytest.raises(ClientError) as e:  # a workdir the nodes cannot enter: at submission
        client.submit({"command": ["true"], "workdir": str(tmp_path / "nope")})
    assert e.value.status == 400 and "is not a directory on the scheduler's machine" in str(e.value)
    with pytest.raises(ClientError) as e:  # a container image Slurm's processes would not run in
        client.submit({"command": ["true"], "image": "pytorch/pytorch"})
    assert e.value.status == 400 and str(e.value).startswith(
        "image: a container image needs the 'docker' executor; this server runs jobs with the 'slurm' "
        "executor")
    rng = random.Random(14)
    ids: list[int] = []
    try:
        for cycle in range(3):
            for _ in range(4):  # 4 x 2 GPUs: the whole cluster
                ids.append(client.submit({"name": f"c{cycle}", "command": [sys.executable, str(script),
                                                                          str(notes), "6"], "gpus": 2})["id"])
            time.sleep(rng.uniform(0.0, 3.0))  # mid-round, mid-submit or mid-run
            srv.kill()
            srv = SlurmServe(tmp_path, cluster, "--token", TOKEN).start()
            client = Client(srv.url, TOKEN)
        wait_for(lambda: all(client.job(i)["state"] in ("succeeded", "failed", "cancelled") for i in ids),
                 240, "every job to end")
        jobs = {i: client.job(i) for i in ids}
    finally:
        srv.stop()
    assert all(j["state"] == "succeeded" for j in jobs.values()), {i: (j["state"], j["reason"])
                                                                   for i, j in jobs.items()}
    for i in ids:
        assert len(started(notes, i)) == 1, f"job {i} ran {len(started(notes, i))} times"
    # and Slurm saw one batch job per run of this server's: none was submitted twice
    names = [j["name"] for j in ours(cluster, tmp_path)]
    per_run = {n.split("-")[0] for n in names}
    assert len(per_run) == len(names) == len(ids), names


def cut_short(cluster: SlurmCluster, tmp_path: Path, window: str) -> tuple[int, dict, Path]:
    """A 2-GPU job whose launch the server's death cut short in `window`: its id, its held Slurm
    job, the notes file its runs write to."""
    script, notes = job_files(tmp_path)
    srv = SlurmServe(tmp_path, cluster, "--token", TOKEN, crash=window).start()
    spec = {"command": [sys.executable, str(script), str(notes), "1"], "gpus": 2}
    try:
        answer: int | None = Client(srv.url, TOKEN).submit(spec)["id"]
    except ClientError:  # the round that launches it (and dies) may come before the answer is sent
        answer = None
    assert srv.proc is not None and srv.proc.wait(60) == 9  # cut short where the test says
    held = ours(cluster, tmp_path)
    job_id = int(held[0]["comment"].split(":")[-2]) if len(held) == 1 else None  # tag:job:run
    assert answer in (None, job_id)
    assert [(j["name"].split("-")[0], j["job_state"]) for j in held] == [(f"sl{job_id}.0", "PENDING")], held
    assert job_id is not None
    return job_id, held[0], notes


def ours(cluster: SlurmCluster, tmp_path: Path) -> list[dict]:
    """The Slurm jobs of the server whose job root is under `tmp_path`, oldest first."""
    tag = SlurmExecutor(tmp_path / "jobs").tag
    mine = [j for j in cluster.jobs() if j["comment"].startswith(tag + ":")]
    return sorted(mine, key=lambda j: j["job_id"])


def run_to_end(cluster: SlurmCluster, tmp_path: Path, job_id: int, crash: str | None = None) -> dict:
    srv = SlurmServe(tmp_path, cluster, "--token", TOKEN, crash=crash).start()
    try:
        client = Client(srv.url, TOKEN)
        wait_for(lambda: client.job(job_id)["state"] in ("succeeded", "failed", "cancelled"), 60,
                 "the job to end")
        return client.job(job_id)
    finally:
        srv.stop()


@pytest.mark.parametrize("window", ["sbatch", "release"])
def test_a_launch_cut_short_behind_its_gate_is_released_after_the_restart_not_submitted_again(
        cluster: SlurmCluster, tmp_path: Path, window: str) -> None:
    """The server dies between `sbatch --hold` and `scontrol release`: the Slurm job exists, held,
    and never ran. The next server completes that launch (the id on disk, the job released): the
    job runs once, and Slurm saw one batch job for its run, not a cancelled one and a second."""
    job_id, held, notes = cut_short(cluster, tmp_path, window + ":0")
    done = run_to_end(cluster, tmp_path, job_id)
    assert done["state"] == "succeeded" and done["restarts"] == 0, done
    assert started(notes) == [str(held["job_id"])], started(notes)
    assert [(j["job_id"], j["job_state"]) for j in ours(cluster, tmp_path)] == [(held["job_id"], "COMPLETED")]


@pytest.mark.parametrize("window, then", [("sbatch", None), ("release", None), ("sbatch", "refuse-release")])
def test_a_relaunch_after_a_resize_cut_short_behind_its_gate_is_released_after_the_restart(
        cluster: SlurmCluster, tmp_path: Path, window: str, then: str | None) -> None:
    """An elastic job shrunk for a newcomer (elastic-fifo) is relaunched at its new size by the
    executor; the server dies behind that relaunch's gate. The next server re-attaches the job
    (it is running for the engine) and opens the gate: the job does not wait held for ever.
    Where Slurm refuses that release, the held job is cancelled and the run submitted again."""
    script, notes = job_files(tmp_path)

    srv = SlurmServe(tmp_path, cluster, "--token", TOKEN, "--policy", "elastic-fifo",
                     crash=f"{window}:1").start()
    client = Client(srv.url, TOKEN)
    cmd = [sys.executable, str(script), str(notes), "10"]
    filler = client.submit({"command": cmd, "gpus": 4})["id"]  # one node's GPUs
    wait_for(lambda: started(notes, filler), 60, "the 4-GPU job to start")
    elastic = client.submit({"command": cmd, "gpus": "auto", "min_gpus": 1, "max_gpus": 4})["id"]
    wait_for(lambda: started(notes, elastic), 60, "the elastic job to start")
    assert client.job(elastic)["gpus"] == 4
    newcomer = client.submit({"command": cmd, "gpus": 2})["id"]  # the elastic job shrinks to 2
    assert srv.proc is not None and srv.proc.wait(60) == 9  # cut short where the test says
    held = [j for j in ours(cluster, tmp_path) if j["name"].startswith(f"sl{elastic}.1-")]
    assert [j["job_state"] for j in held] == ["PENDING"], held
    srv = SlurmServe(tmp_path, cluster, "--token", TOKEN, "--policy", "elastic-fifo", crash=then).start()
    try:
        client = Client(srv.url, TOKEN)
        ids = (filler, elastic, newcomer)
        wait_for(lambda: all(client.job(i)["state"] in ("succeeded", "failed", "cancelled") for i in ids),
                 90, "every job to end")
        jobs = {i: client.job(i) for i in ids}
    finally:
        srv.stop()
    assert all(j["state"] == "succeeded" for j in jobs.values()), jobs
    assert not [j for j in ours(cluster, tmp_path) if j["job_state"] == "PENDING"]
    runs = [j for j in ours(cluster, tmp_path) if j["name"].startswith(f"sl{elastic}.1-")]
    ran = started(notes, elastic)  # (its later runs too, where it grew back once the others ended)
    if then is None:  # the held run ran: no second Slurm job for it
        assert [j["job_id"] for j in runs] == [held[0]["job_id"]], runs
        assert ran[1] == str(held[0]["job_id"]), ran
    else:  # cancelled, never ran; a second Slurm job ran that run
        assert [j["job_id"] for j in runs][0] == held[0]["job_id"] and len(runs) == 2, runs
        assert runs[0]["job_state"] == "CANCELLED" and ran[1] == str(runs[1]["job_id"]), (runs, ran)


def test_a_held_job_that_cannot_be_released_after_the_restart_is_cancelled_and_the_job_started_again(
        cluster: SlurmCluster, tmp_path: Path) -> None:
    """Where the next server cannot release the held job (Slurm's answer an error), it cancels it
    and the engine starts the job again: it still runs once."""
    job_id, held, notes = cut_short(cluster, tmp_path, "sbatch:0")
    done = run_to_end(cluster, tmp_path, job_id, crash="refuse-release")
    assert done["state"] == "succeeded", done
    slurm = [(j["job_id"], j["job_state"]) for j in ours(cluster, tmp_path)]
    assert len(slurm) == 2 and slurm[0] == (held["job_id"], "CANCELLED") and slurm[1][1] == "COMPLETED", slurm
    assert started(notes) == [str(slurm[1][0])], started(notes)
    assert f"cannot release its held Slurm job {held['job_id']} after the restart" in \
        (tmp_path / "serve.log").read_text()


def test_shared_setup_runs_jobs_as_their_users_and_keeps_them_apart(
        cluster: SlurmCluster, accounts: dict[str, Account], home: Path, python: str) -> None:  # noqa: F811
    tokens = tokens_file(home)
    user_map = f"alice={accounts['alice'].name},bob={accounts['bob'].name}"
    srv = SlurmServe(home, cluster, "--tokens", str(tokens), "--user-map", user_map, "--admins", "carol")
    srv.start()
    alice, bob = Client(srv.url, "alice-token"), Client(srv.url, "bob-token")
    try:
        nodes = alice.gpus()["nodes"]
        assert [(n["name"], len(n["gpus"])) for n in nodes] == [("n1", 4), ("n2", 4)]
        b = bob.submit({"name": "secret", "command": [python, "-c", SECRET], "gpus": 1})
        wait_for(lambda: "ready" in bob.logs(b["id"]), 60, "bob's job to write its secret")
        bob_dir = str(home / "jobs" / str(b["id"]))
        targets = {"read": {"bob_dir": bob_dir, "bob_secret": bob_dir + "/secret.txt", "tokens": str(tokens),
                            "store": str(home / "serve.db")}, "pid": os.getpid()}
        a = alice.submit({"name": "probe", "command": [python, "-c", PROBE, json.dumps(targets)], "gpus": 1})
        wait_for(lambda: alice.job(a["id"])["state"] in ("succeeded", "failed"), 60, "alice's probe")
        log = alice.logs(a["id"])
        assert alice.job(a["id"])["state"] == "succeeded", log
        (line,) = [x for x in log.splitlines() if x.startswith("REPORT ")]
        seen = json.loads(line[len("REPORT "):])
        assert seen["uid"] == accounts["alice"].uid and seen["USER"] == accounts["alice"].name
        assert seen["job_dir_mode"] == "0o700"
        assert {k: seen[k] for k in ("bob_dir", "bob_secret", "tokens", "store", "signal")} == dict.fromkeys(
            ("bob_dir", "bob_secret", "tokens", "store", "signal"), "denied")
        # a workdir bob's account cannot enter (alice's job directory) is refused at submission (Slurm
        # would have run his job in /tmp instead)
        with pytest.raises(ClientError, match="which cannot enter it") as e:
            bob.submit({"name": "peek", "command": ["ls"], "workdir": str(home / "jobs" / str(a["id"]))})
        assert e.value.status == 400
        # Slurm itself ran them as their accounts
        users = {j["name"].split("-", 1)[0]: j["user_name"] for j in cluster.jobs()}
        assert users[f"sl{a['id']}.0"] == accounts["alice"].name
        assert users[f"sl{b['id']}.0"] == accounts["bob"].name
        with pytest.raises(ClientError, match="403"):
            alice.cancel(b["id"])
        bob.cancel(b["id"])
        wait_for(lambda: bob.job(b["id"])["state"] == "cancelled", 60, "bob's job to be cancelled")
    finally:
        srv.stop()
