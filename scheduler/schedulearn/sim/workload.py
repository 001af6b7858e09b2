"""Reader for Pollux workload files (``workload-N.csv``).

Columns ``name,time,application,num_replicas,batch_size``: job name, arrival
in seconds from the start of the trace, application (one of
:data:`schedulearn.sim.apps.APPLICATIONS`), the user's GPU count and the
user's *global* batch size.  Durations are not in the file; they follow from
the application profiles (:mod:`schedulearn.sim.apps`).  An optional last
column ``deadline`` gives seconds after arrival by which the job should finish
(empty: no deadline).

Errors are ``ValueError`` with a one-line message ``FILE:LINE: FIELD: ...``
(``FILE`` as the path was given, ``LINE`` 1-based, the header is line 1).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from .apps import APPLICATIONS, get_profile

__all__ = ["HEADER", "MAX_SECONDS", "WorkloadJob", "is_workload_csv", "read_workload"]

#: The largest time a trace may give, in seconds (10 years; Philly's longest job ran 54 days): a
#: value past it is a slip of units (milliseconds), and at 1e300 s a job's own run time vanished
#: from its completion time (1e300 + 66 - 1e300 == 0) while the tables printed 300-digit numbers.
MAX_SECONDS = 10 * 365 * 86400

HEADER: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")
DEADLINE_HEADER: tuple[str, ...] = (*HEADER, "deadline")


@dataclass(frozen=True)
class WorkloadJob:
    name: str
    submit_time: float  # seconds from the start of the trace
    application: str
    gpus: int  # the user's GPU count (num_replicas)
    batch_size: int  # the user's global batch size
    deadline: float | None = None  # seconds after arrival


def _split_header(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.lstrip("\ufeff").strip().split(","))


def is_workload_csv(path: str | Path) -> bool:
    """True if the file's first line is the workload header."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return _split_header(first) in (HEADER, DEADLINE_HEADER)


def _int_field(where: str, field: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{where}: {field}: expected an integer >= 1, got {text!r}")
    return value


def read_workload(path: str | Path) -> list[WorkloadJob]:
    """Jobs of a workload file, in file order."""
    jobs: list[WorkloadJob] = []
    seen: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        columns = None if header is None else _split_header(",".join(header))
        if columns not in (HEADER, DEADLINE_HEADER):
            got = "" if header is None else ",".join(header)
            raise ValueError(f"{path}:1: header: expected {','.join(HEADER)!r} (optionally ,deadline), "
                             f"got {got!r}")
        for row in reader:
            line = reader.line_num
            where = f"{path}:{line}"
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(columns):
                raise ValueError(f"{where}: expected {len(columns)} fields, got {len(row)}")
            name, time_s, app, replicas_s, bsz_s, *rest = (c.strip() for c in row)
            if not name:
                raise ValueError(f"{where}: name: expected a non-empty name, got {name!r}")
            if name in seen:
                raise ValueError(f"{where}: name: duplicate {name!r} (first on line {seen[name]})")
            seen[name] = line
            try:
                submit = float(time_s)
            except ValueError:
                submit = math.nan
            if not (math.isfinite(submit) and 0 <= submit <= MAX_SECONDS):
                raise ValueError(f"{where}: time: expected a number of seconds from 0 to {MAX_SECONDS:,}, "
                                 f"got {time_s!r}")
            if app not in APPLICATIONS:
                raise ValueError(
                    f"{where}: application: unknown {app!r}; expected one of {', '.join(APPLICATIONS)}"
                )
            gpus = _int_field(where, "num_replicas", replicas_s)
            batch = _int_field(where, "batch_size", bsz_s)
            try:
                get_profile(app).check_batch_size(batch)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            deadline = None
            if rest and rest[0]:
                try:
                    deadline = float(rest[0])
                except ValueError:
                    deadline = math.nan
                if not (math.isfinite(deadline) and 0 < deadline <= MAX_SECONDS):
                    raise ValueError(f"{where}: deadline: expected seconds > 0 after arrival, at most "
                                     f"{MAX_SECONDS:,} (or empty), got {rest[0]!r}")
            jobs.append(WorkloadJob(name, submit, app, gpus, batch, deadline))
    return jobs
