"""Trace readers: rigid CSV (`name,submit_time,gpus,duration`), the Philly summary
(`timestamp,duration,num_gpus,gpu_time,cluster`) and Pollux workloads (`sim.workload`).
The format is detected from the header. Rigid and Pollux traces may end with a `deadline`
column: seconds after submission by which the job should finish (empty: none); it becomes the
job's absolute `JobSpec.deadline`. Errors are one line: `file:line: field: what is allowed`."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..model import JobSpec, SpecError
from .workload import MAX_SECONDS

#: traces are UTF-8; a byte-order mark (a spreadsheet's "CSV UTF-8" export) is skipped
ENCODING = "utf-8-sig"
RIGID_HEADER = ["name", "submit_time", "gpus", "duration"]
PHILLY_HEADER = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"]
WORKLOAD_HEADER = ["name", "time", "application", "num_replicas", "batch_size"]


@dataclass(frozen=True, slots=True)
class TraceJob:
    submit_time: float
    spec: JobSpec
    where: str  # file:line, for error messages


def _num(where: str, field: str, text: str, kind=float, minimum=None, strict=False, maximum=None):
    try:
        value = kind(text)
        if not math.isfinite(value):  # nan and inf parse as floats
            raise ValueError
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise SpecError(f"{where}: {field}: expected {what}, got {text!r}") from None
    if minimum is not None and (value <= minimum if strict else value < minimum):
        op = ">" if strict else ">="
        raise SpecError(f"{where}: {field}: expected a value {op} {minimum}, got {text!r}")
    if maximum is not None and value > maximum:
        raise SpecError(f"{where}: {field}: expected at most {maximum:,} (seconds: 10 years), got {text!r}")
    return value


def _seconds(where: str, field: str, text: str, strict: bool) -> float:
    return _num(where, field, text, minimum=0, strict=strict, maximum=MAX_SECONDS)


def _rows(path: Path):
    with path.open(newline="", encoding=ENCODING) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        yield [h.strip() for h in header] if header else []
        for line, row in enumerate(reader, start=2):
            if row and any(c.strip() for c in row):
                yield line, row


def read_rigid(path: Path) -> list[TraceJob]:
    rows = _rows(path)
    width = len(next(rows))
    jobs = []
    for line, row in rows:
        where = f"{path.name}:{line}"
        if len(row) != width:
            names = ",".join(RIGID_HEADER + (["deadline"] if width == 5 else []))
            raise SpecError(f"{where}: expected {width} fields ({names}), got {len(row)}")
        name, t, g, d, *rest = (c.strip() for c in row)
        t = _seconds(where, "submit_time", t, strict=False)
        g = _num(where, "gpus", g, int, minimum=1)
        d = _seconds(where, "duration", d, strict=True)
        dl = t + _seconds(where, "deadline", rest[0], strict=True) if rest and rest[0] else None
        jobs.append(TraceJob(t, JobSpec(name=name or f"job{line}", gpus=g, duration=d, deadline=dl), where))
    return jobs


def _philly_time(where: str, text: str) -> float:
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise SpecError(f"{where}: timestamp: expected 'YYYY-MM-DD HH:MM:SS', got {text!r}") from None


def read_philly(path: Path, start: str | None = None, limit: int | None = None) -> list[TraceJob]:
    """Philly jobs sorted by submission, times relative to the first kept job.
    `start`: skip jobs submitted before this date/time; `limit`: keep the first N after it."""
    t0 = _philly_time("--start", start) if start else None
    rows = _rows(path)
    next(rows)
    raw = []
    for line, row in rows:
        where = f"{path.name}:{line}"
        if len(row) != 5:
            raise SpecError(f"{where}: expected 5 fields ({','.join(PHILLY_HEADER)}), got {len(row)}")
        t = _philly_time(where, row[0])
        if t0 is not None and t < t0:
            continue
        d = _seconds(where, "duration", row[1], strict=True)
        g = _num(where, "num_gpus", row[2], int, minimum=1)
        raw.append((t, line, d, g, where))
    raw.sort()
    if limit is not None:
        raw = raw[:limit]
    base = raw[0][0] if raw else 0.0
    return [TraceJob(t - base, JobSpec(name=f"philly-{line}", gpus=g, duration=d), where)
            for t, line, d, g, where in raw]


def read_workload(path: Path) -> list[TraceJob]:
    """Pollux workload jobs: the user's GPU count and batch size (what rigid policies run), elastic
    between 1 and Pollux's cap, batch size adaptive except ncf (pinned as in the Pollux runs)."""
    from .apps import get_profile
    from .workload import read_workload as read

    def spec(w) -> JobSpec:
        app = get_profile(w.application)
        cap = 1 if w.application == "ncf" else min(64, app.max_batch_size // app.min_local_bsz)
        deadline = None if w.deadline is None else w.submit_time + w.deadline
        return JobSpec(name=w.name, gpus=w.gpus, application=w.application, batch_size=w.batch_size,
                       min_gpus=1, max_gpus=max(cap, w.gpus), adaptive_batch=w.application != "ncf",
                       deadline=deadline)

    return [TraceJob(w.submit_time, spec(w), f"{path.name}:{i + 2}") for i, w in enumerate(read(path))]


#: The set-up each trace format was published with (`simulate`'s defaults for that format): the
#: Pollux workloads ran on 16 nodes x 4 GPUs, a round every 60 s, 30 s per restart. Rigid and
#: Philly traces have none: a cluster must be named, rounds follow events, restarts are free.
REFERENCE_SETTINGS = {
    "pollux": {"cluster": "16x4", "interval": 60.0, "restart_penalty": 30.0},
}


def trace_format(path: str | Path) -> str:
    """`rigid`, `philly` or `pollux` (a Pollux workload), from the header (`unknown` otherwise)."""
    try:
        with Path(path).open(newline="", encoding=ENCODING) as f:
            header = [h.strip() for h in next(csv.reader(f), [])]
    except (OSError, UnicodeDecodeError):
        return "unknown"
    for name, known in (("rigid", RIGID_HEADER), ("philly", PHILLY_HEADER), ("pollux", WORKLOAD_HEADER)):
        if header == known or (name != "philly" and header == [*known, "deadline"]):
            return name
    return "unknown"


def load_trace(path: str | Path, start: str | None = None, limit: int | None = None) -> list[TraceJob]:
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"trace: {str(path)!r} is a folder; expected a CSV trace file")
    if not path.is_file():
        raise SpecError(f"trace: no such file {str(path)!r}")
    try:
        return _load(path, start, limit)
    except UnicodeDecodeError as e:  # (a binary file, or another encoding's text)
        raise SpecError(f"trace: {path.name} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                        f"{e.start:,}); expected a CSV trace") from None


def _load(path: Path, start: str | None, limit: int | None) -> list[TraceJob]:
    with path.open(newline="", encoding=ENCODING) as f:
        header = [h.strip() for h in next(csv.reader(f), [])]
    if header == PHILLY_HEADER:
        return read_philly(path, start, limit)
    if start is not None:
        raise SpecError("--start: only for Philly traces (timestamp,duration,num_gpus,gpu_time,cluster)")
    if header in (RIGID_HEADER, [*RIGID_HEADER, "deadline"]):
        jobs = read_rigid(path)
    elif header in (WORKLOAD_HEADER, [*WORKLOAD_HEADER, "deadline"]):
        jobs = read_workload(path)
    else:
        raise SpecError(
            f"{path.name}:1: header: expected one of {','.join(RIGID_HEADER)} | "
            f"{','.join(PHILLY_HEADER)} | {','.join(WORKLOAD_HEADER)} (rigid and workload traces "
            f"may end with ,deadline); got {','.join(header)}")
    jobs.sort(key=lambda j: j.submit_time)
    return jobs[:limit] if limit is not None else jobs


def shifted(trace: list[TraceJob], seconds: float) -> list[TraceJob]:
    """The trace with every arrival and deadline `seconds` later (a job's deadline stays as far
    after its arrival). With rounds at multiples of the interval this replays the same trace at
    another phase: a resizing policy's figures are one draw of a chaotic process, and a few
    phases show how far they move."""
    if not seconds:
        return list(trace)
    return [TraceJob(tj.submit_time + seconds,
                     tj.spec if tj.spec.deadline is None
                     else tj.spec.model_copy(update={"deadline": tj.spec.deadline + seconds}), tj.where)
            for tj in trace]
