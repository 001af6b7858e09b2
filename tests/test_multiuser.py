"""The shared set-up isolates its users (`schedulearn serve --tokens --user-map --admins`).

Real OS accounts (created here with useradd, removed at teardown; root needed, so skipped
elsewhere but required in CI) and a real `schedulearn serve` started as root: each user's job runs
as their mapped account, cannot read another user's job directory, the tokens file or the store,
cannot signal another user's processes; a link a job puts in place of its log or result does not
make the root server read or write through it; only admins switch the policy, and the queue
widget shows the others a read-only dropdown. Plus the start-up refusals (tokens file mode, no
user map, non-root server) and the user map's parsing.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from schedulearn.accounts import Account, NoAccount, UserMap, check_can_switch
from schedulearn.client import Client, ClientError
from schedulearn.executors.local import PID_FILE
from schedulearn.model import SpecError

from tests.conftest import require
from tests.fixtures.jupyter import ROOT, free_port, wait_http

pytestmark = pytest.mark.slow

#: what a job runs to probe its neighbourhood; prints one `REPORT {json}` line
PROBE = r"""
import json, os, sys
targets = json.loads(sys.argv[1])
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": sorted(os.getgroups()),
       "HOME": os.environ.get("HOME"), "USER": os.environ.get("USER"),
       "LOGNAME": os.environ.get("LOGNAME"),
       "job_dir_mode": oct(os.stat(os.environ["SCHEDULEARN_JOB_DIR"]).st_mode & 0o777)}
for name, path in targets["read"].items():
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(1)
        out[name] = "read"
    except PermissionError:
        out[name] = "denied"
try:
    os.kill(targets["pid"], 0)
    out["signal"] = "sent"
except PermissionError:
    out["signal"] = "denied"
print("REPORT " + json.dumps(out), flush=True)
"""

#: bob's job: a secret in its directory, then sleep (its process is what alice tries to signal)
SECRET = ("import os, time; d = os.environ['SCHEDULEARN_JOB_DIR']; "
          "open(os.path.join(d, 'secret.txt'), 'w').write('bob-secret'); print('ready', flush=True); "
          "time.sleep(120)")

#: a job that puts links to the tokens file in place of its log and its result
LINKER = ("import os, sys; d = os.environ['SCHEDULEARN_JOB_DIR']; t = sys.argv[1]; "
          "os.remove(os.path.join(d, 'log.txt')); os.symlink(t, os.path.join(d, 'log.txt')); "
          "os.symlink(t, os.path.join(d, 'result.pkl'))")


def wait_for(fn, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# -- real OS accounts ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def accounts() -> Iterator[dict[str, Account]]:
    require(os.geteuid() == 0, "creating OS users and switching to them needs root")
    require(shutil.which("useradd") is not None and shutil.which("userdel") is not None,
            "useradd/userdel not installed")
    tag = uuid.uuid4().hex[:6]
    made: dict[str, Account] = {}
    try:
        for who in ("alice", "bob"):
            name = f"sl{who}{tag}"
            subprocess.run(["useradd", "--no-create-home", "--home-dir", f"/home/{name}", "--shell",
                            "/usr/sbin/nologin", "--user-group", name], check=True, capture_output=True)
            made[who] = Account.lookup(name)
        yield made
    finally:
        for acc in made.values():  # their jobs were stopped by the `shared` fixture
            subprocess.run(["userdel", acc.name], capture_output=True)


@pytest.fixture(scope="module")
def python(accounts: dict[str, Account]) -> str:
    """An interpreter the test accounts may run (this venv's may live in root's private home):
    the jobs here need only the standard library."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            ok = subprocess.run([candidate, "-c", "pass"], capture_output=True, cwd="/",
                                **accounts["alice"].popen_kwargs()).returncode == 0
        except OSError:
            ok = False
        if ok:
            return candidate
    require(False, "no Python interpreter that an unprivileged account may run")
    raise AssertionError


class Serve:
    """`schedulearn serve` as a real process (as root, or as `run_as`)."""

    def __init__(self, home: Path, *args: str, run_as: Account | None = None, wait: bool = True,
                 env: dict[str, str] | None = None, store: bool = True):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        path = os.pathsep.join([str(ROOT / "scheduler"), str(ROOT)])
        env = {**os.environ, **(env or {}), "PYTHONPATH": path}
        self.argv = [sys.executable, "-m", "schedulearn.cli", "serve", "--port", str(self.port),
                     *(["--store", f"sqlite:///{home / 'serve.db'}"] if store else []),
                     "--job-root", str(home / "jobs"), *args]
        kw = run_as.popen_kwargs() if run_as is not None else {}
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     cwd=home, **kw)
        if wait:
            wait_http(self.url + "schedulearn/api/policy", proc=self.proc)

    def refused(self) -> str:
        """The process's output when it exits by itself at start (it must)."""
        out, _ = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 2, out
        return out.decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)


@pytest.fixture
def home() -> Iterator[Path]:
    """A directory the test accounts can traverse (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="schedulearn-multiuser-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def tokens_file(home: Path, mode: int = 0o600) -> Path:
    path = home / "tokens.json"
    path.write_text(json.dumps({"alice-token": "alice", "bob-token": "bob", "carol-token": "carol"}))
    path.chmod(mode)
    return path


@pytest.fixture
def shared(accounts: dict[str, Account], home: Path) -> Iterator[Serve]:
    tokens = tokens_file(home)
    user_map = f"alice={accounts['alice'].name},bob={accounts['bob'].name}"
    s = Serve(home, "--tokens", str(tokens), "--user-map", user_map, "--admins", "carol",
              "--virtual-gpus", "2", "--tick", "0.2", "--cancel-grace", "2")
    try:
        yield s
    finally:  # jobs outlive their server: stop what is left before the accounts go
        for token in ("alice-token", "bob-token"):
            c = Client(s.url, token)
            user = token.split("-")[0]
            for job in c.jobs(user=user):
                if job["state"] in ("queued", "running"):
                    c.cancel(job["id"])
            wait_for(lambda c=c, user=user: all(j["state"] not in ("queued", "running")
                                                for j in c.jobs(user=user)), what="the jobs to stop")
        s.stop()


# -- the shared set-up, end to end -----------------------------------------------------------------
def test_jobs_run_as_their_users_and_cannot_reach_each_other(shared: Serve, accounts: dict[str, Account],
                                                             python: str):
    alice, bob = Client(shared.url, "alice-token"), Client(shared.url, "bob-token")
    jobs = shared.home / "jobs"
    secret = bob.submit({"name": "secret", "command": [python, "-c", SECRET]})
    wait_for(lambda: "ready" in bob.logs(secret["id"]), what="bob's job to start")
    bob_dir = jobs / str(secret["id"])
    bob_pid = json.loads((bob_dir / PID_FILE).read_text())["pid"]
    assert os.stat(f"/proc/{bob_pid}").st_uid == accounts["bob"].uid  # his process, his uid
    st = bob_dir.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (accounts["bob"].uid, accounts["bob"].gid, 0o700)

    targets = {"read": {"bob_dir": str(bob_dir), "bob_secret": str(bob_dir / "secret.txt"),
                        "bob_log": str(bob_dir / "log.txt"), "tokens": str(shared.home / "tokens.json"),
                        "store": str(shared.home / "serve.db")},
               "pid": bob_pid}
    probe = alice.submit({"name": "probe", "command": [python, "-c", PROBE, json.dumps(targets)]})
    wait_for(lambda: alice.job(probe["id"])["state"] in ("succeeded", "failed"), what="alice's probe")
    log = alice.logs(probe["id"])  # read back by the (root) server from alice's private directory
    assert alice.job(probe["id"])["state"] == "succeeded", log
    report = json.loads(next(line for line in log.splitlines() if line.startswith("REPORT "))[7:])
    a = accounts["alice"]
    assert (report["uid"], report["gid"]) == (a.uid, a.gid)
    assert report["groups"] == sorted(a.groups) and 0 not in report["groups"]  # root's groups dropped
    assert (report["HOME"], report["USER"], report["LOGNAME"]) == (a.home, a.name, a.name)
    assert report["job_dir_mode"] == "0o700"
    for what in ("bob_dir", "bob_secret", "bob_log", "tokens", "store", "signal"):
        assert report[what] == "denied", (what, report)
    # the server's own files in alice's directory still work: log markers, pid file, exit code
    assert "=== schedulearn: start #0" in log and "=== schedulearn: exit of run #0: code 0" in log
    assert (jobs / str(probe["id"]) / "exit_code").read_text().strip() == "0"
    assert (jobs / str(probe["id"]) / PID_FILE).stat().st_uid == 0
    # bob's job is still controlled by the server (root signals it), and only by bob
    with pytest.raises(ClientError) as e:
        alice.cancel(secret["id"])
    assert e.value.status == 403
    bob.cancel(secret["id"])
    wait_for(lambda: bob.job(secret["id"])["state"] == "cancelled", what="bob's job to stop")


def test_links_in_a_job_directory_are_not_followed_by_the_server(shared: Serve, python: str):
    bob = Client(shared.url, "bob-token")
    tokens = shared.home / "tokens.json"
    before = tokens.read_bytes()
    job = bob.submit({"name": "linker", "command": [python, "-c", LINKER, str(tokens)]})
    wait_for(lambda: bob.job(job["id"])["state"] in ("succeeded", "failed"), what="the linker job")
    d = shared.home / "jobs" / str(job["id"])
    assert (d / "log.txt").is_symlink(), "the job did replace its log with a link"
    assert "token" not in bob.logs(job["id"])  # not read through the link
    with pytest.raises(ClientError) as e:
        bob.result(job["id"])
    assert e.value.status == 404
    assert tokens.read_bytes() == before  # the exit marker was not appended through the link
    assert oct(tokens.stat().st_mode & 0o777) == "0o600"


def _private_folder_with_an_open_one(owner: Account, top: Path) -> tuple[Path, Path]:
    """`top/private` (0700, `owner`'s) holding `open/` (0755) with a world-readable file: what a
    job directory and its checkpoints folder are."""
    private, opened = top / "private", top / "private" / "open"
    opened.mkdir(parents=True)
    (opened / "model.pt").write_text("alice-weights")
    for path, mode in ((private, 0o700), (opened, 0o755), (opened / "model.pt", 0o644)):
        os.chown(path, owner.uid, owner.gid)
        path.chmod(mode)
    return private, opened


def test_a_workdir_the_jobs_account_cannot_enter_is_refused_and_never_entered(
        shared: Serve, accounts: dict[str, Account], python: str):
    """A job's working directory is entered by its own account, never by the root server before
    the switch. It was: bob's `--workdir` set to the open checkpoints folder inside alice's 0700
    job directory ran his job there, and it read her model (relative paths need no right on the
    folders above the current one)."""
    alice, bob = Client(shared.url, "alice-token"), Client(shared.url, "bob-token")
    private, opened = _private_folder_with_an_open_one(accounts["alice"], shared.home)
    read = [python, "-c", "print(open('model.pt').read())"]
    with pytest.raises(ClientError) as e:
        bob.submit({"name": "steal", "command": read, "workdir": str(opened)})
    assert e.value.status == 400
    assert str(e.value) == (f"workdir: {str(opened)!r}: bob's jobs run as the OS account "
                            f"{accounts['bob'].name}, which cannot enter it (the permissions of it or of "
                            "a folder above) (HTTP 400)")
    assert bob.jobs(user="bob") == []  # nothing stored
    mine = alice.submit({"name": "mine", "command": read, "workdir": str(opened)})  # her own: fine
    wait_for(lambda: alice.job(mine["id"])["state"] in ("succeeded", "failed"), what="alice's job")
    assert "alice-weights" in alice.logs(mine["id"]) and alice.job(mine["id"])["state"] == "succeeded"

    # closed between submission and start (both GPUs held): refused again at the start
    shared_dir = shared.home / "lab"
    shared_dir.mkdir(mode=0o755)
    shutil.copy(opened / "model.pt", shared_dir / "model.pt")
    hold = alice.submit({"name": "hold", "gpus": 2, "command": [python, "-c", "import time; time.sleep(60)"]})
    wait_for(lambda: alice.job(hold["id"])["state"] == "running", what="the GPUs to be held")
    late = bob.submit({"name": "late", "command": read, "workdir": str(shared_dir)})
    shared_dir.chmod(0o700)  # root's now
    alice.cancel(hold["id"])
    wait_for(lambda: bob.job(late["id"])["state"] in ("succeeded", "failed"), what="bob's job")
    job = bob.job(late["id"])
    assert job["state"] == "failed" and "cannot enter it" in job["reason"], job
    assert "alice-weights" not in bob.logs(late["id"])


def test_the_gate_enters_the_workdir_as_the_account(accounts: dict[str, Account], home: Path):
    """The run's first process (`local._gate`) changes into the folder after the switch, as the
    account: where it may not, the run stops there, saying so, and runs nothing."""
    from schedulearn.executors.local import _gate

    private, opened = _private_folder_with_an_open_one(accounts["alice"], home)
    refused = f"schedulearn: workdir: cannot enter {opened} as {accounts['bob'].name}"
    for who, code, out in (("alice", 0, "alice-weights"), ("bob", 1, refused)):
        gate = _gate(opened, "/nonexistent/gate_closed", 0)
        p = subprocess.run([*gate, "cat", "model.pt"], input=b"go\n", capture_output=True, cwd="/",
                           **accounts[who].popen_kwargs())
        assert (p.returncode, (p.stdout + p.stderr).decode().strip()) == (code, out), who


def test_a_user_without_an_account_is_refused_at_submit(shared: Serve):
    carol = Client(shared.url, "carol-token")
    with pytest.raises(ClientError) as e:
        carol.submit({"command": [sys.executable, "-c", "print(1)"]})
    assert e.value.status == 403
    assert "\n" not in str(e.value) and "'carol' has no OS account" in str(e.value)
    assert carol.jobs(user="carol") == []  # nothing stored


def test_an_admin_cancels_anyones_job_and_is_named(shared: Serve, python: str):
    """An operator stops another user's runaway job: only a named admin may (anyone else: 403,
    naming who may), and the job's reason says who did it."""
    alice, bob, carol = (Client(shared.url, f"{who}-token") for who in ("alice", "bob", "carol"))
    sleep = [python, "-c", "import time; print('up', flush=True); time.sleep(120)"]
    running = alice.submit({"name": "runaway", "gpus": 2, "command": sleep})
    wait_for(lambda: "up" in alice.logs(running["id"]), what="alice's job to start")
    queued = alice.submit({"name": "next", "command": sleep})
    with pytest.raises(ClientError) as e:
        bob.cancel(running["id"])
    assert e.value.status == 403
    assert str(e.value) == (f"job {running['id']}: belongs to 'alice'; only they or the scheduler's admins "
                            "(carol) may cancel it (HTTP 403)")
    assert carol.policy_info()["admin"] is True and alice.policy_info()["admin"] is False
    assert carol.cancel(queued["id"])["state"] == "cancelled"
    assert carol.cancel(running["id"])["state"] == "running"  # stopping: SIGTERM sent
    wait_for(lambda: alice.job(running["id"])["state"] == "cancelled", what="the runaway job to stop")
    assert alice.job(queued["id"])["reason"] == "cancelled by carol (an admin)"
    assert alice.job(running["id"])["reason"] == "cancelled by carol (an admin)"
    assert bob.job(running["id"])["reason"] == "cancelled by carol (an admin)"  # not private


def test_only_admins_switch_the_policy(shared: Serve):
    alice, carol = Client(shared.url, "alice-token"), Client(shared.url, "carol-token")
    fifo = {"policy": "fifo", "plans_deadlines": False, "paused": None}
    assert alice.policy_info() == {**fifo, "can_switch": False, "user": "alice", "admin": False}
    assert carol.policy_info() == {**fifo, "can_switch": True, "user": "carol", "admin": True}
    with pytest.raises(ClientError) as e:
        alice.set_policy("las")
    assert e.value.status == 403
    assert "\n" not in str(e.value) and str(e.value).startswith("policy: only the scheduler's admins")
    assert alice.policy() == "fifo"
    assert carol.set_policy("las") == "las"
    assert alice.policy() == "las"
    # pausing the scheduler is an admin's action too
    for act in (lambda: alice.pause("mine now"), alice.resume):
        with pytest.raises(ClientError) as e:
            act()
        assert e.value.status == 403
        assert str(e.value) == ("pause: only the scheduler's admins may pause or resume it (carol); you are "
                                "'alice' (HTTP 403)") or str(e.value).startswith("resume: only"), str(e.value)
    assert alice.policy_info()["paused"] is None
    assert carol.pause("maintenance")["by"] == "carol"
    assert alice.policy_info()["paused"]["reason"] == "maintenance"  # everyone sees it
    carol.resume()
    assert alice.policy_info()["paused"] is None


def test_queue_widget_is_read_only_for_non_admins(shared: Serve):
    pytest.importorskip("ipywidgets")
    from schedulearn_magics.widgets import READ_ONLY_TIP, QueueWidget

    mine = QueueWidget(Client(shared.url, "alice-token"), interval=0.1)
    admin = QueueWidget(Client(shared.url, "carol-token"), interval=0.1)
    try:
        assert mine.dropdown.disabled and mine.dropdown.tooltip == READ_ONLY_TIP
        assert "schedulearn-policy-readonly" in mine.dropdown._dom_classes
        assert not admin.dropdown.disabled and admin.dropdown.tooltip is None
        admin.dropdown.value = "las"  # a choice in the browser arrives as this change
        wait_for(lambda: mine.dropdown.value == "las", timeout=10, what="the read-only dropdown to follow")
        assert mine.dropdown.disabled  # following a switch does not make it editable
    finally:
        mine.close()
        admin.close()


def test_sighup_reloads_the_tokens_and_closes_what_a_removed_token_opened(home: Path, python: str):
    """A leaked token is revoked by editing the tokens file and `kill -HUP`, without a restart:
    the old token is refused from then on, and its open event socket and followed log are
    closed (a revoked holder stops reading at once); other users' connections stay. A file that
    cannot be used (not private) changes nothing."""
    import asyncio
    import contextlib
    import http.client
    import signal
    import threading
    import urllib.request

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    tokens = tokens_file(home)
    s = Serve(home, "--tokens", str(tokens), "--user-map", "server", "--virtual-gpus", "2", "--tick", "0.2")
    said: list[str] = []  # the server's log, as it comes

    def read() -> None:
        for line in s.proc.stdout:
            said.append(line.decode())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    alice = Client(s.url, "alice-token")
    ws = s.url.replace("http", "ws", 1) + "schedulearn/api/events"
    try:
        talk = "import time\nwhile True: print('tick'); time.sleep(0.2)"
        job = alice.submit({"name": "talks", "command": [python, "-u", "-c", talk]})
        wait_for(lambda: "tick" in alice.logs(job["id"]), what="the job to talk")
        follow = urllib.request.urlopen(urllib.request.Request(
            f"{s.url}schedulearn/api/jobs/{job['id']}/logs?follow=1",
            headers={"Authorization": "token alice-token"}), timeout=30)
        assert follow.read1(1 << 16)  # open, and sending

        async def sockets() -> None:
            theirs, hers = [await websocket_connect(HTTPRequest(ws, headers={"Authorization": f"token {t}"}))
                            for t in ("bob-token", "alice-token")]
            assert json.loads(await theirs.read_message())["type"] == "hello"
            assert json.loads(await hers.read_message())["type"] == "hello"
            tokens.write_text(json.dumps({"alice-new": "alice", "bob-token": "bob", "dave-token": "dave"}))
            s.proc.send_signal(signal.SIGHUP)
            while (await hers.read_message()) is not None:  # events may come first; then it is closed
                pass
            assert (hers.close_code, hers.close_reason) == (1008, "token: revoked")
            Client(s.url, "bob-token").submit({"name": "ping", "command": [python, "-c", "pass"]})
            event = json.loads(await asyncio.wait_for(theirs.read_message(), 30))  # bob's stays open
            assert event["type"] == "job", event
            theirs.close()

        asyncio.run(sockets())
        with contextlib.suppress(OSError, http.client.HTTPException):
            while follow.read1(1 << 16):  # the followed log ends (cut short), though the job runs on
                pass
        assert Client(s.url, "alice-new").job(job["id"])["state"] == "running"
        with pytest.raises(ClientError) as e:
            alice.jobs()
        assert e.value.status == 403
        # an unusable file (readable by others) is not taken: the tokens in force stay
        tokens.write_text(json.dumps({"x": "mallory"}))
        tokens.chmod(0o644)
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: any("tokens not reloaded" in line for line in said), what="the refused reload")
        assert Client(s.url, "alice-new").job(job["id"])["state"] == "running"
        with pytest.raises(ClientError):
            Client(s.url, "x").jobs()
    finally:  # the job runs for ever: stopped whichever token is in force
        for token in ("alice-new", "alice-token"):
            with contextlib.suppress(ClientError, NameError):
                Client(s.url, token).cancel(job["id"])
        s.stop()
        reader.join(10)
    out = "".join(said)
    assert ("INFO schedulearn: tokens reloaded: users alice, bob, dave (new: dave); 2 tokens removed, "
            "2 connections closed") in out, out
    assert (f"ERROR schedulearn: tokens not reloaded (the old ones stay in force): tokens: {tokens} is "
            f"readable by others (mode 0644); run chmod 600 {tokens}") in out, out


# -- refusals at start -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_tokens_file_readable_by_others_is_refused(home: Path, mode: int):
    tokens = tokens_file(home, mode)
    out = Serve(home, "--tokens", str(tokens), "--user-map", "server", wait=False).refused()
    line = (f"schedulearn serve: tokens: {tokens} is readable by others (mode {mode:04o}); "
            f"run chmod 600 {tokens}")
    assert out.strip().splitlines() == [line]


def test_secrets_on_the_command_line_are_refused_in_the_shared_set_up(home: Path):
    """Every account here reads a process's arguments (`ps`), the users' jobs included: a store
    password there let bob's job rewrite the store (alice's queued job, run as alice). In the
    shared set-up it is refused, and so is `--token`; from the environment (private to the
    server) both pass. A one-user server says it, as a warning, and starts."""
    tokens = str(tokens_file(home))
    url = "postgresql+psycopg://sl:hunter2@/sl?host=/nonexistent"
    store_line = ("schedulearn serve: store: the password in --store is readable by every account on this "
                  "machine (ps shows a process's arguments), the users' jobs included; give the URL in "
                  "$SCHEDULEARN_STORE_URL, or the password in ~/.pgpass, instead")
    out = Serve(home, "--tokens", tokens, "--user-map", "server", "--store", url, wait=False).refused()
    assert out.strip().splitlines() == [store_line]
    out = Serve(home, "--tokens", tokens, "--user-map", "server", "--token", "t", wait=False).refused()
    assert out.strip().splitlines() == [
        "schedulearn serve: token: --token is readable by every account on this machine (ps shows a "
        "process's arguments); give it in $SCHEDULEARN_SERVE_TOKEN or the --tokens file instead"]
    # the same URL from the environment passes the check (and fails on connecting: no such server)
    env = {"SCHEDULEARN_STORE_URL": url, "SCHEDULEARN_SERVE_TOKEN": "t"}
    out = Serve(home, "--tokens", tokens, "--user-map", "server", wait=False, env=env, store=False).refused()
    assert out.strip().splitlines()[-1].startswith(
        "schedulearn serve: store: cannot open postgresql+psycopg://sl:***@/sl?host=%2Fnonexistent"), out
    assert "hunter2" not in out
    # one user: said, not refused
    out = Serve(home, "--token", "t", "--store", url, wait=False).refused()
    assert f"WARNING schedulearn: {store_line.removeprefix('schedulearn serve: ')}" in out
    assert "WARNING schedulearn: token: --token is readable by every account" in out
    assert out.strip().splitlines()[-1].startswith("schedulearn serve: store: cannot open"), out


def test_users_whose_jobs_will_be_refused_are_named_at_start(accounts: dict[str, Account], home: Path):
    """`--user-map same` maps every user to the account of their name: one with no such account
    was not said at start (only `alice=…` maps were checked), and learnt it from a 403."""
    ghost = f"ghost{uuid.uuid4().hex[:6]}"
    tokens = home / "tokens.json"
    tokens.write_text(json.dumps({"a": accounts["alice"].name, "g": ghost, "r": "root"}))
    tokens.chmod(0o600)
    s = Serve(home, "--tokens", str(tokens), "--user-map", "same", "--virtual-gpus", "1")
    s.stop()
    out = s.proc.stdout.read().decode()
    said = [line.split(" WARNING ", 1)[1] for line in out.splitlines() if " will be refused: " in line]
    assert said == [f"schedulearn: the jobs of {ghost} will be refused: no OS account {ghost!r} on this host",
                    "schedulearn: the jobs of root will be refused: 'root' maps to 'root', which is root; "
                    "jobs never run as root"], out


def test_shared_mode_without_a_user_map_is_refused(home: Path):
    out = Serve(home, "--tokens", str(tokens_file(home)), wait=False).refused()
    assert len(out.strip().splitlines()) == 1
    assert out.startswith("schedulearn serve: user_map: with --tokens each user's jobs run as their own OS")


def test_shared_mode_as_a_non_root_server_is_refused(accounts: dict[str, Account], home: Path, python: str):
    """A real server process started as an unprivileged account (`test_check_can_switch_needs_root`
    checks the same refusal as a function where this cannot run)."""
    if python != sys.executable:
        pytest.skip(f"this environment's Python ({sys.executable}) is private to root: an unprivileged "
                    "account cannot start the server")
    tokens = tokens_file(home)
    os.chown(tokens, accounts["alice"].uid, accounts["alice"].gid)
    os.chown(home, accounts["alice"].uid, accounts["alice"].gid)
    out = Serve(home, "--tokens", str(tokens), "--user-map", f"bob={accounts['bob'].name}",
                run_as=accounts["alice"], wait=False).refused()
    assert out.strip().splitlines() == [
        f"schedulearn serve: user_map: running jobs as their users' OS accounts needs root, but this server "
        f"runs as {accounts['alice'].name!r} (uid {accounts['alice'].uid}); start it as root, or give "
        "--user-map server to run every job as the server's account (no isolation between users)"]


def test_check_can_switch_needs_root():
    check_can_switch(0)
    with pytest.raises(SpecError, match=r"^user_map: running jobs as their users' OS accounts needs root"):
        check_can_switch(4242)


def test_mapped_accounts_must_exist_and_not_be_root(home: Path):
    tokens = str(tokens_file(home))
    for user_map, expected in [
        ("alice=nosuchaccount-x", "user_map: no OS account 'nosuchaccount-x' on this host"),
        ("alice=root", "user_map: 'alice' maps to 'root', which is root; jobs never run as root"),
    ]:
        if os.geteuid() != 0:  # the root check comes first
            expected = "user_map: running jobs as their users' OS accounts needs root"
        out = Serve(home, "--tokens", tokens, "--user-map", user_map, wait=False).refused()
        assert len(out.strip().splitlines()) == 1 and out.startswith(f"schedulearn serve: {expected}"), out


# -- the user map ----------------------------------------------------------------------------------
def test_user_map_parsing():
    assert UserMap.parse("alice=alice, bob = b.smith").entries == {"alice": "alice", "bob": "b.smith"}
    assert UserMap.parse("same").same and UserMap.parse("same").account_name("x") == "x"
    assert UserMap.parse("server") is None and UserMap.parse("") is None and UserMap.parse(None) is None
    for bad in ("alice", "alice=", "=alice", "alice=a,,bob=b"):
        with pytest.raises(SpecError, match=r"^user_map: expected user=account\[,user=acc"):
            UserMap.parse(bad)
    with pytest.raises(SpecError, match="^user_map: 'a' is mapped twice"):
        UserMap.parse("a=x,a=y")
    m = UserMap.parse("alice=root")
    with pytest.raises(NoAccount, match="jobs never run as root"):
        m.account("alice")
    with pytest.raises(NoAccount, match="^user: 'bob' has no OS account on this server"):
        m.account("bob")
    me = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() != 0:
        assert UserMap.parse("same").account(me).uid == os.geteuid()


def test_an_account_that_cannot_run_the_jobs_python_is_named_at_start(
        accounts: dict[str, Account], home: Path, python: str, caplog):
    """A virtualenv under /root (mode 0700) runs the server, but no job of a mapped account: each
    failed with `/srv/jobs/1/exit_code: 1: python: Permission denied`. The server now says so
    in its log at start, per account, before any user submits."""
    from types import SimpleNamespace

    from schedulearn.accounts import UserMap
    from schedulearn.executors.launch import RUNNER
    from schedulearn.executors.local import LocalExecutor
    from schedulearn.service import Settings

    from schedulearn_jupyter.serve import warn_unusable_accounts

    alice = accounts["alice"]
    private = home / "private"
    private.mkdir(mode=0o700)
    hidden = private / "python3"
    hidden.symlink_to(python)
    ex = LocalExecutor(home / "jobs", python=str(hidden))
    assert ex.account_problem(alice) == f"it cannot run {hidden} (Permission denied)"
    settings = Settings(user_map=UserMap({"alice": alice.name, "bob": accounts["bob"].name}))
    with caplog.at_level(logging.WARNING, logger="schedulearn.serve"):
        warn_unusable_accounts(SimpleNamespace(executor=ex), settings, {"a": "alice", "c": "carol"})
    assert [r.getMessage() for r in caplog.records] == [
        f"schedulearn: the jobs of alice (OS account {alice.name}) cannot start: it cannot run {hidden} "
        "(Permission denied); install the environment where the accounts can read it (docs/server.md)"]
    # an interpreter the account may run: fine where it can read the job runner too
    readable = subprocess.run(["test", "-r", RUNNER], cwd="/", **alice.popen_kwargs()).returncode == 0
    problem = LocalExecutor(home / "jobs2", python=python).account_problem(alice)
    assert problem == (None if readable else f"it cannot read the job runner {RUNNER}")
