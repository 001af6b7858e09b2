"""Job log files: read the tail, follow as they grow, and pick a one-line failure reason.

A job's log is one file (`<job dir>/log.txt`) that every (re)start appends to, after a marker
line starting with `MARKER`. Following polls the file's size (`tail -f` does the same); it costs
one `stat` per interval and stops when the caller says the job is over and the file is read.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from . import nofollow

MARKER = "=== schedulearn:"
_MAX_REASON = 300
#: Lines of a log's tail `failure_reason` reads (a torchrun failure's summary alone is ~50).
REASON_LINES = 200
_TAIL_BLOCK = 64 * 1024
PAGE = 1 << 20  # the most one `page` (a `GET logs?offset=`) answers, and `follow` reads at a time
NEXT_OFFSET = "X-Schedulearn-Next-Offset"  # `GET logs?offset=`: where the next page starts
LOG_SIZE = "X-Schedulearn-Log-Size"  # and how long the log was then
TAIL_BYTES = 4 << 20  # the most `tail` reads back from the end (a progress bar's endless line)


def tail(path: Path | str, lines: int | None = None) -> str:
    """The last `lines` lines of the file (all of it when `lines` is None); '' if absent.

    At most the last `TAIL_BYTES` are read: where those hold fewer lines (a progress bar that
    rewrites one line with carriage returns for hours), the lines that start within them."""
    path = Path(path)
    if lines is not None and lines < 0:
        raise ValueError(f"tail: expected a number of lines >= 0, got {lines}")
    try:
        f = open(path, "rb", opener=nofollow.opener)
    except (FileNotFoundError, nofollow.NotAFile):
        return ""
    with f:
        if lines is None:
            return f.read().decode("utf-8", "replace")
        if lines == 0:
            return ""
        end = f.seek(0, os.SEEK_END)
        data = b""
        pos = end
        while pos > 0 and data.count(b"\n") <= lines and end - pos < TAIL_BYTES:
            step = min(_TAIL_BLOCK, pos, TAIL_BYTES - (end - pos))
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    return last_lines(data, lines, cut_short=pos > 0)


def last_lines(data: bytes, lines: int, cut_short: bool) -> str:
    """The last `lines` lines of `data`, the end of a log (`cut_short`: not from its start, so
    that its first line may be a piece, dropped unless it is all there is)."""
    if cut_short and data.count(b"\n") <= lines:
        cut = data.find(b"\n")
        data = data[cut + 1:] if 0 <= cut < len(data) - 1 else data.lstrip(bytes(range(0x80, 0xC0)))
    # lines end at newlines only: a progress bar's carriage returns redraw a line, add none
    *ended, last = data.decode("utf-8", "replace").split("\n")
    kept = [p + "\n" for p in ended] + ([last] if last else [])
    return "".join(kept[-lines:])


def append_line(path: Path | str, text: str) -> None:
    """Append `text` (a marker line) to the log at `path` on a line of its own: a newline first
    where the job's output left its last line open (`print(..., end="")`, a progress bar)."""
    with open(path, "ab+", opener=nofollow.opener) as f:
        if f.seek(0, os.SEEK_END) and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
            text = "\n" + text
        f.write(text.encode())


def lines_since_start(path: Path | str, prefix: str = "") -> int:
    """How many lines (ended by a newline; a progress bar's carriage returns end none) the log
    holds since its last start marker, counting only those that begin with `prefix` and are not
    markers: what a run re-attached after a restart already wrote. Read a piece at a time."""
    count, at_start, counts = 0, True, False
    mark, start, pre = MARKER.encode(), b" start #", prefix.encode()
    try:
        f = open(path, "rb", opener=nofollow.opener)
    except (FileNotFoundError, nofollow.NotAFile):
        return 0
    with f:
        while piece := f.readline(_TAIL_BLOCK):
            if at_start:
                if piece.startswith(mark) and start in piece:
                    count = 0
                counts = piece.startswith(pre) and not piece.startswith(mark)
            at_start = piece.endswith(b"\n")
            count += at_start and counts
    return count


def page(path: Path | str, offset: int, size: int = PAGE) -> tuple[bytes, int, int]:
    """`size` bytes of the file from `offset` (fewer at its end), the offset after them, and the
    file's size now: what a reader that keeps its place asks for (a page may end inside a
    UTF-8 character: decode with an incremental decoder). Absent: nothing, at `offset`."""
    if offset < 0:
        raise ValueError(f"offset: expected a byte offset >= 0, got {offset}")
    try:
        f = open(path, "rb", opener=nofollow.opener)
    except (FileNotFoundError, nofollow.NotAFile):
        return b"", offset, 0
    with f:
        end = f.seek(0, os.SEEK_END)
        if offset >= end:
            return b"", offset, end
        f.seek(offset)
        data = f.read(min(size, end - offset))
    return data, offset + len(data), end


class _Reader:
    """What `follow` and `afollow` share: the file once it is there, read at most `PAGE` at a
    time, and the line not yet ended (held until it ends, so that readers get whole lines). A
    line with a carriage return is a progress bar's, redrawn in place: what there is of it is
    passed on at once (tqdm's bar moves as it is drawn); so is a line past `PAGE`, in pieces,
    so that neither the reader's memory nor the wait for the line's end grows without bound."""

    def __init__(self, path: Path | str, from_start: bool):
        self.path, self.from_start = Path(path), from_start
        self.f = None
        self.buf = b""

    def read(self) -> tuple[list[str], bool]:
        """The lines (and pieces) written since the last call, and whether there may be more
        right away (a whole page was read)."""
        if self.f is None:
            try:
                self.f = open(self.path, "rb", opener=nofollow.opener)
            except (FileNotFoundError, nofollow.NotAFile):
                return [], False
            if not self.from_start:
                self.f.seek(0, os.SEEK_END)
        chunk = self.f.read(PAGE)
        if not chunk:
            return [], False
        *complete, self.buf = (self.buf + chunk).split(b"\n")
        out = [c.decode("utf-8", "replace") + "\n" for c in complete]
        if b"\r" in self.buf or len(self.buf) > PAGE:  # a progress bar's drawings, or a long line
            cut = utf8_boundary(self.buf)
            if cut:
                out.append(self.buf[:cut].decode("utf-8", "replace"))
                self.buf = self.buf[cut:]
        return out, len(chunk) == PAGE

    def rest(self) -> list[str]:
        """The last line, where it has no newline (once all is read)."""
        rest, self.buf = self.buf, b""
        return [rest.decode("utf-8", "replace")] if rest else []

    def close(self) -> None:
        if self.f is not None:
            self.f.close()


def utf8_boundary(data: bytes) -> int:
    """The length of `data` less a UTF-8 character cut short at its end (where it may be cut)."""
    lead = len(data) - 1
    while lead >= 0 and len(data) - lead <= 4 and 0x80 <= data[lead] < 0xC0:
        lead -= 1  # back over continuation bytes to the character's first byte
    if lead < 0 or data[lead] < 0xC0:
        return len(data)  # ASCII (or no lead byte to be found: nothing to keep back)
    width = 2 if data[lead] < 0xE0 else 3 if data[lead] < 0xF0 else 4
    return len(data) if lead + width <= len(data) else lead


def follow(
    path: Path | str,
    done: Callable[[], bool],
    interval: float = 0.1,
    from_start: bool = True,
    timeout: float | None = None,
) -> Iterator[str]:
    """Yield the file's lines as they are written, until `done()` is true and all is read.

    Waits for the file to appear. `timeout` (seconds) bounds the whole follow."""
    deadline = None if timeout is None else time.monotonic() + timeout
    reader = _Reader(path, from_start)
    try:
        while True:
            finished = done()  # read before the data, so nothing written before it is missed
            more = True
            while more:
                lines, more = reader.read()
                yield from lines
            if finished:
                yield from reader.rest()
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(interval)
    finally:
        reader.close()


async def afollow(
    path: Path | str,
    done: Callable[[], bool],
    interval: float = 0.1,
    from_start: bool = True,
) -> AsyncIterator[str]:
    """`follow` for asyncio servers (a websocket, `?follow=1`): never blocks the loop."""
    reader = _Reader(path, from_start)
    try:
        while True:
            finished = done()
            more = True
            while more:
                lines, more = reader.read()
                for line in lines:
                    yield line
            if finished:
                for line in reader.rest():
                    yield line
                return
            await asyncio.sleep(interval)
    finally:
        reader.close()


#: The prefixes of a line: `srun --label`'s task (`1: `), then the rank: torchrun's `[rank1]: `,
#: horovodrun's `[1]<stderr>:`.
_PREFIX = r"(?:\d+: )?(?:\[rank\d+\]:\s*|\[\d+\]<std(?:out|err)>:\s*)?"
_EXC = re.compile(
    rf"^{_PREFIX}(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*")
_IGNORED = ("ChildFailedError", "HorovodInternalError: Broadcast", "RuntimeError: Horovod detected")
#: What a rank says when a peer has gone (its collective lost the connection): a consequence,
#: reported only where no other rank's exception tells the cause.
_PEER_GONE = ("by peer", "remote worker", "communicator was aborted", "Watchdog caught collective",
              "Horovod has been shut down")


def _meaningful(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith(MARKER) and bool(re.search(r"[A-Za-z0-9]", s)) and not (
        set(s) <= set("=-*#_ ")
    )


def current_run(log_tail: str) -> str:
    """The part of a log's tail that the current run wrote: what follows its last start marker."""
    lines = log_tail.splitlines(keepends=True)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(MARKER) and "start" in lines[i]:
            return "".join(lines[i + 1:])
    return log_tail


def failure_reason(log_tail: str) -> str:
    """One line saying why a run failed: the last exception line in the log's tail (one rank's
    cause before another rank's lost connection to it), else its last meaningful line; '' when
    the log says nothing."""
    lines = [ln.rstrip() for ln in current_run(log_tail).splitlines()]
    errors = [s for s in (ln.strip() for ln in reversed(lines))
              if _EXC.match(s) and not any(x in s for x in _IGNORED)]
    causes = [s for s in errors if not any(x in s for x in _PEER_GONE)]
    chosen = (causes or errors or [""])[0]
    if not chosen:
        for line in reversed(lines):
            if _meaningful(line):
                chosen = line.strip()
                break
    chosen = re.sub(f"^{_PREFIX}", "", chosen)
    if len(chosen) > _MAX_REASON:
        chosen = chosen[: _MAX_REASON - 3] + "..."
    return chosen
