"""`schedulearn serve` killed with SIGKILL in the middle of a round that starts many jobs, and a
store that goes down under a running server (issue 16, points 2 and 3).

Each job records its own start and end (pid, `CUDA_VISIBLE_DEVICES`, times) in a shared file;
right after every restart the test also reads the real job processes' environments from /proc.
After each of the 20 kill-and-restart cycles: every job ran exactly once (never twice, never
lost), no GPU held two runs at the same time, and every job succeeded.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schedulearn.client import Client, ClientError

from tests.fixtures.jupyter import ROOT, free_port, wait_http

pytestmark = pytest.mark.slow

GPUS = 24
CYCLES = 20
TOKEN = "crash-token"

JOB = r"""
import json, os, sys, time
def note(**kw):
    with open(sys.argv[1], "a") as f:  # one short line per write: O_APPEND keeps lines whole
        f.write(json.dumps(kw) + "\n")
me = dict(job=os.environ["SCHEDULEARN_JOB_ID"], pid=os.getpid(), gpus=os.environ["CUDA_VISIBLE_DEVICES"])
note(what="start", t=time.time(), **me)
time.sleep(float(sys.argv[2]))
note(what="end", t=time.time(), **me)
"""


class Server:
    def __init__(self, home: Path, store: str, gpus: int):
        self.home, self.store, self.gpus = home, store, gpus
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc: subprocess.Popen | None = None
        self.client = Client(self.url, TOKEN)

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
        with open(self.home / "serve.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(self.port), "--store",
                 self.store, "--job-root", str(self.home / "jobs"), "--token", TOKEN, "--virtual-gpus",
                 str(self.gpus), "--tick", "0.2", "--cancel-grace", "2"],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        wait_http(self.url + "schedulearn/api/policy", proc=self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def job_processes(script: Path) -> dict[int, tuple[str, str]]:
    """pid -> (job id, CUDA_VISIBLE_DEVICES) of every live process running `script`, read from
    /proc (the job's Python, not its wrappers)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            if len(argv) < 2 or argv[1] != str(script).encode() or "python" not in argv[0].decode():
                continue
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            if stat[stat.rindex(")") + 2] in "ZX":
                continue
            env = dict(kv.split(b"=", 1) for kv in Path(f"/proc/{entry.name}/environ").read_bytes()
                       .split(b"\0") if b"=" in kv)
        except (OSError, ValueError):
            continue
        found[int(entry.name)] = (env[b"SCHEDULEARN_JOB_ID"].decode(), env[b"CUDA_VISIBLE_DEVICES"].decode())
    return found


def check_live(script: Path) -> None:
    procs = job_processes(script)
    jobs = [j for j, _ in procs.values()]
    assert len(jobs) == len(set(jobs)), f"a job runs twice at once: {procs}"
    gpus = [g for _, devs in procs.values() for g in devs.split(",")]
    assert len(gpus) == len(set(gpus)), f"a GPU holds two runs: {procs}"


def check_runs(notes: Path, job_ids: list[int]) -> None:
    recs = [json.loads(x) for x in notes.read_text().splitlines()]
    starts = {}
    for r in recs:
        if r["what"] == "start":
            starts.setdefault(r["job"], []).append(r)
    for jid in job_ids:
        runs = starts.get(str(jid), [])
        assert len(runs) == 1, f"job {jid} ran {len(runs)} times: {runs}"
    ends = {(r["job"], r["pid"]): r["t"] for r in recs if r["what"] == "end"}
    spans = []  # (gpu, start, end, job)
    for rs in starts.values():
        for r in rs:
            end = ends.get((r["job"], r["pid"]))
            assert end is not None, f"a run never ended: {r}"
            spans += [(g, r["t"], end, r["job"]) for g in r["gpus"].split(",")]
    spans.sort()
    for (g1, _, e1, j1), (g2, s2, _, j2) in zip(spans, spans[1:], strict=False):
        assert g1 != g2 or s2 >= e1, f"GPU {g1} held by job {j1} and job {j2} at once"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_kill_9_mid_round_never_runs_a_job_twice(tmp_path: Path, store: str, request):
    url = f"sqlite:///{tmp_path / 'serve.db'}" if store == "sqlite" else request.getfixturevalue(
        "postgres_fresh_url")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    notes = tmp_path / "notes.jsonl"
    notes.touch()
    server = Server(tmp_path, url, GPUS)
    rng = random.Random(int(os.environ.get("CRASH_SEED", "16")))
    all_ids: list[int] = []
    server.start()
    try:
        for cycle in range(CYCLES):
            c = server.client
            # a blocker on every GPU, 24 one-GPU jobs behind it; cancelling it lets one round
            # start all 24: the server is killed at a random point of that
            blocker = c.submit({"name": f"blocker{cycle}", "command": [sys.executable, "-c",
                                "import time; time.sleep(600)"], "gpus": GPUS})
            wait_for(lambda b=blocker, c=c: c.job(b["id"])["state"] == "running", 30, "the blocker to run")
            ids = [c.submit({"name": f"c{cycle}j{i}", "command": [sys.executable, str(script), str(notes),
                                                                  "1.5"]})["id"] for i in range(GPUS)]
            all_ids += ids
            c.cancel(blocker["id"])
            time.sleep(rng.uniform(0.0, 1.2))
            server.kill()
            check_live(script)
            server.start()
            c = server.client
            check_live(script)
            wait_for(lambda ids=ids, c=c: all(c.job(i)["state"] in ("succeeded", "failed", "cancelled")
                                              for i in ids), 90, f"cycle {cycle}'s jobs to end")
            jobs = {j["id"]: j for j in c.jobs()}
            bad = {i: (jobs[i]["state"], jobs[i]["reason"]) for i in ids if jobs[i]["state"] != "succeeded"}
            assert not bad, f"cycle {cycle}: jobs lost or failed: {bad}"
            assert jobs[blocker["id"]]["state"] == "cancelled"
            assert all(jobs[i]["last_alloc"] for i in ids)
            check_runs(notes, all_ids)
            gpus = c.gpus()["nodes"][0]["gpus"]
            assert all(g["job_id"] is None for g in gpus), gpus
    finally:
        server.stop()
        for pid in job_processes(script):
            os.kill(pid, 9)
    from schedulearn.store import SqlStore

    with SqlStore(url) as s:  # what the kills hit (shown with -s): launches adopted, requeued
        kinds = [e["kind"] for e in s.events()]
    print({k: kinds.count(k) for k in ("starting", "started", "adopted", "requeued", "cancelling")})


def test_store_down_answers_503_and_changes_nothing(tmp_path: Path, postgres_server, postgres_fresh_url: str):
    """PostgreSQL stopped under a running server: `PUT policy` and `DELETE` answer 503, the
    policy and the job are unchanged; the cancel retried once the database is back holds across
    a restart: that job never runs."""
    marker = tmp_path / "ran"
    server = Server(tmp_path, postgres_fresh_url, 1)
    server.start()
    try:
        c = server.client
        blocker = c.submit({"name": "blocker", "command": [sys.executable, "-c",
                                                           "import time; time.sleep(600)"]})
        victim = c.submit({"name": "victim", "command": [sys.executable, "-c",
                                                         f"open({str(marker)!r}, 'w').write('ran')"]})
        wait_for(lambda: c.job(blocker["id"])["state"] == "running", 30, "the blocker to run")
        postgres_server.pg_ctl("-m", "fast", "-w", "stop")
        try:
            with pytest.raises(ClientError) as e:
                c.set_policy("las")
            assert e.value.status == 503 and "store" in str(e.value) and "\n" not in str(e.value)
            assert c.policy() == "fifo"
            with pytest.raises(ClientError) as e:
                c.cancel(victim["id"])
            assert e.value.status == 503 and "store" in str(e.value)
            assert c.job(victim["id"])["state"] == "queued"
            with pytest.raises(ClientError) as e:
                c.cancel(blocker["id"])
            assert e.value.status == 503
            time.sleep(1.0)
            assert c.job(blocker["id"])["state"] == "running"
        finally:
            postgres_server.start()
        assert c.cancel(victim["id"])["state"] == "cancelled"  # the retry, with the store back
        assert c.set_policy("las") == "las"
        server.kill()
        server.start()
        c = server.client
        assert c.policy() == "las"
        assert c.job(victim["id"])["state"] == "cancelled"
        c.cancel(blocker["id"])
        wait_for(lambda: c.job(blocker["id"])["state"] == "cancelled", 30, "the blocker to stop")
        time.sleep(1.0)  # a round or more with the GPU free: the cancelled job must stay so
        assert c.job(victim["id"])["state"] == "cancelled" and not marker.exists()
    finally:
        server.stop()
