"""Real server processes: `jupyter server` with the extension (runtime file, CLI client,
restart with queued and running jobs), `schedulearn serve` with tokens, and an extension that
uses that standalone scheduler remotely."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import stat
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from schedulearn.client import Client, ClientError, LogReader
from schedulearn.executors.local import PID_FILE
from schedulearn.store import migrate

from tests.fixtures.jupyter import ROOT, LiveServer, free_port, wait_http

pytestmark = pytest.mark.slow

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]


def cli(env: dict, *args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "schedulearn.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60, cwd=cwd)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def wait_for(fn, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def test_runtime_file_and_cli_client(live_server: LiveServer, tmp_path: Path):
    live_server.start()
    info_path = live_server.home / "runtime" / "schedulearn-server.json"
    info = json.loads(info_path.read_text())
    assert info["url"] == live_server.url and info["token"] == live_server.token
    assert info["pid"] == live_server.proc.pid
    assert oct(info_path.stat().st_mode & 0o777) == "0o600"
    # the CLI finds the server through the runtime file alone
    env = {k: v for k, v in live_server.env.items() if not k.startswith("SCHEDULEARN_")}
    gpus = json.loads(cli(env, "gpus", "--json").stdout)
    assert len(gpus["nodes"][0]["gpus"]) == 4
    out = cli(env, "submit", "--json", "--name", "hi", "--", sys.executable, "-c", "print('hi from the cli')")
    job = json.loads(out.stdout)
    assert job["name"] == "hi" and job["state"] == "queued"
    wait_for(lambda: json.loads(cli(env, "ls", "--json", "--state", "succeeded").stdout)["jobs"],
             what="the job to succeed")
    assert "hi from the cli" in cli(env, "logs", str(job["id"])).stdout
    # a long log, byte for byte, and into a reader that stops early: no error, no traceback
    big = json.loads(cli(env, "submit", "--json", "--name", "big", "--", sys.executable, "-c",
                         "print('\\n'.join(f'row {i} é' for i in range(300_000)))").stdout)
    wait_for(lambda: cli(env, "ls", "--json", "--state", "succeeded").stdout.count('"big"'), what="big")
    whole = subprocess.run([sys.executable, "-m", "schedulearn.cli", "logs", str(big["id"])], env=env,
                           capture_output=True, timeout=60)
    on_disk = (Path(live_server.traits["job_root"]) / str(big["id"]) / "log.txt").read_bytes()
    assert whole.returncode == 0 and whole.stdout == on_disk and len(on_disk) > 3 << 20  # 4 pages
    head = subprocess.run(f"{sys.executable} -m schedulearn.cli logs {big['id']} | head -n 2", shell=True,
                          env=env, capture_output=True, text=True, timeout=60)
    assert head.returncode == 0 and len(head.stdout.splitlines()) == 2 and head.stderr == "", head.stderr
    waited = subprocess.run(
        f"{sys.executable} -m schedulearn.cli submit --wait -- {sys.executable} -c "
        "'import time\nfor i in range(50): print(i, flush=True); time.sleep(0.02)' | head -n 2",
        shell=True, env=env, capture_output=True, text=True, timeout=60)
    assert waited.returncode == 0 and waited.stdout.startswith("submitted job "), waited
    assert "Traceback" not in waited.stderr and "BrokenPipe" not in waited.stderr, waited.stderr
    listed = json.loads(cli(env, "ls", "--json").stdout)["jobs"]
    assert [j["id"] for j in listed][:2] == [job["id"], big["id"]] and len(listed) == 3
    table = cli(env, "ls").stdout.splitlines()
    assert table[0].split()[:4] == ["ID", "NAME", "USER", "STATE"] and "succeeded" in table[1]
    # `--gpus auto` for one Python process: a note says why it gets one GPU (not with --max-gpus)
    auto = cli(env, "submit", "--gpus", "auto", "--", sys.executable, "-c", "pass")
    assert auto.returncode == 0 and auto.stderr == (
        "note: this job runs as one Python process, so --gpus auto gives it 1 GPU(s); add --max-gpus N if "
        "it starts its own workers, or use --launcher torchrun\n"), auto.stderr
    for grows in (("--max-gpus", "2"), ("--launcher", "torchrun")):
        p = cli(env, "submit", "--gpus", "auto", *grows, "--", sys.executable, "-c", "pass")
        assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "PROGRESS" in table[0].split() and "done" in table[1].split()
    # policy
    assert json.loads(cli(env, "policy", "las", "--json").stdout) == {"policy": "las"}
    shown = json.loads(cli(env, "policy", "--json").stdout)
    assert shown["policy"] == "las" and "fifo" in [p["name"] for p in shown["policies"]]
    bad = cli(env, "policy", "nope", check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "policy: unknown 'nope'" in bad.stderr
    # cancel a running job, then again: a one-line 409
    sleeper = json.loads(cli(env, "submit", "--json", "--", *SLEEP).stdout)
    wait_for(lambda: Client(live_server.url, live_server.token).job(sleeper["id"])["state"] == "running")
    done = json.loads(cli(env, "cancel", "--json", str(sleeper["id"])).stdout)
    assert done["jobs"][0]["id"] == sleeper["id"]
    wait_for(lambda: Client(live_server.url, live_server.token).job(sleeper["id"])["state"] == "cancelled")
    again = cli(env, "cancel", str(sleeper["id"]), check=False)
    assert again.returncode == 1 and "already cancelled (HTTP 409)" in again.stderr
    assert again.stderr.count(f"job {sleeper['id']}") == 1  # said once, not twice
    unknown = cli(env, "cancel", "999999", check=False)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert unknown.stderr.startswith("schedulearn: job: no job with id") and unknown.stderr.count("job") == 2
    # a job that failed at start has an empty log: `logs` says why on stderr
    broken = json.loads(cli(env, "submit", "--json", "--", "nope-xyz-cmd").stdout)
    wait_for(lambda: Client(live_server.url, live_server.token).job(broken["id"])["state"] == "failed")
    empty = cli(env, "logs", str(broken["id"]))
    assert empty.stdout == "" and empty.stderr == (
        f"schedulearn: job {broken['id']} has no log: it failed without writing any "
        "(command: 'nope-xyz-cmd' not found on PATH)\n"), empty.stderr
    followed = cli(env, "logs", "-f", str(broken["id"]))  # following it says the same (it said nothing)
    assert (followed.stdout, followed.stderr) == ("", empty.stderr), followed
    none_asked = cli(env, "logs", "--tail", "0", str(big["id"]))  # a log, and none of it asked for
    assert none_asked.stdout == none_asked.stderr == ""
    # `script`: what a job runs, as submitted (job dicts carry its size only); a command's: 404
    source = tmp_path / "train.py"
    source.write_text("print('trained é')\n" + "# padding\n" * 5000)
    scripted = json.loads(cli(env, "submit", "--json", "--script", str(source)).stdout)
    assert "script" not in scripted["spec"] and scripted["script_bytes"] == source.stat().st_size
    shown = subprocess.run([sys.executable, "-m", "schedulearn.cli", "script", str(scripted["id"])], env=env,
                           capture_output=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout == source.read_bytes()
    none = cli(env, "script", str(broken["id"]), check=False)
    assert none.returncode == 1 and none.stderr == (
        f"schedulearn: script: job {broken['id']} runs a command, not a script: nope-xyz-cmd (HTTP 404)\n")
    # `submit --wait` exits with the job's status, as `srun` does
    for program, status in [("import sys; sys.exit(3)", 3), ("import os; os.kill(os.getpid(), 9)", 128 + 9)]:
        ended = cli(env, "submit", "--wait", "--", sys.executable, "-c", program, check=False)
        assert ended.returncode == status and "failed" in ended.stderr, ended
    # --timeout: the scheduler stops it when it has run that long; 124, as timeout(1)
    capped = cli(env, "submit", "--wait", "--timeout", "1s", "--", *SLEEP, check=False)
    assert capped.returncode == 124, capped
    assert capped.stderr.endswith("failed (stopped at its time limit (1 s of run time))\n"), capped.stderr
    assert cli(env, "submit", "--timeout", "soon", "--", "true", check=False).stderr == (
        "schedulearn: --timeout: expected a duration > 0 such as 90, 90s, 10m, 2h or 1h30m, got 'soon'\n")
    # Ctrl-C ends the wait, not the job, and says so (it said nothing)
    waiting = subprocess.Popen([sys.executable, "-m", "schedulearn.cli", "submit", "--wait", "--", *SLEEP],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert waiting.stdout is not None
    waiting_id = int(waiting.stdout.readline().split()[2])  # `submitted job N (...)`
    assert waiting.stdout.readline().startswith("=== schedulearn: start #0")  # following its log
    waiting.send_signal(signal.SIGINT)
    _, said = waiting.communicate(timeout=60)
    assert waiting.returncode == 130 and said.strip() == (
        f"schedulearn: job {waiting_id} goes on (Ctrl-C ended the wait only): schedulearn logs -f "
        f"{waiting_id} follows it, schedulearn cancel {waiting_id} stops it")
    c = Client(live_server.url, live_server.token)
    assert c.job(waiting_id)["state"] in ("queued", "running")
    c.cancel(waiting_id)
    # a relative --workdir is where the user typed it, not where the server was started
    (tmp_path / "data").mkdir()
    here = cli(env, "submit", "--wait", "--workdir", "data", "--", sys.executable, "-c",
               "import os; print('cwd', os.getcwd())", cwd=tmp_path)
    assert f"cwd {tmp_path / 'data'}\n" in here.stdout, here
    # without one, as with sbatch, where it was typed: `-- python train.py` finds train.py (it
    # ran in the job's directory and failed: can't open file '<job dir>/train.py')
    (tmp_path / "data" / "train.py").write_text("import os\nprint('trained in', os.getcwd())\n")
    here = cli(env, "submit", "--wait", "--", sys.executable, "train.py", cwd=tmp_path / "data")
    assert f"trained in {tmp_path / 'data'}\n" in here.stdout, here
    gone = cli(env, "submit", "--workdir", str(tmp_path / "nope"), "--", "true", check=False)
    assert gone.returncode == 1 and gone.stderr == (  # at submission, not when its turn comes
        f"schedulearn: workdir: '{tmp_path / 'nope'}' is not a directory on the scheduler's machine "
        "(HTTP 400)\n")
    # a container image on a server that runs processes: refused, not dropped (it ran in the
    # server's Python)
    imaged = cli(env, "submit", "--image", "pytorch/pytorch", "--", "true", check=False)
    assert imaged.returncode == 1 and imaged.stderr == (
        "schedulearn: image: a container image needs the 'docker' executor; this server runs jobs with "
        "the 'local' executor, as processes in its own environment (leave --image out) (HTTP 400)\n")
    # a deadline under a policy that does not plan for it (las): submitted, with a note saying so
    timed = cli(env, "submit", "--deadline", "2 hours", "--", "true")
    assert timed.stdout.startswith("submitted job "), timed.stdout
    assert "; deadline in 2 h 00 min, " in timed.stdout, timed.stdout  # and what the estimate says
    assert "note: the las policy does not plan for deadlines" in timed.stderr, timed.stderr
    assert "(schedulearn policy qoe)" in timed.stderr
    # bad input: one line naming the field
    bad = cli(env, "submit", "--gpus", "0", "--", "true", check=False)
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "gpus: " in bad.stderr
    # explicit flags win over the runtime file; a wrong token is refused
    wrong = cli(env, "ls", "--url", live_server.url, "--token", "nope", check=False)
    assert wrong.returncode == 1 and "HTTP 403" in wrong.stderr
    live_server.stop()
    assert not info_path.exists()
    gone = cli(env, "ls", check=False)
    assert gone.returncode == 1 and "no Schedulearn server found" in gone.stderr


def test_submit_from_a_spec_file_with_flags_over_it(live_server: LiveServer, tmp_path: Path):
    """`schedulearn submit --spec FILE`: a JobSpec in JSON, which flags override (here its name
    and GPUs), read whether or not an editor began it with a byte-order mark; a file that is not
    a JSON object is one line naming it, and nothing is submitted."""
    live_server.start()
    env = {**live_server.env, "SCHEDULEARN_URL": live_server.url, "SCHEDULEARN_TOKEN": live_server.token}
    spec = {"name": "from-the-file", "gpus": 1, "env": {"GREETING": "hi from a spec"},
            "command": [sys.executable, "-c", "import os; print(os.environ['GREETING'])"]}
    path = tmp_path / "job.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(spec).encode())
    out = cli(env, "submit", "--json", "--spec", str(path), "--name", "renamed", "--gpus", "2").stdout
    job = json.loads(out)
    assert (job["name"], job["spec"]["gpus"], job["spec"]["command"]) == ("renamed", 2, spec["command"])
    wait_for(lambda: Client(live_server.url, live_server.token).job(job["id"])["state"] == "succeeded",
             what="the job to succeed")
    assert "hi from a spec" in cli(env, "logs", str(job["id"])).stdout
    for text, said in (("[1, 2]", f"spec: expected a JSON object in {path}"),
                       ('{"gpus": 1', f"spec: cannot read a JSON object from {path} (Expecting ")):
        path.write_text(text)
        bad = cli(env, "submit", "--spec", str(path), check=False)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1
        assert bad.stderr.startswith(f"schedulearn: {said}"), bad.stderr
    assert len(Client(live_server.url, live_server.token).jobs()) == 1


def test_restart_keeps_queued_and_running_jobs(live_server: LiveServer):
    live_server.traits.update(virtual_gpus=1)
    live_server.start()
    c = Client(live_server.url, live_server.token)
    running = c.submit({"name": "a", "command": SLEEP})
    queued = c.submit({"name": "b", "command": SLEEP})
    wait_for(lambda: c.job(running["id"])["state"] == "running")
    assert c.job(queued["id"])["state"] == "queued"
    pid = int(json.loads((Path(live_server.traits["job_root"]) / str(running["id"]) / PID_FILE)
                         .read_text())["pid"])
    live_server.stop()
    assert alive(pid), "a running job survives its server's restart"
    live_server.start()
    c = Client(live_server.url, live_server.token)
    jobs = {j["id"]: j for j in c.jobs()}
    assert set(jobs) == {running["id"], queued["id"]}
    assert jobs[running["id"]]["state"] == "running", jobs[running["id"]]
    assert jobs[queued["id"]]["state"] == "queued"
    # Jupyter's log says what the restart found (the core's records in Jupyter's format)
    assert re.search(r"^\[I [^\]]* schedulearn\.engine\] store: 2 job\(s\): 1 running, 1 queued$",
                     live_server.output(), re.M), live_server.output()[-3000:]
    # the re-attached job is still controlled: cancel it, the queued one starts, cancel that
    c.cancel(running["id"])
    wait_for(lambda: c.job(running["id"])["state"] == "cancelled", what="the re-attached job to stop")
    wait_for(lambda: not alive(pid), what="its process to end")
    wait_for(lambda: c.job(queued["id"])["state"] == "running", what="the queued job to start")
    c.cancel(queued["id"])
    wait_for(lambda: c.job(queued["id"])["state"] == "cancelled")


def test_a_wait_on_a_job_rides_out_its_servers_restart(live_server: LiveServer, tmp_path: Path):
    """`submit --wait` and `logs -f` keep following a job while its server restarts (an upgrade,
    a crash and its service manager's restart): every line once, in order, the job's own exit
    status at the end. Before, both ended at once with `cannot reach` and exit status 1."""
    live_server.start()
    env = {**live_server.env, "SCHEDULEARN_URL": live_server.url, "SCHEDULEARN_TOKEN": live_server.token}
    gate = tmp_path / "open"
    program = (f"import os, sys, time\nprint('before', flush=True)\n"
               f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
               "for i in range(40):\n    print(f'after {i}', flush=True)\n    time.sleep(0.05)\n"
               f"while not os.path.exists({str(gate)!r} + '2'):\n    time.sleep(0.05)\n"
               "print('last', flush=True)\nsys.exit(3)\n")
    (tmp_path / "job.py").write_text(program)
    cmd = [sys.executable, "-m", "schedulearn.cli"]
    waiting = subprocess.Popen([*cmd, "submit", "--wait", "--", sys.executable, str(tmp_path / "job.py")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert waiting.stdout is not None
    job_id = int(waiting.stdout.readline().split()[2])  # `submitted job N (...)`
    wait_for(lambda: "before" in Client(live_server.url, live_server.token).logs(job_id), what="its start")
    following = subprocess.Popen([*cmd, "logs", "-f", "--tail", "1", str(job_id)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    live_server.stop()
    gate.touch()  # it writes while no server reads its log
    time.sleep(3.0)
    live_server.start()
    Path(f"{gate}2").touch()  # and ends once its server is back
    out, err = waiting.communicate(timeout=90)
    followed, followed_err = following.communicate(timeout=90)
    body = [ln for ln in out.splitlines() if not ln.startswith("=== schedulearn")]
    assert body == ["before", *(f"after {i}" for i in range(40)), "last"], out
    assert waiting.returncode == 3, (out, err)
    said = err.splitlines()
    assert said[0].startswith("schedulearn: lost touch with the server (url: "), err
    assert said[0].endswith("; trying again for up to 10 min (the job is not affected)"), err
    assert re.fullmatch(r"schedulearn: the server answers again \(after \d+ s\)", said[1]), err
    assert said[2:] == [f"job {job_id}: failed (last)"], err  # (its last line: the reason)
    shown = [ln for ln in followed.splitlines() if not ln.startswith("=== schedulearn")]
    assert shown == ["before", *(f"after {i}" for i in range(40)), "last"], followed
    assert following.returncode == 0 and "the server answers again" in followed_err, followed_err


def test_queued_jobs_say_why_counts_are_real_and_one_process_gets_one_gpu(live_server: LiveServer):
    """A queued job's `reason` says what it needs, what is free and its place in line; `ls` shows
    the GPUs a job asks for, holds or held (never 0); `--gpus auto` gives a plain Python job one
    GPU, even under an elastic policy, unless `max_gpus` says it can use more."""
    live_server.start()  # 4 virtual GPUs, FIFO
    env = {k: v for k, v in live_server.env.items() if not k.startswith("SCHEDULEARN_")}
    c = Client(live_server.url, live_server.token)
    big = c.submit({"name": "big", "command": SLEEP, "gpus": 3})
    wait_for(lambda: c.job(big["id"])["state"] == "running", what="the 3-GPU job to start")
    pair = c.submit({"name": "pair", "command": SLEEP, "gpus": 2})
    one = c.submit({"name": "one", "command": SLEEP, "gpus": 1})
    assert c.job(pair["id"])["reason"] == "waiting: needs 2 GPUs, 1 free; 1st in line of 2"
    assert c.job(one["id"])["reason"] == ("waiting: needs 1 GPU, 1 free; 2nd in line of 2; the fifo "
                                          "policy starts it when it comes first")
    listed = {j["id"]: j for j in json.loads(cli(env, "ls", "--json").stdout)["jobs"]}
    assert listed[pair["id"]]["reason"].startswith("waiting: needs 2 GPUs")
    assert [ls_gpus(env)[j["id"]] for j in (big, pair, one)] == ["3", "2", "1"]
    for j in (big, pair, one):
        c.cancel(j["id"])
    for j in (big, pair, one):
        wait_for(lambda j=j: c.job(j["id"])["state"] == "cancelled", what=f"job {j['name']} to end")
    c.set_policy("elastic-fifo")
    probe = "import os; print('visible', os.environ.get('CUDA_VISIBLE_DEVICES'))"
    auto = c.submit({"name": "auto", "script": probe, "gpus": "auto"})
    wider = c.submit({"name": "wider", "script": probe, "gpus": "auto", "max_gpus": 2})
    for j in (auto, wider):
        wait_for(lambda j=j: c.job(j["id"])["state"] == "succeeded", what=f"job {j['name']} to succeed")
    assert re.search(r"^visible \d+$", c.logs(auto["id"]), re.M), c.logs(auto["id"])  # one device
    assert sum(len(v) for v in c.job(wider["id"])["last_alloc"].values()) == 2
    assert [ls_gpus(env)[j["id"]] for j in (big, auto, wider)] == ["3", "1", "2"]


def test_ls_shows_the_newest_jobs_and_says_when_there_are_more(live_server: LiveServer, monkeypatch,
                                                                capsys) -> None:
    """A scheduler with months of jobs behind it: `schedulearn ls` shows the newest `LS_ROWS`
    and says that there are more (it printed every job ever run); `--all`, `--limit N` and
    `--json` are as asked."""
    from schedulearn import client_cli
    from schedulearn.cli import main

    live_server.start()
    c = Client(live_server.url, live_server.token)
    ids = [c.submit({"name": f"n{i}", "command": ["true"]})["id"] for i in range(3)]
    monkeypatch.setattr(client_cli, "LS_ROWS", 2)
    where = ["--url", live_server.url, "--token", live_server.token]

    def listed(*args: str) -> tuple[list[int], list[str]]:
        assert main(["ls", *where, *args]) == 0
        lines = capsys.readouterr().out.splitlines()
        return [int(ln.split()[0]) for ln in lines[1:] if ln[:1].isdigit()], lines

    rows, lines = listed()
    assert rows == ids[-2:] and lines[-1].startswith("(the newest 2 jobs; --all lists every one")
    rows, lines = listed("--all")
    assert rows == ids and lines[-1].split()[0] == str(ids[-1])  # no note: nothing left out
    rows, lines = listed("--limit", "3")
    assert rows == ids and "newest" not in lines[-1]
    assert main(["ls", *where, "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ids

def test_show_prints_one_job_in_full(live_server: LiveServer, capsys, tmp_path: Path) -> None:
    """`schedulearn show ID`: a line per field, the whole reason (`ls` cuts it at 90 characters),
    where it ran, its times, its command quoted as a shell would; `--json` the job's dict; an
    unknown id is one line and exit status 1."""
    from schedulearn.cli import main

    live_server.start()
    where = ["--url", live_server.url, "--token", live_server.token]
    c = Client(live_server.url, live_server.token)
    done = c.submit({"name": "quoted", "command": [sys.executable, "-c", "print('hi there')"],
                     "env": {"SECRET_KEY": "s3"}, "time_limit": 600, "workdir": str(tmp_path)})
    wait_for(lambda: c.job(done["id"])["state"] == "succeeded", what="the job to end")
    assert main(["show", *where, str(done["id"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    fields = {line[:11].rstrip().rstrip(":"): line[12:] for line in lines}
    assert fields["job"] == f"{done['id']} 'quoted' of {c.job(done['id'])['user']}: succeeded"
    assert fields["gpus"].startswith("held 1 on ")
    assert fields["command"] == f"{sys.executable} -c 'print('\"'\"'hi there'\"'\"')'"
    assert fields["workdir"] == str(tmp_path) and fields["env"] == "SECRET_KEY"  # names, not values
    assert fields["ran"].endswith(" of its time limit 10 min") and fields["exit code"] == "0"
    assert {"submitted", "started", "ended"} <= set(fields) and "s3" not in "".join(lines)
    c.pause("the driver upgrade of the whole lab, announced on the mailing list last Monday")
    try:
        held = c.submit({"name": "held", "command": ["true"]})
        assert main(["show", *where, str(held["id"])]) == 0
        reason = c.job(held["id"])["reason"]
        assert len(reason) > 90 and f"reason:     {reason}" in capsys.readouterr().out.splitlines()
    finally:
        c.resume()
    assert main(["show", *where, "--json", str(done["id"])]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == done["id"]
    assert main(["show", *where, "999"]) == 1
    assert capsys.readouterr().err.strip() == "schedulearn: job: no job with id 999 (HTTP 404)"


def test_trace_writes_the_finished_jobs_for_the_simulator_to_replay(live_server: LiveServer, capsys,
                                                                    tmp_path: Path) -> None:
    """`schedulearn trace -o FILE`: the jobs that ran, as a rigid trace `simulate` replays on the
    shape it suggests (the server's 4 virtual GPUs); jobs still running or never started are left
    out and counted; replayed under FIFO, jobs that never waited finish no later than they did."""
    from schedulearn.cli import main

    live_server.start()
    where = ["--url", live_server.url, "--token", live_server.token]
    c = Client(live_server.url, live_server.token)
    nap = [sys.executable, "-c", "import time; time.sleep(1)"]
    ran = [c.submit({"name": "two, wide", "gpus": 2, "command": nap})["id"],
           c.submit({"name": "due", "command": nap, "deadline": "1h"})["id"]]
    for i in ran:
        wait_for(lambda i=i: c.job(i)["state"] == "succeeded", what="a job to end")
    c.pause("for the test")
    never = c.submit({"name": "never", "command": ["true"]})["id"]
    c.cancel(never)
    c.resume()
    running = c.submit({"name": "long", "command": SLEEP})["id"]
    wait_for(lambda: c.job(running)["state"] == "running", what="the long job to run")
    out = tmp_path / "lab.csv"
    try:
        assert main(["trace", *where, "-o", str(out)]) == 0
    finally:
        c.cancel(running)
    said = capsys.readouterr().err.splitlines()
    assert said[0].endswith(f"written to {out}; left out: 1 never started, 1 not finished yet"), said
    assert said[0].startswith("2 jobs submitted ") and said[1].startswith("as they ran here: avg JCT ")
    assert said[2] == ("replay them on this scheduler's GPUs: "
                       f"schedulearn simulate {out} --policy all --cluster 1x4")
    lines = out.read_text().splitlines()
    assert lines[0] == "name,submit_time,gpus,duration,deadline"
    rows = [ln.rsplit(",", 4) for ln in lines[1:]]
    assert [(r[0], r[2]) for r in rows] == [('"two, wide"', "2"), ("due", "1")]
    assert rows[0][4] == "" and 3590 < float(rows[1][4]) <= 3600  # '1h' as of its submission
    assert all(1 <= float(r[3]) < 10 for r in rows), rows  # a second's nap, as run
    assert main(["simulate", str(out), "--policy", "fifo", "--cluster", "1x4", "--json", "-q"]) == 0
    replay = json.loads(capsys.readouterr().out)[0]
    live = [c.job(i) for i in ran]
    assert replay["jobs"] == 2 and replay["deadline_met"] == 1.0
    # Neither waited: replayed, each takes its run time as written, to a tenth of a second (a
    # 1.06 s run reads 1.1): no later than it did, but for that rounding (it failed 1 run in 3)
    assert replay["avg_jct_s"] <= sum(j["end_time"] - j["submit_time"] for j in live) / 2 + 0.05 + 1e-9
    # the line of their figures as they ran names the replay's (p99, not a max it does not print)
    assert said[1].split(", ")[:3] == ["as they ran here: avg JCT {:.0f} s".format(
        statistics.fmean(jcts := [j["end_time"] - j["submit_time"] for j in live])),
        f"p50 {statistics.median(jcts):.0f} s", f"p99 {float(np.percentile(jcts, 99)):.0f} s"], said
    # `-o` a pipe (or /dev/null) is written into, not renamed over: `trace -o /dev/null` run as
    # root left a regular file there, and the machine's next `> /dev/null` of another account failed
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_text()), daemon=True)
    reader.start()
    assert main(["trace", *where, "-o", str(pipe)]) == 0
    reader.join(10)
    assert stat.S_ISFIFO(pipe.stat().st_mode), "the pipe was replaced"
    assert got and got[0].splitlines()[:3] == out.read_text().splitlines(), got  # (and the long job now)
    assert main(["trace", *where, "-o", str(tmp_path)]) == 1
    said = capsys.readouterr().err.splitlines()[-1]
    assert said == f"schedulearn: output: cannot write {tmp_path} (a folder)", said


def test_pause_and_resume_from_the_cli(live_server: LiveServer, capsys) -> None:
    """`schedulearn pause REASON` holds the queue (an admin's; here the one user), `ls` says so
    under its table, and `schedulearn resume` starts what waited."""
    from schedulearn.cli import main

    live_server.start()
    where = ["--url", live_server.url, "--token", live_server.token]
    assert main(["pause", *where, "reboot", "at", "19:00"]) == 0
    said = capsys.readouterr().out.strip()
    assert re.fullmatch(r"scheduling paused by \S+ since \d{4}-\d\d-\d\d \d\d:\d\d \(reboot at 19:00\): "
                        r"no job starts until an admin runs schedulearn resume", said), said
    c = Client(live_server.url, live_server.token)
    job = c.submit({"name": "held", "command": ["true"]})
    assert main(["ls", *where]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == said and "scheduling paused by" in lines[-2]  # its row says why it waits
    assert main(["resume", *where]) == 0
    assert capsys.readouterr().out == "scheduling resumed\n"
    assert main(["resume", *where]) == 0  # again: nothing to resume, said so (not "resumed")
    assert capsys.readouterr().out == "scheduling was not paused\n"
    wait_for(lambda: c.job(job["id"])["state"] == "succeeded", what="the held job to run")
    assert main(["ls", *where]) == 0
    assert "paused" not in capsys.readouterr().out


def test_cancelling_several_jobs_starts_none_of_them(live_server: LiveServer, capsys) -> None:
    """`schedulearn cancel RUNNING QUEUED...`: the queued ones are cancelled first, newest first,
    so that stopping the running job (or the one first in line) does not start the next one
    listed only to stop it (it did: its run began 2 ms before its cancel came). Answers are
    said in the order asked; an unknown id is one line and exit status 1."""
    from schedulearn.cli import main

    live_server.start()
    c = Client(live_server.url, live_server.token)
    running = c.submit({"name": "all", "command": SLEEP, "gpus": 4})
    wait_for(lambda: c.job(running["id"])["state"] == "running", what="the 4-GPU job to start")
    first = c.submit({"name": "first", "command": SLEEP, "gpus": 4})
    second = c.submit({"name": "second", "command": SLEEP, "gpus": 2})
    where = ["--url", live_server.url, "--token", live_server.token]
    ids = [running["id"], first["id"], second["id"]]
    assert main(["cancel", *where, *map(str, ids), "999999"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"job {ids[0]}: stopping", f"job {ids[1]}: cancelled",
                                f"job {ids[2]}: cancelled"]
    assert err.count("\n") == 1 and err.startswith("schedulearn: job: no job with id")
    wait_for(lambda: c.job(running["id"])["state"] == "cancelled", what="the running job to stop")
    for job in (first, second):
        assert c.job(job["id"])["start_time"] is None  # never started


def ls_gpus(env: dict) -> dict[int, str]:
    """The GPUS column of `schedulearn ls`, by job id (read at the header's offsets)."""
    head, *rows = cli(env, "ls").stdout.splitlines()
    start = head.index("GPUS")
    return {int(r.split()[0]): r[start:].split()[0] for r in rows}


class Serve:
    def __init__(self, home: Path, *args: str, store: str | None = None, port: int | None = None):
        self.home = home
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
        self.log = open(home / "serve.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(self.port),
             "--store", store or f"sqlite:///{home / 'serve.db'}", "--job-root", str(home / "jobs"), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        wait_http(self.url + "schedulearn/api/policy", proc=self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.log.close()


@pytest.fixture
def serve(tmp_path: Path):
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice-token": "alice", "bob-token": "bob"}))
    tokens.chmod(0o600)  # a tokens file readable by others is refused
    # no OS accounts alice/bob here: every job as the server's account (tests/test_multiuser.py
    # runs the isolated set-up with real accounts)
    s = Serve(tmp_path / "serve", "--tokens", str(tokens), "--user-map", "server", "--virtual-gpus", "2",
              "--tick", "0.2")
    yield s
    s.stop()


def test_serve_on_port_0_listens_on_a_free_port_and_says_which(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedulearn.cli", "serve", "--port", "0", "--token", "t",
         "--virtual-gpus", "1", "--store", f"sqlite:///{tmp_path / 's.db'}",
         "--job-root", str(tmp_path / "jobs")],
        stderr=subprocess.PIPE, text=True, env=env)
    try:
        said = []
        for line in proc.stderr:  # (the log lines, then where the API is)
            said.append(line)
            found = re.match(r"schedulearn: API at http://127\.0\.0\.1:(\d+)/schedulearn/api/$", line.strip())
            if found:
                break
        else:
            pytest.fail(f"serve exited ({proc.wait()}) without saying where it listens")
        port = int(found.group(1))
        assert port != 0
        # A new store is one line, not alembic's line per revision (some of them several lines long)
        start = "".join(said)
        assert f"store: schema created (revision {migrate.head()})" in start, start
        assert "Running upgrade" not in start and "Context impl" not in start, start
        assert Client(f"http://127.0.0.1:{port}/", "t").policy() == "fifo"
    finally:
        proc.terminate()
        proc.wait(20)


def test_serve_under_a_base_url_answers_there_and_only_there(tmp_path: Path):
    """`serve --base-url /sched` (behind a proxy that routes a path to it): the API, a followed
    log and the events socket live under the prefix, with or without its trailing slash in the
    client's URL; nothing answers at the root."""
    import asyncio

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)]),
           "SCHEDULEARN_SERVE_TOKEN": "t"}
    port = free_port()
    root = f"http://127.0.0.1:{port}/"
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(port), "--base-url", "/sched",
         "--virtual-gpus", "1", "--store", f"sqlite:///{tmp_path / 's.db'}",
         "--job-root", str(tmp_path / "jobs")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for line in proc.stderr:
            if "API at" in line:
                assert line.strip() == f"schedulearn: API at http://127.0.0.1:{port}/sched/schedulearn/api/"
                break
        else:
            pytest.fail(f"serve exited ({proc.wait()}) without saying where it listens")
        for url in (root + "sched/", root + "sched"):
            assert Client(url, "t").policy() == "fifo"
        with pytest.raises(ClientError) as e:
            Client(root, "t").policy()
        assert e.value.status == 404
        c = Client(root + "sched/", "t")
        job = c.submit({"command": [sys.executable, "-c", "print('under a prefix')"]})
        assert "under a prefix" in "".join(c.follow(job["id"], timeout=60))

        async def hello() -> dict:
            ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:{port}/sched/schedulearn/api/events",
                                                     headers={"Authorization": "token t"}))
            try:
                return json.loads(await ws.read_message())
            finally:
                ws.close()

        assert asyncio.run(hello())["type"] == "hello"
    finally:
        proc.terminate()
        proc.wait(20)


def test_serve_refuses_a_setting_it_cannot_work_with_in_one_line_naming_it(tmp_path: Path):
    """Each start-up failure names its own setting. Seen: `--job-root /proc/x` was reported as
    `port: cannot listen on 127.0.0.1:8765 (No such file or directory)`, and `postgres://`
    (libpq's spelling of a PostgreSQL URL) as a SQLAlchemy plugin that cannot be loaded."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    no_pg = f"postgres://nobody@/nodb?host={tmp_path}"  # no server there: it gets as far as asking
    cases = {
        ("--job-root", str(tmp_path / "file" / "jobs")):
            f"job_root: cannot create '{tmp_path / 'file' / 'jobs'}' (Not a directory)",
        ("--store", "nosuch://x"): "store: unknown database 'nosuch' in nosuch://x; use a SQLite path",
        ("--store", no_pg): "store: cannot open postgresql://nobody@/nodb?host=",
        ("--port", str(taken)): f"port: cannot listen on 127.0.0.1:{taken} (Address already in use)",
    }
    (tmp_path / "file").write_text("a file where a folder should be")
    try:
        for args, said in cases.items():
            base = {"--port": str(free_port()), "--store": f"sqlite:///{tmp_path / 's.db'}",
                    "--job-root": str(tmp_path / "jobs"), **dict([args])}
            p = subprocess.run([sys.executable, "-m", "schedulearn.cli", "serve", "--virtual-gpus", "1",
                                *[x for kv in base.items() for x in kv]],
                               capture_output=True, text=True, env={**env, "SCHEDULEARN_SERVE_TOKEN": "t"},
                               timeout=60)
            assert p.returncode == 2, (args, p.stderr)
            last = p.stderr.splitlines()[-1]
            assert last.startswith(f"schedulearn serve: {said}"), (args, p.stderr)
            assert "Traceback" not in p.stderr, p.stderr
    finally:
        busy.close()


def test_a_workstation_keeps_a_gpu_out_of_the_schedulers_hands(tmp_path: Path):
    """`--local-gpus 1,3` (SCHEDULEARN_LOCAL_GPUS, `c.SchedulearnApp.local_gpus`): the scheduler
    lists and gives out only those; a selection that names none of this machine's GPUs is refused
    at start, in one line."""
    s = Serve(tmp_path / "serve", "--token", "t", "--virtual-gpus", "4", "--local-gpus", "1,3",
              "--tick", "0.2")
    try:
        c = Client(s.url, "t")
        assert [g["index"] for g in c.gpus()["nodes"][0]["gpus"]] == [1, 3]
        job = c.submit({"gpus": 2, "command": [sys.executable, "-c", "import os; print(os.environ["
                                                                      "'CUDA_VISIBLE_DEVICES'])"]})
        wait_for(lambda: c.job(job["id"])["state"] == "succeeded")
        assert "\n1,3\n" in c.logs(job["id"])
        assert "gpus: at most 2 (the GPUs of this cluster), got 3" in str(
            pytest.raises(ClientError, c.submit, {"gpus": 3, "command": ["true"]}).value)
    finally:
        s.stop()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])}
    refused = subprocess.run(
        [sys.executable, "-m", "schedulearn.cli", "serve", "--port", "0", "--token", "t", "--virtual-gpus",
         "4", "--local-gpus", "4,5", "--store", f"sqlite:///{tmp_path / 'r.db'}",
         "--job-root", str(tmp_path / "j")],
        capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode != 0 and refused.stderr.splitlines()[-1] == (
        "schedulearn serve: local_gpus: none of 4, 5 is a GPU of this machine (it has 0, 1, 2, 3)"), refused


def test_serve_standalone_with_tokens(serve: Serve):
    with pytest.raises(ClientError) as e:
        Client(serve.url, "").gpus()
    assert e.value.status == 403
    with pytest.raises(ClientError) as e:
        Client(serve.url, "mallory").jobs()
    assert e.value.status == 403
    alice, bob = Client(serve.url, "alice-token"), Client(serve.url, "bob-token")
    assert len(alice.gpus()["nodes"][0]["gpus"]) == 2
    job = alice.submit({"command": [sys.executable, "-c", "print('standalone')"]})
    assert job["user"] == "alice"
    wait_for(lambda: alice.job(job["id"])["state"] == "succeeded")
    assert "standalone" in alice.logs(job["id"])
    mine = bob.submit({"command": SLEEP})
    assert mine["user"] == "bob"
    with pytest.raises(ClientError) as e:
        alice.cancel(mine["id"])
    assert e.value.status == 403 and "bob" in str(e.value)
    assert [j["id"] for j in alice.jobs(user="bob")] == [mine["id"]]
    bob.cancel(mine["id"])
    wait_for(lambda: bob.job(mine["id"])["state"] == "cancelled")
    # the same OpenAPI document, the same errors
    assert set(alice.openapi()["paths"]) >= {"/jobs", "/jobs/{job_id}", "/policy", "/gpus"}
    with pytest.raises(ClientError) as e:
        alice.submit({"command": ["x"], "gpus": 3})
    assert e.value.status == 400 and str(e.value).startswith("gpus: at most 2")


def test_a_shared_schedulers_jobs_keep_their_environment_log_and_result_from_other_users(serve: Serve):
    """With --tokens everyone sees the queue, but bob read alice's job's environment (her
    WANDB_API_KEY) in `GET jobs/{id}`, `GET jobs` and the events, and its log and result,
    while its folder was private to her account."""
    from tornado import httpclient, websocket

    alice, bob = Client(serve.url, "alice-token"), Client(serve.url, "bob-token")

    async def first_job_event(token: str, submit: Any) -> dict:
        req = httpclient.HTTPRequest(serve.url.replace("http", "ws") + "schedulearn/api/events",
                                     headers={"Authorization": f"token {token}"})
        ws = await websocket.websocket_connect(req)
        try:
            assert json.loads(await ws.read_message())["type"] == "hello"
            job = submit()
            while True:
                event = json.loads(await asyncio.wait_for(ws.read_message(), 60))
                if event["type"] == "job" and event["job"]["id"] == job["id"]:
                    return event["job"]
        finally:
            ws.close()

    script = "import time\nprint('alice secret log')\ntime.sleep(1)\n"
    cell = "/home/alice/thesis.ipynb#code-0123456789abcdef"  # a hash of her cell's code
    submit = lambda: alice.submit({"script": script, "env": {"WANDB_API_KEY": "s3cret"},  # noqa: E731
                                   "cell": cell})
    seen_by_bob = asyncio.run(first_job_event("bob-token", submit))
    job_id = seen_by_bob["id"]
    seen_by_alice = asyncio.run(first_job_event("alice-token", lambda: {"id": job_id}))
    wait_for(lambda: alice.job(job_id)["state"] == "succeeded")
    assert "alice secret log" in alice.logs(job_id)
    with pytest.raises(ClientError) as e:
        alice.result(job_id)  # hers to ask for (a script leaves no result; a cell's does)
    assert e.value.status == 404
    for d in (seen_by_bob, bob.job(job_id), next(j for j in bob.jobs() if j["id"] == job_id)):
        assert d["user"] == "alice" and d["spec"]["env"] == {"WANDB_API_KEY": "(hidden)"}
        assert "script" not in d["spec"] and "s3cret" not in json.dumps(d)
        assert d["spec"]["cell"] == "(hidden)"
    for d in (seen_by_alice, alice.job(job_id), next(j for j in alice.jobs() if j["id"] == job_id)):
        assert d["spec"]["env"] == {"WANDB_API_KEY": "s3cret"} and "script" not in d["spec"]
        assert d["spec"]["cell"] == cell
        assert d["script_bytes"] == len(script)  # the script itself: `GET jobs/{id}/script`
    assert alice.script(job_id) == script
    for read in (bob.logs, lambda i: bob.logs(i, tail=5), bob.log_page, lambda i: "".join(bob.follow(i)),
                 bob.result, bob.script):
        with pytest.raises(ClientError) as e:
            read(job_id)
        assert e.value.status == 403 and "only they may read its log, result and script" in str(e.value)
    failed = alice.submit({"command": [sys.executable, "-c", "raise SystemExit('token=s3cret is wrong')"]})
    wait_for(lambda: alice.job(failed["id"])["state"] == "failed")
    assert "s3cret" in alice.job(failed["id"])["reason"]  # a failure's reason quotes the log:
    assert bob.job(failed["id"])["reason"] == "(hidden)"  # hers too


def test_jupyter_extension_using_a_remote_scheduler(serve: Serve, tmp_path: Path):
    jupyter = LiveServer(tmp_path / "jupyter", {"remote_url": serve.url, "remote_token": "alice-token"})
    try:
        jupyter.start()
        via_jupyter = Client(jupyter.url, jupyter.token)
        assert len(via_jupyter.gpus()["nodes"][0]["gpus"]) == 2  # the standalone server's GPUs
        # its jobs run on another machine, maybe: the CLI gives them no default working directory
        assert Client(serve.url, "alice-token").gpus()["executor"] == "local"
        assert via_jupyter.gpus()["executor"] == "remote"

        async def watch() -> list[dict]:
            from tornado.httpclient import HTTPRequest
            from tornado.websocket import websocket_connect

            ws = await websocket_connect(HTTPRequest(
                jupyter.url.replace("http", "ws") + "schedulearn/api/events",
                headers={"Authorization": f"token {jupyter.token}"}))
            hello = json.loads(await ws.read_message())
            assert hello["type"] == "hello" and hello["remote"].startswith(serve.url)
            spec = {"command": [sys.executable, "-c", "print(42); print('x' + 'é' * 700_000)"]}  # 2 pages
            job = await asyncio.to_thread(via_jupyter.submit, spec)
            seen = []
            async with asyncio.timeout(30):
                while not seen or seen[-1].get("event") != "succeeded":
                    seen.append(json.loads(await ws.read_message()))
            ws.close()
            assert all(e["job"]["id"] == job["id"] for e in seen if e["type"] == "job")
            return seen

        seen = asyncio.run(watch())
        assert [e["event"] for e in seen if e["type"] == "job"] == ["submitted", "started", "succeeded"]
        job_id = seen[-1]["job"]["id"]
        # recorded on the standalone server as the remote token's user
        assert Client(serve.url, "bob-token").job(job_id)["user"] == "alice"
        log = Client(serve.url, "alice-token").logs(job_id)
        assert "42" in log and "é" * 700_000 in log
        assert via_jupyter.logs(job_id) == log  # passed on a page at a time
        assert LogReader(via_jupyter, job_id).read() == log  # page by page (`?offset=`)
        assert "".join(via_jupyter.follow(job_id)) == log  # no character cut in two on the way
        # A progress bar's drawings come as they are drawn (not when its line ends): the job
        # draws one, then waits for the gate that the follower opens once it has seen it.
        gate = tmp_path / "gate"
        bar = via_jupyter.submit({"command": [sys.executable, "-c", (
            "import os, sys, time\nsys.stdout.write('\\rstep 1'); sys.stdout.flush()\n"
            f"t = time.time()\nwhile not os.path.exists({str(gate)!r}) and time.time() - t < 30:\n"
            "    time.sleep(0.05)\n"
            f"print('\\rstep 2\\ngate seen:', os.path.exists({str(gate)!r}))")]})
        pieces = []
        for piece in via_jupyter.follow(bar["id"]):
            pieces.append(piece)
            if "step 1" in "".join(pieces):
                gate.touch()
        assert "gate seen: True\n" in pieces and "".join(pieces).count("\rstep 1\rstep 2\n") == 1
        script = "print('a cell')  # " + "é" * 1000 + "\n"
        cell = via_jupyter.submit({"script": script})
        assert via_jupyter.script(cell["id"]) == script and cell["script_bytes"] == len(script.encode())
        with pytest.raises(ClientError) as e:
            via_jupyter.script(bar["id"])  # a command's job: the upstream's 404, passed on
        assert e.value.status == 404 and str(e.value).startswith(f"script: job {bar['id']} runs a command")
        with pytest.raises(ClientError) as e:
            via_jupyter.job(999)
        assert e.value.status == 404
        with pytest.raises(ClientError) as e:
            via_jupyter.submit({"command": []})
        assert e.value.status == 400 and "command" in str(e.value)
        for act in (lambda: via_jupyter.pause("mine"), via_jupyter.resume):  # passed on: alice is no admin
            with pytest.raises(ClientError) as e:
                act()
            assert e.value.status == 403 and "only the scheduler's admins may pause" in str(e.value)
        assert via_jupyter.policy_info()["paused"] is None
    finally:
        jupyter.stop()


def test_serve_on_postgresql_keeps_jobs_across_a_restart(tmp_path: Path, postgres_fresh_url: str):
    args = ("--token", "pg-token", "--user", "carol", "--virtual-gpus", "1", "--tick", "0.2")
    s = Serve(tmp_path / "pg", *args, store=postgres_fresh_url)
    try:
        c = Client(s.url, "pg-token")
        running = c.submit({"name": "a", "command": SLEEP})
        queued = c.submit({"name": "b", "command": SLEEP})
        wait_for(lambda: c.job(running["id"])["state"] == "running")
        assert c.set_policy("las") == "las"
    finally:
        s.stop()
    s = Serve(tmp_path / "pg", *args, store=postgres_fresh_url, port=s.port)
    try:
        c = Client(s.url, "pg-token")
        jobs = {j["id"]: j for j in c.jobs()}
        assert {j["name"] for j in jobs.values()} == {"a", "b"} and jobs[queued["id"]]["state"] == "queued"
        assert jobs[running["id"]]["state"] == "running" and jobs[running["id"]]["user"] == "carol"
        assert c.policy() == "las"  # the runtime switch is kept in the store
        for job_id in (running["id"], queued["id"]):
            c.cancel(job_id)
        wait_for(lambda: {j["state"] for j in c.jobs()} == {"cancelled"}, what="both cancelled")
    finally:
        s.stop()


def _a_large_result_whole_then_changed_on_the_way(c: Client, serve: Serve) -> None:
    """A finished job's signed result of 128 MiB comes back whole through `c`; changed in place
    while it is sent, the answer ends short (an error), and asked again it is a 409."""
    import http.client

    from schedulearn import results, run

    job = c.submit({"command": [sys.executable, "-c", "pass"]})
    wait_for(lambda: c.job(job["id"])["state"] == "succeeded", what="the job to end")
    with pytest.raises(ClientError) as e:
        c.result(job["id"])
    assert e.value.status == 404 and "has no result" in str(e.value)
    root = serve.home / "jobs"
    path = root / str(job["id"]) / run.RESULT_FILE
    data = os.urandom(128 << 20)  # far more than socket buffers hold: the server is reading it
    run.write_result(data, str(path), results.job_key(results.server_secret(root), job["id"]))
    got = c.result(job["id"])
    assert len(got) == len(data) and got == data
    with c._open("GET", f"jobs/{job['id']}/result") as resp:
        assert resp.read(1 << 20) == data[: 1 << 20]  # the server is some MiB ahead, not 127
        with open(path, "r+b") as f:  # changed in place: its end, not yet read by the server
            f.seek(len(data) - 8)
            f.write(b"tampered")
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            resp.read()
    with pytest.raises(ClientError) as e:
        c.result(job["id"])  # asked again: refused outright
    assert e.value.status == 409 and f"not written by job {job['id']}'s run" in str(e.value)


def test_a_large_result_comes_back_whole_and_one_changed_on_the_way_never_does(serve: Serve):
    """`GET result` sends a result a block at a time (the server never holds it whole); a
    result changed in place while it is sent ends the answer short, an error to the client,
    never a whole result that its job's run did not sign."""
    _a_large_result_whole_then_changed_on_the_way(Client(serve.url, "alice-token"), serve)


def test_a_result_through_a_remote_scheduler_is_passed_on_and_cut_short_as_upstream(
        serve: Serve, tmp_path: Path):
    """An extension that uses a remote scheduler passes a result on as it comes (a model of
    gigabytes is not held in the user's Jupyter server, and tornado's 100 MB cap on a body does
    not apply), the remote's 404 and 409 as such, and an answer cut short upstream cut short."""
    jupyter = LiveServer(tmp_path / "jupyter", {"remote_url": serve.url, "remote_token": "alice-token"})
    try:
        jupyter.start()
        _a_large_result_whole_then_changed_on_the_way(Client(jupyter.url, jupyter.token), serve)
    finally:
        jupyter.stop()


SHOWING_JOB = '''\
import hashlib, hmac, json, os, time
key, job_dir = os.environ["SCHEDULEARN_RESULT_KEY"], os.environ["SCHEDULEARN_JOB_DIR"]
def line(record, k=key):
    body = json.dumps(record).encode()
    return hmac.new(k.encode(), body, hashlib.sha256).hexdigest().encode() + b" " + body + b"\\n"
path = os.path.join(job_dir, "shown.jsonl")
with open(path, "ab") as f:  # (as the cell runner writes them)
    f.write(line({"run": "r", "at": 0, "bundle": {"text/html": "<b>epoch 1</b>"}}))
    f.write(line({"run": "r", "at": 1, "bundle": {"text/html": "<script>alert(1)</script>"}}, k="0" * 64))
while not os.path.exists(os.path.join(job_dir, "go")):
    time.sleep(0.05)
with open(path, "ab") as f:
    f.write(line({"run": "r", "at": 0, "bundle": {"text/html": "<b>epoch 2</b>"}}))
'''


def test_what_a_job_shows_is_handed_out_as_it_comes_as_its_run_signed_it(serve: Serve, tmp_path: Path):
    """`GET jobs/{id}/shown` hands out the records of the job's live record while it runs, a
    page from an offset on, only those its run signed with its key (a line signed otherwise
    is skipped); the same through a Jupyter server that uses the scheduler remotely."""
    c = Client(serve.url, "alice-token")
    job = c.submit({"script": SHOWING_JOB, "name": "shows"})
    first = {"run": "r", "at": 0, "bundle": {"text/html": "<b>epoch 1</b>"}}
    wait_for(lambda: c.shown(job["id"])[0] == [first], what="the first record")
    items, after = c.shown(job["id"])
    assert c.job(job["id"])["state"] == "running" and after > 0
    assert c.shown(job["id"], after) == ([], after)  # nothing new yet
    (serve.home / "jobs" / str(job["id"]) / "go").touch()
    wait_for(lambda: c.job(job["id"])["state"] == "succeeded", what="the job to end")
    second = {"run": "r", "at": 0, "bundle": {"text/html": "<b>epoch 2</b>"}}
    items, end = c.shown(job["id"], after)
    assert items == [second] and end == (serve.home / "jobs" / str(job["id"]) / "shown.jsonl").stat().st_size
    quiet = c.submit({"command": [sys.executable, "-c", "pass"]})
    wait_for(lambda: c.job(quiet["id"])["state"] == "succeeded", what="the quiet job")
    assert c.shown(quiet["id"], 5) == ([], 5)  # a job that showed nothing: nothing, yet
    for bad, status in (({"job_id": 999}, 404), ({"job_id": job["id"], "offset": -1}, 400)):
        with pytest.raises(ClientError) as e:
            c.shown(**bad)
        assert e.value.status == status
    jupyter = LiveServer(tmp_path / "jupyter", {"remote_url": serve.url, "remote_token": "alice-token"})
    try:
        jupyter.start()
        assert Client(jupyter.url, jupyter.token).shown(job["id"]) == ([first, second], end)
    finally:
        jupyter.stop()
