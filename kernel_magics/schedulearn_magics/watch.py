"""Following a job and the queue from the notebook by polling the REST API: the text views (a
terminal, or `SCHEDULEARN_WIDGETS=0`), the polling loops that feed any view (the text one here,
the widgets of `widgets.py`), and the queue as text.

A view is anything with `update(job, position, logs)` and `log_behind`; the job view is fed
from the cell that waits (or a background thread with `--no-wait`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from schedulearn.client import ClientError, Reconnecting, paused_text

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
class JobView(Protocol):
    """What the magic feeds as a job progresses (`TextJobView`, `widgets.JobWidget`)."""

    #: `update` gets the text written since the last update, read on from where the last poll
    #: stopped: all of the log, in pieces (None), or, for a view that shows only the log's end,
    #: skipping ahead to its last `log_behind` bytes where it is further behind
    log_behind: int | None

    def update(self, job: dict[str, Any], position: int | None, logs: str | None) -> None: ...

    def note(self, text: str) -> None:
        """Say something about the wait itself (the server was lost, it answers again)."""


class TextJobView:
    """Plain text: a line when the state (or queue position) changes, and the log as it comes
    (carriage returns kept: a progress bar redraws its line)."""

    log_behind = None

    def __init__(self, out: Any = None):
        self.out = out or sys.stdout
        self.last = ""
        self.open_line = False  # the log's last piece shown did not end its line

    def update(self, job: dict[str, Any], position: int | None, logs: str | None) -> None:
        final = job.get("state") in FINAL_STATES
        if not final:
            self._status(job, position)
        if logs:
            self.out.write(logs)
            self.open_line = not logs.endswith("\n")
        if final:
            self._status(job, position)
        self.out.flush()

    def note(self, text: str) -> None:
        if self.open_line:
            self.out.write("\n")
            self.open_line = False
        self.out.write(f"schedulearn: {text}\n")
        self.out.flush()

    def _status(self, job: dict[str, Any], position: int | None) -> None:
        key = f"{job.get('state')}/{position}/{job.get('gpus')}"
        if key != self.last:
            self.last = key
            if self.open_line:  # the status on a line of its own
                self.out.write("\n")
                self.open_line = False
            self.out.write(views.status_line(job, position) + "\n")


def poll_job(handle: JobHandle, view: JobView, answered: Callable[[], None] | None = None) -> dict[str, Any]:
    """Ask the server once about the job (state, queue position, logs) and update `view`;
    `answered()` is called once the server has answered (before the view shows anything)."""
    job = handle.refresh()
    if answered is not None:
        answered()
    position = None
    if job["state"] == "queued":
        try:
            position = views.queue_position(job, handle.client.jobs(state="queued"))
        except Exception:
            position = None
    logs = None
    if job.get("start_time") is not None or job["state"] != "queued":
        logs = _new_logs(handle, view, to_the_end=job["state"] in FINAL_STATES)
    view.update(job, position, logs)
    return job


def _new_logs(handle: JobHandle, view: JobView, to_the_end: bool) -> str | None:
    """What the log gained (a few pages a call); `to_the_end` (the job has ended, read before
    its log: nothing it wrote is missed): all of it, or the view would end the cell without the
    log's last lines (a traceback, the final loss) of a job that wrote fast at its end."""
    parts: list[str] = []
    while True:
        try:
            more = handle.new_logs(view.log_behind)
        except Exception:
            break
        parts.append(more)
        if not (more and to_the_end):
            break
    return "".join(parts) if parts else None


def reconnecting(view: JobView) -> Reconnecting:
    """How a wait rides out a server restart: it asks again (for up to 10 min), and the view
    says that the server was lost, and that it is back."""
    return Reconnecting(say=view.note)


def follow(handle: JobHandle, view: JobView, poll: float = 0.5,
           stop: threading.Event | None = None, live: Any = None) -> dict[str, Any]:
    """Poll until the job ends (or `stop` is set), updating `view`; the last job dict. A
    server that cannot answer for a while (a restart) is asked again (`reconnecting`).
    `live` (`live.LiveShown`): what the job shows is displayed as it comes."""
    delay = 0.1
    patience = reconnecting(view)
    while True:
        try:
            job = poll_job(handle, view, patience.answered)
        except ClientError as e:
            time.sleep(patience.lost(e))  # (raises: a refusal, or a server gone too long)
            continue
        if live is not None and job.get("start_time") is not None:
            live.fetch(ended=job["state"] in FINAL_STATES)
            live.show()
        if job["state"] in FINAL_STATES:
            return job
        if stop is not None and stop.wait(delay):
            return job
        if stop is None:
            time.sleep(delay)
        delay = min(delay * 1.5, poll)


def follow_in_background(handle: JobHandle, view: JobView, poll: float = 1.0,
                         live: Any = None) -> threading.Thread:
    def run() -> None:
        errors = 0
        while True:
            try:
                follow(handle, view, poll, live=live)
                return
            except Exception:
                errors += 1
                if errors > 30:
                    return
                time.sleep(min(30, 2 ** min(errors, 5)))

    t = threading.Thread(target=run, name=f"schedulearn-job-{handle.id}", daemon=True)
    t.start()
    return t


# --- the queue, as text -------------------------------------------------------------------------
def queue_text(client: Any, limit: int = 50) -> str:
    names, _ = policy_names(client)
    info = client.policy_info()
    current = info["policy"]
    others = ", ".join(n for n in names if n != current)
    paused = f"{paused_text(info['paused'], resume='%schedulearn resume')}\n" if info.get("paused") else ""
    return f"policy: {current} (others: {others})\n{paused}" + views.text_table(recent_jobs(client, limit))


def policy_names(client: Any) -> tuple[list[str], dict[str, str]]:
    items = client.policies()
    names = [p["name"] if isinstance(p, dict) else str(p) for p in items]
    desc = {p["name"]: p.get("description", "") for p in items if isinstance(p, dict)}
    return names, desc


def recent_jobs(client: Any, limit: int) -> list[dict[str, Any]]:
    """Queued and running jobs, then the most recent finished ones, up to `limit` in all."""
    jobs = client.jobs()
    active = [j for j in jobs if j.get("state") not in FINAL_STATES]
    done = [j for j in jobs if j.get("state") in FINAL_STATES]
    done.sort(key=lambda j: -int(j["id"]))
    out = sorted(active, key=lambda j: int(j["id"])) + done[: max(0, limit - len(active))]
    return out


