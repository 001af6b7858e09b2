"""The CLI contract, through the real command (`python -m schedulearn`) in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from schedulearn import __version__, policies

from tests.conftest import require
from tests.test_sim_rigid import SMALL_FIFO_METRICS

ROOT = Path(__file__).resolve().parent.parent
SMALL = str(ROOT / "tests" / "data" / "small-trace.csv")
KEYS = ["policy", "jobs", "avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s",
        "gpu_utilization"]


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "scheduler"), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "schedulearn", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def usage_error(*args: str) -> str:
    p = cli(*args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_version():
    p = cli("--version")
    assert p.returncode == 0 and p.stdout.strip() == f"schedulearn {__version__}"


def test_help_lists_commands_and_examples():
    p = cli("--help")
    assert p.returncode == 0
    for word in ("policies", "simulate", "examples:", "schedulearn simulate"):
        assert word in p.stdout
    p = cli("simulate", "--help")
    assert p.returncode == 0
    for word in ("--policy", "--cluster", "--json", "--start", "--limit", "--interval", "--tick", "--plot",
                 "examples:", "avg_jct_s"):
        assert word in p.stdout


def test_policies_json():
    p = cli("policies", "--json")
    assert p.returncode == 0
    got = json.loads(p.stdout)
    assert got == policies.available()
    assert all(set(d) == {"name", "description"} and d["description"] for d in got)
    assert [d["name"] for d in got][:4] == ["fifo", "elastic-fifo", "round-robin", "las"]


def test_policies_table():
    p = cli("policies")
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert lines[0].split() == ["policy", "description"]
    assert any(line.startswith("las ") and "least attained service" in line for line in lines)


def test_simulate_json_exact():
    p = cli("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == [SMALL_FIFO_METRICS]
    assert "simulate: fifo: 8 jobs" in p.stderr  # progress on stderr, not in the JSON


def test_simulate_all_policies_json():
    p = cli("simulate", SMALL, "--policy", "all", "--cluster", "2x4", "--json", "--quiet")
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert [r["policy"] for r in got] == [d["name"] for d in policies.available()]
    for r in got:
        assert list(r) == KEYS and r["jobs"] == 8
        assert 0 < r["gpu_utilization"] <= 1 and r["p50_jct_s"] <= r["p99_jct_s"]
    assert p.stderr == ""
    las = next(r for r in got if r["policy"] == "las")
    assert las["avg_jct_s"] < SMALL_FIFO_METRICS["avg_jct_s"]  # small jobs pass the 8-GPU ones


def test_simulate_several_policies_table():
    p = cli("simulate", SMALL, "--policy", "fifo,las", "--cluster", "2x4")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "2 hosts, 8 GPUs"
    assert lines[1].split()[:4] == ["policy", "jobs", "avg", "JCT"]
    fifo = lines[2].split()
    assert fifo[:3] == ["fifo", "8", "11,318"] and fifo[-1] == "78.1%"
    assert lines[3].split()[0] == "las"
    assert len({len(line) for line in lines[1:4]}) == 1  # aligned columns
    assert p.stderr.count("\n") == 3  # the settings, then one progress line per policy


def test_simulate_interval_and_tick_options():
    p = cli("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--json", "--interval", "600")
    assert p.returncode == 0, p.stderr
    slower = json.loads(p.stdout)[0]
    assert slower["avg_jct_s"] > SMALL_FIFO_METRICS["avg_jct_s"]  # starts wait for a round


def test_simulate_philly_start_and_limit(traces):
    p = cli("simulate", str(traces / "philly.csv"), "--policy", "las", "--cluster", "4x8", "--json",
            "--start", "2017-10-10 00:00:00", "--limit", "300")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["jobs"] == 300


def test_pollux_workload_defaults_to_its_reference_setup_and_says_so(traces):
    """A Pollux workload runs by default as published (16x4, 60 s rounds, 30 s restarts): the
    same figures as with those flags spelled out, and the settings are printed."""
    w1 = str(traces / "pollux" / "workloads" / "workload-1.csv")
    plain = cli("simulate", w1, "--policy", "las", "--limit", "40", "--json")
    assert plain.returncode == 0, plain.stderr
    assert ("simulate: cluster 16x4, a round every 60 s, tick 60 s, restart penalty 30 s, estimates "
            "from what jobs report (--cluster, --interval, --restart-penalty: the pollux trace "
            "format's reference set-up)") in plain.stderr.splitlines()
    spelled = cli("simulate", w1, "--policy", "las", "--limit", "40", "--json", "--cluster", "16x4",
                  "--interval", "60", "--restart-penalty", "30")
    assert json.loads(plain.stdout) == json.loads(spelled.stdout)
    assert "reference set-up" not in spelled.stderr
    free_restarts = cli("simulate", w1, "--policy", "las", "--limit", "40", "--json",
                        "--restart-penalty", "0")
    assert "(--cluster, --interval: the pollux" in free_restarts.stderr  # only what was defaulted
    assert json.loads(free_restarts.stdout)[0]["avg_jct_s"] < json.loads(plain.stdout)[0]["avg_jct_s"]


def test_rigid_traces_have_no_reference_setup():
    p = cli("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--json")
    line = ("simulate: cluster 2x4, a round at every event, tick 60 s, restart penalty 0 s, estimates "
            "from what jobs report")
    assert line in p.stderr.splitlines()


def test_estimates_oracle_is_an_upper_bound_and_says_so(traces):
    """`--estimates oracle` feeds the policies the simulator's ground truth; the settings line
    says which; a bad value is one line naming the allowed ones."""
    w1 = str(traces / "pollux" / "workloads" / "workload-1.csv")
    oracle = cli("simulate", w1, "--policy", "goodput", "--limit", "30", "--json", "--estimates", "oracle")
    assert oracle.returncode == 0, oracle.stderr
    assert "estimates from the true job models (oracle: an upper bound)" in oracle.stderr
    assert json.loads(oracle.stdout)[0]["jobs"] == 30
    line = usage_error("simulate", w1, "--policy", "goodput", "--estimates", "truth")
    assert "--estimates: invalid choice: 'truth' (choose from 'reported', 'oracle')" in line


def test_unknown_policy_lists_the_available_ones():
    line = usage_error("simulate", SMALL, "--policy", "sjf", "--cluster", "2x4")
    names = ", ".join(d["name"] for d in policies.available())
    assert line == f"policy: unknown 'sjf'; available: {names}, all"


def test_malformed_trace_names_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,submit_time,gpus,duration\na,0,1,10\nb,5,two,10\n")
    assert usage_error("simulate", str(bad), "--policy", "fifo", "--cluster", "1x4") == \
        "bad.csv:3: gpus: expected an integer, got 'two'"


@pytest.mark.parametrize("args, expected", [
    (("simulate", SMALL, "--policy", "fifo", "--cluster", "2by4"), "cluster: expected HxG"),
    (("simulate", SMALL, "--policy", "fifo", "--cluster", "1x4"),
     "small-trace.csv:3: gpus: at most 4 (the GPUs of the cluster), got 8"),
    (("simulate", SMALL, "--cluster", "2x4"), "the following arguments are required: --policy"),
    (("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--limit", "0"),
     "argument --limit: expected a positive number, got '0'"),
    (("simulate", "nope.csv", "--policy", "fifo", "--cluster", "2x4"), "trace: no such file 'nope.csv'"),
    (("simulate", "tests", "--policy", "fifo", "--cluster", "2x4"),
     "trace: 'tests' is a folder; expected a CSV trace file"),
    (("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--start", "2017-10-01"),
     "--start: only for Philly traces"),
    (("simulate", SMALL, "--policy", "fifo"), "--cluster: required for rigid and Philly traces"),
    (("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--restart-penalty", "-1"),
     "argument --restart-penalty: expected seconds >= 0, got '-1'"),
    (("serve", "--restart-cost", "0"),
     "argument --restart-cost: expected seconds > 0 (a finite number), got '0'"),
    (("serve", "--restart-cost", "nan"),
     "argument --restart-cost: expected seconds > 0 (a finite number), got 'nan'"),
    (("serve", "--port", "99999"),  # (tornado bound 99999 % 65536 = 34463 and said 99999)
     "argument --port: expected a port 0-65535, got '99999' (the flag or $SCHEDULEARN_PORT)"),
    (("serve", "--tick", "nan"), "argument --tick: expected seconds > 0, got 'nan'"),
    (("serve", "--cancel-grace", "-1"), "argument --cancel-grace: expected seconds >= 0, got '-1'"),
    (("serve", "--keep-job-dirs", "soon"), "argument --keep-job-dirs: expected a duration > 0 such as "
                                           "30d, 12h or 3600, got 'soon' (the flag or "
                                           "$SCHEDULEARN_KEEP_JOB_DIRS)"),
    (("frobnicate",), "invalid choice: 'frobnicate'"),
])
def test_usage_errors_are_one_line_exit_2(args, expected):
    assert expected in usage_error(*args)


def test_a_bad_serve_variable_is_serves_one_line_error_and_no_other_commands(monkeypatch):
    """`serve`'s flags take their defaults from variables (`SCHEDULEARN_TICK`, an executor's
    `SCHEDULEARN_SLURM_POLL_INTERVAL`, ...). They were converted as the parser was built, so one
    bad variable (exported for the Jupyter extension, say) made every command a traceback."""
    for variable, flag, value in [("SCHEDULEARN_TICK", "--tick", "abc"), ("SCHEDULEARN_PORT", "--port", "x"),
                                  ("SCHEDULEARN_VIRTUAL_GPUS", "--virtual-gpus", "two"),
                                  ("SCHEDULEARN_SLURM_POLL_INTERVAL", "--slurm-poll-interval", "fast"),
                                  # (these said `executor: expected ...`, `policy: unknown ...`)
                                  ("SCHEDULEARN_EXECUTOR", "--executor", "kubernetes"),
                                  ("SCHEDULEARN_DEFAULT_POLICY", "--policy", "nope"),
                                  ("SCHEDULEARN_DOCKER_PULL", "--docker-pull", "sometimes")]:  # (passed)
        monkeypatch.setenv(variable, value)
        p = cli("policies")
        assert p.returncode == 0 and "qoe" in p.stdout, p.stderr
        line = usage_error("serve")
        assert f"argument {flag}: expected " in line and f"got {value!r} (the flag or ${variable})" in line
        monkeypatch.delenv(variable)


def test_an_executor_refusing_its_setting_is_a_one_line_error_not_a_traceback():
    p = cli("serve", "--executor", "slurm", "--slurm-poll-interval", "nan", "--store", "sqlite://",
            "--port", "0")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    last = p.stderr.splitlines()[-1]
    assert last == "schedulearn serve: slurm_poll_interval: expected seconds > 0, got nan"


def test_no_command_prints_help_and_exits_2():
    p = cli()
    assert p.returncode == 2 and "usage: schedulearn" in p.stderr


def test_plot(tmp_path):
    require(importlib.util.find_spec("matplotlib") is not None, "matplotlib (the plot extra) is missing")
    out = tmp_path / "jct.png"
    p = cli("simulate", SMALL, "--policy", "fifo,las", "--cluster", "2x4", "--plot", str(out))
    assert p.returncode == 0, p.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_plot_that_cannot_be_written_is_refused_before_the_run(tmp_path):
    """A typo in --plot's path or format is one line and exit 2 before anything is simulated
    (it was a matplotlib traceback after the whole run, which may take minutes)."""
    require(importlib.util.find_spec("matplotlib") is not None, "matplotlib (the plot extra) is missing")
    gone, txt = tmp_path / "nowhere", tmp_path / "x.txt"
    refused = {
        str(gone / "x.png"): f"--plot: no folder '{gone}' to write 'x.png' into\n",
        str(txt): f"--plot: unknown image format '.txt' in '{txt}'; use one of: .avif, .eps, ",
        str(tmp_path): f"--plot: '{tmp_path}' is a folder; give a file name such as '{tmp_path}/jct.png'\n",
    }
    for target, message in refused.items():
        p = cli("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--plot", target)
        assert p.returncode == 2, (target, p.stderr)
        assert p.stdout == "" and len(p.stderr.splitlines()) == 1 and p.stderr.startswith(message), p.stderr
        if target == str(txt):
            assert ".pdf" in p.stderr and ".png" in p.stderr and ".svg" in p.stderr
    assert os.listdir(tmp_path) == []


def test_a_plot_without_a_suffix_is_a_png_at_the_name_given(tmp_path):
    """matplotlib alone writes `out` as `out.png`, while the CLI said `plot written to out`."""
    require(importlib.util.find_spec("matplotlib") is not None, "matplotlib (the plot extra) is missing")
    p = cli("simulate", SMALL, "--policy", "fifo", "--cluster", "2x4", "--plot", "out", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert os.listdir(tmp_path) == ["out"]
    assert (tmp_path / "out").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "simulate: plot written to out" in p.stderr


def test_a_script_or_spec_that_is_not_text_is_one_line_naming_it(tmp_path):
    """`submit --script model.bin` (or a script saved in Latin-1) was a UnicodeDecodeError
    traceback; a folder given as --spec said `[Errno 21] Is a directory: ...`."""
    nowhere = ("--url", "http://127.0.0.1:9/")  # the discard port: nothing is sent
    (tmp_path / "model.bin").write_bytes(b"\xe9\x00\xff")
    (tmp_path / "latin.json").write_bytes('{"name": "\xe9"}'.encode("latin-1"))
    cases = [
        (("--script", "model.bin"), "script: cannot read model.bin (not UTF-8 text: byte 0xe9 at offset 0)"),
        (("--spec", "latin.json"),
         "spec: cannot read a JSON object from latin.json (not UTF-8 text: byte 0xe9 at offset 10)"),
        (("--spec", "."), "spec: cannot read a JSON object from . (Is a directory)"),
    ]
    for args, said in cases:
        p = cli("submit", *nowhere, *args, cwd=tmp_path)
        assert (p.returncode, p.stderr) == (1, f"schedulearn: {said}\n"), p.stderr


def test_a_job_id_that_cannot_be_one_is_refused_before_the_server_is_asked():
    """`logs -1` reached the server and came back as `path: no route .../jobs/-1/logs`."""
    nowhere = ("--url", "http://127.0.0.1:9/")  # the discard port: asking it would fail otherwise
    for command, arg in (("logs", "-1"), ("show", "0"), ("script", "x"), ("cancel", "2.5")):
        p = cli(command, *nowhere, arg)
        assert p.returncode == 2, p.stderr
        assert p.stderr == (f"schedulearn {command}: argument JOB_ID: expected a job id (an integer >= 1, as "
                            f"schedulearn ls shows), got {arg!r} (see schedulearn {command} --help)\n")


def test_counts_that_cannot_be_one_are_refused_naming_the_flag():
    """`ls --limit 0` printed a bare header; `logs --tail -3` came back as the API's `tail: ...`."""
    nowhere = ("--url", "http://127.0.0.1:9/")
    for args, flag, least, arg in ((("ls", "--limit", "0"), "--limit", 1, "0"),
                                   (("ls", "--limit", "many"), "--limit", 1, "many"),
                                   (("logs", "3", "--tail", "-3"), "--tail", 0, "-3")):
        p = cli(*args[:1], *nowhere, *args[1:])
        assert p.returncode == 2, p.stderr
        assert p.stderr == (f"schedulearn {args[0]}: argument {flag}: expected an integer >= {least}, got "
                            f"{arg!r} (see schedulearn {args[0]} --help)\n")


def test_submit_checks_the_spec_with_the_model_before_anything_is_sent():
    """The server's own check and message (`JobSpec.parse`), with no server to ask: the URL is
    the discard port, so a spec that got past the check would fail with 'cannot reach'."""
    nowhere = ("--url", "http://127.0.0.1:9/")
    p = cli("submit", *nowhere, "--gpus", "two", "--", "true")
    assert p.returncode == 1
    assert p.stderr == "schedulearn: gpus: expected an integer >= 1 or 'auto', got 'two'\n"
    p = cli("submit", *nowhere, "--gpus", "auto", "--min-gpus", "3", "--max-gpus", "2", "--", "true")
    assert (p.returncode, p.stderr) == (1, "schedulearn: min_gpus: must be <= max_gpus (2), got 3\n")
    p = cli("submit", *nowhere, "--gpus", "AUTO", "--", "true")  # valid: it gets as far as the server
    assert p.returncode == 1 and "cannot reach" in p.stderr, p.stderr
    # --resize, as the magic's: in place needs a launcher that can (the model's one line)
    p = cli("submit", *nowhere, "--gpus", "auto", "--resize", "in-place", "--", "true")
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("schedulearn: resize: 'in-place' needs the horovod or torchrun launcher")
    p = cli("submit", *nowhere, "--gpus", "auto", "--resize", "in-place", "--launcher", "horovod", "--", "t")
    assert p.returncode == 1 and "cannot reach" in p.stderr, p.stderr
    p = cli("submit", *nowhere, "--resize", "sideways", "--", "true")
    assert p.returncode == 2 and "argument --resize: invalid choice: 'sideways'" in p.stderr
    from schedulearn.cli import build_parser
    from schedulearn.client_cli import build_spec
    args = build_parser().parse_args(["submit", "--launcher", "torchrun", "--resize", "in-place", "--", "t"])
    assert build_spec(args)["resize"] == "in-place"  # what is sent


def test_submit_env_takes_a_value_or_this_shells_value_of_a_name(monkeypatch):
    """`--env KEY` alone is this shell's value of KEY, as `docker run -e KEY`; a KEY the shell
    does not have is one line, nothing sent."""
    from schedulearn.cli import build_parser
    from schedulearn.client import ClientError
    from schedulearn.client_cli import build_spec
    monkeypatch.setenv("WANDB_API_KEY", "k-1=2")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    args = build_parser().parse_args(["submit", "--env", "WANDB_API_KEY", "--env", "A=b=c", "--", "t"])
    assert build_spec(args)["env"] == {"WANDB_API_KEY": "k-1=2", "A": "b=c"}
    args = build_parser().parse_args(["submit", "--env", "NOT_SET_HERE", "--", "t"])
    with pytest.raises(ClientError, match="^env: expected KEY=VALUE, or KEY alone for a variable this shell "
                                          "has, got 'NOT_SET_HERE'$"):
        build_spec(args)
    p = cli("submit", "--url", "http://127.0.0.1:9/", "--env", "=x", "--", "true")
    assert (p.returncode, p.stderr.count("\n")) == (1, 1) and "env: expected KEY=VALUE" in p.stderr


def test_submit_refuses_arguments_that_a_script_would_never_get(tmp_path):
    """`--script train.py -- 600 1` ran the script without its arguments (a job that failed on
    `sys.argv[1]`): a script carries no argv, so the arguments are refused, naming the way."""
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint(sys.argv)\n")
    p = cli("submit", "--url", "http://127.0.0.1:9/", "--script", str(script), "--", "600", "1")
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("schedulearn: script: takes no arguments; got '600 1' after --")
    assert f"-- python {script} ARGS" in p.stderr
    p = cli("submit", "--url", "http://127.0.0.1:9/", "--script", str(script))  # alone: it is sent
    assert p.returncode == 1 and "cannot reach" in p.stderr, p.stderr


def test_serve_comes_from_the_jupyter_side_through_the_extension_hook():
    require(importlib.util.find_spec("schedulearn_jupyter") is not None, "the Jupyter side is not installed")
    p = cli("serve", "--help")
    assert p.returncode == 0
    for word in ("--tokens", "--executor", "local | docker | slurm | sim", "--docker-host",
                 "--default-image", "--slurm-partition"):
        assert word in p.stdout


def test_a_long_simulation_shows_its_progress(capsys, monkeypatch):
    """`simulate` reports each job's end to `progress`; the CLI turns that into a line every 15 s
    on stderr (in place on a terminal), with the jobs done, the simulated time and an ETA."""
    from schedulearn import cli as cli_module
    from schedulearn.model import parse_cluster
    from schedulearn.sim.simulate import simulate
    from schedulearn.sim.traces import load_trace

    trace = load_trace(SMALL)
    seen = []
    simulate(trace, parse_cluster("2x4"), "fifo", progress=lambda done, t: seen.append((done, t)))
    assert [d for d, _ in seen] == list(range(1, len(trace) + 1))
    assert [t for _, t in seen] == sorted(t for _, t in seen) and seen[-1][1] > 0

    monkeypatch.setattr(cli_module._Progress, "QUIET_S", 0.0)
    monkeypatch.setattr(cli_module._Progress, "EVERY", 0.0)
    shown = cli_module._Progress("qoe", 160)
    shown(40, 3 * 3600)
    shown(160, 9 * 3600)  # the last job: the result lines follow at once
    shown.clear()
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("simulate: qoe: 40/160 jobs done, 3.0 h simulated, ") and " s left" in err


def test_the_time_left_follows_a_slow_tail():
    """Most jobs of a trace end in its first seconds; a few long ones then run for simulated
    weeks, and the run's whole pace said `~0 s left` through all of that tail. The time left goes
    by the slower of the whole run's pace and the last third's (at least 3 s)."""
    from schedulearn import cli as cli_module

    shown = cli_module._Progress("goodput", 1000)
    shown.began = 0.0
    shown.seen.clear()
    shown.seen.extend([(0.0, 0), (1.0, 450), (2.0, 900)])
    assert shown._left(2.0, 900) == pytest.approx(100 * 2 / 900)  # all fast so far: that pace
    shown.seen.extend([(5.0, 900), (6.5, 905), (8.0, 910)])
    assert shown._left(8.0, 910) == pytest.approx(90 * 0.3)  # 10 jobs in the last 3 s
    assert shown.seen[0] == (5.0, 900)  # what is older than the window is let go


def test_tables_print_control_characters_as_escapes(capsys):
    """A name stored before names were checked (or any cell) cannot drive the terminal that
    `schedulearn ls` prints to: its control characters are written as escapes, and the columns
    stay aligned."""
    from schedulearn import client_cli

    client_cli._table([["ID", "NAME", "STATE"], ["1", "a\x1b[2J\tb\x9b", "queued"], ["2", "ok", "running"]])
    head, first, second = capsys.readouterr().out.splitlines()
    assert first == "1   a\\x1b[2J\\tb\\x9b  queued"
    assert head.index("STATE") == first.index("queued") == second.index("running")


def test_a_server_on_another_machine_gives_no_default_workdir():
    """The current directory is a job's default working directory only where the server is on
    this machine (its paths are this directory's); no request is made to decide otherwise (the
    address is TEST-NET-1: nothing answers there)."""
    from schedulearn.client import Client

    assert Client("http://192.0.2.1:9/", "t").default_workdir() is None


@pytest.mark.parametrize("job, note", [
    ({"state": "queued", "reason": "waiting: needs 2 GPUs, 1 free; 1st in line of 1"},
     "it has not started yet (waiting: needs 2 GPUs, 1 free; 1st in line of 1)"),
    ({"state": "running", "reason": "", "start_time": 5.0}, "it has written nothing yet"),
    ({"state": "failed", "reason": "command: 'x' not found on PATH", "start_time": None},
     "it failed without writing any (command: 'x' not found on PATH)"),
    ({"state": "cancelled", "reason": "cancelled", "start_time": None},
     "it was cancelled before it started"),
    ({"state": "cancelled", "reason": "cancelled", "start_time": 5.0},
     "it was cancelled without writing any"),
    ({"state": "succeeded", "reason": "", "start_time": 5.0}, "it succeeded without writing any"),
])
def test_an_empty_log_says_why_in_words(job, note):
    """(A job cancelled in the queue said `it cancelled without writing any (cancelled)`.)"""
    from schedulearn.client import empty_log_note

    assert empty_log_note({"id": 7, **job}) == f"job 7 has no log: {note}"


@pytest.mark.parametrize("spec, alloc, gpus", [
    ({"gpus": "auto", "launcher": "torchrun"}, {"vm": [0]}, "holds 1 on vm 0 (asked auto (1 or more))"),
    ({"gpus": "auto", "min_gpus": 2, "max_gpus": 4}, {"vm": [0, 1]},
     "holds 2 on vm 0, 1 (asked auto (2..4))"),
    ({"gpus": 2}, {"vm": [0, 1]}, "holds 2 on vm 0, 1"),
    ({"gpus": 2, "min_gpus": 1}, {"vm": [0]}, "holds 1 on vm 0 (asked 2 (1..2))"),  # (said "1 or more")
    ({"gpus": "auto", "min_gpus": 2, "launcher": "horovod"}, {}, "asks for auto (2 or more)"),
    ({"gpus": "auto"}, {"vm": [0]}, "holds 1 on vm 0 (asked auto (1: one process; --max-gpus lets it grow))"),
    ({"gpus": "auto", "min_gpus": 2, "launcher": "python"}, {},
     "asks for auto (2: one process; --max-gpus lets it grow)"),
])
def test_show_says_what_an_auto_job_asked_for_and_holds(spec, alloc, gpus):
    """`schedulearn show`'s gpus line: the bounds an auto job gave (no `?` for a maximum it left
    to the policy), what it holds and where. A plain Python job's `auto` is its minimum (one
    process, `JobSpec.single_process`): it said "1 or more" where the scheduler gives it 1."""
    from schedulearn.client_cli import job_fields

    job = {"id": 3, "name": "train", "user": "ann", "state": "running" if alloc else "queued",
           "spec": {"command": ["python", "t.py"], **spec}, "alloc": alloc,
           "gpus": sum(map(len, alloc.values())), "submit_time": 0.0}
    assert dict(job_fields(job, now=10.0))["gpus"] == gpus


def test_ls_progress_column_shows_time_left_and_a_silent_job():
    """`schedulearn ls`'s PROGRESS: the bar, the time left, and for a running job that stopped
    reporting (`silent_s`) how long it has been silent; nothing of either once it has ended."""
    from schedulearn.client_cli import _progress

    job = {"state": "running", "progress": 0.42, "eta_s": 725.0, "eta_basis": "progress"}
    assert _progress(job) == "[####------] 42% ~12m left"
    assert _progress({**job, "eta_basis": "history"}) == "[####------] 42% ~12m left?"
    silent = {"state": "running", "progress": 0.12, "silent_s": 420.0}
    assert _progress(silent) == "[#---------] 12% no report for 7m"
    assert _progress({**silent, "state": "failed"}) == "[#---------] 12%"
    assert _progress({"state": "succeeded", "progress": 1.0}) == "done"
    assert _progress({"state": "queued"}) == "-"
