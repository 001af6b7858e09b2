"""The job view (state, GPUs, queue position, elapsed, log tail, Cancel) and the queue view (live
table of jobs + policy dropdown), as ipywidgets, or as plain text outside a widget frontend.

Both are fed by polling the REST API: the job view from the cell that waits (or a background
thread with `--no-wait`), the queue view from its own background thread.
"""

from __future__ import annotations

import html
import os
import sys
import threading
import time
from typing import Any

from . import views
from .handle import FINAL_STATES, JobHandle

LOG_TAIL_LINES = 40


def widgets_available(shell: Any) -> bool:
    """A kernel with a frontend that can show widgets (not a terminal IPython), unless
    `SCHEDULEARN_WIDGETS=0` asks for plain text."""
    if os.environ.get("SCHEDULEARN_WIDGETS", "").lower() in ("0", "false", "no", "text"):
        return False
    if getattr(shell, "kernel", None) is None:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


# --- one job ----------------------------------------------------------------------------------
class JobView:
    """What the magic feeds as a job progresses."""

    def update(self, job: dict[str, Any], position: int | None, logs: str | None) -> None: ...

    def close(self) -> None: ...


class TextJobView(JobView):
    """Plain text: a line when the state (or queue position) changes, and new log lines."""

    def __init__(self, out: Any = None):
        self.out = out or sys.stdout
        self.last = ""
        self.printed = 0  # characters of the log already shown

    def update(self, job: dict[str, Any], position: int | None, logs: str | None) -> None:
        final = job.get("state") in FINAL_STATES
        if not final:
            self._status(job, position)
        if logs is not None and len(logs) > self.printed:
            self.out.write(logs[self.printed:])
            if not logs.endswith("\n"):
                self.out.write("\n")
            self.printed = len(logs)
        if final:
            self._status(job, position)
        self.out.flush()

    def _status(self, job: dict[str, Any], position: int | None) -> None:
        key = f"{job.get('state')}/{position}/{job.get('gpus')}"
        if key != self.last:
            self.last = key
            self.out.write(views.status_line(job, position) + "\n")

    @property
    def wants_full_logs(self) -> bool:
        return True


def _job_widget_class() -> type:
    import ipywidgets as w
    from traitlets import Float, Int, Unicode

    class JobWidget(w.VBox):
        """Traits `state`, `gpus`, `position` (0 = not queued), `elapsed`, `progress` (0..1, -1:
        not reported), `eta` (time left, as text), `log_tail` follow the job; the children show
        them."""

        state = Unicode("")
        gpus = Int(0)
        progress = Float(-1.0)
        eta = Unicode("")
        position = Int(0)
        elapsed = Unicode("")
        log_tail = Unicode("")

        def __init__(self, handle: JobHandle, **kw: Any):
            self.handle = handle
            self.header = w.HTML()
            # The log box is the widget's own element, kept across updates: a column-reverse
            # flex box starts (and stays) scrolled to its end as lines arrive, and keeps the
            # place a user scrolled up to (the offset from the end) while new lines come in.
            self.logview = w.HTML(layout=w.Layout(max_height="16em", overflow="auto", display="flex",
                                                  flex_flow="column-reverse"))
            self.logview.add_class("schedulearn-log")
            self.cancel_button = w.Button(description="Cancel", button_style="danger", icon="stop",
                                          tooltip=f"cancel job {handle.id}")
            self.cancel_button.on_click(lambda _b: self._cancel())
            self.message = w.HTML()
            top = w.HBox([self.header, self.cancel_button, self.message])
            super().__init__([top, self.logview], **kw)
            self.add_class("schedulearn-job")
            self._line = views.status_line(handle.job)

        def __repr__(self) -> str:  # the text/plain beside the widget view (notebook viewers)
            return self._line

        def _cancel(self) -> None:
            self.cancel_button.disabled = True
            try:
                job = self.handle.cancel()
                self.update(job, None, None)
            except Exception as e:  # shown, not raised: this runs in a comm callback
                self.message.value = f"<span style='color:#dc322f'>{html.escape(str(e))}</span>"
                self.cancel_button.disabled = False

        def update(self, job: dict[str, Any], position: int | None, logs: str | None) -> None:
            now = time.time()
            self.state = str(job.get("state", ""))
            by_you = bool(getattr(self.handle, "cancelled_by_you", False))
            self.gpus = int(job.get("gpus") or 0)
            self.position = int(position or 0)
            self.progress = float(job["progress"]) if job.get("progress") is not None else -1.0
            self.eta = views.fmt_seconds(job["eta_s"]) if job.get("eta_s") is not None else ""
            self._line = views.status_line(job, position, now)
            self.elapsed = views.fmt_seconds(
                views.waited(job, now) if self.state == "queued" else views.ran(job, now))
            colour = views._STATE_COLOURS.get(self.state, "inherit")
            shown, detail = self.state, views.status_detail(job, position, now)
            if by_you and self.state == "cancelled":
                shown = "cancelled by you"
                detail = f"ran {views.fmt_seconds(views.ran(job, now))}"
            elif by_you and self.state not in FINAL_STATES:
                shown = "cancelling"  # asked; the job is stopping (SIGTERM, then its grace period)
            self.header.value = (
                f"<b>job {job.get('id')}</b> {html.escape(str(job.get('name', '')))} — "
                f"<span class='schedulearn-state' style='color:{colour}'>{shown}</span> "
                f"{views.progress_bar_html(job) if self.state not in FINAL_STATES else ''}"
                f"<span>{html.escape(detail)}</span>"
            )
            if logs is not None:
                self.log_tail = "\n".join(logs.splitlines()[-LOG_TAIL_LINES:])
                self.logview.value = (
                    # (the content's own height: ipywidgets fixes an HTML widget's to one line)
                    "<style>.schedulearn-log > .widget-html-content{height:auto;line-height:normal;"
                    "align-self:stretch}</style>"
                    f"<pre style='margin:0;font-size:85%'>{html.escape(self.log_tail)}</pre>"
                )
            if self.state in FINAL_STATES or by_you:  # nothing (more) to cancel: no button
                self.cancel_button.disabled = True
                self.cancel_button.layout.display = "none"

        wants_full_logs = False

    return JobWidget


_JOB_WIDGET: type | None = None


def job_widget(handle: JobHandle) -> Any:
    global _JOB_WIDGET
    if _JOB_WIDGET is None:
        _JOB_WIDGET = _job_widget_class()
    return _JOB_WIDGET(handle)


def poll_job(handle: JobHandle, view: Any) -> dict[str, Any]:
    """Ask the server once about the job (state, queue position, logs) and update `view`."""
    job = handle.refresh()
    position = None
    if job["state"] == "queued":
        try:
            position = views.queue_position(job, handle.client.jobs(state="queued"))
        except Exception:
            position = None
    logs = None
    if job.get("start_time") is not None or job["state"] != "queued":
        try:
            tail = None if getattr(view, "wants_full_logs", False) else LOG_TAIL_LINES
            logs = handle.logs(tail=tail)
        except Exception:
            logs = None
    view.update(job, position, logs)
    return job


def follow(handle: JobHandle, view: Any, poll: float = 0.5,
           stop: threading.Event | None = None) -> dict[str, Any]:
    """Poll until the job ends (or `stop` is set), updating `view`; the last job dict."""
    delay = 0.1
    while True:
        job = poll_job(handle, view)
        if job["state"] in FINAL_STATES:
            return job
        if stop is not None and stop.wait(delay):
            return job
        if stop is None:
            time.sleep(delay)
        delay = min(delay * 1.5, poll)


def follow_in_background(handle: JobHandle, view: Any, poll: float = 1.0) -> threading.Thread:
    def run() -> None:
        errors = 0
        while True:
            try:
                follow(handle, view, poll)
                return
            except Exception:
                errors += 1
                if errors > 30:
                    return
                time.sleep(min(30, 2 ** min(errors, 5)))

    t = threading.Thread(target=run, name=f"schedulearn-job-{handle.id}", daemon=True)
    t.start()
    return t


# --- the queue --------------------------------------------------------------------------------
def _queue_widget_class() -> type:
    import ipywidgets as w

    class QueueWidget(w.VBox):
        """A live table of the jobs and a dropdown of the server's policies. Choosing a policy
        switches the server's policy; a switch made elsewhere moves the dropdown."""

        def __init__(self, client: Any, interval: float = 1.0, limit: int = 50):
            self.client = client
            self.interval = interval
            self.limit = limit
            self._syncing = False
            self._stop = threading.Event()
            self._lock = threading.Lock()
            names, descriptions = _policies(client)
            info = client.policy_info()
            current = info["policy"]
            self.dropdown = w.Dropdown(options=names, value=current if current in names else None,
                                       description="Policy:")
            self.dropdown.add_class("schedulearn-policy")
            self._show_can_switch(info.get("can_switch", True))
            self.dropdown.observe(self._on_choose, names="value")
            self.descriptions = descriptions
            self.message = w.HTML()
            self.table = w.HTML()
            self.table.add_class("schedulearn-queue-table")
            super().__init__([w.HBox([self.dropdown, self.message]), self.table])
            self.add_class("schedulearn-queue")
            self.refresh()
            self._thread = threading.Thread(target=self._loop, name="schedulearn-queue", daemon=True)
            self._thread.start()
            _LIVE_QUEUES.append(self)
            while len(_LIVE_QUEUES) > MAX_LIVE_QUEUES:  # re-run cells must not pile up pollers
                _LIVE_QUEUES.pop(0).pause("paused: a newer queue widget is live")

        @property
        def live(self) -> bool:
            return self._thread.is_alive()

        def pause(self, why: str) -> None:
            self._stop.set()
            self.message.value = f"<span style='color:#93a1a1'>{html.escape(why)}</span>"

        @property
        def policy(self) -> str | None:
            return self.dropdown.value

        def __repr__(self) -> str:
            return f"Schedulearn queue: policy {self.dropdown.value}, {len(getattr(self, 'jobs', []))} jobs"

        def _on_choose(self, change: dict[str, Any]) -> None:
            if self._syncing or change["new"] is None:
                return
            try:
                self.client.set_policy(change["new"])
                self.message.value = f"<span>switched to {html.escape(change['new'])}</span>"
            except Exception as e:
                self.message.value = f"<span style='color:#dc322f'>{html.escape(str(e))}</span>"
                self._set_dropdown(change["old"])

        def _show_can_switch(self, can: bool) -> None:
            """Read-only (disabled, with a tooltip saying why) for a user who may not switch."""
            self.dropdown.disabled = not can
            self.dropdown.tooltip = None if can else READ_ONLY_TIP
            if can:
                self.dropdown.remove_class("schedulearn-policy-readonly")
            else:
                self.dropdown.add_class("schedulearn-policy-readonly")

        def _set_dropdown(self, value: str | None) -> None:
            with self._lock:
                self._syncing = True
                try:
                    if value is not None and value not in self.dropdown.options:
                        self.dropdown.options = [*self.dropdown.options, value]
                    self.dropdown.value = value
                finally:
                    self._syncing = False

        def refresh(self) -> None:
            jobs = _recent_jobs(self.client, self.limit)
            info = self.client.policy_info()
            current = info["policy"]
            if current != self.dropdown.value:  # switched elsewhere (the sidebar, another user)
                self._set_dropdown(current)
                self.message.value = f"<span>policy now {html.escape(current)} (switched elsewhere)</span>"
            if self.dropdown.disabled != (not info.get("can_switch", True)):
                self._show_can_switch(info.get("can_switch", True))
            self.table.value = views.html_table(jobs)
            self.jobs = jobs

        def _loop(self) -> None:
            errors = 0
            while not self._stop.wait(self.interval * (1 + min(errors, 10))):
                try:
                    self.refresh()
                    if errors:  # the server is back: the error shown is no longer true
                        self.message.value = ""
                    errors = 0
                except Exception as e:
                    errors += 1
                    self.message.value = (f"<span style='color:#dc322f'>server unreachable: "
                                          f"{html.escape(str(e))}</span>")

        def close(self) -> None:
            self._stop.set()
            if self in _LIVE_QUEUES:
                _LIVE_QUEUES.remove(self)
            super().close()

    return QueueWidget


_QUEUE_WIDGET: type | None = None
#: the policy dropdown's tooltip for users who may not switch the policy
READ_ONLY_TIP = "Only the scheduler's admins can switch the policy"
#: Queue widgets that still poll; the oldest is paused when a newer one would exceed this.
MAX_LIVE_QUEUES = 3
_LIVE_QUEUES: list[Any] = []


def queue_widget(client: Any, interval: float = 1.0) -> Any:
    global _QUEUE_WIDGET
    if _QUEUE_WIDGET is None:
        _QUEUE_WIDGET = _queue_widget_class()
    return _QUEUE_WIDGET(client, interval=interval)


def queue_text(client: Any, limit: int = 50) -> str:
    names, _ = _policies(client)
    current = client.policy()
    others = ", ".join(n for n in names if n != current)
    return f"policy: {current} (others: {others})\n" + views.text_table(_recent_jobs(client, limit))


def _policies(client: Any) -> tuple[list[str], dict[str, str]]:
    items = client.policies()
    names = [p["name"] if isinstance(p, dict) else str(p) for p in items]
    desc = {p["name"]: p.get("description", "") for p in items if isinstance(p, dict)}
    return names, desc


def _recent_jobs(client: Any, limit: int) -> list[dict[str, Any]]:
    """Queued and running jobs, then the most recent finished ones, up to `limit` in all."""
    jobs = client.jobs()
    active = [j for j in jobs if j.get("state") not in FINAL_STATES]
    done = [j for j in jobs if j.get("state") in FINAL_STATES]
    done.sort(key=lambda j: -int(j["id"]))
    out = sorted(active, key=lambda j: int(j["id"])) + done[: max(0, limit - len(active))]
    return out


