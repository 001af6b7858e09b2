"""The magics' queue widget in real Chromium: a notebook in a real `jupyter lab` runs
`%schedulearn queue`; the widget renders (policy dropdown + jobs table), choosing a policy in the
dropdown switches the server's policy, a switch made over the API moves the dropdown, and a job
submitted elsewhere appears in the table."""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import LabServer, open_lab

pytestmark = pytest.mark.slow

WIDGET = ".schedulearn-queue"
SELECT = ".schedulearn-policy select"


def write_notebook(server: LabServer, name: str, sources: list[str]) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nbformat.write(nb, server.root / name)


def open_notebook(page: Any, name: str) -> None:
    """Opens `name` and waits for *its* panel (a restored workspace may hold hidden others)."""
    page.evaluate("(p) => window.jupyterapp.commands.execute('docmanager:open', {path: p})", name)
    page.wait_for_selector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook', timeout=60_000)
    page.wait_for_function(
        "(p) => window.jupyterapp.shell.currentWidget?.context?.path === p", arg=name, timeout=60_000)


def wait_until(predicate: Any, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_queue_widget_renders_and_its_dropdown_switches_the_policy(
    browser: Any, lab_server: LabServer, shot: Any
) -> None:
    assert lab_server.api("PUT", "policy", {"policy": "fifo"})[0] == 200
    # No %load_ext: the kernel loads the magics itself (installed ipython_kernel_config.py).
    write_notebook(lab_server, "queue.ipynb", ["%schedulearn queue"])
    page = open_lab(browser, lab_server)
    try:
        open_notebook(page, "queue.ipynb")
        page.wait_for_selector(".jp-NotebookPanel .jp-mod-idle, .jp-Notebook-ExecutionIndicator",
                               timeout=60_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        widget = page.locator(WIDGET)
        widget.wait_for(state="visible", timeout=60_000)
        select = page.locator(SELECT)
        _, policies = lab_server.api("GET", "policies")
        names = [p["name"] for p in policies]
        wait_until(lambda: select.locator("option").count() == len(names), what="the policy options")
        assert [o.text_content() for o in select.locator("option").all()] == names
        assert select.input_value() == "fifo"

        # A job submitted elsewhere shows up in the live table.
        status, job = lab_server.api("POST", "jobs", {"name": "from-elsewhere", "script": "print(1)"})
        assert status == 201, job
        row = page.locator(f'{WIDGET} tr.schedulearn-job[data-job-id="{job["id"]}"]')
        row.wait_for(timeout=30_000)
        assert "from-elsewhere" in row.text_content()

        # Choosing in the dropdown switches the server's policy at once.
        select.select_option("las")
        wait_until(lambda: lab_server.api("GET", "policy")[1]["policy"] == "las", what="policy las")
        shot(page, "queue-widget", widget)

        # Someone else switches it: the dropdown follows.
        assert lab_server.api("PUT", "policy", {"policy": "round-robin"})[0] == 200
        wait_until(lambda: select.input_value() == "round-robin", what="the dropdown to follow")
        time.sleep(1.0)
        assert lab_server.api("GET", "policy")[1]["policy"] == "round-robin"  # not switched back
    finally:
        page.context.close()
        lab_server.api("PUT", "policy", {"policy": "fifo"})


def test_job_widget_cancel_button_in_the_browser(browser: Any, lab_server: LabServer, shot: Any) -> None:
    """A waiting `%%schedulearn` cell shows the job widget; clicking its Cancel button in the
    page cancels the job while the cell is still waiting (the kernel's loop is not blocked)."""
    write_notebook(lab_server, "cancel.ipynb", [
        "%%schedulearn --name browser-cancel\nimport time\nprint('started', flush=True)\ntime.sleep(120)"])
    page = open_lab(browser, lab_server)
    try:
        open_notebook(page, "cancel.ipynb")
        # Not awaited: the command's promise settles only when the cell has finished.
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        widget = page.locator(".schedulearn-job")
        widget.wait_for(state="visible", timeout=60_000)

        def running() -> dict | None:
            _, jobs = lab_server.api("GET", "jobs")
            mine = [j for j in jobs["jobs"] if j["name"] == "browser-cancel"]
            return mine[-1] if mine and mine[-1]["state"] == "running" else None

        job = wait_until(running, what="the job to run")
        page.locator(".schedulearn-job .schedulearn-state", has_text="running").wait_for(timeout=30_000)
        page.locator(".schedulearn-job pre", has_text="started").wait_for(timeout=30_000)
        shot(page, "job-widget-running", widget)
        page.locator(".schedulearn-job button", has_text="Cancel").click()
        lab_server.wait_job(job["id"], {"cancelled"}, timeout=30)
        page.locator(".schedulearn-job .schedulearn-state", has_text="cancelled").wait_for(timeout=30_000)
        state = page.locator(".schedulearn-job .schedulearn-state", has_text="cancelled by you")
        state.wait_for(timeout=30_000)
        assert page.locator(".schedulearn-job button", has_text="Cancel").is_hidden()
        # The cell ended with one line saying so: a cancel is not a crash.
        out = page.locator(".jp-OutputArea-output", has_text="JobCancelled")
        out.wait_for(timeout=30_000)
        assert "cancelled by you" in out.inner_text() and "JobFailed" not in out.inner_text()
    finally:
        page.context.close()


def test_a_no_wait_jobs_widget_draws_what_the_job_shows_as_it_comes(browser: Any, lab_server: LabServer,
                                                                    shot: Any) -> None:
    """A `--no-wait` cell's job widget follows the job in the background; what the job shows (a
    display, a figure) renders inside the widget while the job runs, and an update of the
    display replaces it there."""
    go = lab_server.root / "widget-go"
    write_notebook(lab_server, "widget-shows.ipynb", [
        "%%schedulearn --no-wait --name browser-shows\nimport os, time\n"
        "from IPython.display import Markdown\nimport matplotlib.pyplot as plt\n"
        "h = display(Markdown('loss **0.9**'), display_id=True)\n"
        f"plt.plot([3, 2, 1]); plt.show()\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
        "h.update(Markdown('loss **0.1**'))"])
    page = open_lab(browser, lab_server)
    try:
        open_notebook(page, "widget-shows.ipynb")
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        widget = page.locator(".schedulearn-job")
        widget.locator("img").wait_for(state="visible", timeout=60_000)
        widget.locator("strong", has_text="0.9").wait_for(timeout=30_000)
        _, jobs = lab_server.api("GET", "jobs")
        job = [j for j in jobs["jobs"] if j["name"] == "browser-shows"][-1]
        assert job["state"] == "running", job  # (it waits for the file)
        shot(page, "job-widget-shows", widget)
        go.touch()
        lab_server.wait_job(job["id"], {"succeeded"}, timeout=60)
        widget.locator("strong", has_text="0.1").wait_for(timeout=30_000)
        assert widget.locator("strong", has_text="0.9").count() == 0
        assert widget.locator("img").count() == 1
    finally:
        page.context.close()


def test_kernel_interrupt_ends_the_widget_cancelled_without_a_cancel_button(browser: Any,
                                                                           lab_server: LabServer) -> None:
    """Interrupting the kernel (JupyterLab's Interrupt) cancels the job the cell waits for: the
    widget shows `cancelled` within 2 s of the job's end and no Cancel button, the cell ends
    with one line that says so."""
    write_notebook(lab_server, "interrupt.ipynb", [
        "%%schedulearn --name browser-interrupt\nimport time\nprint('started', flush=True)\ntime.sleep(120)"])
    page = open_lab(browser, lab_server)
    try:
        open_notebook(page, "interrupt.ipynb")
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.locator(".schedulearn-job pre", has_text="started").wait_for(timeout=60_000)
        _, jobs = lab_server.api("GET", "jobs")
        (job,) = [j for j in jobs["jobs"] if j["name"] == "browser-interrupt"]
        assert page.locator(".schedulearn-job button", has_text="Cancel").is_visible()
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:interrupt-kernel')")
        lab_server.wait_job(job["id"], {"cancelled"}, timeout=30)
        ended = time.monotonic()
        page.locator(".schedulearn-job .schedulearn-state", has_text="cancelled").wait_for(timeout=30_000)
        assert time.monotonic() - ended < 2.0, "the widget took more than 2 s to show 'cancelled'"
        assert page.locator(".schedulearn-job button", has_text="Cancel").is_hidden()
        out = page.locator(".jp-OutputArea-output.jp-RenderedText", has_text="cancelled by you")
        out.wait_for(timeout=30_000)  # one line (the interrupt's), not a traceback
        assert out.inner_text().strip().count("\n") == 0 and "Traceback" not in out.inner_text()
    finally:
        page.context.close()


def test_job_widget_log_follows_the_tail_and_keeps_where_the_user_scrolled(browser: Any,
                                                                          lab_server: LabServer) -> None:
    """While lines arrive the log box shows the newest ones (scrolled to its end); once the user
    scrolls up, new lines no longer pull the box back to the end."""
    write_notebook(lab_server, "follow.ipynb", [
        "%%schedulearn --name log-follow\nimport time\nfor i in range(240):\n"
        "    print(f'line {i}', flush=True)\n    time.sleep(0.05)"])
    page = open_lab(browser, lab_server)
    log = ".schedulearn-job .schedulearn-log"
    geometry = f"() => {{ const e = document.querySelector('{log}'); " \
               "return [e.scrollTop, e.scrollHeight, e.clientHeight, e.innerText]; }"

    def last_line() -> int:
        text = page.evaluate(geometry)[3]
        numbers = [int(ln.split()[1]) for ln in text.splitlines() if ln.startswith("line ")]
        return numbers[-1] if numbers else -1

    try:
        open_notebook(page, "follow.ipynb")
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        page.locator(log, has_text="line 40").wait_for(timeout=60_000)
        for _ in range(3):  # lines keep coming: the box stays at its end, the newest line in view
            top, height, client, _ = page.evaluate(geometry)
            assert height > client + 20 and abs(top) <= 2, (top, height, client)
            seen = last_line()
            wait_until(lambda seen=seen: last_line() > seen, what="newer lines")
        # The user scrolls up: new lines arrive, the box stays where they put it.
        page.evaluate(f"() => {{ const e = document.querySelector('{log}'); e.scrollTop = -120; }}")
        seen = last_line()
        wait_until(lambda: last_line() > seen + 10, what="more lines after scrolling up")
        top = page.evaluate(geometry)[0]
        assert top <= -100, f"pulled back to the end: scrollTop {top}"
        _, jobs = lab_server.api("GET", "jobs")
        job = [j for j in jobs["jobs"] if j["name"] == "log-follow"][-1]
        lab_server.wait_job(job["id"], {"succeeded"}, timeout=60)
    finally:
        page.context.close()


def test_no_wait_output_follows_the_job_to_its_end(browser: Any, lab_server: LabServer) -> None:
    """A `--no-wait` cell's output is a live job widget: it ends showing `succeeded`, not the
    text `<schedulearn job ... queued>` frozen at submission."""
    write_notebook(lab_server, "nowait.ipynb", [
        "%%schedulearn --no-wait --name no-wait-cell\nimport time\ntime.sleep(2)\nprint('done', flush=True)"])
    page = open_lab(browser, lab_server)
    try:
        open_notebook(page, "nowait.ipynb")
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        state = page.locator(".schedulearn-job .schedulearn-state")
        state.first.wait_for(timeout=60_000)
        page.locator(".schedulearn-job .schedulearn-state", has_text="succeeded").wait_for(timeout=60_000)
        page.locator(".schedulearn-job .schedulearn-log", has_text="done").wait_for(timeout=30_000)
        assert page.locator(".schedulearn-job").count() == 1  # one view of the job, not two
        outputs = page.locator(".jp-OutputArea-output").all_inner_texts()
        assert not any("queued>" in t for t in outputs), outputs
    finally:
        page.context.close()
