"""Several phases of the rounds, simulated side by side: shared by `bench_pollux` and `bench_deadlines`.

A policy that resizes jobs on fitted models is chaotic: the same trace with every arrival a few
seconds later (another phase against the 60 s rounds) moves one workload's figures by ±3 % of
JCT or ±3.5 points of deadlines met. One phase is one draw; the mean over phases
(`--shift 0,15,30,45`) is a steadier figure to hold a target to.

`parse_shifts` reads the option; `run` runs independent simulations in `jobs` processes (each
simulation is deterministic and alone in its process, so the figures are those of a run one at a
time, only sooner) and says on stderr how many are done and about how long the rest will take
(`eta`: each task left at the mean time of the tasks of its kind done so far — a `goodput`
simulation takes 20 times a rigid policy's);
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


def eta(kinds: list, took: dict[int, float], workers: int, running: dict[int, float] | None = None) -> float:
    """Seconds the tasks not in `took` (task index -> seconds it took) should take on `workers`
    processes: each at the mean time of the done tasks of its kind (`kinds[k]`), of all done
    tasks where none of its kind is done yet; less, for a task in flight (`running`: task index
    -> seconds it has run), what it has run already (down to 0)."""
    if not took:
        return 0.0
    running = running or {}
    by_kind: dict = {}
    for k, secs in took.items():
        by_kind.setdefault(kinds[k], []).append(secs)
    mean = {kind: sum(v) / len(v) for kind, v in by_kind.items()}
    overall = sum(took.values()) / len(took)
    left = [max(mean.get(kinds[k], overall) - running.get(k, 0.0), 0.0)
            for k in range(len(kinds)) if k not in took]
    return sum(left) / max(1, min(workers, len(left)))


def _timed(fn: Callable, *args) -> tuple:
    began = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - began


def run(tasks: list[tuple[Callable, tuple]], jobs: int = 1, out=None, kinds: list | None = None) -> list:
    """Each `(function, args)` of `tasks` called, in `jobs` processes (1: here, in order); the
    results in the order of `tasks`. After each: `k/N done, S s in, about L s left` on `out`
    (default: stderr), L from `eta` with `kinds` (one per task, say its policy; default: the
    function, so every task of one function counts alike)."""
    out = out or sys.stderr
    kinds = kinds if kinds is not None else [fn for fn, _ in tasks]
    if len(kinds) != len(tasks):
        raise ValueError(f"kinds: expected one per task ({len(tasks)}), got {len(kinds)}")
    began, results, took = time.perf_counter(), [None] * len(tasks), {}
    workers = 1 if jobs == 1 or len(tasks) <= 1 else min(jobs, len(tasks))
    # The pool hands tasks out in order as workers free: the first `workers` start at once,
    # each next one when a task ends (for the ETA's tasks in flight).
    started = [began] * workers  # by task index

    def done(k: int, value: tuple) -> None:
        results[k], took[k] = value
        now = time.perf_counter()
        if len(started) < len(tasks):
            started.append(now)
        running = {j: now - t for j, t in enumerate(started) if j not in took}
        left = eta(kinds, took, workers, running)
        spent = now - began
        print(f"{len(took)}/{len(tasks)} done, {spent:.0f} s in, about {left:.0f} s left",
              file=out, flush=True)

    if workers == 1:
        for k, (fn, args) in enumerate(tasks):
            done(k, _timed(fn, *args))
        return results
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(_timed, fn, *args): k for k, (fn, args) in enumerate(tasks)}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
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
