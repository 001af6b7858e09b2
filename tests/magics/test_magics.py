"""`%%schedulearn` / `%schedulearn` driven through IPython's InteractiveShell against a real
`jupyter server` with the Schedulearn extension (local executor, 4 virtual GPUs): real jobs run
as processes, results come back over HTTP."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from schedulearn.client import Client
from schedulearn_magics import views
from schedulearn_magics.handle import (
    JobCancelled,
    JobFailed,
    JobHandle,
    JobInterrupted,
    NoResult,
    ValueNotKept,
)

from tests.conftest import require
from tests.fixtures.jupyter import LiveServer
from tests.magics.conftest import GPUS, wait_job


def cell(sh: InteractiveShell, line: str, body: str) -> Any:
    return sh.run_cell(f"%%schedulearn {line}\n{body}")


def job_count(client: Client) -> int:
    return len(client.jobs())


def test_python_job_value_is_the_cell_value_and_out(shell: InteractiveShell, client: Client) -> None:
    r = cell(shell, "--name sum-job -o total", "import os\nprint('pid', os.getpid())\nsum(range(10))")
    assert r.success, r.error_in_exec
    assert r.result == 45
    assert shell.user_ns["total"] == 45
    job = client.jobs()[-1]
    assert job["name"] == "sum-job" and job["state"] == "succeeded"
    assert job["spec"]["launcher"] == "python"
    assert f"pid {os.getpid()}" not in client.logs(job["id"])  # it ran elsewhere
    assert "pid " in client.logs(job["id"])


def test_a_cell_ending_with_a_semicolon_sends_back_no_value_unless_out_asks(
        shell: InteractiveShell, client: Client, capsys: pytest.CaptureFixture) -> None:
    """`trainer.fit(model);` says the value is not wanted, as in IPython: the job neither
    pickles nor sends it (a value that cannot be pickled failed the job after its training), and
    the cell shows nothing (IPython's own check reads the magic's call, which has no `;`)."""
    r = cell(shell, "", "def fit():\n    return (i for i in range(3))  # no pickle takes it\nfit();  # quiet")
    assert r.success, r.error_in_exec
    assert r.result is None
    assert client.jobs()[-1]["state"] == "succeeded"
    assert "Out[" not in capsys.readouterr().out
    r = cell(shell, "-o kept", "41 + 1;")
    assert r.success and r.result is None and shell.user_ns["kept"] == 42  # stored, not shown
    r = cell(shell, "", "x = 'a;'\nx")
    assert r.result == "a;"  # a `;` in a string is not the cell's end


def test_a_value_no_pickle_takes_is_one_line_and_the_job_succeeds(
        shell: InteractiveShell, client: Client, capsys: pytest.CaptureFixture) -> None:
    """The training stands: the job succeeds; the cell shows one line (the value's type, why, its
    repr in the job) and no value; asked for by name (`-o`, `result()`), it is `ValueNotKept`."""
    body = "import threading\nclass Trainer:\n    lock = threading.Lock()\n    def __repr__(self):\n" \
           "        return 'Trainer(loss=0.1)'\nTrainer()"
    r = cell(shell, "", body)
    assert r.success, r.error_in_exec
    assert r.result is None
    job = client.jobs()[-1]
    assert job["state"] == "succeeded"
    err = capsys.readouterr().err
    assert f"ValueNotKept: job {job['id']} (cell" in err
    assert ("value (Trainer) cannot be pickled (TypeError: cannot pickle '_thread.lock' object), "
            "so it stayed in the job; there it was: Trainer(loss=0.1)") in err
    shell.user_ns.pop("t", None)
    r = cell(shell, "-o t", body)
    assert isinstance(r.error_in_exec, ValueNotKept) and "t" not in shell.user_ns
    with pytest.raises(ValueNotKept, match="there it was: Trainer"):
        JobHandle(client, client.job(job["id"])).result()


def test_a_handle_keeps_the_figures_its_job_showed(shell: InteractiveShell, tmp_path: Path) -> None:
    r = cell(shell, "--no-wait", "import matplotlib.pyplot as plt\nfrom IPython.display import HTML\n"
                                 "display(HTML('<b>loss</b>'))\nplt.plot([1, 2])\nplt.show()\n'plotted'")
    handle = r.result
    assert handle.figures == [] and handle.shown == []  # nothing read yet
    assert handle.result(timeout=60) == "plotted"
    assert [repr(f) for f in handle.figures] == ["<Figure size 640x480 with 1 Axes>"]  # as the inline one's
    html, figure = handle.shown  # in the order the cell showed them
    assert html._repr_mimebundle_()["text/html"] == "<b>loss</b>" and figure is handle.figures[0]
    assert handle.figures[0]._repr_png_().startswith(b"\x89PNG")
    handle.figures[0].save(str(tmp_path / "curve.png"))
    assert (tmp_path / "curve.png").read_bytes() == handle.figures[0].png
    failing = cell(shell, "--no-wait", "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                                       "raise ValueError('nan')")
    with pytest.raises(JobFailed, match="ValueError: nan"):
        failing.result.result(timeout=60)
    assert len(failing.result.figures) == 1  # what the cell showed before it raised


def test_a_wait_displays_what_the_job_shows_as_it_comes_and_its_end_in_place(
        shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`follow` with a `LiveShown` (the waiting cell's, in a kernel) displays each thing the job
    shows while it runs, under a display id of its own, and an update of it in place; once the
    result is read, `finish` puts the result's last state in those places where it differs
    (an update the live record could not carry) and displays what was not shown live. A text
    view (a terminal) shows it all at the end instead."""
    import io

    from schedulearn_magics import live as live_module
    from schedulearn_magics.magics import SchedulearnMagics
    from schedulearn_magics.watch import TextJobView, follow

    go = tmp_path / "go"
    handle = cell(shell, "--no-wait", "import os, time\nfrom IPython.display import Markdown\n"
                                      "h = display(Markdown('epoch 1'), display_id=True)\n"
                                      f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
                                      "h.update(Markdown('epoch 2'))\n"
                                      "h.update({'text/plain': 'epoch 3', 'x/set': {1}}, raw=True)\n"
                                      "'done'").result
    calls: list[tuple[str, str | None, Any, str]] = []

    def display(*objs: Any, raw: bool = False, display_id: str | None = None) -> None:
        for obj in objs:
            calls.append(("display", display_id, obj, handle.refresh()["state"]))
        go.touch()  # (the job goes on once its first display was seen here)

    def update_display(obj: Any, raw: bool = False, display_id: str | None = None) -> None:
        calls.append(("update", display_id, obj, handle.refresh()["state"]))

    monkeypatch.setattr(live_module, "display", display)
    monkeypatch.setattr(live_module, "update_display", update_display)
    live = live_module.LiveShown(handle)
    assert follow(handle, TextJobView(io.StringIO()), poll=0.2, live=live)["state"] == "succeeded"
    assert handle.result() == "done"
    live.finish()
    assert [kind for kind, _, _, _ in calls] == ["display", "update", "update"]
    assert calls[0][3] == "running"  # (the job waited for it)
    assert len({did for _, did, _, _ in calls}) == 1 and calls[0][1].startswith(f"schedulearn-{handle.id}-")
    assert [c[2]["text/markdown"] for c in calls[:2]] == ["epoch 1", "epoch 2"]  # as the job sent them
    assert calls[2][2] is handle.shown[0]  # the last update, which JSON could not carry: the result's
    assert handle.shown[0].bundle == {"text/plain": "epoch 3", "x/set": {1}}
    calls.clear()
    late = live_module.LiveShown(handle)  # a cell that follows the job only now: each place once, as it is
    late.fetch()
    late.show()
    assert [(kind, obj["text/markdown"]) for kind, _, obj, _ in calls] == [("display", "epoch 2")]
    calls.clear()
    live_module.LiveShown(handle).finish()  # nothing shown live: all of it, displayed now
    assert [(kind, did, obj) for kind, did, obj, _ in calls] == [("display", None, handle.shown[0])]
    assert SchedulearnMagics._live(handle, TextJobView(io.StringIO())) is None


def test_a_restarted_jobs_new_run_redraws_what_the_old_run_showed_in_place(
        shell: InteractiveShell, client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job restarted by a resize runs its cell again from the top: what the new run shows
    replaces what the old run showed in the same place (a cell run again replaces its output),
    not a second copy below it (before, a `--gpus auto` job resized four times showed five curves).
    Here `elastic-fifo` shrinks a `--gpus auto` job for a newcomer: a checkpoint-restart."""
    from schedulearn_magics import live as live_module
    from schedulearn_magics.watch import TextJobView, follow

    go, runs = tmp_path / "go", tmp_path / "runs"
    before = client.policy()
    client.set_policy("elastic-fifo")
    newcomer: list[Any] = []
    try:
        handle = cell(shell, f"--no-wait --gpus auto --max-gpus {GPUS} --name reruns",
                      f"import os, time\nfrom IPython.display import Markdown\nn = {str(runs)!r}\n"
                      "k = int(open(n).read()) + 1 if os.path.exists(n) else 1\nopen(n, 'w').write(str(k))\n"
                      "display(Markdown(f'run {k}'))\n"
                      f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n'done'").result
        calls: list[tuple[str, str | None, str]] = []

        def seen(kind: str, did: str | None, obj: Any) -> None:
            calls.append((kind, did, obj["text/markdown"]))
            if obj["text/markdown"] == "run 1" and not newcomer:  # a newcomer: the job is shrunk
                newcomer.append(cell(shell, "--no-wait --name newcomer", "'x'").result)
            elif obj["text/markdown"] != "run 1":
                go.touch()  # (the newcomer's end may grow it again first: a third run)

        def display(*objs: Any, raw: bool = False, display_id: str | None = None) -> None:
            for obj in objs:
                seen("display", display_id, obj)

        monkeypatch.setattr(live_module, "display", display)
        monkeypatch.setattr(live_module, "update_display",
                            lambda obj, raw=False, display_id=None: seen("update", display_id, obj))
        live = live_module.LiveShown(handle)
        job = follow(handle, TextJobView(open(os.devnull, "w")), poll=0.2, live=live)
        last = int(runs.read_text())
        assert job["state"] == "succeeded" and last >= 2, job
        assert handle.result() == "done"
        live.finish()  # (the result's place 0 is what the cell shows: nothing more)
        assert calls[0][::2] == ("display", "run 1") and calls[-1][2] == f"run {last}", calls
        assert [kind for kind, _, _ in calls[1:]] == ["update"] * (len(calls) - 1), calls  # none below
        assert {did for _, did, _ in calls} == {f"schedulearn-{handle.id}-0"}
    finally:
        client.set_policy(before)
        for h in newcomer:
            h.wait(timeout=60)


def test_no_wait_returns_a_handle(shell: InteractiveShell, client: Client) -> None:
    r = cell(shell, "--no-wait -o h", "import time\nprint('working', flush=True)\ntime.sleep(1.5)\n'done'")
    assert r.success, r.error_in_exec
    handle = r.result
    assert isinstance(handle, JobHandle) and shell.user_ns["h"] is handle
    assert handle.state in ("queued", "running")  # returned before the job ended
    assert handle.result(timeout=60) == "done"
    assert handle.state == "succeeded"
    assert "working" in handle.logs()
    assert handle.cancel() is handle and handle.state == "succeeded"  # a finished job: unchanged


def test_cancel_gives_back_the_handle(shell: InteractiveShell, client: Client) -> None:
    """`h.cancel()` as a cell's last line shows the handle (a notebook's live job widget, one
    line as text), not the job's 30-line dict."""
    h = cell(shell, "--no-wait -o h2", "import time\ntime.sleep(60)").result
    r = shell.run_cell("h2.cancel()")
    assert r.success and r.result is h and h.cancelled_by_you
    assert h.job["state"] in ("queued", "running", "cancelled")  # refreshed: stopping, or ended
    h.wait(timeout=30)
    assert h.state == "cancelled" and client.job(h.id)["state"] == "cancelled"


def test_vars_are_shipped(shell: InteractiveShell) -> None:
    shell.run_cell("weights = {'a': [1, 2, 3]}\ndef triple(x):\n    return 3 * x\n")
    r = cell(shell, "--vars weights,triple", "triple(sum(weights['a']))")
    assert r.success, r.error_in_exec
    assert r.result == 18


def test_files_are_shipped(shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "lr.txt").write_text("0.01")
    (tmp_path / "labels.csv").write_text("cat\ndog\n")
    monkeypatch.chdir(tmp_path)
    r = cell(shell, "--files conf --files labels.csv",
             "lr = float(open('conf/lr.txt').read())\n"
             "labels = open('labels.csv').read().split()\n"
             "(lr, labels)")
    assert r.success, r.error_in_exec
    assert r.result == (0.01, ["cat", "dog"])


def test_a_cell_runs_in_the_notebooks_folder(shell: InteractiveShell, client: Client, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """As in the notebook: relative paths are the notebook's folder's (read and written), its
    modules import (`model.py` is the user's, not a module of Schedulearn's or the runner's);
    with --files the cell runs in its own job directory, where they are unpacked."""
    (tmp_path / "model.py").write_text("WIDTH = 7\n")
    (tmp_path / "labels.csv").write_text("cat\ndog\n")
    monkeypatch.chdir(tmp_path)
    r = cell(shell, "--gpus 2 --launcher torchrun",  # the launcher whose runner is a file of the package
             "import os, model\n"
             "labels = open('labels.csv').read().split()\n"
             "if os.environ['RANK'] == '0':\n"
             "    open('out.txt', 'w').write('saved')\n"
             "(model.WIDTH, labels, os.getcwd())")
    assert r.success, r.error_in_exec
    assert r.result == (7, ["cat", "dog"], str(tmp_path))
    assert (tmp_path / "out.txt").read_text() == "saved"
    assert max(client.jobs(), key=lambda j: j["id"])["spec"]["workdir"] == str(tmp_path)
    r = cell(shell, "--files labels.csv", "import os\n(os.getcwd(), open('labels.csv').read())")
    assert r.success, r.error_in_exec
    assert r.result[0] != str(tmp_path) and r.result[1] == "cat\ndog\n"
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")  # (import model's)
    assert left == ["labels.csv", "model.py", "out.txt"]  # --files left nothing here


def test_env_priority_and_gpus_reach_the_spec(shell: InteractiveShell, client: Client,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FROM_KERNEL", "kernel's")  # `--env NAME` alone: the kernel's value
    r = cell(shell, "--env GREETING=hello --env 'SPACED=a b' --env FROM_KERNEL --gpus 2 --priority 5",
             "import os\n(os.environ['GREETING'], os.environ['SPACED'], os.environ['SCHEDULEARN_NUM_GPUS'], "
             "os.environ['FROM_KERNEL'])")
    assert r.success, r.error_in_exec
    assert r.result == ("hello", "a b", "2", "kernel's")
    spec = client.jobs()[-1]["spec"]
    assert spec["priority"] == 5 and spec["gpus"] == 2


def test_a_notebook_of_any_file_name_gets_a_valid_default_job_name(
        shell: InteractiveShell, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default name is the notebook's: one that is long or holds a tab still submits (a
    name is one line of at most 200 characters, and the user did not choose this one)."""
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/u/" + "x" * 250 + "\tdraft.ipynb")
    handle = cell(shell, "--no-wait", "'ok'").result
    name = handle.job["name"]
    assert name.startswith("x" * 180) and "\t" not in name and len(name) <= 200, name
    assert handle.result(timeout=60) == "ok"


def test_a_cell_without_a_name_is_known_by_its_notebook_and_code(
        shell: InteractiveShell, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside JupyterLab (no cell id with the request) the cell is its notebook and a hash of its
    code: the same code run again is the same cell, other code another; a job given a `--name`
    is known by it (no cell). The notebook's whole path keeps its tab out, as the name does."""
    monkeypatch.setenv("JPY_SESSION_NAME", "/home/u/a\tb.ipynb")
    specs = []
    for line, body in (("--no-wait", "'same'"), ("--no-wait", "'same'"), ("--no-wait", "'other'"),
                       ("--no-wait --name mine", "'same'")):
        handle = cell(shell, line, body).result
        specs.append(client.job(handle.job["id"])["spec"])
        assert handle.result(timeout=60) in ("same", "other")
    one, again, other, named = (s.get("cell") for s in specs)
    assert one == again != other and named is None
    assert one.startswith("/home/u/a\\tb.ipynb#code-") and "\t" not in one, one


def test_a_deadline_reaches_the_spec_and_the_job_view(shell: InteractiveShell, client: Client) -> None:
    """`--deadline 2h` is two hours after submission; the job dict and its text say so."""
    before = time.time()
    handle = cell(shell, "--deadline 2h --no-wait", "'ok'").result
    assert before + 7200 <= handle.job["spec"]["deadline"] <= time.time() + 7200
    assert handle.job["deadline"] == handle.job["spec"]["deadline"]
    assert "deadline in 2 h 00 min" in views.status_line(handle.job)
    assert handle.result(timeout=60) == "ok"
    done = client.job(handle.id)
    assert done["deadline_status"] == "met" and views.status_detail(done).startswith("deadline met, ")


def test_a_date_and_time_without_quotes_is_the_deadline(shell: InteractiveShell) -> None:
    """`--deadline 2026-11-24 18:00` as the help writes it: the line splits it in two words, the
    magic reads them as the one date and time."""
    when = datetime.now().replace(second=0, microsecond=0) + timedelta(days=1)
    handle = cell(shell, f"--deadline {when:%Y-%m-%d %H:%M} --no-wait", "'ok'").result
    assert handle.job["spec"]["deadline"] == when.timestamp()
    assert handle.result(timeout=60) == "ok"


def test_epochs_reach_the_spec_and_count_reported_epochs(shell: InteractiveShell, client: Client,
                                                          tmp_path: Path) -> None:
    """`--epochs 4` declares the job's length: `report(epoch=1)` is 25 % of it."""
    gate = tmp_path / "open"
    body = (f"import os, time\nfrom schedulearn import elastic\nelastic.report(epoch=1)\n"
            f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n'ok'")
    handle = cell(shell, "--epochs 4 --no-wait", body).result
    assert handle.job["spec"]["epochs"] == 4
    deadline = time.monotonic() + 60
    while client.job(handle.id).get("progress") != 0.25:
        assert time.monotonic() < deadline, client.job(handle.id)
        time.sleep(0.1)
    gate.touch()
    assert handle.result(timeout=60) == "ok"


def test_auto_python_cell_is_told_it_gets_one_gpu(shell: InteractiveShell, client: Client,
                                                   capsys: pytest.CaptureFixture) -> None:
    """A plain Python cell runs one process: `--gpus auto` gives it one GPU and the cell says so;
    with `--max-gpus` (it starts its own workers) no note and no cap."""
    capsys.readouterr()
    r = cell(shell, "--gpus auto", "import os\nos.environ['SCHEDULEARN_NUM_GPUS']")
    assert r.success, r.error_in_exec
    assert r.result == "1"
    assert "runs as one Python process, so --gpus auto gives it 1 GPU(s)" in capsys.readouterr().err
    r = cell(shell, "--gpus auto --max-gpus 2", "1")
    assert r.success, r.error_in_exec
    assert "one Python process" not in capsys.readouterr().err
    # a submission the server refuses is its one-line error alone, no note about what it would get
    r = cell(shell, f"--gpus auto --min-gpus {GPUS + 1}", "1")
    error = r.error_in_exec
    assert isinstance(error, UsageError) and f"at most {GPUS}" in str(error), error
    assert "one Python process" not in capsys.readouterr().err


def test_a_deadline_under_a_policy_that_does_not_plan_for_it_is_told_so(
        shell: InteractiveShell, client: Client, capsys: pytest.CaptureFixture) -> None:
    """Under fifo (the default) a `--deadline` is only watched: the cell says so, and how to
    switch to the policy that plans for it; under qoe no note."""
    before = client.policy()
    try:
        for policy, noted in (("fifo", True), ("qoe", False)):
            client.set_policy(policy)
            capsys.readouterr()
            r = cell(shell, "--deadline 1h", "'due'")
            assert r.success and r.result == "due", r.error_in_exec
            err = capsys.readouterr().err
            said = (f"note: the {policy} policy does not plan for deadlines: this one is only watched"
                    in err and "%schedulearn policy qoe" in err)
            assert said == noted, err
    finally:
        client.set_policy(before)


def test_torchrun_detected_and_run_with_one_process_per_gpu(shell: InteractiveShell, client: Client) -> None:
    body = (
        "import torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([float(dist.get_rank() + 1)])\n"
        "dist.all_reduce(t)\n"
        "world = dist.get_world_size()\n"
        "dist.destroy_process_group()\n"
        "(world, t.item())"
    )
    r = cell(shell, "--gpus 2", body)
    assert r.success, r.error_in_exec
    assert r.result == (2, 3.0)
    assert client.jobs()[-1]["spec"]["launcher"] == "torchrun"


def test_a_cell_that_exits_or_leaves_no_result_ends_clearly(shell: InteractiveShell, client: Client) -> None:
    """`sys.exit()` in a cell is a success with no value (it was `UsageError: result: job N has no
    result (yet); state succeeded (HTTP 404)`); a cell whose process ends before writing its value
    says so in one line, also for `%schedulearn result` of any job without one."""
    r = cell(shell, "", "import sys\nprint('leaving')\nsys.exit()")
    assert r.success and r.result is None, r.error_in_exec
    r = cell(shell, "", "import os\nos._exit(0)")
    assert isinstance(r.error_in_exec, NoResult), r.error_in_exec
    job = client.jobs()[-1]
    assert job["state"] == "succeeded" and str(r.error_in_exec) == (
        f"job {job['id']} ({job['name']}) succeeded without a result: its process ended before writing one "
        "(a cell that calls os._exit), or it is not a notebook cell's job")
    assert r.error_in_exec._render_traceback_() == [f"NoResult: {r.error_in_exec}"]
    with pytest.raises(NoResult):  # the line magic says the same of it
        shell.run_line_magic("schedulearn", f"result {job['id']}")


def test_failed_job_raises_one_line_error_with_log_tail(shell: InteractiveShell) -> None:
    r = cell(shell, "", "print('before the crash')\nraise ValueError('bad batch')")
    assert isinstance(r.error_in_exec, JobFailed)
    msg = str(r.error_in_exec)
    assert "\n" not in msg and "failed" in msg and "exit code 1" in msg


def test_the_text_view_prints_the_log_once_as_it_comes(shell: InteractiveShell, client: Client,
                                                       capsys: pytest.CaptureFixture) -> None:
    """Outside a widget frontend the log is printed as it comes, each poll asking only for
    what is new (`GET logs?offset=`): a log of several pages, multi-byte characters across
    the page ends, a progress bar's carriage returns kept, the status on a line of its own."""
    body = ("import sys, time\n"
            "for i in range(4):\n"
            "    sys.stdout.write(f'\\rprogress {25 * (i + 1)}%'); sys.stdout.flush(); time.sleep(0.3)\n"
            "sys.stdout.write('\\n' + 'x' + 'é' * 1_300_000 + '\\n')\n"  # 2.6 MB: three pages
            "print('the end')\n")
    r = cell(shell, "", body)
    assert r.success, r.error_in_exec
    shown = capsys.readouterr().out
    job = client.jobs()[-1]
    log = client.logs(job["id"])
    assert shown.count("x" + "é" * 1_300_000 + "\n") == 1 and shown.count("the end") == 1
    assert "\rprogress 25%\rprogress 50%\rprogress 75%\rprogress 100%\n" in shown
    assert "\ufffd" not in shown  # no character cut in two by a page end
    assert log in shown.replace("\n" + views.status_line(job) + "\n", "\n")  # the log, whole, once
    handle = JobHandle(client, job)
    assert handle.new_logs() == log and handle.new_logs() == ""  # only what is new each time


def test_the_text_view_shows_the_end_of_a_log_written_fast_at_the_end(
        shell: InteractiveShell, client: Client, capsys: pytest.CaptureFixture) -> None:
    """A job that writes more at its end than one poll reads (a few pages): the cell showed the
    log up to where the last poll stopped and ended there, without the log's last lines."""
    body = ("import sys, time\n"
            "time.sleep(1)\n"  # the polls slow down to one each 0.5 s
            "for i in range(3):\n"
            "    sys.stdout.write(f'block {i} ' + ('x' * 99 + '\\n') * 100_000)\n"  # 30 MB at once
            "print('the end')\n")
    r = cell(shell, "", body)
    assert r.success, r.error_in_exec
    shown = capsys.readouterr().out
    job = client.jobs()[-1]
    assert shown.count("block 2 ") == 1 and shown.count("the end\n") == 1
    assert shown.rstrip("\n").endswith(views.status_line(job))
    assert client.logs(job["id"]) in shown.replace("\n" + views.status_line(job) + "\n", "\n")


@pytest.mark.parametrize(
    ("line", "body", "message"),
    [
        ("--bogus", "1", "unrecognized arguments: --bogus"),
        ("--gpus 0", "1", "--gpus: expected an integer >= 1 or 'auto', got 0"),
        ("--gpus two", "1", "--gpus: expected an integer >= 1 or 'auto'"),
        (f"--gpus {GPUS + 1}", "1", "gpus: at most 4"),
        ("--launcher mpi", "1", "invalid choice: 'mpi'"),
        ("--vars nope", "1", "--vars: no variable named 'nope' in the notebook"),
        ("--vars lock", "1", "--vars: 'lock' cannot be pickled"),
        ("--files missing.bin", "1", "--files: no such file or folder: 'missing.bin'"),
        ("--env NOT_IN_THE_KERNEL", "1",
         "--env: 'NOT_IN_THE_KERNEL' is not set in this kernel's environment; expected K=V, or K alone"),
        ("--timeout soon", "1", "--timeout: expected a duration"),
        ("--timeout 400d", "1", "--timeout: expected a duration of at most a year (365d), got '400d'"),
        ("--epochs 0", "1", "--epochs: expected an integer >= 1, got 0"),
        ("--deadline soon", "1", "--deadline: cannot read 'soon'; expected a duration (2h, 90m, 1h30m, 2d)"),
        ("--deadline 900h", "1", "--deadline: "),
        ("--deadline -5m", "1", "--deadline: -5m is a duration back in the past; expected a time after "
         "submission"),
        ("--min-gpus 3 --max-gpus 2 --gpus auto", "1", "--min-gpus: must be <= --max-gpus"),
        ("--gpus auto --resize in-place --launcher python", "1",
         "--resize: 'in-place' needs the horovod or torchrun launcher"),
        ("--resize inplace", "1", "invalid choice: 'inplace'"),
        ("", "x = (1,\nprint(x)", "cell: syntax error"),
        ("", "   \n", "cell: empty"),
        ("", "threading.Lock()", "cell: a job does not see the notebook's names: threading (add import "
         "threading"),
        ("--vars lock", "print(lock, weights)", "names: weights (add --vars weights, or define it in the "
         "cell)"),
        ("", "get_ipython().run_line_magic('pwd', '')", "get_ipython (IPython's: a job runs plain Python)"),
    ],
)
def test_bad_input_is_one_line_and_submits_nothing(
    shell: InteractiveShell, client: Client, line: str, body: str, message: str
) -> None:
    shell.run_cell("import threading\nlock = threading.Lock()\nweights = [1]")
    before = job_count(client)
    r = cell(shell, line, body)
    assert isinstance(r.error_in_exec, UsageError), r.error_in_exec
    assert message in str(r.error_in_exec)
    assert "\n" not in str(r.error_in_exec)
    assert job_count(client) == before


def test_bad_line_magic_input(shell: InteractiveShell, client: Client) -> None:
    before = client.policy()
    for line, message in [
        ("policy nosuch", "nosuch"),
        ("frobnicate", "unknown command 'frobnicate'"),
        ("logs", "expected a job id, then --tail N or --all"),
        ("cancel x", "expected one job id"),
        ("script", "expected one job id"),
        ("result 0", "%schedulearn result: expected one job id (an integer >= 1, as %schedulearn ls shows), "
         "got '0'"),
        ("cancel ²", "got '²'"),  # a digit to str.isdigit, not to int()
        ("logs ²", "expected a job id, then --tail N or --all, got '²'"),
        ("logs 1 --tail ²", "--tail expects a number of lines >= 0, got '²'"),
        ("logs 999999", "no job with id 999999"),
    ]:
        r = shell.run_cell(f"%schedulearn {line}")
        assert isinstance(r.error_in_exec, UsageError), (line, r.error_in_exec)
        assert message in str(r.error_in_exec) and "\n" not in str(r.error_in_exec), line
    assert client.policy() == before


def test_no_server_is_one_line(shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULEARN_URL", "http://127.0.0.1:9/")  # nothing listens on the discard port
    magics = shell.magics_manager.registry["SchedulearnMagics"]
    magics._client = None
    r = cell(shell, "", "1")
    assert isinstance(r.error_in_exec, UsageError)
    assert "cannot reach" in str(r.error_in_exec) and "\n" not in str(r.error_in_exec)
    magics._client = None


def test_line_magics(shell: InteractiveShell, client: Client, capsys: pytest.CaptureFixture) -> None:
    r = cell(shell, "--no-wait --name sleeper", "import time\nprint('tick', flush=True)\ntime.sleep(60)")
    handle = r.result
    deadline = time.monotonic() + 30
    while "tick" not in handle.logs() and time.monotonic() < deadline:
        time.sleep(0.2)
    capsys.readouterr()
    shell.run_cell(f"%schedulearn logs {handle.id}")
    assert "tick" in capsys.readouterr().out
    shell.run_cell("%schedulearn ls")
    out = capsys.readouterr().out
    assert "sleeper" in out and "running" in out
    shell.run_cell(f"%schedulearn cancel {handle.id}")
    assert f"job {handle.id}:" in capsys.readouterr().out
    handle.wait(timeout=30)
    assert handle.state == "cancelled"

    shell.run_cell("%schedulearn policy las")
    assert client.policy() == "las"
    shell.run_cell("%schedulearn policy")
    out = capsys.readouterr().out
    assert "* las" in out and "fifo" in out
    shell.run_cell("%schedulearn policy fifo")
    assert client.policy() == "fifo"
    capsys.readouterr()
    shell.run_cell("%schedulearn pause a demo at 3pm")
    assert client.policy_info()["paused"]["reason"] == "a demo at 3pm"
    assert "(a demo at 3pm): no job starts until an admin runs %schedulearn resume" in capsys.readouterr().out
    shell.run_cell("%schedulearn ls")
    assert "scheduling paused by" in capsys.readouterr().out.splitlines()[-1]
    shell.run_cell("%schedulearn resume")
    assert client.policy_info()["paused"] is None and capsys.readouterr().out == "scheduling resumed\n"
    shell.run_cell("%schedulearn gpus")
    out = capsys.readouterr().out
    assert "(virtual)" in out and out.count("virtual GPU") == GPUS

    done = cell(shell, "--no-wait", "'kept'").result
    done.wait(timeout=60)
    assert shell.run_cell(f"%schedulearn result {done.id}").result == "kept"

    # the cell a job runs, not the script it travels in; any other job's script whole
    capsys.readouterr()
    shell.run_cell(f"%schedulearn script {handle.id}")
    assert capsys.readouterr().out == (f"(job {handle.id} runs this notebook cell; the whole script: "
                                       f"schedulearn script {handle.id})\n"
                                       "import time\nprint('tick', flush=True)\ntime.sleep(60)\n")
    plain = client.submit({"script": "print('plain')\n", "name": "plain"})
    shell.run_cell(f"%schedulearn script {plain['id']}")
    assert capsys.readouterr().out == "print('plain')\n"
    command = client.submit({"command": ["true"]})
    r = shell.run_cell(f"%schedulearn script {command['id']}")
    assert isinstance(r.error_in_exec, UsageError) and "runs a command, not a script" in str(r.error_in_exec)


def test_logs_line_magic_shows_the_last_lines_unless_told(shell: InteractiveShell, client: Client,
                                                          capsys: pytest.CaptureFixture) -> None:
    """`%schedulearn logs ID` prints the last 1,000 lines and says there is more (a log of
    gigabytes printed whole takes the notebook down); `--tail N` and `--all` say otherwise."""
    handle = cell(shell, "--no-wait", "print('\\n'.join(f'row {i}' for i in range(1500)))").result
    handle.wait(timeout=60)
    capsys.readouterr()
    shell.run_cell(f"%schedulearn logs {handle.id}")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"(the last 1,000 lines; %schedulearn logs {handle.id} --all for all of it)"
    assert len(out) == 1001 and "row 1499" in out and "row 499" not in out
    shell.run_cell(f"%schedulearn logs {handle.id} --tail 3")
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and out[0].startswith("(the last 3 lines;") and "row 1499" in out[1:]
    shell.run_cell(f"%schedulearn logs --all {handle.id}")
    out = capsys.readouterr().out
    assert "row 0\n" in out and "row 1499\n" in out and "(the last" not in out
    for line, message in [(f"--tail x {handle.id}", "--tail expects a number of lines >= 0, got 'x'"),
                          (f"{handle.id} --tail", "--tail expects a number of lines >= 0, got ''"),
                          (f"{handle.id} 7", "expected a job id, then --tail N or --all, got")]:
        r = shell.run_cell(f"%schedulearn logs {line}")
        assert isinstance(r.error_in_exec, UsageError) and message in str(r.error_in_exec), r.error_in_exec
    # a job that failed at start wrote no log: the magic says why instead of nothing
    broken = client.submit({"command": ["nope-xyz-cmd"]})
    deadline = time.monotonic() + 30
    while client.job(broken["id"])["state"] != "failed" and time.monotonic() < deadline:
        time.sleep(0.1)
    capsys.readouterr()
    shell.run_cell(f"%schedulearn logs {broken['id']}")
    assert capsys.readouterr().out == (f"(job {broken['id']} has no log: it failed without writing any "
                                       "(command: 'nope-xyz-cmd' not found on PATH))\n")


@pytest.fixture
def sigint_interrupts():
    """Python's own SIGINT handler for the test: a kernel has one, but a test run started in the
    background (`cmd &` in a script, nohup) inherits SIGINT ignored and Python keeps it so."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


class _Interrupter(threading.Thread):
    """Interrupts the main thread as a kernel interrupt does (a real SIGINT, which also wakes a
    sleeping system call) once the job named `name` runs; `sent` says whether it did, `handler`
    what handled SIGINT then, `error` what stopped it from looking (a failing test says which)."""

    def __init__(self, client: Client, name: str):
        super().__init__(daemon=True)
        self.client, self.name = client, name
        self.sent: float | None = None
        self.handler: object = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                jobs = [j for j in self.client.jobs() if j["name"] == self.name]
                if jobs and jobs[-1]["state"] == "running":
                    self.handler = signal.getsignal(signal.SIGINT)
                    self.sent = time.monotonic()
                    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                    return
                time.sleep(0.1)
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            self.error = e

    def check(self) -> None:
        self.join()
        assert self.sent is not None, f"the interrupt was never sent: {self.error or 'the job never ran'}"
        assert self.handler is signal.default_int_handler, f"SIGINT was handled by {self.handler!r}"


def test_an_interrupt_after_the_job_ended_says_so(shell: InteractiveShell, client: Client) -> None:
    """An interrupt may come once the job has ended, while the cell still reads the end of its
    log (a large one): the cell said `cancelled by you` (or, waiting on `%schedulearn result`,
    `still succeeded; it runs on`) of a job that had succeeded."""
    from schedulearn_magics.watch import TextJobView

    r = cell(shell, "--name done-already", "6 * 7")
    assert r.success and r.result == 42
    done = JobHandle(client, client.jobs()[-1])
    magics = shell.magics_manager.registry["SchedulearnMagics"]
    for stopped in (magics._interrupted, magics._stopped_waiting):
        said = str(stopped(done, TextJobView()))
        assert said == (f"job {done.id}: it had succeeded already (%schedulearn result {done.id} gives its "
                        "value) (kernel interrupted)"), said
    assert client.job(done.id)["state"] == "succeeded"


def test_kernel_interrupt_cancels_the_job(shell: InteractiveShell, client: Client,
                                          sigint_interrupts: None) -> None:
    t = _Interrupter(client, "interrupted")
    r = cell(shell, "--name interrupted", "import time\ntime.sleep(120)")
    t.check()
    assert isinstance(r.error_in_exec, JobInterrupted), r.error_in_exec  # one line, as in a kernel
    assert str(r.error_in_exec).endswith(": cancelled by you (kernel interrupted)"), r.error_in_exec
    job = [j for j in client.jobs() if j["name"] == "interrupted"][-1]
    deadline = time.monotonic() + 30
    while job["state"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.2)
        job = client.job(job["id"])
    assert job["state"] == "cancelled"


def test_a_job_cancelled_elsewhere_ends_the_cell_in_one_line(shell: InteractiveShell, client: Client) -> None:
    """A cancel is not a crash: the waiting cell ends with `JobCancelled` on one line, no log."""
    def cancel_when_running() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            jobs = [j for j in client.jobs() if j["name"] == "cancelled-elsewhere"]
            if jobs and jobs[-1]["state"] == "running":
                client.cancel(jobs[-1]["id"])
                return
            time.sleep(0.1)

    t = threading.Thread(target=cancel_when_running, daemon=True)
    t.start()
    r = cell(shell, "--name cancelled-elsewhere",
             "print('working', flush=True)\nimport time\ntime.sleep(120)")
    t.join()
    err = r.error_in_exec
    assert isinstance(err, JobCancelled) and not err.by_you, err
    assert err._render_traceback_() == [f"JobCancelled: {err}"]  # one line, no log tail
    # its own user cancelled it, elsewhere: said so, without the SIGTERM's `exit code 143`
    job_id, user = err.job["id"], err.job["user"]
    assert str(err) == f"job {job_id} (cancelled-elsewhere) cancelled by its user, {user}"


def test_a_job_cancelled_here_by_its_id_reads_cancelled_by_you(shell: InteractiveShell,
                                                              client: Client) -> None:
    """Seen live: `%schedulearn cancel 10` then `%schedulearn result 10` said `cancelled: exit
    code 143: cancelled`, as if someone else had (the server keeps who cancelled a job only where
    an admin cancelled another's): what this kernel cancelled, any later view says so."""
    handle = cell(shell, "--no-wait --name cancelled-here", "import time\ntime.sleep(120)").result
    wait_job(client, "cancelled-here", "running")
    shell.run_line_magic("schedulearn", f"cancel {handle.id}")
    deadline = time.monotonic() + 60
    while client.job(handle.id)["state"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.2)
    r = shell.run_cell(f"%schedulearn result {handle.id}")
    err = r.error_in_exec
    assert isinstance(err, JobCancelled) and err.by_you, err
    assert str(err) == f"job {handle.id} (cancelled-here) cancelled by you"


def test_interrupt_can_leave_the_job_running(shell: InteractiveShell, client: Client,
                                             sigint_interrupts: None) -> None:
    shell.run_line_magic("config", "SchedulearnMagics.cancel_on_interrupt = False")
    t = _Interrupter(client, "kept-running")
    r = cell(shell, "--name kept-running", "import time\ntime.sleep(120)")
    t.check()
    assert isinstance(r.error_in_exec, JobInterrupted), r.error_in_exec
    assert "still running; it runs on (%schedulearn logs" in str(r.error_in_exec), r.error_in_exec
    job = [j for j in client.jobs() if j["name"] == "kept-running"][-1]
    time.sleep(1.0)
    assert client.job(job["id"])["state"] == "running"
    client.cancel(job["id"])


def test_result_of_a_running_job_follows_it_and_an_interrupt_leaves_it_running(
        shell: InteractiveShell, client: Client, capsys: pytest.CaptureFixture, tmp_path: Path,
        sigint_interrupts: None) -> None:
    """After a kernel restart (or from another notebook) `%schedulearn result ID` of a running job
    shows it as a waiting cell does, its log included, and comes back with its value; before, it
    blocked without a word until the job ended. An interrupt stops the wait, not the job (it was
    not this cell's). `%schedulearn job ID` is a handle of any job."""
    gate = tmp_path / "open"
    body = (f"import os, time\nprint('resumed work', flush=True)\n"
            f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n'late value'")
    handle = cell(shell, "--no-wait --name reattached", body).result
    opener = threading.Timer(3.0, gate.touch)
    wait_job(client, "reattached", "running")
    capsys.readouterr()
    opener.start()
    r = shell.run_cell(f"late = %schedulearn result {handle.id}")
    assert r.success and shell.user_ns["late"] == "late value", r.error_in_exec
    out = capsys.readouterr().out
    assert f"job {handle.id} 'reattached': running" in out and "resumed work" in out, out

    gate.unlink()
    again = cell(shell, "--no-wait --name reattached", body).result
    wait_job(client, "reattached", "running")
    interrupt = threading.Timer(1.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    interrupt.start()  # (the wait has begun by then: it polls the job, then sleeps)
    r = shell.run_cell(f"%schedulearn result {again.id}")
    interrupt.join()
    assert isinstance(r.error_in_exec, JobInterrupted), r.error_in_exec
    assert str(r.error_in_exec) == (f"job {again.id}: still running; it runs on (%schedulearn result "
                                    f"{again.id}, %schedulearn cancel {again.id}) (kernel interrupted)")
    time.sleep(1.0)
    assert client.job(again.id)["state"] == "running"

    capsys.readouterr()
    h = shell.run_cell(f"%schedulearn job {again.id}").result
    assert isinstance(h, JobHandle) and h.id == again.id and h.state == "running"
    assert f"job {again.id} 'reattached': running" in capsys.readouterr().out
    gate.touch()
    assert h.result(timeout=60) == "late value"
    for line, message in [(f"job {again.id + 1000}", f"job: no job with id {again.id + 1000} (HTTP 404)"),
                          ("job x", "%schedulearn job: expected one job id (an integer >= 1, as "
                                     "%schedulearn ls shows), got 'x'"),
                          ("result", "%schedulearn result: expected one job id (an integer >= 1, as "
                                     "%schedulearn ls shows), got ''")]:
        r = shell.run_cell(f"%schedulearn {line}")
        assert isinstance(r.error_in_exec, UsageError), (line, r.error_in_exec)
        assert message in str(r.error_in_exec), (line, r.error_in_exec)


def test_timeout_is_the_schedulers_time_limit(shell: InteractiveShell, client: Client) -> None:
    """`--timeout` is the spec's `time_limit`: the scheduler stops the job (SIGTERM, the grace
    period: a checkpoint can be saved; it was `os._exit(124)` in the cell's process) and the
    cell ends with one line saying why."""
    r = cell(shell, "--timeout 1 --name capped",
             "import signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda *_: (print('saving', flush=True), sys.exit(143)))\n"
             "time.sleep(60)")
    err = r.error_in_exec
    assert isinstance(err, JobFailed), err
    assert str(err).endswith("(capped) failed: exit code 124: stopped at its time limit (1 s of run time)"), \
        err
    assert err.job["spec"]["time_limit"] == 1.0 and "saving" in client.logs(err.job["id"])


def test_a_waiting_cell_rides_out_a_restart_of_its_server(
        shell: InteractiveShell, server: LiveServer, capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    """A standalone scheduler (or the Jupyter server of another machine) restarts while a cell
    waits for its job: the cell says so, waits, and gets its value. Before, it ended at once with
    `UsageError: job N: lost touch with the server`, while the job ran on."""
    gate = tmp_path / "open"

    def restart() -> None:
        client = Client(server.url, server.token)
        wait_job(client, "restarted-under", "running")
        time.sleep(0.5)
        server.stop()
        gate.touch()
        time.sleep(2.0)
        server.start()
        Path(f"{gate}2").touch()

    t = threading.Thread(target=restart, daemon=True)
    t.start()
    capsys.readouterr()
    r = cell(shell, "--name restarted-under",
             f"import os, time\nprint('before', flush=True)\n"
             f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\nprint('during', flush=True)\n"
             f"while not os.path.exists({str(gate)!r} + '2'):\n    time.sleep(0.05)\n'after'")
    t.join()
    assert r.success and r.result == "after", r.error_in_exec
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if not ln.startswith(("job ", "=== schedulearn"))]
    assert lines[:2] == ["before", "schedulearn: lost touch with the server (url: cannot reach "
                         f"{server.url}schedulearn/api/ ([Errno 111] Connection refused)); trying again for "
                         "up to 10 min (the job is not affected)"], out
    assert re.fullmatch(r"schedulearn: the server answers again \(after \d+ s\)", lines[2]), out
    assert lines[3] == "during" and [ln.split(": ", 1)[-1] for ln in lines[4:]] == ["'after'"], out
    # a handle's result() alike (a --no-wait cell's, `%schedulearn job N`'s)
    handle = cell(shell, "--no-wait --name bounced", "import time\ntime.sleep(6)\n'kept'").result
    bounce = threading.Thread(target=lambda: (server.stop(), time.sleep(1.0), server.start()), daemon=True)
    bounce.start()
    assert handle.result(timeout=90) == "kept"
    bounce.join()
    err = capsys.readouterr().err
    assert "schedulearn: lost touch with the server" in err and "the server answers again" in err, err


def test_queue_text_outside_a_widget_frontend(shell: InteractiveShell, capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    shell.run_cell("%schedulearn queue")
    out = capsys.readouterr().out
    assert out.startswith("policy: ")
    assert "state" in out and "waited" in out and "succeeded" in out


def test_horovod_detected_and_rank_zero_result(shell: InteractiveShell, client: Client) -> None:
    try:
        import horovod.torch  # noqa: F401
    except ImportError:
        require(False, "horovod (with torch) is not installed (scripts/setup.sh builds it)")
    body = (
        "import torch\n"
        "import horovod.torch as hvd\n"
        "hvd.init()\n"
        "total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)\n"
        "(hvd.size(), hvd.rank(), total.item())"
    )
    r = cell(shell, "--gpus 2 --name hvd-job", body)
    assert r.success, r.error_in_exec
    assert r.result == (2, 0, 3.0)  # rank 0's value
    assert client.jobs()[-1]["spec"]["launcher"] == "horovod"
