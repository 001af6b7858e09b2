"""A waiting cell displays what its job shows (figures, `display()`) as the job shows it.

The job's cell runner records each figure and display it keeps, and each update of one, in the
job directory (`cell_runner.LiveShown`); the server hands out the records its run signed
(`GET jobs/{id}/shown`, `Client.shown`). `LiveShown` reads them as the cell waits (`fetch`, in
any thread) and displays them in the cell's output (`show`, in the kernel's), each place under
a display id of its own: an update replaces the display in place, as it would in the notebook.
A place is its index in the run: a job restarted (a resize, a preemption) runs its cell again
from the top, and its new run's first figure redraws the old run's first in place, as a cell run
again replaces its output (before, a `--gpus auto` job resized four times showed five curves).
When the job ends, `finish` puts what the result carries in those places where it is not what
they show already (what the record left out: a bundle JSON cannot carry, a record past its
limit), and displays whatever was not shown yet, in order.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from typing import Any

from IPython.display import display, update_display

from .handle import JobHandle, ShownFigure, ShownObject


class LiveShown:
    """`draw(latest)`: where the new and updated places go ({display id: bundle}, in order);
    by default displays in the cell's output (`draw_in_cell`). A job widget that follows a job
    in the background draws them in its own area (`widgets.JobWidget.draw_shown`): a display
    from that thread would land in whichever cell runs then."""

    PAGES = 4  # pages (`liveshown.PAGE`, 8 MiB) read at most in one `fetch` (a poll)

    def __init__(self, handle: JobHandle, draw: Callable[[dict[str, dict[str, Any]]], None] | None = None,
                 catch_up: bool = False):
        self.handle = handle
        self.draw = draw or self.draw_in_cell
        self.catch_up = catch_up
        self.offset = 0
        self.pending: dict[int, dict[str, Any]] = {}  # place -> its latest bundle read
        self.shown: dict[str, dict[str, Any]] = {}  # display id -> the bundle it shows
        self.off = False  # the server has no such route (an older one), or the job's directory is gone
        self._lock = threading.Lock()

    def _id(self, at: int) -> str:
        return f"schedulearn-{self.handle.id}-{at}"

    def fetch(self, ended: bool = False) -> None:
        """Read the records the job wrote since the last call: a few pages at most, or, where
        nothing puts the result's last state in place after (`catch_up`: a widget) and the job
        has `ended`, all of them (a job that redrew one place for 40 MiB showed update 28 of 40)."""
        from schedulearn.client import ClientError

        pages = 0
        while not self.off and (pages < self.PAGES or (ended and self.catch_up)):
            try:
                items, after = self.handle.client.shown(self.handle.id, self.offset)
            except ClientError as e:
                if e.status in (404, 405):
                    self.off = True
                return
            with self._lock:  # of several updates of a place only the last is kept
                for item in items:
                    self.pending[item["at"]] = item["bundle"]
                moved, self.offset = after != self.offset, after
            pages += 1
            if not moved:
                return

    def show(self) -> None:
        """Display what `fetch` read: a new place as a new display, an update in its place; of
        several updates of one place read at once only the last (a cell that starts following a
        job that redrew its curve a thousand times draws it once)."""
        with self._lock:
            items, self.pending = self.pending, {}
        latest = {self._id(at): bundle for at, bundle in items.items()}  # (in the order they first came)
        if latest:
            self.draw(latest)
            self.shown.update(latest)

    def draw_in_cell(self, latest: dict[str, dict[str, Any]]) -> None:
        for did, bundle in latest.items():
            if did in self.shown:
                update_display(bundle, raw=True, display_id=did)
            else:
                display(bundle, raw=True, display_id=did)

    def finish(self) -> None:
        """The job ended and its result was read (`handle.shown`): each place shown live gets its
        last state; what was not shown live is displayed after it, in order."""
        places = self.handle.shown_places
        if places is None or len(places) != len(self.handle.shown):
            places = [None] * len(self.handle.shown)
        rest = []
        for at, item in zip(places, self.handle.shown, strict=True):
            did = self._id(at) if at is not None else None
            if did is None or did not in self.shown:
                rest.append(item)
            elif self.shown[did] != _as_sent(item):
                update_display(item, display_id=did)
        display(*rest)


def _as_sent(item: ShownFigure | ShownObject) -> dict[str, Any]:
    """The bundle of one of the result's items as the live record carries it (bytes as base64)."""
    figure = isinstance(item, ShownFigure)
    bundle = {"image/png": item.png, "text/plain": item.text} if figure else item.bundle
    return {mime: base64.b64encode(v).decode("ascii") if isinstance(v, bytes | bytearray) else v
            for mime, v in bundle.items()}


def show_shown(handle: JobHandle, live: LiveShown | None) -> None:
    """What the job's cell showed, displayed as the cell's output: in the places `live` showed
    it as it came, or all of it now."""
    if live is None:
        display(*handle.shown)
    else:
        live.finish()
