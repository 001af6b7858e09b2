"""The job runner (`python -m schedulearn.run`), the job's environment, the launchers' use of the
runner, and signed results: real subprocesses, no server."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from schedulearn import results, run
from schedulearn.executors.launch import (
    INHERITED_ENV,
    RUNNER,
    build_workers,
    job_environment,
    user_command,
    with_runner,
)
from schedulearn.model import JobSpec

from tests.conftest import HELD_TO_EXIT, ROOT

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "scheduler")}


def _run(args: list[str], cwd: Path, module: bool = True) -> subprocess.CompletedProcess:
    argv = [PY, "-m", "schedulearn.run", *args] if module else [PY, RUNNER, *args]
    return subprocess.run(argv, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60)


# --- exit statuses ----------------------------------------------------------------------------
@pytest.mark.parametrize("module", [True, False], ids=["-m schedulearn.run", "run.py by path"])
def test_a_script_that_returns_exits_0_as_main_with_its_argv(tmp_path: Path, module: bool) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text("VALUE = 'from the script folder'\n")
    (tmp_path / "sub" / "s.py").write_text(
        "import sys, helper\n"
        "print('name', __name__, 'argv', sys.argv, helper.VALUE)\n"
        "import __main__; print('main is me', __main__.__dict__ is globals())\n")
    p = _run(["sub/s.py", "a", "--b"], tmp_path, module)
    assert p.returncode == 0, p.stderr
    assert "name __main__ argv ['sub/s.py', 'a', '--b'] from the script folder" in p.stdout
    assert "main is me True" in p.stdout
    assert p.stderr == ""


def test_system_exit_code_is_the_status(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text("import sys\nprint('before')\nsys.exit(3)\n")
    p = _run(["s.py"], tmp_path)
    assert (p.returncode, p.stdout, p.stderr) == (3, "before\n", "")
    (tmp_path / "m.py").write_text("raise SystemExit('a message')\n")
    p = _run(["m.py"], tmp_path)
    assert (p.returncode, p.stderr) == (1, "a message\n")
    (tmp_path / "n.py").write_text("raise SystemExit(None)\n")
    assert _run(["n.py"], tmp_path).returncode == 0


def test_an_exception_exits_1_with_one_traceback_of_the_script(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(
        "def f():\n    raise ValueError('boom')\nprint('start', flush=True)\nf()\n")
    p = _run(["s.py"], tmp_path)
    assert p.returncode == 1
    assert p.stdout == "start\n"
    assert p.stderr.count("Traceback (most recent call last)") == 1
    assert p.stderr.strip().splitlines()[-1] == "ValueError: boom"
    assert 's.py", line 4, in <module>' in p.stderr and 's.py", line 2, in f' in p.stderr
    assert "runpy" not in p.stderr and "schedulearn" not in p.stderr  # the runner's frames are hidden


def test_dash_m_runs_a_module_and_a_missing_script_is_2(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "tool.py").write_text("import sys\nprint(__name__, sys.argv[1:])\nsys.exit(4)\n")
    p = _run(["-m", "pkg.tool", "x"], tmp_path)
    assert (p.returncode, p.stdout) == (4, "__main__ ['x']\n"), p.stderr
    p = _run(["nope.py"], tmp_path)
    assert p.returncode == 2 and "can't open file" in p.stderr and "nope.py" in p.stderr
    p = _run([], tmp_path)
    assert p.returncode == 2 and "usage: python -m schedulearn.run" in p.stderr


def test_the_process_group_is_destroyed_and_output_flushed(tmp_path: Path) -> None:
    """A one-rank gloo group left initialised: the runner destroys it before exiting (the
    program's atexit handler sees it gone) and a line printed without newline nor flush comes out."""
    (tmp_path / "s.py").write_text(
        "import atexit, os, sys, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=sys.argv[1], RANK='0', WORLD_SIZE='1')\n"
        "dist.init_process_group('gloo')\n"
        "atexit.register(lambda: print('at exit initialised:', dist.is_initialized(), flush=True))\n"
        "os.environ.pop('PYTHONUNBUFFERED', None)\n"
        "sys.stdout.write('last words')\n")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = _run(["s.py", str(port)], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "last wordsat exit initialised: False\n"


@pytest.mark.parametrize("ends", ["returns", "raises", "is stopped"])
def test_what_the_program_holds_is_released_after_its_exit_handlers(tmp_path: Path, ends: str) -> None:
    """`multiprocessing` (torch imports it) keeps the program's `__main__` module alive as
    `__mp_main__`: what its globals held (a DDP model and through it the gloo process group) was
    destroyed only in the interpreter's finalisation, where a gloo group aborted about one job in
    30. The runner releases it after the program's own exit handlers (which still see the
    globals) and before the interpreter finalises — also when it failed or was stopped."""
    (tmp_path / "s.py").write_text(
        HELD_TO_EXIT + "if sys.argv[1] == 'raises':\n    raise ValueError('boom')\n"
        "if sys.argv[1] == 'is stopped':\n    sys.exit(143)\n")
    p = _run(["s.py", ends], tmp_path)
    assert p.returncode == {"returns": 0, "raises": 1, "is stopped": 143}[ends], p.stderr
    assert p.stdout == "exit handler sees Held\nreleased before finalizing\n", (p.stdout, p.stderr)


def test_a_stopped_program_ends_with_the_collectors_heap_frozen(tmp_path: Path) -> None:
    """Status 143 (the scheduler's stop, `EXIT_CHECKPOINTED`): the heap is frozen before the
    interpreter's teardown (whose collections it then skips); any other status keeps Python's."""
    (tmp_path / "s.py").write_text(
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0, flush=True))\n"
        "sys.exit(int(sys.argv[1]))\n")
    for status, frozen in ((143, True), (0, False), (1, False)):
        p = _run(["s.py", str(status)], tmp_path)
        assert p.returncode == status, (status, p.stderr)
        assert p.stdout == f"frozen at exit: {frozen}\n", (status, p.stdout)


def test_a_rank_waits_for_rank_0s_store_to_listen_before_torch_connects(tmp_path: Path) -> None:
    """A rank other than 0 rendezvousing through `env://` waits, polling, until rank 0's store
    listens (torch's own client backs off for 0.3-0.7 s when it is early); it gives up after
    `MASTER_WAIT_S` and lets torch's connect (with its own timeout and error) go on."""
    import socket
    import threading
    import time

    def rendezvous(args=(), kwargs=None, **env):
        old = {k: os.environ.get(k) for k in ("RANK", "MASTER_ADDR", "MASTER_PORT")}
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", **env})
        try:
            return run._env_rendezvous(tuple(args), kwargs or {})
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    assert rendezvous(["gloo"], RANK="1") and rendezvous(["gloo", "env://"], RANK="3")
    assert not rendezvous(["gloo"], RANK="0")  # rank 0 starts the store
    assert rendezvous(["gloo"], {"rank": 1}, RANK="0") and not rendezvous(["gloo"], {"rank": 0}, RANK="1")
    assert not rendezvous(["gloo", "tcp://10.0.0.1:23456"], RANK="1")  # not env://
    assert not rendezvous(["gloo"], {"store": object()}, RANK="1")
    assert not rendezvous(["gloo"], RANK="1", MASTER_PORT="")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listening = []

    def listen_later():
        time.sleep(0.4)
        srv = socket.create_server(("127.0.0.1", port))
        listening.append(time.monotonic())
        time.sleep(2)
        srv.close()

    t = threading.Thread(target=listen_later)
    t.start()
    run._wait_for_master("127.0.0.1", port)
    returned = time.monotonic()
    t.join()
    assert listening and returned >= listening[0]  # it returned once the port listened, not before

    old = run.MASTER_WAIT_S
    run.MASTER_WAIT_S = 0.2
    try:
        t0 = time.monotonic()
        run._wait_for_master("127.0.0.1", port)  # nothing listens: it gives up
        assert time.monotonic() - t0 < 5
        run.MASTER_WAIT_S = 60
        t0 = time.monotonic()
        run._wait_for_master("no-such-host.invalid", port)  # no such name: torch's connect says so
        assert time.monotonic() - t0 < 30
    finally:
        run.MASTER_WAIT_S = old

    # under the runner, init_process_group is wrapped, and two ranks started rank 1 first meet
    (tmp_path / "s.py").write_text(
        "import os, sys, time, torch, torch.distributed as dist\n"
        "assert hasattr(dist.init_process_group, '__wrapped__')\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([float(dist.get_rank() + 1)]); dist.all_reduce(t)\n"
        "print('sum', int(t.item()), flush=True)\n")
    env = {**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    argv = [PY, "-m", "schedulearn.run", "s.py"]
    one = subprocess.Popen(argv, cwd=tmp_path, env={**env, "RANK": "1"}, stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    zero = subprocess.Popen(argv, cwd=tmp_path, env={**env, "RANK": "0"}, stdout=subprocess.PIPE, text=True)
    outs = [p.communicate(timeout=120)[0] for p in (zero, one)]
    assert [p.returncode for p in (zero, one)] == [0, 0] and all("sum 3" in o for o in outs), outs


# --- rank prefixes ----------------------------------------------------------------------------
def test_ranks_sharing_one_log_write_whole_prefixed_lines(tmp_path: Path) -> None:
    """Two ranks of a 2-process job write 3,000 lines each, every line in two pieces, to one log
    (as torchrun's workers share the job's log): each line comes out whole with its rank."""
    (tmp_path / "s.py").write_text(
        "import os, sys\n"
        "r = os.environ['RANK']\n"
        "for i in range(3000):\n"
        "    print(f'r{r} step {i}', end='')\n"
        "    print(f' loss {i * 0.5}')\n"
        "print(f'r{r} to stderr', file=sys.stderr)\n")
    log = tmp_path / "log.txt"
    with open(log, "ab") as f:
        procs = [subprocess.Popen([PY, "-m", "schedulearn.run", "s.py"], cwd=tmp_path, stdout=f,
                                  stderr=subprocess.STDOUT, env={**ENV, "WORLD_SIZE": "2", "RANK": str(r)})
                 for r in (0, 1)]
        assert [p.wait(120) for p in procs] == [0, 0]
    lines = log.read_text().splitlines()
    assert len(lines) == 2 * 3001
    bad = [ln for ln in lines if not re.fullmatch(r"\[rank(\d)\]: r\1 (step \d+ loss \d+\.\d|to stderr)", ln)]
    assert not bad, bad[:5]


@pytest.mark.parametrize("env", [{"WORLD_SIZE": "1", "RANK": "0"}, {},
                                 {"WORLD_SIZE": "2", "RANK": "1", "SCHEDULEARN_RANK_PREFIX": "0"},
                                 {"WORLD_SIZE": "2", "RANK": "1", "HOROVOD_RANK": "1"}],
                         ids=["one process", "no torchrun", "turned off", "horovod prefixes itself"])
def test_no_rank_prefix_where_there_is_one_process_or_it_is_off(tmp_path: Path, env: dict) -> None:
    (tmp_path / "s.py").write_text("print('plain')\n")
    base = {k: v for k, v in ENV.items() if k not in ("WORLD_SIZE", "RANK", "HOROVOD_RANK")}
    p = subprocess.run([PY, "-m", "schedulearn.run", "s.py"], cwd=tmp_path, env={**base, **env},
                       capture_output=True, text=True, timeout=60)
    assert p.stdout == "plain\n"


def test_a_failing_rank_s_traceback_is_prefixed_and_still_the_reason(tmp_path: Path) -> None:
    from schedulearn import joblogs

    (tmp_path / "s.py").write_text("raise RuntimeError('boom')\n")
    p = subprocess.run(
        [PY, "-m", "schedulearn.run", "s.py"], cwd=tmp_path, env={**ENV, "WORLD_SIZE": "2", "RANK": "1"},
        capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.splitlines()[0] == "[rank1]: Traceback (most recent call last):"
    assert joblogs.failure_reason(p.stderr) == "RuntimeError: boom"


# --- the launchers put Python programs under the runner --------------------------------------
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "train.py", "--lr", "1"], ["python", "R", "train.py", "--lr", "1"]),
        (["/v/bin/python3", "-u", "-B", "t.py"], ["/v/bin/python3", "-u", "-B", "R", "t.py"]),
        (["python", "-W", "ignore", "-X", "dev", "t.py"],
         ["python", "-W", "ignore", "-X", "dev", "R", "t.py"]),
        (["python", "-Wignore", "t.py"], ["python", "-Wignore", "R", "t.py"]),
        (["python", "-m", "pkg.train", "x"], ["python", "R", "-m", "pkg.train", "x"]),
        (["python", "-um", "pkg"], ["python", "-u", "R", "-m", "pkg"]),
        (["python", "-mpkg", "a"], ["python", "R", "-m", "pkg", "a"]),
        (["python", "-c", "print(1)"], None),
        (["python", "-uc", "print(1)"], None),
        (["python", "-"], None),
        (["python"], None),
        (["bash", "run.sh"], None),
        (["./train.py"], None),
    ],
)
def test_with_runner(argv: list[str], expected: list[str] | None) -> None:
    assert with_runner(argv, "R") == (argv if expected is None else expected)


def test_every_launcher_runs_the_script_through_the_runner(tmp_path: Path) -> None:
    spec = JobSpec(script="print(1)", gpus=2, launcher="torchrun")
    (w,) = build_workers(spec, 5, {"n": (0, 1)}, tmp_path, python="/v/bin/python", result_key="k5")
    assert w.argv[-2:] == [RUNNER, f"{tmp_path}/main.py"]
    assert w.env["SCHEDULEARN_RESULT_KEY"] == "k5"
    workers = build_workers(spec, 5, {"a": (0,), "b": (1,)}, tmp_path, python="py")  # multi-host
    assert all(x.argv[-2:] == [RUNNER, f"{tmp_path}/main.py"] for x in workers) and len(workers) == 2
    hvd = JobSpec(command=["python", "train.py"], gpus=2, launcher="horovod")
    (w,) = build_workers(hvd, 5, {"n": (0, 1)}, tmp_path, python="py", runner="/job/.run.py")
    assert w.argv[-3:] == ["python", "/job/.run.py", "train.py"]
    plain = JobSpec(command=["python", "-m", "pkg"], gpus=1)
    assert user_command(plain, "py", tmp_path, RUNNER) == ["python", RUNNER, "-m", "pkg"]
    assert user_command(plain, "py", tmp_path, None) == ["python", "-m", "pkg"]


# --- the environment ----------------------------------------------------------------------------
def test_job_environment_is_an_allow_list() -> None:
    server = {
        "PATH": "/usr/bin", "HOME": "/home/srv", "USER": "srv", "LANG": "C.UTF-8", "LC_ALL": "C",
        "TZ": "UTC", "TMPDIR": "/scratch", "NCCL_DEBUG": "INFO", "PYTHONPATH": "/lib",
        "SCHEDULEARN_STORE_URL": "postgresql://sched:pw@db/x", "SCHEDULEARN_REMOTE_TOKEN": "t",
        "JUPYTER_TOKEN": "j", "JPY_API_TOKEN": "h", "AWS_SECRET_ACCESS_KEY": "s",
        "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        "SCHEDULEARN_JOB_ID": "99",
    }
    env = job_environment(
        {"SCHEDULEARN_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "2", "TORCH_X": "1"},
        {"MINE": "1", "SCHEDULEARN_JOB_ID": "666", "PATH": "/mine:/usr/bin"},
        inherit=server, python="/venv/bin/python", pythonpath="/pkg", extra={"OPERATOR": "o"},
        home="/home/alice", user="alice")
    assert env == {
        "PATH": "/mine:/usr/bin", "HOME": "/home/alice", "USER": "alice", "LOGNAME": "alice",
        "LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "TMPDIR": "/scratch", "NCCL_DEBUG": "INFO",
        "PYTHONPATH": "/lib:/pkg", "OPERATOR": "o", "MINE": "1",
        "SCHEDULEARN_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "2", "TORCH_X": "1",
    }
    bare = job_environment({"A": "1"}, inherit=server, python="/venv/bin/python")
    assert bare["PATH"] == "/venv/bin:/usr/bin" and bare["HOME"] == "/home/srv"
    assert not any(k.startswith(("SCHEDULEARN_", "JUPYTER", "JPY", "AWS")) for k in bare)
    assert "CUDA_VISIBLE_DEVICES" not in bare
    assert set(bare) - {"A", "LC_ALL", "NCCL_DEBUG"} <= set(INHERITED_ENV)
    assert job_environment({"A": "1"}, {"B": "2"}) == {"A": "1", "B": "2"}  # containers: nothing inherited


# --- signed results -------------------------------------------------------------------------------
def test_a_result_is_handed_out_a_block_at_a_time_and_never_whole_once_changed(tmp_path: Path) -> None:
    """A result of several blocks comes out whole, block by block; one changed in place while
    it is handed out (after its signature was checked) ends short: the last block is held back
    until the signature of what was read matches, so it is never handed out whole."""
    secret = results.server_secret(tmp_path)
    d = tmp_path / "5"
    d.mkdir()
    data = os.urandom(3 * results.BLOCK + 123)
    run.write_result(data, str(d / run.RESULT_FILE), results.job_key(secret, 5))
    with results.open_result(secret, 5, d) as signed:
        assert signed.size == len(data)
        blocks = list(signed.blocks())
        assert b"".join(blocks) == data and len(blocks) == 4
        assert max(map(len, blocks)) == results.BLOCK
    with results.open_result(secret, 5, d) as signed:
        handed = signed.blocks()
        got = next(handed)  # the first block (the second read, held back)
        with open(d / run.RESULT_FILE, "r+b") as f:  # the same file, changed in place
            f.seek(3 * results.BLOCK)
            f.write(b"tampered")
        with pytest.raises(results.ForgedResult, match="changed while it was read"):
            for block in handed:
                got += block
        assert len(got) == 3 * results.BLOCK and got == data[:len(got)]  # never the last block
    with pytest.raises(results.ForgedResult, match="not written by job 5's run"):
        results.open_result(secret, 5, d)  # and the next ask is refused outright


def test_a_result_is_handed_out_only_with_the_jobs_signature(tmp_path: Path) -> None:
    secret = results.server_secret(tmp_path)
    assert stat.S_IMODE((tmp_path / results.SECRET_NAME).stat().st_mode) == 0o600
    assert results.server_secret(tmp_path) == secret  # made once, then read
    d3, d4 = tmp_path / "3", tmp_path / "4"
    d3.mkdir()
    d4.mkdir()
    with pytest.raises(results.NoResult):
        results.read_result(secret, 3, d3)
    run.write_result(b"genuine", str(d3 / run.RESULT_FILE), results.job_key(secret, 3))
    assert results.read_result(secret, 3, d3) == b"genuine"
    # job 4 signs with its own key and plants its result in job 3's directory: refused
    run.write_result(b"planted", str(d3 / run.RESULT_FILE), results.job_key(secret, 4))
    with pytest.raises(results.ForgedResult, match="not written by job 3's run"):
        results.read_result(secret, 3, d3)
    (d4 / "result.pkl").write_bytes(b"no signature at all")
    with pytest.raises(results.ForgedResult):
        results.read_result(secret, 4, d4)
    run.write_result(b"unsigned", str(d4 / run.RESULT_FILE), "")  # no key: no MAC file either
    assert not (d4 / "result.pkl.hmac").exists()
    with pytest.raises(results.ForgedResult):
        results.read_result(secret, 4, d4)
    os.chmod(tmp_path / results.SECRET_NAME, 0o644)
    with pytest.raises(results.ResultError, match="readable by others"):
        results.server_secret(tmp_path)
