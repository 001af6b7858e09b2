"""The job widget and the queue widget, fed by the live server (ipywidgets models in this
process; the browser test in tests/browser/ renders them)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from schedulearn.client import Client, LogReader
from schedulearn_magics.handle import JobCancelled, JobHandle
from schedulearn_magics.views import screen_lines
from schedulearn_magics.watch import follow_in_background
from schedulearn_magics.widgets import JobWidget, QueueWidget

from tests.magics.conftest import GPUS


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_job_widget_follows_queued_running_succeeded(
    shell: InteractiveShell, client: Client, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    # A job holding every GPU until the gate opens, so that the next job has to queue.
    blocker = shell.run_cell(
        f"%%schedulearn --no-wait --gpus {GPUS} --name blocker\n"
        f"import os, time\nwhile not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    ).result
    wait_for(lambda: blocker.state == "running", what="the blocker to run")
    handle = shell.run_cell(
        "%%schedulearn --no-wait --name watched\nprint('step 1', flush=True)\nimport time\n"
        "time.sleep(0.5)\nprint('step 2', flush=True)\n'ok'"
    ).result
    assert isinstance(handle, JobHandle)

    widget = JobWidget(handle)
    states: list[str] = []
    positions: list[int] = []
    widget.observe(lambda c: states.append(c["new"]), names="state")
    widget.observe(lambda c: positions.append(c["new"]), names="position")
    follow_in_background(handle, widget, poll=0.1)
    wait_for(lambda: widget.state == "queued", what="the widget to show 'queued'")
    assert widget.position == 1
    assert "queued" in widget.header.value
    assert not widget.cancel_button.disabled
    gate.touch()
    wait_for(lambda: widget.state == "succeeded", timeout=60, what="the widget to show 'succeeded'")
    assert states[:1] == ["queued"]
    assert "running" in states
    assert states[-1] == "succeeded"
    assert states.index("queued") < states.index("running") < states.index("succeeded")
    assert 1 in positions and widget.position == 0
    assert widget.gpus == 0  # its GPU was given back
    assert "step 1" in widget.log_tail and "step 2" in widget.log_tail
    assert "step 2" in widget.logview.value
    assert widget.cancel_button.disabled  # nothing left to cancel
    assert widget.cancel_button.layout.display == "none"  # and no button shown
    assert handle.result() == "ok"
    blocker.wait(timeout=30)


def test_job_widget_cancel_button(shell: InteractiveShell, client: Client) -> None:
    handle = shell.run_cell("%%schedulearn --no-wait --name to-cancel\nimport time\ntime.sleep(120)").result
    widget = JobWidget(handle)
    follow_in_background(handle, widget, poll=0.1)
    wait_for(lambda: widget.state == "running", what="running")
    assert widget.gpus == 1
    widget.cancel_button.click()  # what a click in the browser does, through the comm
    wait_for(lambda: widget.state == "cancelled", what="cancelled")
    assert client.job(handle.id)["state"] == "cancelled"


@pytest.fixture
def queue(client: Client) -> Any:
    client.set_policy("fifo")
    w = QueueWidget(client, interval=0.1)
    yield w
    w.close()
    client.set_policy("fifo")


def test_queue_widget_lists_jobs_and_policies(queue: Any, client: Client, shell: InteractiveShell) -> None:
    names = [p["name"] for p in client.policies()]
    assert list(queue.dropdown.options) == names
    assert queue.dropdown.value == "fifo"
    shell.run_cell("%%schedulearn --name listed-job\n1")
    wait_for(lambda: "listed-job" in queue.table.value, what="the new job in the table")
    for column in ("user", "name", "state", "GPUs", "waited", "ran"):
        assert f">{column}</th>" in queue.table.value
    job = [j for j in client.jobs() if j["name"] == "listed-job"][-1]
    assert f"data-job-id='{job['id']}'" in queue.table.value


def test_queue_dropdown_switches_the_server_policy(queue: Any, client: Client) -> None:
    queue.dropdown.value = "las"  # a choice in the browser arrives as this change
    assert client.policy() == "las"
    queue.dropdown.value = "round-robin"
    assert client.policy() == "round-robin"


def test_queue_dropdown_follows_a_switch_made_elsewhere(queue: Any, client: Client) -> None:
    client.set_policy("elastic-fifo")
    wait_for(lambda: queue.dropdown.value == "elastic-fifo", timeout=10, what="the dropdown to follow")
    time.sleep(0.3)
    assert client.policy() == "elastic-fifo"  # following did not switch anything back


def test_queue_widget_says_when_scheduling_is_paused(queue: Any, client: Client) -> None:
    """An admin's pause shows above the table (a queued job would wait there without a word),
    and goes when scheduling resumes; the text view (no widgets) says it too."""
    from schedulearn_magics.watch import queue_text

    assert queue.paused.value == ""
    client.pause("a demo at 3pm")
    try:
        wait_for(lambda: "a demo at 3pm" in queue.paused.value, timeout=10, what="the pause in the widget")
        assert "scheduling paused by " in queue.paused.value
        assert "(a demo at 3pm): no job starts until an admin runs %schedulearn resume" in queue_text(client)
    finally:
        client.resume()
    wait_for(lambda: queue.paused.value == "", timeout=10, what="the pause to go")
    assert "paused" not in queue_text(client)


def test_old_queue_widgets_stop_polling(client: Client) -> None:
    from schedulearn_magics import widgets

    made = [QueueWidget(client, interval=0.1) for _ in range(widgets.MAX_LIVE_QUEUES + 1)]
    try:
        wait_for(lambda: not made[0].live, timeout=5, what="the oldest queue widget to stop")
        assert "paused" in made[0].message.value
        assert all(w.live for w in made[1:])
    finally:
        for w in made:
            w.close()
    wait_for(lambda: not any(w.live for w in made), timeout=5, what="closed widgets to stop")


def test_job_widget_and_queue_show_reported_progress_and_time_left(
    shell: InteractiveShell, client: Client, tmp_path: Path
) -> None:
    """A job that reports its progress (`elastic.report(progress=...)`): the server's estimate
    reaches the widget (a bar, `N% done`, the time left from its rate) and the queue's rows."""
    from schedulearn_magics import views

    gate = tmp_path / "open"
    handle = shell.run_cell(
        "%%schedulearn --no-wait --name progress\nimport os, time\nfrom schedulearn import elastic\n"
        "for i in range(1, 4):\n    time.sleep(0.3)\n    elastic.report(progress=i / 10)\n"
        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
    ).result
    widget = JobWidget(handle)
    follow_in_background(handle, widget, poll=0.1)
    wait_for(lambda: widget.progress > 0.29, timeout=60, what="the reported progress in the widget")
    job = handle.refresh()
    assert job["progress"] == pytest.approx(0.3) and job["eta_basis"] == "progress"
    assert job["eta_s"] >= 0 and widget.eta  # 0.1 of the work every 0.3 s: about 2 s left
    assert "schedulearn-progress" in widget.header.value and "30% done" in widget.header.value
    row = views.job_rows([job], now=time.time())[0]
    assert row[views.COLUMNS.index("progress")].startswith("30% done, ~")
    gate.touch()
    wait_for(lambda: widget.state == "succeeded", timeout=60, what="the job to succeed")
    assert "schedulearn-progress" not in widget.header.value  # no bar on a finished job


def test_progress_text_and_bar() -> None:
    from schedulearn_magics import views

    job = {"state": "running", "progress": 0.42, "eta_s": 725.0, "eta_basis": "progress"}
    assert views.progress_text(job) == "42% done, ~12m05s left"
    assert views.progress_text({**job, "eta_basis": "history", "progress": None}) == \
        "~12m05s left (like similar jobs)"
    assert views.progress_text({"state": "queued", "progress": 0.5, "eta_s": 9.0}) == "50% done"
    # a running job that stopped reporting says for how long; an ended one does not
    silent = {"state": "running", "progress": 0.42, "silent_s": 420.0}
    assert views.progress_text(silent) == "42% done, no report for 7m00s"
    assert views.progress_text({**silent, "state": "failed"}) == "42% done"
    assert views.progress_text({"state": "running"}) == "" and views.progress_bar_html({}) == ""
    assert "width:42.0%" in views.progress_bar_html(job)


def test_gpu_counts_shown_for_running_finished_and_auto_jobs() -> None:
    """Finished `--gpus auto` jobs show the GPUs they got (their `last_alloc`), not "auto"."""
    from schedulearn_magics import views

    auto = {"gpus": "auto"}
    running = {"id": 1, "name": "a", "state": "running", "gpus": 3, "alloc": {"n0": [0, 1, 2]},
               "last_alloc": {"n0": [0, 1, 2]}, "spec": auto}
    done = {"id": 2, "name": "b", "state": "succeeded", "gpus": 0, "alloc": {},
            "last_alloc": {"n0": [0], "n1": [3]}, "spec": auto}
    waiting = {"id": 3, "name": "c", "state": "queued", "gpus": 0, "alloc": {}, "spec": auto}
    assert [views.shown_gpus(j) for j in (running, done, waiting)] == ["3", "2", "auto"]
    assert "2 GPUs (n0:0 n1:3)" in views.status_detail(done, now=0)
    assert [row[4] for row in views.job_rows([running, done, waiting], now=0)] == ["3", "2", "auto"]


def test_the_job_tables_show_each_deadline() -> None:
    """`%schedulearn ls` and the queue widget say what `schedulearn ls` says of a deadline."""
    from schedulearn_magics import views

    spec = {"gpus": 1}
    risky = {"id": 1, "name": "a", "state": "running", "gpus": 2, "spec": spec,
             "deadline": 1_200.0, "deadline_status": "at_risk"}
    late = {"id": 2, "name": "b", "state": "succeeded", "gpus": 0, "spec": spec,
            "deadline": 60.0, "deadline_status": "missed", "missed_by_s": 720.0}
    none = {"id": 3, "name": "c", "state": "queued", "gpus": 0, "spec": spec}
    at = views.COLUMNS.index("deadline")
    rows = views.job_rows([risky, late, none], now=0)
    assert [r[at] for r in rows] == ["in 20 min, at risk", "missed by 12 min", ""]
    assert views.text_table([risky], now=0).splitlines()[0].split()[-1] == "deadline"
    assert "\\x1b[2J\\t" in views.text_table([{**none, "name": "\x1b[2J\t"}], now=0)  # stored before checks
    assert "<td style='padding:0 8px'>in 20 min, at risk</td>" in views.html_table([risky], now=0)


def test_a_queued_job_shows_the_schedulers_reason_for_waiting() -> None:
    from schedulearn_magics import views

    job = {"id": 4, "name": "d", "state": "queued", "gpus": 0, "alloc": {}, "submit_time": 0.0,
           "spec": {"gpus": 3}, "reason": "waiting: needs 3 GPUs, 2 free; 2nd in line of 3"}
    text = views.status_detail(job, position=2, now=5.0)
    assert text.startswith("waiting ") and text.endswith(": needs 3 GPUs, 2 free; 2nd in line of 3"), text
    assert "position" not in text  # the reason has the place in line already
    assert "position 2 in the queue" in views.status_detail({**job, "reason": ""}, position=2, now=5.0)


def test_an_interrupted_cells_widget_ends_cancelled_by_you_without_a_cancel_button(
    shell: InteractiveShell, client: Client
) -> None:
    """After a kernel interrupt (which cancels the job) the widget follows the job to its end:
    `cancelled by you` within 2 s, and no Cancel button from the moment the cancel is asked."""
    magics = shell.magics_manager.registry["SchedulearnMagics"]
    body = "import time\ntime.sleep(120)"
    handle = shell.run_cell(f"%%schedulearn --no-wait --name to-interrupt\n{body}").result
    wait_for(lambda: handle.state == "running", what="the job to run")
    widget = JobWidget(handle)
    assert widget.cancel_button.layout.display != "none"
    interrupted = magics._interrupted(handle, widget)  # what a kernel interrupt does
    assert str(interrupted) == f"job {handle.id}: cancelled by you (kernel interrupted)"
    assert widget.cancel_button.layout.display == "none"
    assert "cancelling" in widget.header.value or widget.state == "cancelled"
    # its text view (notebook viewers) and the handle say so too, not `running` while it stops
    assert ": running" not in repr(widget), repr(widget)
    assert repr(handle).endswith(("' cancelling>", "' cancelled>")), repr(handle)
    wait_for(lambda: widget.state == "cancelled", timeout=2, what="the widget to show 'cancelled' within 2 s")
    wait_for(lambda: "cancelled by you" in widget.header.value, timeout=1, what="'cancelled by you'")
    assert "cancelled, cancelled" not in widget.header.value
    with pytest.raises(JobCancelled, match=r"\(to-interrupt\) cancelled by you$"):
        handle.result(timeout=5)


def test_job_widget_shows_a_progress_bar_as_a_terminal_would(shell: InteractiveShell) -> None:
    """A progress bar redrawn with carriage returns (tqdm's way) is one line in the widget, at
    its last drawing, and the lines before it stay in view."""
    handle = shell.run_cell(
        "%%schedulearn --no-wait --name bar\nimport sys\n"
        "print('\\n'.join(f'setup {i}' for i in range(5)))\n"
        "for i in range(200):\n    sys.stdout.write(f'\\rtraining {i + 1}/200')\n"
        "sys.stdout.write('\\n'); print('saved')\n"
    ).result
    widget = JobWidget(handle)
    follow_in_background(handle, widget, poll=0.1)
    wait_for(lambda: widget.state == "succeeded", timeout=60, what="the job to end")
    wait_for(lambda: "saved" in widget.log_tail, what="the last line")
    lines = [ln for ln in widget.log_tail.splitlines() if not ln.startswith("=== schedulearn")]
    assert lines[-2:] == ["training 200/200", "saved"]
    assert [ln for ln in lines if ln.startswith("setup")] == [f"setup {i}" for i in range(5)]
    assert "training 199/200" not in widget.log_tail and "\r" not in widget.log_tail


def test_screen_lines_draw_over_a_line_as_a_terminal_does() -> None:
    from schedulearn_magics.views import screen_lines

    assert screen_lines("setup\nepoch 1\repoch 2\repoch 10\nsaved\n") == ["setup", "epoch 10", "saved"]
    assert screen_lines("100%\r 50%\r") == [" 50%"]  # what a drawing does not reach stays
    assert screen_lines("training 12/100\rtrai") == ["training 12/100"]  # a drawing read in part
    assert screen_lines("a\r\nb") == ["a", "b"] and screen_lines("") == []


def test_the_screen_fed_in_pieces_shows_what_it_shows_fed_whole() -> None:
    """The widget is fed the log as it comes: a piece may end inside a line or a drawing of it.
    Wherever the log is cut, what it shows is what the whole log shows; it keeps its last rows,
    and an open line that grows for hours is kept to its last `width` characters."""
    from schedulearn_magics.views import Screen, screen_lines

    log = "setup\nepoch 1\repoch 2\repoch 10\nsaved\n100%\r 50%\rtr\r\nnext é\rdone"
    for i in range(len(log) + 1):
        for j in range(i, len(log) + 1):
            screen = Screen(rows=None)
            for piece in (log[:i], log[i:j], log[j:]):
                screen.write(piece)
            assert screen.lines() == screen_lines(log), (i, j)
    screen = Screen(rows=2, width=10)
    screen.write("a\nb\nc\n" + "x" * 25)
    assert screen.lines() == ["c", "x" * 10]
    screen.write("\rab")
    assert screen.lines() == ["c", "ab" + "x" * 8]


def test_a_widget_reads_only_the_end_of_a_long_log(shell: InteractiveShell, client: Client,
                                                  tmp_path: Path) -> None:
    """A widget shows a job's last lines: come late to a long log, it reads back the log's last
    `log_behind` bytes, not the whole log, then only what is new. Before, it asked for the last
    40 lines at every poll: under a progress bar's endless line, the whole line each time (the
    server read up to 4 MiB for it). The line a skip lands in is dropped, but a progress bar's
    is kept from its last whole drawing."""
    gate, ready = tmp_path / "open", tmp_path / "ready"
    bar = "training 20000/20000 " + "z" * 40
    handle = shell.run_cell(
        "%%schedulearn --no-wait --name long-log\nimport os, sys, time\n"
        "for i in range(70_000):\n    print(f'line {i:06d} ' + 'y' * 50)\n"
        "for i in range(20_000):\n    sys.stdout.write(f'\\rtraining {i + 1}/20000 ' + 'z' * 40)\n"
        f"sys.stdout.flush()\nopen({str(ready)!r}, 'w').close()\n"
        f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.05)\n"
        "sys.stdout.write('\\n'); print('saved')\n"
    ).result
    wait_for(ready.exists, timeout=120, what="the job to write its log and wait")  # a widget come late
    fetched: list[int] = []
    reader = handle.client  # (the magics' own client)
    page, logs = reader.log_page, reader.logs

    def counting_page(job_id: int, offset: int = 0):
        data, after, total = page(job_id, offset)
        fetched.append(len(data))
        return data, after, total

    def counting_logs(job_id: int, tail: int | None = None):
        text = logs(job_id, tail)
        fetched.append(len(text.encode()))
        return text

    widget = JobWidget(handle)
    reader.log_page, reader.logs = counting_page, counting_logs  # type: ignore[method-assign]
    try:
        follow_in_background(handle, widget, poll=0.1)
        wait_for(lambda: bar in widget.log_tail, timeout=120, what="the bar's last drawing")
        time.sleep(1.5)  # a dozen polls while the bar stands still
        gate.touch()
        wait_for(lambda: "saved" in widget.log_tail, what="the last line")
    finally:
        del reader.log_page, reader.logs
    # its last 256 KiB (`log_behind`), then only what is new (old: 17 MB in 14 reads)
    assert 250_000 < sum(fetched) < 400_000, f"{sum(fetched):,} bytes in {len(fetched)} reads"
    lines = [ln for ln in widget.log_tail.splitlines() if not ln.startswith("=== schedulearn")]
    assert lines[-2:] == [bar, "saved"] and lines[0] == "[…]"  # (the skip lands in the bar's line)
    assert handle.wait(timeout=60)["state"] == "succeeded"  # its log whole (the run's end line)
    size = sum(len(chunk) for chunk in client.log_bytes(handle.id))
    assert size > 5_000_000

    end = LogReader(client, handle.id, behind=100_000).read()  # lands in the bar's line
    assert end.split("\n")[:2] == ["\r" + bar, "saved"]  # its last drawing
    end = LogReader(client, handle.id, behind=1_500_000).read()  # lands before it
    first, *_ = end.split("\n")
    assert first.startswith("line 0") and first.endswith(" " + "y" * 50) and len(first) == 62
    assert [ln for ln in screen_lines(end) if not ln.startswith("=== schedulearn")][-2:] == [bar, "saved"]


def test_a_running_job_shows_its_time_limit() -> None:
    from schedulearn_magics import views

    job = {"id": 5, "name": "e", "state": "running", "gpus": 1, "alloc": {"n0": [0]}, "start_time": 0.0,
           "spec": {"gpus": 1, "time_limit": 7200.0}}
    assert "ran 5m00s (time limit 2h00m)" in views.status_detail(job, now=300.0)
    ended = {**job, "state": "failed", "run_s": 7200.0, "reason": "stopped at its time limit (2 h 00 min "
             "of run time)"}
    assert views.status_detail(ended, now=9000.0).endswith("ran 2h00m, stopped at its time limit (2 h 00 min "
                                                            "of run time)")


def test_a_job_widget_following_in_the_background_draws_what_the_job_shows(
    shell: InteractiveShell, client: Client, tmp_path: Path
) -> None:
    """A `--no-wait` job's widget (the handle shown in a later cell, `JobWidget.follow`) follows
    the job from a background thread, where a `display()` would land in whichever cell runs then:
    what the job shows (a display, a figure) comes into the widget's own output area as the job
    shows it, an update in its place (before, it came only at `h.result()`). A widget of the
    ended job shows it too."""
    import base64

    go = tmp_path / "go"
    handle = shell.run_cell(
        "%%schedulearn --no-wait --name widget-shows\nimport os, time\nfrom IPython.display import Markdown\n"
        "import matplotlib.pyplot as plt\nh = display(Markdown('epoch 1'), display_id=True)\n"
        f"plt.plot([1, 2]); plt.show()\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
        "h.update(Markdown('epoch 2'))\n'done'").result
    widget = JobWidget(handle)
    widget.follow(poll=0.1)

    def outputs(w: JobWidget) -> list[dict[str, Any]]:  # (each place an Output widget of one output)
        return [o for place in w.shown.children for o in place.outputs]

    def drawn(w: JobWidget) -> list[str]:
        return [o["data"].get("text/markdown") or sorted(o["data"])[0] for o in outputs(w)]

    wait_for(lambda: len(outputs(widget)) == 2, timeout=60, what="the display and the figure")
    assert drawn(widget) == ["epoch 1", "image/png"]
    assert client.job(handle.id)["state"] == "running"  # (it waits for `go`)
    png = base64.b64decode(outputs(widget)[1]["data"]["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(o["output_type"] == "display_data" for o in outputs(widget))
    figure = widget.shown.children[1]
    go.touch()
    wait_for(lambda: widget.state == "succeeded", timeout=60, what="the job to end")
    wait_for(lambda: drawn(widget)[0] == "epoch 2", what="the update, in its place")
    assert drawn(widget) == ["epoch 2", "image/png"]
    assert len(widget.shown.children) == 2 and widget.shown.children[1] is figure  # (only the update sent)
    assert handle.result() == "done"
    ended = JobWidget(handle)
    ended.follow(poll=0.1)  # the job has ended: drawn at once, no thread
    assert drawn(ended) == ["epoch 2", "image/png"]


def test_a_widget_of_an_ended_job_shows_the_last_state_of_a_long_record(shell: InteractiveShell) -> None:
    """A poll reads a few pages of the record (`LiveShown.PAGES` × 8 MiB); a widget reads no
    result after (a waiting cell's `finish` does), so once the job has ended it reads the rest:
    a job that redrew one place for 40 MiB showed an early state of it."""
    handle = shell.run_cell(
        "%%schedulearn --no-wait --name long-record\nfrom IPython.display import HTML\n"
        "h = display(HTML('start'), display_id=True)\nfor i in range(1, 41):\n"
        "    h.update(HTML(f'<p>update {i}</p>' + 'x' * (1 << 20)))\n'done'").result
    assert handle.result(timeout=120) == "done"
    widget = JobWidget(handle)
    widget.follow(poll=0.1)
    [place] = widget.shown.children
    [out] = place.outputs
    assert out["data"]["text/html"].startswith("<p>update 40</p>"), out["data"]["text/html"][:20]
