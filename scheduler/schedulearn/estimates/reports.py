"""What jobs report, and what the scheduler keeps of it.

A report is one JSON object — a line of the job directory's `metrics.jsonl`, written by
`schedulearn.elastic.report(...)` (live), or a dict the simulated job model emits each round
(simulation). Every field is optional except `t`:

| field | meaning |
|---|---|
| `t` | when (seconds; wall clock live, virtual in simulation) |
| `step_time` | seconds per optimiser step, gradient accumulation included |
| `timed_steps` | how many steps `step_time` is the mean of (default: those since the last report) |
| `batch_size` | global batch size of those steps |
| `num_gpus`, `num_nodes` | the placement it ran on (GPUs, nodes; default 1 node) |
| `accum_steps` | micro-steps accumulated before the synchronised one (default 0) |
| `compute_time` | seconds of one micro-step without gradient synchronisation |
| `grad_sqr`, `grad_var` | squared norm of the true gradient; its variance at the initial batch size |
| `init_batch_size`, `max_batch_size`, `max_local_bsz` | the batch sizes the job accepts |
| `progress` | fraction of the job's declared work done, 0..1 |
| `epoch` (+ `epochs`), `step` (+ `total_steps`) | the same as counts; `epochs` may come from the spec |
| `restart` | the run number (a new run after each checkpoint-restart) |

`ingest(job, records)` folds reports into `job.extra["reports"]` — small, JSON-able, persisted by
the store — and bumps its version so cached estimates are rebuilt. Per configuration (nodes, GPUs,
micro-batch, accumulation) the mean step and compute times; the latest gradient statistics; the
batch-size bounds; the last progress; and, per (nodes, GPUs), the running time and progress
between consecutive reports of one run, the last batch size, and the running time weighted by
the statistical efficiency of its batch size *at the time* (`efficiency`: the gradient statistics
of the time, not today's: an adaptive job's efficiency at large batches grows as it trains, and
judging its past by today's statistics would count more work than it did) (`spans`), from which
`estimates.job` works out the work left.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import nofollow
from ..model import Job

#: `Job.extra` key of the folded reports (persisted with the job).
REPORTS_KEY = "reports"
#: weight of a new report in the moving average of a configuration's step times, for a report
#: that covers `REPORT_S` seconds of steps or more (`elastic.Monitor` reports every 10 s: the
#: mean of its steps); a report covering fewer counts for less (1 - (1 - SMOOTHING) ** (s /
#: REPORT_S)), so that a job reporting every step is smoothed over as long, not over its last
#: three steps (seen live: a lone job reporting every step was resized in place 2 -> 1 -> 2 GPUs
#: within seconds, twice, on three slow steps of a loaded machine)
SMOOTHING = 0.3
REPORT_S = 10.0
#: a placement the job itself ran on for fewer seconds than this is not yet believed over what
#: its other measurements say of it (`configs`): the first steps on a new placement (a
#: worker joining, warming up) are not its speed (seen live: an in-place resize to 2 GPUs undone
#: 4 s later on its first five steps)
SETTLE_S = 20.0
#: how much the spans measured before a new one still count (recent rates matter most)
SPAN_DECAY = 0.9
#: the gradient statistics are kept per this many equal stretches of progress (`grad_path`)
PATH_BINS = 20
_KEEP_CONFIGS = 64


def state(job: Job) -> dict[str, Any]:
    return job.extra.get(REPORTS_KEY) or {}


#: the most bytes of a job's `metrics.jsonl` read at once (what follows is read at the next call):
#: a job that writes a gigabyte of reports, or one endless line, must not fill the server's memory
READ_AT_MOST = 8 << 20

#: the largest value of a report's field that is believed (beyond, the field is ignored like a
#: non-number: a job's typo, such as `num_gpus=2**63` or `step_time=1e308`, must not overflow the
#: estimator in the server's scheduling round); the rest are bounded by finiteness alone
_MAX = {"t": 1e11, "num_gpus": 1 << 16, "num_nodes": 1 << 16, "batch_size": 1 << 30,
        "init_batch_size": 1 << 30, "max_batch_size": 1 << 30, "max_local_bsz": 1 << 30,
        "accum_steps": 1 << 20, "timed_steps": 1e9, "restart": 1 << 30, "step_time": 1e6,
        "compute_time": 1e6, "grad_sqr": 1e100, "grad_var": 1e100}
#: below these a value counts as 0 (a step of a nanosecond is not believed, and the estimator
#: divides by step times and gradient statistics: a subnormal one made infinite work)
_TINY = {"step_time": 1e-6, "compute_time": 1e-6, "grad_sqr": 1e-100, "grad_var": 1e-100}


def _num(rec: dict, key: str, kind=float, lo: float = 0.0) -> Any:
    """`rec[key]` as a number of `kind` in [lo, its `_MAX`] (0 below its `_TINY`), else None."""
    v = rec.get(key)
    if v is None or isinstance(v, bool):
        return None
    try:
        v = kind(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(v) and lo <= v <= _MAX.get(key, math.inf)):
        return None
    return kind(0) if 0 < v < _TINY.get(key, 0.0) else v


def _timed(rec: dict) -> bool:
    """Whether a report carries a believable time `t` (one that does not is skipped)."""
    return _num(rec, "t", lo=-_MAX["t"]) is not None


def progress_of(rec: dict, epochs: int | None = None) -> float | None:
    """The fraction of its work a report says the job has done (None if it does not say)."""
    p = _num(rec, "progress")
    if p is None:
        e, total = _num(rec, "epoch"), _num(rec, "epochs") or epochs
        if e is not None and total:
            p = e / total
        else:
            s, total = _num(rec, "step"), _num(rec, "total_steps")
            if s is not None and total:
                p = s / total
    return None if p is None else min(max(p, 0.0), 1.0)


def ingest(job: Job, records: Iterable[dict[str, Any]]) -> int:
    """Fold reports into the job's state; returns how many were used."""
    st = job.extra.setdefault(REPORTS_KEY, {})
    used = 0
    for rec in records:
        if not isinstance(rec, dict) or not _timed(rec):
            continue
        _fold(st, rec, job.spec.epochs)
        used += 1
    if used:
        st["version"] = st.get("version", 0) + used
    return used


def _avg(old: float | None, new: float | None, count: int, covered: float) -> float | None:
    if new is None:
        return old
    if old is None:
        return new
    share = SMOOTHING if covered >= REPORT_S else 1.0 - (1.0 - SMOOTHING) ** (covered / REPORT_S)
    w = max(1.0 / count, share)
    return old + w * (new - old)


def configs(st: dict[str, Any], fallback: bool = False) -> dict[str, list]:
    """The job's measured configurations that are believed: those on placements (nodes, GPUs)
    it ran on for `SETTLE_S` seconds or more, unless none is and nothing else (`fallback`: its
    family's) tells of its speed — then all. (A state kept before the seconds were: all.)"""
    cfgs = st.get("configs") or {}
    measured = st.get("measured_s")
    if not measured:
        return cfgs
    believed = {key: v for key, v in cfgs.items()
                if measured.get(key.rsplit(",", 2)[0], SETTLE_S) >= SETTLE_S}
    return believed if believed or fallback else cfgs


def _fold(st: dict[str, Any], rec: dict[str, Any], epochs: int | None) -> None:
    t = float(rec["t"])
    r = _num(rec, "num_gpus", int, 1) or 1
    k = min(_num(rec, "num_nodes", int, 1) or 1, r)
    b = _num(rec, "batch_size", int, 1)
    a = _num(rec, "accum_steps", int) or 0
    step = _num(rec, "step_time")
    run = _num(rec, "restart", int) or 0
    _hear(st, t, run)
    for key in ("init_batch_size", "max_batch_size", "max_local_bsz"):
        v = _num(rec, key, int, 1)
        if v is not None:
            st[key] = v
    if b is not None:
        st["batch_size"] = b
    if step and b is not None:
        m = max(math.ceil(math.ceil(b / r) / (a + 1)), 1)
        cfgs = st.setdefault("configs", {})
        ck = f"{k},{r},{m},{a}"
        # the seconds of steps this report covers: as many as it says it timed, else since the
        # job's last report on the same placement in the same run, else (the first after a
        # resize) its one step
        place = f"{k},{r}"
        prev = st.get("step_at")
        timed = _num(rec, "timed_steps", float, 1.0)
        if timed is not None:
            covered = step * timed
        else:
            covered = t - prev[0] if prev is not None and prev[1:] == [place, run] and t > prev[0] else step
        st["step_at"] = [t, place, run]
        c = cfgs.get(ck) or [0, None, None]
        c[0] += 1
        c[1] = _avg(c[1], step, c[0], covered)
        c[2] = _avg(c[2], _num(rec, "compute_time") or None, c[0], covered)
        cfgs[ck] = c
        measured = st.setdefault("measured_s", {})  # by placement (an adaptive job's batch
        measured[place] = measured.get(place, 0.0) + covered  # size changes where it runs)
        if len(cfgs) > _KEEP_CONFIGS:  # the least measured go first
            del cfgs[min(cfgs, key=lambda x: cfgs[x][0])]
        st["max_gpus"] = max(st.get("max_gpus", 0), r)
    sqr, var = _num(rec, "grad_sqr"), _num(rec, "grad_var")
    p = progress_of(rec, epochs)
    last = st.get("last")
    if sqr is not None and var is not None and sqr + var > 0:
        st["grad"] = [sqr, var]  # the job smooths its own statistics; they change as it trains
        if p is not None:  # and where in its run it measured them (what later jobs learn from):
            where = (p + last[1]) / 2 if last is not None and last[1] <= p else p  # since the last
            st.setdefault("grad_path", {})[str(path_bin(where))] = [sqr, var]
    if p is None:
        return
    if last is not None and last[2] == run and last[3][:2] == [k, r] and t > last[0] and p >= last[1]:
        spans = st.setdefault("spans", {})
        for v in spans.values():
            v[0] *= SPAN_DECAY
            v[1] *= SPAN_DECAY
            if len(v) > 3:
                v[3] *= SPAN_DECAY
        sk = f"{k},{r}"  # (an adaptive job changes its batch size as it goes: the rate on the GPUs)
        span = spans.get(sk) or [0.0, 0.0, b, 0.0]
        if len(span) < 4:  # kept before the efficiency was: counted at today's from here on
            span.append(None)
        dt = t - last[0]
        st["max_gpus"] = max(st.get("max_gpus", 0), r)  # its rate there measured, step times or
        span[0] += dt  # not (a job that reports only progress ran on 2 GPUs, and was capped at 1)
        span[1] += p - last[1]
        span[2] = b
        if span[3] is not None:
            span[3] += dt * efficiency(st, last[3][2] or b)
        spans[sk] = span
        if step and b:  # the work this stretch of the run cost (goodput-seconds, as measured)
            stretch = st.setdefault("path_work", {}).setdefault(str(path_bin((p + last[1]) / 2)), [0.0, 0.0])
            stretch[0] += dt * efficiency(st, b) * b / step
            stretch[1] += p - last[1]
    st["last"] = [t, p, run, [k, r, b]]
    st["progress"] = p


def _hear(st: dict[str, Any], t: float, run: int) -> None:
    """Keep when the job last reported and how often it does (`heard`: [last t, run, gaps
    between consecutive reports of one run, their sum]): what tells a job that went silent."""
    heard = st.get("heard")
    if heard is None or t >= heard[0]:
        gaps, total = (heard[2], heard[3]) if heard is not None else (0, 0.0)
        if heard is not None and heard[1] == run and t > heard[0]:
            gaps, total = gaps + 1, total + t - heard[0]
        st["heard"] = [t, run, gaps, total]


def path_bin(progress: float) -> int:
    """The stretch of a run (0..PATH_BINS-1) that `progress` (0..1) lies in."""
    return min(max(int(progress * PATH_BINS), 0), PATH_BINS - 1)


def nearest(path: dict[int, Any], b: int) -> Any:
    """The entry of `path` (by stretch) for stretch b, else the nearest stretch's (the earlier on
    a tie)."""
    return path[min(path, key=lambda x: (abs(x - b), x))]


def efficiency(st: dict[str, Any], batch: int | None) -> float:
    """Statistical efficiency of a step at global batch `batch` by the gradient statistics known
    now (the job's latest): progress per sample relative to the initial batch size's, Pollux's
    (var + sqr) / (var + sqr * B / B0). 1 without statistics or batch sizes."""
    grad, b0 = st.get("grad"), st.get("init_batch_size")
    if not grad or not batch or not b0:
        return 1.0
    sqr, var = grad
    s = batch / b0
    return (var + sqr) / (var + sqr * s) if var + sqr * s > 0 else 1.0


# -- live: metrics.jsonl -------------------------------------------------------------------------
def load_reports(path: str | Path) -> list[dict[str, Any]]:
    """The reports of a job's `metrics.jsonl` (lines that are not JSON objects with a believable
    time `t` skipped, as `ingest` skips them)."""
    try:
        data = nofollow.read_bytes(path)  # the job's file: no link, no FIFO
    except OSError:
        return []
    return [r for r in _records(data) if _timed(r)]


def load_recent(path: str | Path, end: int, size: int | None = None) -> list[dict[str, Any]]:
    """The reports in the last `size` (`READ_AT_MOST`) bytes of a job's `metrics.jsonl` before
    byte `end` (a line the window's start cuts is left out): what the server reads of a job's
    file beyond `refresh`'s new lines, bounded like them (`load_reports` reads it whole: the
    job's side only)."""
    start = max(end - (size or READ_AT_MOST), 0)
    try:
        data = nofollow.read_bytes(path, offset=start, limit=end - start) if end > start else b""
    except OSError:
        return []
    if start:
        data = data[data.find(b"\n") + 1:]  # (no newline at all: nothing whole; find gives -1)
    return [r for r in _records(data) if _timed(r)]


def _records(data: bytes) -> list[dict[str, Any]]:
    out = []
    for line in data.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def refresh(job: Job, path: str | Path) -> list[dict[str, Any]]:
    """Fold the lines the job appended to its `metrics.jsonl` since the last call, and return
    the reports folded (empty: nothing new). Live executors call it for every running job before
    each round, and once more when its run ends. `job.extra["_step_before"]` is then the last
    step report before those (None where none was read since the server started).

    Only what is new is read: a stat per call when nothing changed, else the bytes after
    `reports_offset` (a job that reports every step writes a hundred thousand lines in a few
    hours; reading the whole file each round took 0.4 s per job there, on the server's event
    loop). A line still being written (no newline yet) waits for the next call; a file shorter
    than the offset, or another file at the path, is read from its start (the job's directory
    was reset). At most `READ_AT_MOST` bytes are read a call, the rest at the next ones; a line
    longer than that is skipped whole."""
    try:
        st = Path(path).stat()
    except OSError:
        return []
    stamp = [st.st_mtime_ns, st.st_size, st.st_ino]
    old = job.extra.get("_reports_stamp")
    if old == stamp:
        return []
    offset = job.extra.get("reports_offset")
    if offset is None and job.extra.get("reports_read"):  # kept by a version that counted records
        offset = _offset_after(path, int(job.extra["reports_read"]))
    offset = -1 if offset is None else int(offset)
    if not 0 <= offset <= st.st_size or (old is not None and old[2:] != stamp[2:]):
        offset, job.extra["reports_read"] = 0, 0
        job.extra.pop("_last_step", None)
        job.extra.pop("_overlong", None)
    try:  # the job's file: no link, no FIFO; a bounded read (the rest at the next call)
        data = nofollow.read_bytes(path, offset=offset, limit=READ_AT_MOST)
    except OSError:
        return []
    if offset + len(data) >= st.st_size:  # all of it read: nothing new until the file changes
        job.extra["_reports_stamp"] = stamp
    if job.extra.get("_overlong"):  # the rest of a line longer than READ_AT_MOST: not a report
        cut = data.find(b"\n") + 1
        if cut:
            job.extra.pop("_overlong")
        offset, data = offset + (cut or len(data)), data[cut:] if cut else b""
    end = data.rfind(b"\n") + 1  # complete lines only
    if not end and len(data) >= READ_AT_MOST:  # one line fills the read: skipped, to its end
        end, job.extra["_overlong"] = len(data), True
        data = b""
    records = _records(data[:end])
    job.extra["reports_offset"] = offset + end
    job.extra["reports_read"] = int(job.extra.get("reports_read", 0)) + len(records)
    records = [r for r in records if _timed(r)]
    ingest(job, records)
    steps = [r for r in records if r.get("step_time") is not None]
    job.extra["_step_before"] = job.extra.get("_last_step")
    if steps:
        job.extra["_last_step"] = steps[-1]
    return records


def _offset_after(path: str | Path, count: int) -> int | None:
    """The byte offset after the first `count` report objects of the file (None if it has
    fewer: another file)."""
    try:
        data = nofollow.read_bytes(path)
    except OSError:
        return None
    at = 0
    for line in data.splitlines(keepends=True):
        if count <= 0:
            break
        at += len(line)
        if _records(line):
            count -= 1
    return at if count <= 0 else None
