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
_TAIL_BLOCK = 64 * 1024


def tail(path: Path | str, lines: int | None = None) -> str:
    """The last `lines` lines of the file (all of it when `lines` is None); '' if absent."""
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
        while pos > 0 and data.count(b"\n") <= lines:
            step = min(_TAIL_BLOCK, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    text = data.decode("utf-8", "replace")
    parts = text.splitlines(keepends=True)
    return "".join(parts[-lines:])


def _read_new(f, buf: bytes) -> tuple[list[str], bytes]:
    chunk = f.read()
    if not chunk:
        return [], buf
    buf += chunk
    *complete, buf = buf.split(b"\n")
    return [c.decode("utf-8", "replace") + "\n" for c in complete], buf


def follow(
    path: Path | str,
    done: Callable[[], bool],
    interval: float = 0.1,
    from_start: bool = True,
    timeout: float | None = None,
) -> Iterator[str]:
    """Yield the file's lines as they are written, until `done()` is true and all is read.

    Waits for the file to appear. `timeout` (seconds) bounds the whole follow."""
    path = Path(path)
    deadline = None if timeout is None else time.monotonic() + timeout
    f = None
    buf = b""
    try:
        while True:
            finished = done()  # read before the data, so nothing written before it is missed
            if f is None:
                try:
                    f = open(path, "rb", opener=nofollow.opener)
                    if not from_start:
                        f.seek(0, os.SEEK_END)
                except (FileNotFoundError, nofollow.NotAFile):
                    f = None
            if f is not None:
                lines, buf = _read_new(f, buf)
                yield from lines
            if finished:
                if buf:
                    yield buf.decode("utf-8", "replace")
                return
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(interval)
    finally:
        if f is not None:
            f.close()


async def afollow(
    path: Path | str,
    done: Callable[[], bool],
    interval: float = 0.1,
    from_start: bool = True,
) -> AsyncIterator[str]:
    """`follow` for asyncio servers (a websocket, `?follow=1`): never blocks the loop."""
    path = Path(path)
    f = None
    buf = b""
    try:
        while True:
            finished = done()
            if f is None:
                try:
                    f = open(path, "rb", opener=nofollow.opener)
                    if not from_start:
                        f.seek(0, os.SEEK_END)
                except (FileNotFoundError, nofollow.NotAFile):
                    f = None
            if f is not None:
                lines, buf = _read_new(f, buf)
                for line in lines:
                    yield line
            if finished:
                if buf:
                    yield buf.decode("utf-8", "replace")
                return
            await asyncio.sleep(interval)
    finally:
        if f is not None:
            f.close()


_EXC = re.compile(
    r"^(?:\[rank\d+\]:\s*)?(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*")
_IGNORED = ("ChildFailedError", "HorovodInternalError: Broadcast", "RuntimeError: Horovod detected")


def _meaningful(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith(MARKER) and bool(re.search(r"[A-Za-z0-9]", s)) and not (
        set(s) <= set("=-*#_ ")
    )


def failure_reason(log_tail: str) -> str:
    """One line saying why a run failed: the last exception line in the log's tail, else its
    last meaningful line; '' when the log says nothing."""
    lines = [ln.rstrip() for ln in log_tail.splitlines()]
    # only the current run: what follows the last start marker
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(MARKER) and "start" in lines[i]:
            lines = lines[i + 1:]
            break
    chosen = ""
    for line in reversed(lines):
        s = line.strip()
        if _EXC.match(s) and not any(x in s for x in _IGNORED):
            chosen = s
            break
    if not chosen:
        for line in reversed(lines):
            if _meaningful(line):
                chosen = line.strip()
                break
    chosen = re.sub(r"^\[rank\d+\]:\s*", "", chosen)
    if len(chosen) > _MAX_REASON:
        chosen = chosen[: _MAX_REASON - 3] + "..."
    return chosen
