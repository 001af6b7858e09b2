"""`JobHandle`: a submitted job seen from the notebook (state, result, logs, cancel, wait)."""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from schedulearn.client import ClientError, LogReader, Reconnecting

from .cell_runner import NOT_KEPT_MARK, SHOWN_MARK

FINAL_STATES = ("succeeded", "failed", "cancelled")


class JobFailed(RuntimeError):
    """The job ended without a result. IPython shows it as one line (plus the log tail)."""

    def __init__(self, job: dict[str, Any], log_tail: str = ""):
        self.job = job
        self.log_tail = log_tail
        why = job.get("reason") or ""
        code = job.get("exit_code")
        detail = f"exit code {code}" if code not in (None, 0) else ""
        if why and why != detail:
            last = why.strip().splitlines()[-1] if why.strip() else ""
            detail = f"{detail}: {last}" if detail else last
        head = f"job {job.get('id')} ({job.get('name')}) {job.get('state')}"
        super().__init__(head + (f": {detail}" if detail else ""))

    def _render_traceback_(self) -> list[str]:
        lines = [f"JobFailed: {self}"]
        if self.log_tail.strip():
            lines += ["--- last log lines ---", *self.log_tail.rstrip().splitlines()[-20:]]
        return lines


class JobCancelled(JobFailed):
    """The job was cancelled: one line, no log (the cancel was asked for; nothing crashed)."""

    def __init__(self, job: dict[str, Any], by_you: bool = False):
        self.by_you = by_you
        super().__init__(job)
        head = f"job {job.get('id')} ({job.get('name')}) cancelled"
        reason = (job.get("reason") or "").strip()
        last = reason.splitlines()[-1] if reason else ""
        if by_you:
            self.args = (f"{head} by you",)
        elif last in ("", "cancelled"):  # by its own user (the server names an admin who cancels
            user = job.get("user") or (job.get("spec") or {}).get("user")  # another's job); no
            self.args = (f"{head} by its user" + (f", {user}" if user else ""),)  # `exit code 143`:
        else:  # the SIGTERM's, not news
            self.args = (f"{head}{last.removeprefix('cancelled')}" if last.startswith("cancelled ")
                         else f"{head}: {last}",)

    def _render_traceback_(self) -> list[str]:
        return [f"JobCancelled: {self}"]


def job_ended_without_result(job: dict[str, Any], log_tail: str = "", by_you: bool = False) -> JobFailed:
    """The exception for a job that ended in `failed` or `cancelled`."""
    if job.get("state") == "cancelled":
        return JobCancelled(job, by_you)
    return JobFailed(job, log_tail)


class NoResult(RuntimeError):
    """A job that succeeded and left no result (the server's 404): one line saying why that can be."""

    def __init__(self, job: dict[str, Any]):
        self.job = job
        super().__init__(f"job {job.get('id')} ({job.get('name')}) succeeded without a result: its process "
                         "ended before writing one (a cell that calls os._exit), or it is not a notebook "
                         "cell's job")

    def _render_traceback_(self) -> list[str]:
        return [f"NoResult: {self}"]


class ValueNotKept(RuntimeError):
    """A job that succeeded, but whose cell's value no pickle takes (a lock, a generator, an open
    file inside it): the job handed back its type, why, and the start of its repr instead."""

    def __init__(self, job: dict[str, Any], standin: Any):
        self.job = job
        self.type, self.error, self.repr = standin.type, standin.error, standin.repr
        super().__init__(f"job {job.get('id')} ({job.get('name')}) succeeded, but its cell's value "
                         f"({self.type}) cannot be pickled ({self.error}), so it stayed in the job; "
                         f"there it was: {_one_line(self.repr)}")

    def _render_traceback_(self) -> list[str]:
        return [f"ValueNotKept: {self}"]


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


class JobInterrupted(Exception):
    """The kernel was interrupted while a cell waited for its job; shown as one line."""

    def __init__(self, job_id: int, what: str):
        self.job_id = job_id
        super().__init__(f"job {job_id}: {what} (kernel interrupted)")

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {self}"]


#: the jobs this kernel cancelled (a handle's `cancel()`, its widget's Cancel, an interrupt,
#: `%schedulearn cancel ID`): any later view of one says `cancelled by you` (the server keeps
#: who cancelled a job only where an admin cancelled another's)
CANCELLED_HERE: set[tuple[str, int]] = set()  # (the server's API URL, the job's id)


def cancelled_here(client: Any, job_id: int) -> tuple[str, int]:
    """The key of a job in `CANCELLED_HERE`: ids are a server's own (another server, or a fresh
    store, has a job 2 of its own)."""
    return str(getattr(client, "api", "")), int(job_id)


class JobHandle:
    """A job on the Schedulearn server. `state` asks the server each time it is read."""

    def __init__(self, client: Any, job: dict[str, Any]):
        self.client = client
        self.id: int = int(job["id"])
        self.job: dict[str, Any] = job
        #: seconds between the refreshes of the live widget it displays as
        self.poll_interval = 1.0
        self._log_reader: LogReader | None = None  # where `new_logs` goes on from
        #: what the cell showed, in order, once `result()` has read it (rank 0's): the matplotlib
        #: figures (`ShownFigure`) and the objects it displayed (`ShownObject`); in a notebook
        #: `display(*h.shown)`
        self.shown: list[ShownFigure | ShownObject] = []
        #: where each of `shown` was among what the cell showed (the places of the job's live
        #: record, `live.LiveShown`); None from a job that did not say
        self.shown_places: list[int] | None = None

    # -- state -------------------------------------------------------------------------------
    def refresh(self) -> dict[str, Any]:
        self.job = self.client.job(self.id)
        return self.job

    @property
    def state(self) -> str:
        if self.job.get("state") in FINAL_STATES:
            return self.job["state"]
        return self.refresh()["state"]

    @property
    def name(self) -> str:
        return str(self.job.get("name", ""))

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES

    # -- actions -----------------------------------------------------------------------------
    def logs(self, tail: int | None = None) -> str:
        return self.client.logs(self.id, tail=tail)

    def new_logs(self, behind: int | None = None) -> str:
        """What the job's log gained since the last call (all of it the first time, a few MiB
        at most per call): a poll costs what is new, not the whole log again. `behind`: only
        the log's last that many bytes matter (`LogReader`; given at the first call)."""
        if self._log_reader is None:
            self._log_reader = LogReader(self.client, self.id, behind=behind)
        return self._log_reader.read()

    @property
    def log_skipped(self) -> bool:
        """The last `new_logs` skipped ahead (`behind`): its text does not go on from the one
        before, but starts a line of its own."""
        return self._log_reader is not None and self._log_reader.skipped

    @property
    def cancelled_by_you(self) -> bool:
        """This kernel (this handle's widget's Cancel, a kernel interrupt, `cancel()`,
        `%schedulearn cancel ID`) asked for the cancel."""
        return cancelled_here(self.client, self.id) in CANCELLED_HERE

    def cancel(self) -> JobHandle:
        """Cancel the job (a job that already ended is left as it is); the handle, its `job`
        refreshed — as a cell's last line, the job widget following it to `cancelled`."""
        if self.state in FINAL_STATES:
            return self
        try:
            self.client.cancel(self.id)
            CANCELLED_HERE.add(cancelled_here(self.client, self.id))
        except Exception:
            if self.refresh()["state"] not in FINAL_STATES:
                raise
        self.refresh()
        return self

    def wait(
        self,
        timeout: float | None = None,
        poll: float = 0.5,
        on_update: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Block until the job ends (or `timeout` seconds pass: `TimeoutError`). A server that
        cannot answer for a while (a restart) is asked again, saying so on stderr (`Reconnecting`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(poll, 0.2)
        patience = Reconnecting()
        while True:
            try:
                job = self.refresh()
            except ClientError as e:
                pause = patience.lost(e)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    raise TimeoutError(f"job {self.id}: no answer from the server within {timeout} s ({e})") \
                        from None
                time.sleep(pause)
                continue
            patience.answered()
            if on_update is not None:
                on_update(job)
            if job["state"] in FINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id}: still {job['state']} after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 1.5, poll)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the job; the value of its cell's last expression (rank 0), or `JobFailed`
        (`ValueNotKept` for a value that could not be pickled)."""
        job = self.wait(timeout=timeout)
        if job["state"] != "succeeded":
            tail = ""
            try:
                tail = self.logs(tail=20) if job["state"] == "failed" else ""
            except Exception:
                pass
            self.read_shown_of_failure(job)
            raise job_ended_without_result(job, tail, self.cancelled_by_you)
        try:
            data = self.client.result(self.id)
        except ClientError as e:
            if e.status == 404:  # (a 409, a forged result, keeps the server's words)
                raise NoResult(job) from None
            raise
        value = self._unwrap(load_result(data))
        if _marked(value, NOT_KEPT_MARK):
            raise ValueNotKept(job, value)
        return value

    def read_shown_of_failure(self, job: dict[str, Any]) -> None:
        """A failed job's `shown`: what its cell showed before it raised (its result, then,
        carries it and no value); nothing for another end, or where there is no such result."""
        if job["state"] != "failed":
            return
        try:
            self._unwrap(load_result(self.client.result(self.id)))
        except Exception:  # (no result, or one that is not for this kernel): the failure is what counts
            pass

    @property
    def figures(self) -> list[ShownFigure]:
        """The matplotlib figures among what the cell showed."""
        return [s for s in self.shown if isinstance(s, ShownFigure)]

    def _unwrap(self, value: Any) -> Any:
        """The cell's value; what it showed (`cell_runner.Shown`) kept in `shown`."""
        if _marked(value, SHOWN_MARK):
            self.shown = [ShownFigure(*item[1:]) if item[0] == "figure" else ShownObject(item[1])
                          for item in value.shown]
            self.shown_places = getattr(value, "places", None)
            value = load_result(value.value)
        return value

    def _ipython_display_(self) -> None:
        """In a notebook, a live job widget that follows the job to its end (the output of a
        `--no-wait` cell, or `h` in a later cell), what the job shows (figures, `display()`)
        drawn in it as it comes; elsewhere the text repr."""
        from IPython import get_ipython
        from IPython.display import display

        from . import watch

        shell = get_ipython()
        if shell is None or not watch.widgets_available(shell):
            display({"text/plain": repr(self)}, raw=True)
            return
        from .widgets import JobWidget

        view = JobWidget(self)
        display(view)
        view.follow(self.poll_interval)  # (what the job shows: in the widget, not the running cell)

    def __repr__(self) -> str:
        job = self.job
        if self.cancelled_by_you and job.get("state") not in FINAL_STATES:  # (it said `running` of
            return f"<schedulearn job {self.id} {self.name!r} cancelling>"  # `h.cancel()` as it stopped)
        gpus = job.get("gpus") or 0
        on = f" on {gpus} GPU{'s' if gpus != 1 else ''}" if job.get("state") == "running" else ""
        return f"<schedulearn job {self.id} {self.name!r} {job.get('state')}{on}>"


class ShownFigure:
    """A figure the job's cell showed: its PNG in a notebook, and in a text-only front-end what
    the inline backend's figure says (`<Figure size 640x480 with 1 Axes>`)."""

    def __init__(self, png: bytes, text: str):
        self.png = png
        self.text = text

    def _repr_png_(self) -> bytes:
        return self.png

    def __repr__(self) -> str:
        return self.text

    def save(self, path: str) -> None:
        """Write the PNG to `path`."""
        with open(path, "wb") as f:
            f.write(self.png)


class ShownObject:
    """An object the job's cell displayed (`display(df)`): its representations as the job made
    them (HTML, an image, ...), which the notebook displays as it would have the object."""

    def __init__(self, bundle: dict[str, Any]):
        self.bundle = bundle

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.bundle

    def __repr__(self) -> str:
        return str(self.bundle.get("text/plain", "<displayed object>"))


def _marked(value: Any, mark: str) -> bool:
    """`value` is the job's stand-in or envelope with `mark` (`cell_runner`), not the cell's own value."""
    return isinstance(value, SimpleNamespace) and getattr(value, mark, None) == 1


def load_result(data: Any) -> Any:
    """The result as the server sends it (pickle bytes) -> the object."""
    if not isinstance(data, bytes | bytearray):
        return data  # a client that already unpickled it
    try:
        import cloudpickle  # noqa: F401  (registers what cloudpickled objects need)
    except ImportError:
        pass
    return pickle.loads(data)
