"""Several phases of the rounds, simulated side by side: shared by `bench_pollux` and `bench_deadlines`.

A policy that resizes jobs on fitted models is chaotic: the same trace with every arrival a few
seconds later (another phase against the 60 s rounds) moves one workload's figures by ±3 % of
JCT or ±3.5 points of deadlines met. One phase is one draw; the mean over phases
(`--shift 0,15,30,45`) is a steadier figure to hold a target to.

`parse_shifts` reads the option; `run` runs independent simulations in `jobs` processes (each
simulation is deterministic and alone in its process, so the figures are those of a run one at a
time, only sooner) and says on stderr how many are done and about how long the rest will take;
`mean_rows` averages the rows of the phases.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed

DAY = 86400.0


def parse_shifts(text: str) -> list[float]:
    """`"0,15,30,45"` -> [0.0, 15.0, 30.0, 45.0]; ValueError naming the option and the range."""
    try:
        shifts = [float(s) for s in text.split(",")]
    except ValueError:
        raise ValueError(f"--shift: expected seconds in [0, 86400), comma-separated, got {text!r}") from None
    bad = [s for s in shifts if not 0 <= s < DAY]
    if bad:
        raise ValueError(f"--shift: expected seconds in [0, 86400), got {bad[0]:g}")
    if len(set(shifts)) != len(shifts):
        raise ValueError(f"--shift: each phase once, got {text!r}")
    return shifts


def parse_jobs(text: str) -> int:
    """`--jobs N`: a whole number from 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--jobs: expected a whole number of processes from 1, got {text!r}")
    return n


def run(tasks: list[tuple[Callable, tuple]], jobs: int = 1, out=None) -> list:
    """Each `(function, args)` of `tasks` called, in `jobs` processes (1: here, in order); the
    results in the order of `tasks`. After each: `k/N done, about S s left` on `out` (default:
    stderr; the ETA from the mean wall time per task so far)."""
    began, results, out = time.perf_counter(), [None] * len(tasks), out or sys.stderr

    def done(k: int) -> None:
        spent = time.perf_counter() - began
        left = spent / k * (len(tasks) - k)
        print(f"{k}/{len(tasks)} done, {spent:.0f} s in, about {left:.0f} s left", file=out, flush=True)

    if jobs == 1 or len(tasks) <= 1:
        for k, (fn, args) in enumerate(tasks):
            results[k] = fn(*args)
            done(k + 1)
        return results
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        futures = {pool.submit(fn, *args): k for k, (fn, args) in enumerate(tasks)}
        for n, fut in enumerate(as_completed(futures), start=1):
            results[futures[fut]] = fut.result()
            done(n)
    return results


def mean_rows(rows: Iterable[dict], key: tuple[str, ...], values: tuple[str, ...]) -> list[dict]:
    """One row per `key` (in first-seen order): `values` averaged over the rows of the phases,
    each value's figures by phase under `<value>_by_shift` (in the rows' order), and `shifts`."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in key), []).append(r)
    out = []
    for k, rs in groups.items():
        row = dict(zip(key, k, strict=True))
        row["shifts"] = [r["shift"] for r in rs]
        for v in values:
            row[f"{v}_by_shift"] = [r[v] for r in rs]
            row[v] = sum(r[v] for r in rs) / len(rs)
        out.append(row)
    return out
