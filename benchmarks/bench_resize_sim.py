"""What resizing in place is worth to `goodput` on the Pollux workloads, in the simulator.

For each workload (160 jobs, 16x4 GPUs, 60 s rounds, `--estimates reported`, starts and
preemptions 30 s) `goodput` runs three times side by side: every resize a checkpoint-restart at
30 s (Pollux's figure), and every job resizing in place (`--resize in-place`) at the pause measured
on this machine with Horovod Elastic and with torchrun (docs/benchmarks.md, "Resize in place": the
larger of shrink and grow). Printed per run: average and p99 JCT, checkpoint-restarts (resizes
and preemptions), resizes in place, the median pause the policy measured for each kind (what it
prices resizes with: the penalty plus one step, from the simulated job's steps), and the ratio of
the average JCT to the checkpoint-restart run's.

    python benchmarks/bench_resize_sim.py [--workloads 1,2,3,4] [--horovod 0.46] [--torchrun 0.33]
                                          [--restart-penalty 30] [--traces traces] [--json]

(the same as `schedulearn simulate traces/pollux/workloads/workload-N.csv --policy goodput
--resize in-place --launcher horovod --in-place-penalty horovod=0.46`.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))

from schedulearn import pauses  # noqa: E402
from schedulearn.model import Launcher, Resize, parse_cluster  # noqa: E402
from schedulearn.sim.simulate import simulate  # noqa: E402
from schedulearn.sim.traces import load_trace  # noqa: E402


def in_place(trace, launcher: str):
    update = {"resize": Resize.in_place, "launcher": Launcher(launcher)}
    return [dataclasses.replace(tj, spec=tj.spec.model_copy(update=update)) for tj in trace]


def one(trace, w: int, mode: str, penalties: dict[str, float], restart_penalty: float) -> dict:
    if mode != "restart":
        trace = in_place(trace, mode)
    r = simulate(trace, parse_cluster("16x4"), "goodput", interval=60, restart_penalty=restart_penalty,
                 estimates="reported", in_place_penalty=None if mode == "restart" else penalties)
    m = r.metrics

    def median(kind: bool):
        seen = [p for j in r.jobs for p in pauses.measured(j, kind)]
        return round(statistics.median(seen), 2) if seen else None

    penalty = restart_penalty if mode == "restart" else penalties[mode]
    row = {"workload": w, "mode": mode, "penalty_s": penalty,
           "avg_jct_s": m["avg_jct_s"], "p99_jct_s": m["p99_jct_s"], "makespan_s": m["makespan_s"],
           "restarts": sum(j.restarts for j in r.jobs),
           "in_place": sum(int(j.extra.get(pauses.IN_PLACE_KEY, 0)) for j in r.jobs),
           "restart_pause_s": median(False), "in_place_pause_s": median(True), "wall_s": round(r.wall_s, 1)}
    print(f"workload-{w} {mode}: {m['avg_jct_s']:.0f} s avg JCT, {r.wall_s:.1f} s wall",
          file=sys.stderr, flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="1,2,3,4")
    ap.add_argument("--horovod", type=float, default=0.46, help="Horovod's pause in place (s)")
    ap.add_argument("--torchrun", type=float, default=0.33, help="torchrun's pause in place (s)")
    ap.add_argument("--restart-penalty", type=float, default=30.0)
    ap.add_argument("--traces", type=Path, default=ROOT / "traces")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    penalties = {"horovod": args.horovod, "torchrun": args.torchrun}
    rows = []
    for w in [int(x) for x in args.workloads.split(",")]:
        trace = load_trace(args.traces / "pollux" / "workloads" / f"workload-{w}.csv")
        base = None
        for mode in ("restart", "horovod", "torchrun"):
            row = one(trace, w, mode, penalties, args.restart_penalty)
            base = base or row["avg_jct_s"]
            row["ratio"] = round(row["avg_jct_s"] / base, 3)
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; goodput, 16x4, "
          f"60 s rounds, reported estimates, starts/preemptions {args.restart_penalty:g} s")
    print("| workload | resize | penalty s | avg JCT s | ratio | p99 JCT s | restarts | in place | "
          "measured restart s | measured in place s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        label = "checkpoint-restart" if r["mode"] == "restart" else f"in place ({r['mode']})"
        print(f"| {r['workload']} | {label} | {r['penalty_s']:g} | {r['avg_jct_s']:,.0f} | "
              f"{r['ratio']:.3f}x | "
              f"{r['p99_jct_s']:,.0f} | {r['restarts']} | {r['in_place']} | {r['restart_pause_s'] or '-'} | "
              f"{r['in_place_pause_s'] or '-'} | {r['wall_s']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
