"""The job store's cost: submits per second through `Engine.submit` with a SQLite file store and
with no store, measured side by side (alternating repetitions, medians), and the reads a server
does with 10,000 jobs stored: `list_jobs` (all, one state, the newest 100), `events(job_id)`,
and an engine restart (`load_jobs` + rebuilding the queue).

Target: >= 500 submits/s with SQLite. Each submit is what the REST API does: a dict spec,
validated, stored (the job row and its `submitted` event, one transaction each).

Run: PYTHONPATH=scheduler python benchmarks/bench_store.py [--jobs 10000] [--reps 3]
     [--postgres postgresql+psycopg://...]   (adds a PostgreSQL column to the submit figures)
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

import sqlalchemy  # noqa: E402
from schedulearn import Engine  # noqa: E402
from schedulearn.model import virtual_cluster  # noqa: E402
from schedulearn.sim.executor import SimExecutor  # noqa: E402
from schedulearn.store import SqlStore  # noqa: E402


def spec(i: int) -> dict:
    return {"name": f"train-{i}", "command": ["python", "train.py", "--seed", str(i)],
            "gpus": 1 + i % 4, "user": f"user{i % 7}", "env": {"EPOCHS": "10"}}


def submit_rate(jobs: int, store: SqlStore | None) -> tuple[float, float]:
    """Submits per second of wall time, and CPU microseconds (this process) per submit: the
    second is steadier on a machine shared with other work."""
    engine = Engine(virtual_cluster(16, 8), "fifo", SimExecutor(), store=store, clock=lambda: 0.0)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(jobs):
        engine.submit(spec(i), now=float(i))
    return jobs / (time.perf_counter() - t0), (time.process_time() - c0) / jobs * 1e6


def timed(fn, reps: int = 5) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--postgres", help="also measure submits into this (empty) PostgreSQL database")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
          f"{platform.machine()} {platform.processor() or ''}".strip())
    with tempfile.TemporaryDirectory() as tmp:
        rates: dict[str, list[float]] = {"none": [], "sqlite": []}
        cpu: dict[str, list[float]] = {"none": [], "sqlite": []}
        last = None
        for r in range(args.reps):  # alternate, so that load on the machine hits both alike
            rate, us = submit_rate(args.jobs, None)
            rates["none"].append(rate)
            cpu["none"].append(us)
            store = SqlStore(f"sqlite:///{tmp}/bench{r}.db")
            rate, us = submit_rate(args.jobs, store)
            rates["sqlite"].append(rate)
            cpu["sqlite"].append(us)
            if last is not None:
                last.close()
            last = store
        if args.postgres:
            pg = SqlStore(args.postgres)
            rate, us = submit_rate(args.jobs, pg)
            rates["postgresql"], cpu["postgresql"] = [rate], [us]
            pg.close()
        med = {k: statistics.median(v) for k, v in rates.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        print(f"\nsubmits through Engine.submit, {args.jobs} jobs, median of {args.reps} "
              f"alternating runs:")
        for k, v in med.items():
            print(f"  {k:10s} {v:8.0f}/s wall  {cmed[k]:7.0f} us CPU/submit   "
                  f"(runs: {', '.join(f'{x:.0f}' for x in rates[k])}/s)")
        print(f"  ratio none/sqlite: {med['none'] / med['sqlite']:.1f}x wall, "
              f"{cmed['sqlite'] / cmed['none']:.1f}x CPU; the store adds "
              f"{1e6 / med['sqlite'] - 1e6 / med['none']:.0f} us wall, "
              f"{cmed['sqlite'] - cmed['none']:.0f} us CPU per submit")

        store = last
        assert store is not None
        n = len(store.list_jobs(limit=None))
        print(f"\nreads with {n} jobs stored (SQLite file, best of 5):")
        reads = [
            ("list_jobs()", store.list_jobs),
            ("list_jobs(state='queued')", lambda: store.list_jobs(state="queued")),
            ("list_jobs(limit=100)", lambda: store.list_jobs(limit=100)),
            ("list_jobs(user=..., limit=100)", lambda: store.list_jobs(user="user3", limit=100)),
            ("events(job_id=...)", lambda: store.events(job_id=n // 2)),
        ]
        for label, fn in reads:
            print(f"  {label:32s} {timed(fn) * 1e3:8.1f} ms")
        url = f"sqlite:///{tmp}/bench{args.reps - 1}.db"

        def restart() -> None:
            s = SqlStore(url)
            Engine(virtual_cluster(16, 8), "fifo", SimExecutor(), store=s)
            s.close()

        print(f"  {'open + Engine restart':32s} {timed(restart, 3) * 1e3:8.1f} ms")
        store.close()


if __name__ == "__main__":
    main()
