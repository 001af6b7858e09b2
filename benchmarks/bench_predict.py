"""Run-time prediction from job features and history: `estimates.predict.Predictor` (median of
the most recent similar finished jobs, with back-off) against the baseline "mean of similar
jobs" (`MeanOfSimilar`, the original Schedulearn's), on a time-ordered split.

Philly (traces/philly.csv): jobs sorted by submission; the last 20 % are the test set (16k jobs).
Features are what the summary has: virtual cluster and GPU count. Two protocols:
* static: the predictors learn from the training jobs only, then predict every test job;
* online (what a live scheduler does): each test job is predicted from the jobs that *finished*
  before it was submitted (submission + duration; queueing ignored), training jobs included.
The predictor's two parameters (how many recent jobs, how many at least) are chosen on the last
20 % of the training period (validation), never on the test set.

Pollux workloads 1-8 (traces/pollux/workloads/): features application, batch size, GPUs and
declared epochs; run time = the job alone on its requested GPUs and batch size (the profiles);
the workloads one after another (8 h apart); the last 20 % are the test set; online protocol.
There the run time is a function of (application, batch size, GPUs), so both predictors are exact
once a combination has been seen; the second Pollux row keeps only the application.

Metric: median absolute percentage error (MdAPE, %), and the share of jobs predicted within 2x.

    python benchmarks/bench_predict.py [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))

from schedulearn.estimates.predict import MeanOfSimilar, Predictor, mdape  # noqa: E402

GRID = [(r, m) for r in (3, 5, 10, 20, 50) for m in (1, 2, 3)]


def philly(path: Path) -> list[tuple[float, float, dict]]:
    """(submit time, duration, features) sorted by submission."""
    out = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            t = datetime.fromisoformat(row["timestamp"]).replace(tzinfo=timezone.utc).timestamp()
            out.append((t, float(row["duration"]), {"cluster": row["cluster"], "gpus": int(row["num_gpus"])}))
    out.sort(key=lambda x: x[0])
    return out


def pollux(folder: Path) -> list[tuple[float, float, dict]]:
    from schedulearn.estimates import packed_shape
    from schedulearn.sim.apps import EPOCHS, get_profile
    from schedulearn.sim.workload import read_workload

    out = []
    for n in range(1, 9):
        path = folder / f"workload-{n}.csv"
        if not path.is_file():
            continue
        for w in read_workload(path):
            p = get_profile(w.application)
            run = p.time_to_complete(0.0, packed_shape(w.gpus, 4), w.batch_size)
            feats = {"application": w.application, "batch_size": w.batch_size, "gpus": w.gpus,
                     "epochs": EPOCHS[w.application]}
            out.append(((n - 1) * 8 * 3600 + w.submit_time, run, feats))
    out.sort(key=lambda x: x[0])
    return out


def static(jobs, split: int, make) -> list[tuple[float, float]]:
    model = make()
    for _, d, f in jobs[:split]:
        model.add(f, d)
    fallback = sorted(d for _, d, _ in jobs[:split])[split // 2]
    return [(model.predict(f) or fallback, d) for _, d, f in jobs[split:]]


def online(jobs, split: int, make) -> list[tuple[float, float]]:
    """Each job from `split` on is predicted from the jobs finished before it was submitted."""
    import heapq

    model, ends, pairs = make(), [], []
    fallback = None
    for i, (t, d, f) in enumerate(jobs):
        while ends and ends[0][0] <= t:
            _, j = heapq.heappop(ends)
            model.add(jobs[j][2], jobs[j][1])
            fallback = jobs[j][1] if fallback is None else fallback
        if i >= split:
            pairs.append((model.predict(f) or fallback or 1.0, d))
        heapq.heappush(ends, (t + d, i))
    return pairs


def within2(pairs) -> float:
    return 100.0 * sum(1 for p, a in pairs if 0.5 <= p / a <= 2.0) / len(pairs)


def choose(jobs, split: int) -> tuple[int, int]:
    """The (recent, min_count) with the least MdAPE on the last 20 % of the training jobs."""
    train = jobs[:split]
    val = int(len(train) * 0.8)
    scores = {(r, m): mdape(online(train, val, lambda r=r, m=m: Predictor(recent=r, min_count=m)))
              for r, m in GRID}
    return min(scores, key=scores.get)


def evaluate(name: str, jobs, protocols=("static", "online")) -> list[dict]:
    split = int(len(jobs) * 0.8)
    began = time.perf_counter()
    r, m = choose(jobs, split)
    rows = []
    for protocol in protocols:
        run = static if protocol == "static" else online
        for label, make in (("mean-of-similar", MeanOfSimilar), ("recent-median (default)", Predictor),
                            (f"recent-median (recent={r}, min_count={m}: validation)",
                             lambda: Predictor(recent=r, min_count=m))):
            pairs = run(jobs, split, make)
            rows.append({"trace": name, "protocol": protocol, "predictor": label, "test_jobs": len(pairs),
                         "mdape_pct": round(mdape(pairs), 1), "within_2x_pct": round(within2(pairs), 1)})
    rows[-1]["wall_s"] = round(time.perf_counter() - began, 1)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = evaluate("philly", philly(ROOT / "traces" / "philly.csv"))
    jobs = pollux(ROOT / "traces" / "pollux" / "workloads")
    rows += evaluate("pollux 1-8", jobs, ("online",))
    app_only = [(t, d, {"application": f["application"]}) for t, d, f in jobs]
    rows += evaluate("pollux 1-8, application only", app_only, ("online",))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {load:.1f}")
    print("| trace | protocol | predictor | test jobs | MdAPE % | within 2x % |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['trace']} | {r['protocol']} | {r['predictor']} | {r['test_jobs']:,} | {r['mdape_pct']} "
              f"| {r['within_2x_pct']} |")


if __name__ == "__main__":
    main()
