"""The notebook's widgets (ipywidgets): the job view (state, GPUs, queue position, elapsed, log
tail, Cancel) and the queue view (a live table of jobs and the policy dropdown).

Both are fed by polling the REST API (`watch.py`): the job view from the cell that waits (or a
background thread with `--no-wait`), the queue view from its own background thread. Imported only
where widgets can show (`watch.widgets_available`); elsewhere the views are text.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets as w
from schedulearn.client import paused_text
from traitlets import Float, Int, Unicode

from . import views
from .handle import FINAL_STATES, JobHandle
from .live import LiveShown
from .watch import LOG_TAIL_LINES, follow_in_background, policy_names, poll_job, recent_jobs

#: the policy dropdown's tooltip for users who may not switch the policy
READ_ONLY_TIP = "Only the scheduler's admins can switch the policy"
#: Queue widgets that still poll; the oldest is paused when a newer one would exceed this.
MAX_LIVE_QUEUES = 3
_LIVE_QUEUES: list[QueueWidget] = []


# --- one job ----------------------------------------------------------------------------------
class JobWidget(w.VBox):
    """Traits `state`, `gpus`, `position` (0 = not queued), `elapsed`, `progress` (0..1, -1: not
    reported), `eta` (time left, as text), `log_tail` follow the job; the children show them."""

    state = Unicode("")
    gpus = Int(0)
    progress = Float(-1.0)
    eta = Unicode("")
    position = Int(0)
    elapsed = Unicode("")
    log_tail = Unicode("")

    def __init__(self, handle: JobHandle, **kw: Any):
        self.handle = handle
        self._screen = views.Screen(rows=LOG_TAIL_LINES)  # the log's last lines, as drawn
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
        # what the job shows (figures, `display()`), as it shows it, where the widget follows the
        # job in the background (`follow`): each place an output widget of its own, updated in
        # place (an update sends that place alone to the front-end)
        self.shown = w.VBox()
        self._places: dict[str, w.Output] = {}  # display id -> its output
        super().__init__([top, self.logview, self.shown], **kw)
        self.add_class("schedulearn-job")
        self._line = views.short_line(handle.job)

    def __repr__(self) -> str:  # the text/plain beside the widget view (notebook viewers): it
        return self._line  # fits in what ipywidgets keeps of it, the deadline included

    def note(self, text: str) -> None:
        """A word about the wait (the server lost, then back), beside the Cancel button."""
        self.message.value = f"<span style='color:#b58900'>{html.escape(text)}</span>"

    def _cancel(self) -> None:
        self.cancel_button.disabled = True
        try:
            self.update(self.handle.cancel().job, None, None)
        except Exception as e:  # shown, not raised: this runs in a comm callback
            self.message.value = f"<span style='color:#dc322f'>{html.escape(str(e))}</span>"
            self.cancel_button.disabled = False

    def update(self, job: dict[str, Any], position: int | None, logs: str | None) -> None:
        now = time.time()
        self.state = str(job.get("state", ""))
        by_you = self.handle.cancelled_by_you
        self.gpus = int(job.get("gpus") or 0)
        self.position = int(position or 0)
        self.progress = float(job["progress"]) if job.get("progress") is not None else -1.0
        self.eta = views.fmt_seconds(job["eta_s"]) if job.get("eta_s") is not None else ""
        stopping = by_you and self.state not in FINAL_STATES  # asked; SIGTERM, then its grace period
        self._line = views.short_line({**job, "state": "cancelling"} if stopping else job, position, now)
        self.elapsed = views.fmt_seconds(
            views.waited(job, now) if self.state == "queued" else views.ran(job, now))
        if self.state in FINAL_STATES or by_you:  # nothing (more) to cancel: no button — hidden
            self.cancel_button.disabled = True  # before the header says so (each is a message of
            self.cancel_button.layout.display = "none"  # its own: never a final state beside it)
        colour = views._STATE_COLOURS.get(self.state, "inherit")
        shown, detail = self.state, views.status_detail(job, position, now)
        if by_you and self.state == "cancelled":
            shown = "cancelled by you"
            detail = f"ran {views.fmt_seconds(views.ran(job, now))}"
        elif stopping:
            shown = "cancelling"  # (its text view too: it said `running` while the job stopped)
        self.header.value = (
            f"<b>job {job.get('id')}</b> {html.escape(str(job.get('name', '')))} — "
            f"<span class='schedulearn-state' style='color:{colour}'>{shown}</span> "
            f"{views.progress_bar_html(job) if self.state not in FINAL_STATES else ''}"
            f"<span>{html.escape(detail)}</span>"
        )
        if logs:  # (nothing new: nothing sent to the frontend)
            if self.handle.log_skipped:  # the line left open is not the one these go on with
                self._screen.skip()
            self._screen.write(logs)
            self.log_tail = "\n".join(self._screen.lines())
            self.logview.value = (
                # (the content's own height: ipywidgets fixes an HTML widget's to one line)
                "<style>.schedulearn-log > .widget-html-content{height:auto;line-height:normal;"
                "align-self:stretch}</style>"
                f"<pre style='margin:0;font-size:85%'>{html.escape(self.log_tail)}</pre>"
            )

    def draw_shown(self, latest: dict[str, dict[str, Any]]) -> None:
        """`live.LiveShown`'s drawing, into the widget's own output area (any thread)."""
        new = []
        for did, bundle in latest.items():
            place = self._places.get(did)
            if place is None:
                place = self._places[did] = w.Output()
                new.append(place)
            place.outputs = ({"output_type": "display_data", "data": bundle, "metadata": {}},)
        if new:
            self.shown.children = (*self.shown.children, *new)

    def follow(self, poll: float) -> None:
        """Follow the job to its end in a background thread (at once, its state now): its log,
        state and what it shows (`draw_shown`). A job that has ended: what it showed, now."""
        live = LiveShown(self.handle, draw=self.draw_shown, catch_up=True)  # (no result read after)
        job = poll_job(self.handle, self)
        if job.get("state") not in FINAL_STATES:
            follow_in_background(self.handle, self, poll=poll, live=live)
        elif job.get("start_time") is not None:
            live.fetch(ended=True)
            live.show()

    #: the log's end read back at first (and when a job writes faster than the widget polls):
    #: enough for its last lines, never the whole log of a long run
    log_behind = 1 << 18


# --- the queue --------------------------------------------------------------------------------
class QueueWidget(w.VBox):
    """A live table of the jobs and a dropdown of the server's policies. Choosing a policy
    switches the server's policy; a switch made elsewhere moves the dropdown."""

    def __init__(self, client: Any, interval: float = 1.0, limit: int = 50):
        self.client = client
        self.interval = interval
        self.limit = limit
        self.jobs: list[dict[str, Any]] = []
        self._syncing = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        names, descriptions = policy_names(client)
        info = client.policy_info()
        current = info["policy"]
        self.dropdown = w.Dropdown(options=names, value=current if current in names else None,
                                   description="Policy:")
        self.dropdown.add_class("schedulearn-policy")
        self._show_can_switch(info.get("can_switch", True))
        self.dropdown.observe(self._on_choose, names="value")
        self.descriptions = descriptions
        self.message = w.HTML()
        self.paused = w.HTML()  # an admin's pause of scheduling, while there is one
        self.table = w.HTML()
        self.table.add_class("schedulearn-queue-table")
        super().__init__([w.HBox([self.dropdown, self.message]), self.paused, self.table])
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
        return f"Schedulearn queue: policy {self.dropdown.value}, {len(self.jobs)} jobs"

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
        jobs = recent_jobs(self.client, self.limit)
        info = self.client.policy_info()
        current = info["policy"]
        if current != self.dropdown.value:  # switched elsewhere (the sidebar, another user)
            self._set_dropdown(current)
            self.message.value = f"<span>policy now {html.escape(current)} (switched elsewhere)</span>"
        if self.dropdown.disabled != (not info.get("can_switch", True)):
            self._show_can_switch(info.get("can_switch", True))
        paused = info.get("paused")
        note = ("" if not paused else "<div style='border-left:3px solid #b58900;padding-left:6px'>"
                f"{html.escape(paused_text(paused, resume='%schedulearn resume'))}</div>")
        if self.paused.value != note:
            self.paused.value = note
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
