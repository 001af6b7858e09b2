"""The magics in a real IPython kernel (ipykernel over ZeroMQ, as JupyterLab runs it), against
the live server: the waiting cell awaits its job on the kernel's event loop, so the job widget's
Cancel button is heard during the wait, and a kernel interrupt cancels the job."""

from __future__ import annotations

import base64
import queue
import time
from typing import Any

import pytest
from schedulearn.client import Client

from tests.magics.conftest import collect_until_reply, drain, wait_job


def test_result_comes_back_as_execute_result(kernel: tuple[Any, Any]) -> None:
    _, kc = kernel
    drain(kc)
    msg_id = kc.execute("%%schedulearn --name in-kernel -o answer\nprint('computing')\n6 * 7")
    reply, iopub = collect_until_reply(kc, msg_id)
    assert reply["status"] == "ok", reply
    results = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "execute_result"]
    assert results == ["42"]
    widgets = [m for m in iopub if m["msg_type"] == "comm_open"
               and m["content"]["data"]["state"].get("_model_name") == "ButtonModel"]
    assert widgets, "no job widget (Cancel button) was shown"
    reply, iopub = collect_until_reply(kc, kc.execute("print(answer + 1)"))
    assert "43" in "".join(m["content"].get("text", "") for m in iopub if m["msg_type"] == "stream")


def _cancel_button(kc: Any, timeout: float = 60) -> str:
    """The comm id of the first job widget's Cancel button the kernel opens."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if msg["msg_type"] == "comm_open":
            state = msg["content"]["data"]["state"]
            if state.get("_model_name") == "ButtonModel" and state.get("description") == "Cancel":
                return msg["content"]["comm_id"]
    raise AssertionError("the Cancel button never appeared")


def click(kc: Any, button: str) -> None:
    """What the browser sends when the button is clicked: a custom comm message."""
    kc.shell_channel.send(kc.session.msg("comm_msg", {
        "comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}}))


def test_cancel_button_works_while_the_cell_waits(kernel: tuple[Any, Any], client: Client) -> None:
    _, kc = kernel
    drain(kc)
    msg_id = kc.execute("%%schedulearn --name button-cancel\nimport time\ntime.sleep(120)\n'never'")
    button = _cancel_button(kc)
    job = wait_job(client, "button-cancel", "running")
    click(kc, button)
    reply, _ = collect_until_reply(kc, msg_id, timeout=60)
    assert client.job(job["id"])["state"] == "cancelled"
    # a cancel is not a crash: one line saying who cancelled it
    assert reply["status"] == "error" and reply["ename"] == "JobCancelled", reply
    assert reply["evalue"].endswith("(button-cancel) cancelled by you"), reply["evalue"]


def test_result_of_a_running_job_is_awaited_with_its_widget(kernel: tuple[Any, Any], client: Client) -> None:
    """`x = %schedulearn result ID` of a job still running (submitted before a kernel restart)
    shows the job's widget and awaits the job on the event loop: its Cancel button is heard."""
    _, kc = kernel
    drain(kc)
    job = client.submit({"script": "import time\ntime.sleep(120)\n", "name": "awaited-result"})
    wait_job(client, "awaited-result", "running")
    msg_id = kc.execute(f"value = %schedulearn result {job['id']}")
    click(kc, _cancel_button(kc))
    reply, _ = collect_until_reply(kc, msg_id, timeout=60)
    assert client.job(job["id"])["state"] == "cancelled"
    assert reply["status"] == "error" and reply["ename"] == "JobCancelled", reply
    assert reply["evalue"].endswith("(awaited-result) cancelled by you"), reply["evalue"]


def test_interrupt_cancels_the_awaited_job(kernel: tuple[Any, Any], client: Client) -> None:
    km, kc = kernel
    drain(kc)
    msg_id = kc.execute("%%schedulearn --name interrupt-kernel\nimport time\ntime.sleep(120)")
    job = wait_job(client, "interrupt-kernel", "running")
    km.interrupt_kernel()
    reply, iopub = collect_until_reply(kc, msg_id, timeout=60)
    assert reply["status"] == "error", reply
    assert "kernel interrupted" in reply["evalue"]
    deadline = time.monotonic() + 30
    while client.job(job["id"])["state"] != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.job(job["id"])["state"] == "cancelled"
    reply, _ = collect_until_reply(kc, kc.execute("1 + 1"))  # the kernel lives on
    assert reply["status"] == "ok"


def test_an_interrupt_that_leaves_the_job_running_leaves_its_widget_following_it(
        kernel: tuple[Any, Any], client: Client, tmp_path: Any) -> None:
    """With `cancel_on_interrupt` off an interrupt ends the wait, not the job; the cell's widget
    goes on following the job to its end (it said `running` for good: nothing polled for it)."""
    km, kc = kernel
    drain(kc)
    go = tmp_path / "go"
    kc.execute_interactive("%config SchedulearnMagics.cancel_on_interrupt = False", timeout=30)
    try:
        msg_id = kc.execute(f"%%schedulearn --name runs-on\nimport os, time\n"
                            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n'x'")
        job = wait_job(client, "runs-on", "running")
        km.interrupt_kernel()
        reply, _ = collect_until_reply(kc, msg_id, timeout=60)
        assert reply["status"] == "error" and "it runs on" in reply["evalue"], reply
        assert client.job(job["id"])["state"] == "running"
        go.touch()
        said: list[str] = []  # what the widget's parts say from then on
        deadline = time.monotonic() + 60
        while not any("succeeded" in text for text in said):
            assert time.monotonic() < deadline, f"the widget never said the job ended: {said}"
            try:
                msg = kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            state = msg["content"].get("data", {}).get("state") or {} if msg["msg_type"] == "comm_msg" else {}
            if isinstance(state.get("value"), str):
                said.append(state["value"])
        assert client.job(job["id"])["state"] == "succeeded"
    finally:
        kc.execute_interactive("%config SchedulearnMagics.cancel_on_interrupt = True", timeout=30)


def test_bad_input_in_a_kernel_is_one_line_and_submits_nothing(
    kernel: tuple[Any, Any], client: Client
) -> None:
    _, kc = kernel
    drain(kc)
    before = len(client.jobs())
    for line, message in [("--gpus 99", "--gpus: at most 4"),
                          ("--vars missing", "no variable named 'missing'"),
                          ("--launcher mpi", "invalid choice: 'mpi'")]:
        reply, iopub = collect_until_reply(kc, kc.execute(f"%%schedulearn {line}\n1"))
        assert reply["status"] == "error" and reply["ename"] == "UsageError", reply
        assert message in reply["evalue"] and "\n" not in reply["evalue"], reply
        # the server's check too names the option, not the job's field (it said `gpus: at most 4`)
        assert not message.startswith("--") or reply["evalue"].startswith(message), reply
        # IPython shows a UsageError as one line on stderr, no traceback.
        shown = "".join(m["content"]["text"] for m in iopub if m["msg_type"] == "stream")
        assert shown.strip().splitlines() == [f"UsageError: {reply['evalue']}"], shown
        assert not [m for m in iopub if m["msg_type"] == "error"]
    assert len(client.jobs()) == before


def test_bad_input_in_a_fresh_kernels_first_cell_is_answered_with_its_own_error() -> None:
    """Seen live: `%%schedulearn --gpus 0` as a kernel's first cell printed its one line, and the
    kernel never answered (the cell stayed `[*]`; nbclient timed out): the awaited cell goes
    ipykernel's async path, which does not reset the shell's last traceback that its reply reads
    (`AttributeError: ... '_last_traceback'`), and in a later cell the reply carried the traceback
    of an earlier cell's error. The magics load on their own here (the kernel config), as in
    JupyterLab: no plain cell runs first."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        for code, ename in [("%%schedulearn --gpus 0\n1", "UsageError"), ("1 / 0", "ZeroDivisionError"),
                            ("%%schedulearn --gpus abc\n1", "UsageError")]:
            reply, _ = collect_until_reply(kc, kc.execute(code), timeout=30)
            assert reply["status"] == "error" and reply["ename"] == ename, reply
            if ename == "UsageError":
                assert reply["evalue"].startswith("--gpus: expected an integer >= 1"), reply
                assert not reply["traceback"], reply  # (not the ZeroDivisionError's)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_autoawait_off_falls_back_to_the_blocking_magic(kernel: tuple[Any, Any]) -> None:
    _, kc = kernel
    drain(kc)
    try:
        reply, _ = collect_until_reply(kc, kc.execute("%autoawait off"))
        assert reply["status"] == "ok"
        reply, iopub = collect_until_reply(kc, kc.execute("%%schedulearn --name blocking\n'still works'"))
        assert reply["status"] == "ok", reply
        results = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "execute_result"]
        assert results == ["'still works'"]
    finally:
        collect_until_reply(kc, kc.execute("%autoawait asyncio"))


@pytest.mark.parametrize("options", ["--no-wait", ""])
def test_default_name_is_the_cell_number_the_notebook_shows(kernel: tuple[Any, Any], client: Client,
                                                            options: str) -> None:
    _, kc = kernel
    drain(kc)
    msg_id = kc.execute(f"%%schedulearn {options}\n1 + 1")
    reply, _ = collect_until_reply(kc, msg_id)
    assert reply["status"] == "ok", reply
    shown = reply["execution_count"]  # what the notebook prints as In [N]
    names = [j["name"] for j in client.jobs() if j["name"].startswith("cell[")]
    assert names[-1] == f"cell[{shown}]", (shown, names)


def _run_cell(kc: Any, code: str, cell_id: str | None) -> dict:
    """Execute `code` as JupyterLab does: the cell's id in the request's metadata (`cellId`)."""
    msg = kc.session.msg("execute_request", {
        "code": code, "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True}, metadata={"cellId": cell_id} if cell_id else {})
    kc.shell_channel.send(msg)
    reply, _ = collect_until_reply(kc, msg["header"]["msg_id"])
    assert reply["status"] == "ok", reply
    return reply


def test_the_runs_of_one_cell_are_one_job_to_the_history(kernel: tuple[Any, Any], client: Client) -> None:
    """Each run of a cell has a name of its own (`cell[N]`, In [N]), so the runs of one cell were
    strangers to each other: a re-run never learned from the runs before it (no time left from
    history, no family). The spec now carries the cell (`JobSpec.cell`: the id JupyterLab gives
    it, else a hash of its code): the second run of a cell reads its time left from the first,
    while a new cell — of the same user, on as many GPUs — reads none."""
    _, kc = kernel
    drain(kc)
    code = "%%schedulearn --no-wait\nimport time\ntime.sleep(6)\n'slept'"
    _run_cell(kc, code.replace("--no-wait", ""), "a5c1-train")  # the first run, to its end
    again = _run_cell(kc, code, "a5c1-train")  # the same cell again (its code edited or not)
    _run_cell(kc, code.replace("sleep(6)", "sleep(7)"), None)  # a new cell, without an id
    runs = [j for j in client.jobs() if j["name"].startswith("cell[")][-3:]
    first, second, new = (client.job(j["id"]) for j in runs)
    assert second["name"] == f"cell[{again['execution_count']}]" != first["name"]
    assert first["spec"]["cell"] == second["spec"]["cell"] == "cell#a5c1-train"
    assert new["spec"]["cell"].startswith("cell#code-") and len(new["spec"]["cell"]) == len("cell#code-") + 16
    deadline = time.monotonic() + 60
    seen: dict[int, dict] = {}
    while time.monotonic() < deadline and len(seen) < 2:
        for j in (second, new):
            view = client.job(j["id"])
            if view["state"] == "running" and view.get("run_s", 0) > 1:
                seen.setdefault(j["id"], view)
        time.sleep(0.2)
    assert seen[second["id"]].get("eta_basis") == "history", seen[second["id"]]
    assert 0 < seen[second["id"]]["eta_s"] < 6, seen[second["id"]]
    assert "eta_s" not in seen[new["id"]], seen[new["id"]]  # not from the user's other jobs
    for j in (second, new):
        wait_job(client, j["name"], "succeeded")


def test_the_figures_a_job_shows_appear_in_the_notebook(kernel: tuple[Any, Any], client: Client) -> None:
    """`plt.show()` in the job (and the figures still open at its end) reach the notebook as
    images, as IPython's inline backend shows them; a `;` cell shows its figure too. A figure that
    is the cell's value comes back as the value, closed: it does not join the kernel's pyplot
    figures (the inline backend would show it again at the end of a later cell)."""
    _, kc = kernel
    drain(kc)
    code = ("%%schedulearn --name plots\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n"
            "fig, ax = plt.subplots()\nax.plot([2, 1])\nfig")
    reply, iopub = collect_until_reply(kc, kc.execute(code))
    assert reply["status"] == "ok", reply
    images = [m["content"]["data"]["image/png"] for m in iopub
              if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]]
    assert len(images) == 2 and all(base64.b64decode(png).startswith(b"\x89PNG") for png in images)
    texts = [m["content"]["data"]["text/plain"] for m in iopub
             if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]]
    assert texts == ["<Figure size 640x480 with 1 Axes>"] * 2  # in a text front-end, as the inline one
    results = [m["content"]["data"]["text/plain"] for m in iopub if m["msg_type"] == "execute_result"]
    assert results == ["<Figure size 640x480 with 1 Axes>"]  # (and its image, where the kernel draws one)
    _, iopub = collect_until_reply(kc, kc.execute("import matplotlib.pyplot as p\nprint(p.get_fignums())"))
    assert "[]" in "".join(m["content"].get("text", "") for m in iopub if m["msg_type"] == "stream")
    quiet = "%%schedulearn\nimport matplotlib.pyplot as p\np.plot([1]);"
    _, iopub = collect_until_reply(kc, kc.execute(quiet))
    assert [m["msg_type"] for m in iopub if "image/png" in m["content"].get("data", {})] == ["display_data"]
    failing = ("%%schedulearn --name diverged\nimport matplotlib.pyplot as p\np.plot([3, 1, 2])\n"
               "raise ValueError('diverged')")
    reply, iopub = collect_until_reply(kc, kc.execute(failing))
    assert reply["status"] == "error" and "ValueError: diverged" in "".join(reply["traceback"]), reply
    shown = [m["msg_type"] for m in iopub
             if m["msg_type"] == "error" or "image/png" in m["content"].get("data", {})]
    assert shown == ["display_data", "error"]  # the curve the cell drew, then why it failed
    displays = ("%%schedulearn --name displays\nimport matplotlib.pyplot as p\n"
                "from IPython.display import Markdown\ndisplay(Markdown('**epoch 1**'))\n"
                "p.plot([1]); p.show()\ndisplay('text alone')")
    _, iopub = collect_until_reply(kc, kc.execute(displays))
    data = [m["content"]["data"] for m in iopub if m["msg_type"] == "display_data"
            and not any("widget" in mime for mime in m["content"]["data"])]  # (the job widget)
    assert [sorted(d) for d in data] == [["text/markdown", "text/plain"], ["image/png", "text/plain"]], data
    assert data[0]["text/markdown"] == "**epoch 1**"  # as the notebook would display it, in its place
    job = wait_job(client, "displays", "succeeded")  # a text alone went to its log (the widget's)
    assert "'text alone'" in client.logs(job["id"]).splitlines()
    _, iopub = collect_until_reply(kc, kc.execute(f"%schedulearn result {job['id']}"))  # later: shown again
    assert [sorted(m["content"]["data"]) for m in iopub if m["msg_type"] == "display_data"] == [
        ["text/markdown", "text/plain"], ["image/png", "text/plain"]]
    failed = wait_job(client, "diverged", "failed")
    _, iopub = collect_until_reply(kc, kc.execute(f"%schedulearn result {failed['id']}"))
    assert [m["msg_type"] for m in iopub if m["msg_type"] == "error"
            or "image/png" in m["content"].get("data", {})] == ["display_data", "error"]


def test_what_a_job_shows_appears_in_the_waiting_cell_as_it_shows_it(kernel: tuple[Any, Any], client: Client,
                                                                      tmp_path: Any) -> None:
    """A display (and a figure) of a job reaches the waiting cell while the job runs, under a
    display id; an update of it in the job replaces it there (`update_display_data`); at the
    job's end, what the result carries is what the cell shows already: no second copy."""
    _, kc = kernel
    drain(kc)
    go = tmp_path / "go"
    code = ("%%schedulearn --name live-shows\nimport os, time\nfrom IPython.display import Markdown\n"
            "import matplotlib.pyplot as plt\n"
            "h = display(Markdown('epoch 1'), display_id=True)\nplt.plot([1, 2]); plt.show()\n"
            f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
            "h.update(Markdown('epoch 2'))\n'done'")
    msg_id = kc.execute(code)
    before: list[dict] = []
    deadline = time.monotonic() + 60
    while not any("image/png" in m["content"].get("data", {}) for m in before):
        assert time.monotonic() < deadline, "what the job showed did not reach the cell while it ran"
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            before.append(msg)
    assert wait_job(client, "live-shows", "running", timeout=5)  # (it waits for `go`)
    live = [m for m in before if m["msg_type"] == "display_data" and "text/markdown" in m["content"]["data"]]
    assert [m["content"]["data"]["text/markdown"] for m in live] == ["epoch 1"]
    markdown_id = live[0]["content"]["transient"]["display_id"]
    go.touch()
    reply, after = collect_until_reply(kc, msg_id)
    assert reply["status"] == "ok", reply
    shown = [(m["msg_type"], m["content"]["transient"]["display_id"], sorted(m["content"]["data"]))
             for m in before + after if m["msg_type"] in ("display_data", "update_display_data")
             and not any("widget" in mime for mime in m["content"]["data"])]
    figure_id = next(did for kind, did, mimes in shown if "image/png" in mimes)
    assert shown == [("display_data", markdown_id, ["text/markdown", "text/plain"]),
                     ("display_data", figure_id, ["image/png", "text/plain"]),
                     ("update_display_data", markdown_id, ["text/markdown", "text/plain"])]
    updates = [m["content"]["data"] for m in after if m["msg_type"] == "update_display_data"]
    assert [data.get("text/markdown") for data in updates] == ["epoch 2"]  # (the result: the same, not sent)
    results = [m["content"]["data"]["text/plain"] for m in after if m["msg_type"] == "execute_result"]
    assert results == ["'done'"]
