"""A scheduler's past jobs as a trace for `schedulearn simulate`: what would another policy have
made of this lab's last month? (`schedulearn trace`, docs/simulator.md "Your own jobs".)

Each finished job that ran becomes a row of a rigid trace, `name,submit_time,gpus,duration` and
`deadline` when some job had one:
- `submit_time`: seconds after the first job written;
- `gpus`: the GPUs it held, on average over its run (GPU-seconds / run time, rounded; an elastic
  job replays at that one size);
- `duration`: its run time, every run counted (time redone after a preemption included);
- `deadline`: its deadline, seconds after its submission (empty: none).
Jobs still queued or running, and jobs that never started (cancelled in the queue), are left out
and counted. Cancelled and failed jobs are kept: they held their GPUs as long as they ran.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .sim.traces import RIGID_HEADER as HEADER

FINISHED = ("succeeded", "failed", "cancelled")


@dataclass
class Trace:
    rows: list[tuple[str, float, int, float, float | None]] = field(default_factory=list)
    #: why jobs were left out -> how many
    left_out: Counter = field(default_factory=Counter)
    first_submit: float | None = None  # epoch seconds of the first job written
    last_submit: float | None = None
    #: the jobs' completion times as they ran here (end - submit), to set beside the replay's
    jcts: list[float] = field(default_factory=list)
    gpu_seconds: float = 0.0  # the GPU-seconds the jobs written held
    last_end: float | None = None  # epoch seconds of the last end among them

    def utilization(self, gpus: int) -> float | None:
        """Busy GPU-seconds over `gpus` x (last end - first submission): `simulate`'s `GPU util`
        of the jobs as they ran here (None: no span, or no GPUs)."""
        if self.first_submit is None or self.last_end is None or gpus <= 0:
            return None
        span = self.last_end - self.first_submit
        return self.gpu_seconds / (gpus * span) if span > 0 else None

    @property
    def header(self) -> list[str]:
        return HEADER + (["deadline"] if any(r[4] is not None for r in self.rows) else [])

    def csv_text(self) -> str:
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        w.writerow(self.header)
        deadlines = len(self.header) > len(HEADER)
        for name, submit, gpus, duration, deadline in self.rows:
            row = [name, _num(submit), gpus, _num(duration)]
            w.writerow(row + ([_num(deadline) if deadline is not None else ""] if deadlines else []))
        return out.getvalue()


def _num(x: float) -> str:
    return f"{x:.1f}".removesuffix(".0")


def from_jobs(jobs: list[dict[str, Any]], since: float | None = None) -> Trace:
    """The trace of `jobs` (the API's job dicts) submitted at or after `since` (epoch seconds)."""
    trace = Trace()
    kept = []
    for j in sorted(jobs, key=lambda j: (j["submit_time"], j["id"])):
        if since is not None and j["submit_time"] < since:
            continue
        if j["state"] not in FINISHED:
            trace.left_out["not finished yet"] += 1
        elif j.get("start_time") is None or not j.get("run_s"):
            trace.left_out["never started"] += 1
        else:
            kept.append(j)
    if not kept:
        return trace
    t0 = trace.first_submit = kept[0]["submit_time"]
    trace.last_submit = kept[-1]["submit_time"]
    for j in kept:
        run = j["run_s"]
        gpus = max(1, round(j.get("attained_gpu_s", run) / run))
        deadline = j["spec"].get("deadline")
        after = deadline - j["submit_time"] if deadline is not None else None
        trace.jcts.append(j["end_time"] - j["submit_time"])
        trace.gpu_seconds += j.get("attained_gpu_s", run)
        trace.last_end = max(trace.last_end or 0.0, j["end_time"])
        trace.rows.append((j["name"], round(j["submit_time"] - t0, 1), gpus, max(0.1, round(run, 1)),
                           max(0.1, round(after, 1)) if after is not None else None))
    return trace


def cluster_shape(inventory: dict[str, Any]) -> tuple[str, str, int]:
    """`simulate --cluster` for the scheduler's own GPUs (`GET gpus`), a note when its hosts
    differ (the shape then gives every host the most GPUs any has), and how many GPUs it has."""
    sizes = [len(n["gpus"]) for n in inventory.get("nodes", []) if n["gpus"]]
    if not sizes:
        return "", "", 0
    shape = f"{len(sizes)}x{max(sizes)}"
    note = "" if len(set(sizes)) == 1 else f" (its hosts have {', '.join(map(str, sizes))} GPUs)"
    return shape, note, sum(sizes)
