"""What the job and queue views show, computed from the server's job dicts (no widgets here)."""

from __future__ import annotations

import html
import time
from collections import deque
from typing import Any

from schedulearn.client import printable, shown_gpus
from schedulearn.deadlines import deadline_text


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    s = max(0.0, float(s))
    if s < 60:
        return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def waited(job: dict[str, Any], now: float | None = None) -> float | None:
    submit = job.get("submit_time")
    if submit is None:
        return None
    until = job.get("start_time") or job.get("end_time") or (now if now is not None else time.time())
    return until - submit


def ran(job: dict[str, Any], now: float | None = None) -> float | None:
    if job.get("run_s") is not None and job.get("state") != "running":
        return job["run_s"]
    start = job.get("start_time")
    if start is None:
        return None
    return (job.get("end_time") or (now if now is not None else time.time())) - start


def queue_position(job: dict[str, Any], queued: list[dict[str, Any]]) -> int | None:
    """1-based place among the queued jobs in arrival order (the policy may reorder)."""
    if job.get("state") != "queued":
        return None
    if job.get("position") is not None:  # the server's own answer, when it gives one
        return int(job["position"])
    ids = sorted(int(j["id"]) for j in queued)
    return ids.index(int(job["id"])) + 1 if int(job["id"]) in ids else None


#: what ipywidgets keeps of a widget's text/plain (its `_repr_mimebundle_` cuts the rest): the
#: text view of a job widget in GitHub, nbconvert and other notebook viewers
WIDGET_TEXT_WIDTH = 110


def screen_lines(text: str) -> list[str]:
    """The log's lines as a terminal shows them: a carriage return starts drawing over its line
    from the first column (a progress bar redraws its line so, tqdm's way), and what a drawing
    does not reach of the one before stays, as on a terminal (the sidebar's `drawn` alike)."""
    screen = Screen(rows=None)
    screen.write(text)
    return screen.lines()


SKIPPED = "[…]"  # the row where a screen skipped ahead


class Screen:
    """The last `rows` lines of a log as a terminal shows them (`screen_lines`), fed the log in
    pieces as it comes (`write`): a piece may end inside a line or a drawing of it, and the next
    goes on where it stopped. Its memory is bounded: `rows` lines, and the line still open kept
    to its last `width` characters (a line that grows for hours without a newline)."""

    def __init__(self, rows: int | None = 40, width: int = 1 << 16):
        self.rows: deque[str] = deque(maxlen=rows)
        self.width = width
        self.line = ""  # the line not yet ended, as drawn
        self.col = 0  # where the next character lands on it

    def write(self, text: str) -> None:
        *ended, rest = text.split("\n")
        for piece in ended:
            self._draw(piece)
            self.rows.append(self.line)
            self.line, self.col = "", 0
        self._draw(rest)

    def skip(self) -> None:
        """What comes next does not go on from what came before (a reader skipped ahead): the
        line left open is dropped, and a row `[…]` says that lines were left out."""
        self.line, self.col = "", 0
        self.rows.append(SKIPPED)

    def _draw(self, piece: str) -> None:
        for i, part in enumerate(piece.split("\r")):
            if i:
                self.col = 0
            if part:
                self.line = self.line[:self.col] + part + self.line[self.col + len(part):]
                self.col += len(part)
        if len(self.line) > self.width:
            cut = len(self.line) - self.width
            self.line, self.col = self.line[cut:], max(self.col - cut, 0)

    def lines(self) -> list[str]:
        out = [*self.rows, self.line] if self.line else list(self.rows)
        return out if self.rows.maxlen is None else out[-self.rows.maxlen:]


def status_line(job: dict[str, Any], position: int | None = None, now: float | None = None) -> str:
    """`job 3 'train': queued, deadline in 20 min, at risk, waiting 5.0s: needs 2 GPUs, ...`"""
    head = f"job {job.get('id')} {job.get('name', '')!r}: {job.get('state', '?')}"
    detail = status_detail(job, position, now)
    return f"{head}, {detail}" if detail else head


def short_line(job: dict[str, Any], position: int | None = None, now: float | None = None,
               width: int = WIDGET_TEXT_WIDTH) -> str:
    """`status_line` in at most `width` characters, cut at its end (`…`), never before the state
    and the deadline: a name too long to leave them room is shortened instead."""
    line = status_line(job, position, now)
    if len(line) <= width:
        return line
    name, deadline = str(job.get("name", "")), deadline_text(job, now)
    must = len(f"job {job.get('id')} {name!r}: {job.get('state', '?')}")
    must += len(deadline) + 2 if deadline else 0
    if must > width - 1:  # (the name's repr loses at least as many characters as the name)
        name = name[:max(len(name) - (must - width + 2), 1)] + "…"
        line = status_line({**job, "name": name}, position, now)
    return line if len(line) <= width else line[:width - 1] + "…"


def status_detail(job: dict[str, Any], position: int | None = None, now: float | None = None) -> str:
    """The deadline first (what follows may be cut: `short_line`), then the queue position and
    wait, or GPUs and run time, and the reason of a failure."""
    state = job.get("state", "?")
    parts: list[str] = []
    if deadline_text(job, now):
        parts.append(deadline_text(job, now))
    if state == "queued":
        why = str(job.get("reason") or "")
        if why.startswith("waiting: "):  # the scheduler's own words: needs, free, place in line
            parts.append(f"waiting {fmt_seconds(waited(job, now))}: {why[len('waiting: '):]}")
        else:
            if position is not None:
                parts.append(f"position {position} in the queue")
            parts.append(f"waiting {fmt_seconds(waited(job, now))}")
    else:
        gpus = shown_gpus(job)
        if state == "running" or job.get("last_alloc"):
            parts.append(f"{gpus} GPU{'s' if gpus != '1' else ''} {alloc_text(job)}".rstrip())
        limit = (job.get("spec") or {}).get("time_limit")
        cap = f" (time limit {fmt_seconds(limit)})" if limit is not None and state == "running" else ""
        parts.append(f"ran {fmt_seconds(ran(job, now))}{cap}")
        if state != "succeeded" and progress_text(job):
            parts.append(progress_text(job))
    why = str(job.get("reason") or "").strip()
    if state in ("failed", "cancelled") and why and why != state:  # not "cancelled, cancelled"
        parts.append(why.splitlines()[-1])
    return ", ".join(parts)


def progress_text(job: dict[str, Any]) -> str:
    """`42% done, ~12m00s left`: what the scheduler's estimate knows (empty when nothing); a
    time left predicted from similar jobs, not from the job's own progress, says so; a running
    job that stopped reporting (`silent_s`: hung, or a long stretch without reports), `no report
    for 7m00s`."""
    parts = []
    if job.get("progress") is not None:
        parts.append(f"{100 * float(job['progress']):.0f}% done")
    if job.get("eta_s") is not None and job.get("state") == "running":
        guess = " (like similar jobs)" if job.get("eta_basis") == "history" else ""
        parts.append(f"~{fmt_seconds(job['eta_s'])} left{guess}")
    if job.get("silent_s") is not None and job.get("state") == "running":
        parts.append(f"no report for {fmt_seconds(job['silent_s'])}")
    return ", ".join(parts)


def progress_bar_html(job: dict[str, Any], width: str = "8em") -> str:
    """A small bar filled to the job's reported progress ('' when it reports none)."""
    p = job.get("progress")
    if p is None:
        return ""
    pct = max(0.0, min(100.0, 100 * float(p)))
    return (f"<span class='schedulearn-progress' title='{pct:.0f}% done' style='display:inline-block;"
            f"width:{width};height:0.6em;background:#e0e0e0;border-radius:3px;vertical-align:middle;"
            f"margin:0 4px'><span style='display:block;width:{pct:.1f}%;height:100%;background:#268bd2;"
            f"border-radius:3px'></span></span>")


def alloc_text(job: dict[str, Any]) -> str:
    """`(node:0,1)`: where the job runs, or where it last ran."""
    alloc = job.get("alloc") or job.get("last_alloc") or {}
    if not alloc:
        return ""
    return "(" + " ".join(f"{node}:{','.join(str(i) for i in idx)}" for node, idx in alloc.items()) + ")"


COLUMNS = ("id", "user", "name", "state", "GPUs", "waited", "ran", "progress", "deadline")


def job_rows(jobs: list[dict[str, Any]], now: float | None = None) -> list[tuple[str, ...]]:
    rows = []
    for j in jobs:
        rows.append((
            str(j.get("id")), str(j.get("user") or "-"), str(j.get("name", "")), str(j.get("state")),
            shown_gpus(j), fmt_seconds(waited(j, now)), fmt_seconds(ran(j, now)),
            progress_text(j) if j.get("state") != "succeeded" else "",
            deadline_text(j, now).removeprefix("deadline "),  # `in 20 min, at risk`, `met`
        ))
    return rows


def text_table(jobs: list[dict[str, Any]], now: float | None = None) -> str:
    rows = [COLUMNS, *([printable(c) for c in r] for r in job_rows(jobs, now))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


_STATE_COLOURS = {"queued": "#b58900", "running": "#268bd2", "succeeded": "#2aa198",
                  "failed": "#dc322f", "cancelled": "#93a1a1"}


def html_table(jobs: list[dict[str, Any]], now: float | None = None) -> str:
    if not jobs:
        return "<i>no jobs</i>"
    head = "".join(f"<th style='text-align:left;padding:0 8px'>{c}</th>" for c in COLUMNS)
    body = []
    for row in job_rows(jobs, now):
        cells = []
        for c, v in zip(COLUMNS, row, strict=True):
            style = "padding:0 8px"
            if c == "state":
                style += f";color:{_STATE_COLOURS.get(v, 'inherit')}"
            cells.append(f"<td style='{style}'>{html.escape(v)}</td>")
        body.append(f"<tr class='schedulearn-job' data-job-id='{html.escape(row[0])}'>{''.join(cells)}</tr>")
    return f"<table class='schedulearn-jobs'><tr>{head}</tr>{''.join(body)}</table>"


def gpus_text(inventory: dict[str, Any]) -> str:
    lines = []
    for node in inventory.get("nodes", []):
        kind = " (virtual)" if node.get("virtual") else ""
        lines.append(f"{node.get('name')}{kind}")
        for g in node.get("gpus", []):
            who = f"job {g['job_id']}" if g.get("job_id") is not None else (
                f"held: {g['held_by']}" if g.get("held_by") else "free")
            mem = ""
            if g.get("memory_total_mb"):
                mem = f"  {g.get('memory_used_mb', 0)}/{g['memory_total_mb']} MiB"
            lines.append(f"  [{g.get('index')}] {g.get('name', '')}{mem}  {who}")
    if inventory.get("note"):  # no GPUs: why, and what to do
        lines.append(f"({inventory['note']})")
    return "\n".join(lines) or "no GPUs"
