"""Pollux workloads 1-4 through the real engine and every policy, against the published results.

For each workload (160 jobs, 16x4 GPUs, 60 s rounds, 30 s per checkpoint-restart) and policy:
average and p99 JCT, makespan, GPU utilisation, the ratio of the average JCT to the published
Tiresias and Pollux numbers (traces README), and the simulation's own wall and CPU time.
Simulations run one after another in this process (the profile caches warm up in the first
goodput run of a process; its time includes that).

    python benchmarks/bench_pollux.py [--workloads 1,2,3,4] [--policies fifo,...,goodput,goodput-attained]
                                      [--traces traces] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))

from schedulearn.model import parse_cluster  # noqa: E402
from schedulearn.sim.simulate import simulate  # noqa: E402
from schedulearn.sim.traces import load_trace  # noqa: E402

TIRESIAS = {1: 2474, 2: 5145, 3: 3876, 4: 3280}
POLLUX = {1: 2089, 2: 3323, 3: 2188, 4: 2721}
POLICIES = ("fifo", "elastic-fifo", "round-robin", "las", "goodput", "goodput-attained")


def make_policy(name: str):
    """A policy name, or `goodput-attained`: goodput weighting jobs by attained service instead of
    the remaining work its profile estimate knows (what live jobs get without progress reports)."""
    if name != "goodput-attained":
        return name
    from schedulearn.policies.goodput import Goodput

    p = Goodput()
    p.use_remaining = False
    p.name = name
    return p


def run(traces: Path, workloads: list[int], policies: list[str]) -> list[dict]:
    rows = []
    for w in workloads:
        trace = load_trace(traces / "pollux" / "workloads" / f"workload-{w}.csv")
        for policy in policies:
            cpu = time.process_time()
            r = simulate(trace, parse_cluster("16x4"), make_policy(policy), interval=60, restart_penalty=30)
            m = r.metrics
            rows.append({
                "workload": w, "policy": policy, "jobs": m["jobs"], "avg_jct_s": m["avg_jct_s"],
                "p99_jct_s": m["p99_jct_s"], "makespan_s": m["makespan_s"],
                "gpu_utilization": m["gpu_utilization"],
                "vs_tiresias": m["avg_jct_s"] / TIRESIAS[w], "vs_pollux": m["avg_jct_s"] / POLLUX[w],
                "restarts": sum(j.restarts for j in r.jobs), "rounds": r.rounds,
                "wall_s": r.wall_s, "cpu_s": time.process_time() - cpu,
            })
            print(f"workload-{w} {policy}: {m['avg_jct_s']:.0f} s avg JCT, {r.wall_s:.1f} s wall",
                  file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    las = {r["workload"]: r["avg_jct_s"] for r in rows if r["policy"] == "las"}
    head = ("| workload | policy | avg JCT s | vs las | vs Tiresias | vs Pollux | p99 JCT s | makespan s "
            "| GPU util | restarts | sim wall s | sim CPU s |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        vs_las = f"{r['avg_jct_s'] / las[r['workload']]:.2f}×" if r["workload"] in las else "–"
        lines.append(
            f"| {r['workload']} | {r['policy']} | {r['avg_jct_s']:,.0f} | {vs_las} | {r['vs_tiresias']:.3f}× "
            f"| {r['vs_pollux']:.3f}× | {r['p99_jct_s']:,.0f} | {r['makespan_s']:,.0f} "
            f"| {r['gpu_utilization']:.1%} | {r['restarts']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="1,2,3,4")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--traces", type=Path, default=ROOT / "traces")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args()
    workloads = [int(w) for w in args.workloads.split(",")]
    bad = [w for w in workloads if w not in TIRESIAS]
    if bad:
        ap.error(f"--workloads: expected numbers among 1,2,3,4 (published results), got {bad[0]}")
    rows = run(args.traces, workloads, args.policies.split(","))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {load:.1f}")
    print(table(rows))


if __name__ == "__main__":
    main()
