"""Replay the full Philly trace (82k rigid jobs) through the engine on a virtual clock.

Target: `las` on 300 hosts x 8 GPUs in <= 60 s on the 2-core development machine. Prints the
time to read the trace, the replay's wall and CPU time, the rounds run, and the metrics.

Run: PYTHONPATH=scheduler python benchmarks/bench_philly.py [--cluster 300x8] [--policy las]
     [--limit N] [--trace traces/philly.csv]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))

from schedulearn.model import parse_cluster  # noqa: E402
from schedulearn.sim.simulate import simulate  # noqa: E402
from schedulearn.sim.traces import load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "traces" / "philly.csv"))
    ap.add_argument("--cluster", action="append", help="HxG (repeat; default 300x8)")
    ap.add_argument("--policy", action="append", help="policy (repeat; default las)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--tick", type=float, default=60.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace = load_trace(args.trace, limit=args.limit)
    print(f"read {len(trace)} jobs in {time.perf_counter() - t0:.1f} s; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'policy':<13}{'cluster':>9}{'wall s':>9}{'cpu s':>8}{'rounds':>9}{'avg JCT s':>12}"
          f"{'avg queue s':>13}{'util':>7}  target (<= 60 s)")
    for cluster in args.cluster or ["300x8"]:
        nodes = parse_cluster(cluster)
        for policy in args.policy or ["las"]:
            c0, w0 = time.process_time(), time.perf_counter()
            r = simulate(trace, nodes, policy, tick=args.tick)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            m = r.metrics
            print(f"{policy:<13}{cluster:>9}{wall:>9.1f}{cpu:>8.1f}{r.rounds:>9}{m['avg_jct_s']:>12,.0f}"
                  f"{m['avg_queue_s']:>13,.0f}{m['gpu_utilization']:>7.1%}  "
                  f"{'met' if wall <= 60 else 'missed'}", flush=True)


if __name__ == "__main__":
    main()
