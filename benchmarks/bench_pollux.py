"""Pollux workloads through the real engine and every policy, against the published results.

For each workload (160 jobs, 16x4 GPUs, 60 s rounds, 30 s per checkpoint-restart) and policy:
average and p99 JCT, makespan, GPU utilisation, the ratio of the average JCT to the published
Tiresias and Pollux numbers (traces README), and the simulation's own wall and CPU time.

Estimates: policies that read them (goodput) run with `--estimates reported` (what jobs report,
as live: the headline) and, with `--estimates both` (the default), also with `oracle` (the job
models' ground truth: an upper bound); the gap between the two is printed per workload. Rigid
policies read no estimates: they run once.

Workloads 1-4 are the ones reported; 5-8 (the rest of the Pollux artifact's set) are the ones the
policies' parameters were chosen on. Simulations run one after another in this process (the
profile caches warm up in the first goodput run of a process; its time includes that), or with
`--jobs N` N side by side in their own processes (the same figures, sooner; each one's wall and
CPU time then include that warm-up and the others' load).

    python benchmarks/bench_pollux.py [--workloads 1,2,3,4] [--policies fifo,...,goodput]
                                      [--estimates reported|oracle|both] [--shift S[,S...]] [--jobs N]
                                      [--traces traces] [--json]

`--shift S`: every arrival S seconds later — the same trace at another phase against the 60 s
rounds (`sim.traces.shifted`); the figures of a resizing policy move by a few per cent with it.
Several (`--shift 0,15,30,45`): a table per phase, then each workload, policy and estimate's
average JCT at every phase, their mean and its ratios — a steadier figure than one phase
(`benchmarks/phases.py`).
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
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler")]

from schedulearn.model import parse_cluster  # noqa: E402
from schedulearn.sim.simulate import simulate  # noqa: E402
from schedulearn.sim.traces import load_trace, shifted  # noqa: E402

from benchmarks import phases  # noqa: E402

# Published average JCTs (s), Pollux artifact `results-jobload/{tiresias,pollux}-1.0/summary.json`
TIRESIAS = {1: 2474, 2: 5145, 3: 3876, 4: 3280, 5: 3501, 6: 3470, 7: 5480, 8: 5080}
POLLUX = {1: 2089, 2: 3323, 3: 2188, 4: 2721, 5: 2674, 6: 2446, 7: 3616, 8: 2952}
POLICIES = ("fifo", "elastic-fifo", "round-robin", "las", "goodput")
READS_ESTIMATES = {"goodput"}


def tasks(traces: Path, workloads: list[int], policies: list[str], modes: list[str],
          shift: float = 0.0) -> list[tuple]:
    """The simulations of one phase, as `(one_at, args)` for `phases.run`."""
    return [(one_at, (traces, w, shift, policy, mode)) for w in workloads for policy in policies
            for mode in (modes if policy in READS_ESTIMATES else ["-"])]


def one_at(traces: Path, w: int, shift: float, policy: str, mode: str) -> dict:
    """`one` on workload w at that phase."""
    trace = shifted(load_trace(traces / "pollux" / "workloads" / f"workload-{w}.csv"), shift)
    row = one(trace, w, policy, mode)
    return {"shift": shift, **row}


def one(trace, w: int, policy: str, mode: str) -> dict:
    cpu = time.process_time()
    r = simulate(trace, parse_cluster("16x4"), policy, interval=60, restart_penalty=30,
                 estimates="reported" if mode == "-" else mode)
    m = r.metrics
    print(f"workload-{w} {policy} ({mode}): {m['avg_jct_s']:.0f} s avg JCT, {r.wall_s:.1f} s wall",
          file=sys.stderr, flush=True)
    return {
        "workload": w, "policy": policy, "estimates": mode, "jobs": m["jobs"], "avg_jct_s": m["avg_jct_s"],
        "p99_jct_s": m["p99_jct_s"], "makespan_s": m["makespan_s"], "gpu_utilization": m["gpu_utilization"],
        "vs_tiresias": m["avg_jct_s"] / TIRESIAS[w], "vs_pollux": m["avg_jct_s"] / POLLUX[w],
        "restarts": sum(j.restarts for j in r.jobs), "rounds": r.rounds,
        "wall_s": r.wall_s, "cpu_s": time.process_time() - cpu,
    }


def table(rows: list[dict]) -> str:
    las = {r["workload"]: r["avg_jct_s"] for r in rows if r["policy"] == "las"}
    head = ("| workload | policy | estimates | avg JCT s | vs las | vs Tiresias | vs Pollux | p99 JCT s "
            "| makespan s | GPU util | restarts | sim wall s | sim CPU s |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        vs_las = f"{r['avg_jct_s'] / las[r['workload']]:.3f}×" if r["workload"] in las else "–"
        lines.append(
            f"| {r['workload']} | {r['policy']} | {r['estimates']} | {r['avg_jct_s']:,.0f} | {vs_las} "
            f"| {r['vs_tiresias']:.3f}× | {r['vs_pollux']:.3f}× | {r['p99_jct_s']:,.0f} "
            f"| {r['makespan_s']:,.0f} "
            f"| {r['gpu_utilization']:.1%} | {r['restarts']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} |")
    return "\n".join(lines)


def gaps(rows: list[dict]) -> str:
    """Per workload and estimate-reading policy: reported over oracle average JCT."""
    by = {(r["workload"], r["policy"], r["estimates"]): r["avg_jct_s"] for r in rows}
    lines = ["| workload | policy | reported s | oracle s | reported / oracle |", "|---|---|---|---|---|"]
    for (w, p, mode), v in by.items():
        if mode == "reported" and (w, p, "oracle") in by:
            o = by[(w, p, "oracle")]
            lines.append(f"| {w} | {p} | {v:,.0f} | {o:,.0f} | {v / o:.3f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="1,2,3,4")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--estimates", choices=("reported", "oracle", "both"), default="both",
                    help="what estimate-reading policies are fed (default: both, and the gap)")
    ap.add_argument("--shift", default="0", metavar="S[,S...]",
                    help="every arrival S seconds later: the trace at another phase of the rounds; "
                         "several (0,15,30,45): each phase and the mean")
    ap.add_argument("--jobs", default="1", metavar="N", help="simulations side by side (processes)")
    ap.add_argument("--traces", type=Path, default=ROOT / "traces")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args()
    try:
        shifts, jobs = phases.parse_shifts(args.shift), phases.parse_jobs(args.jobs)
    except ValueError as e:
        ap.error(str(e))
    workloads = [int(w) for w in args.workloads.split(",")]
    bad = [w for w in workloads if w not in TIRESIAS]
    if bad:
        ap.error(f"--workloads: expected numbers among 1-8 (published results), got {bad[0]}")
    modes = ["reported", "oracle"] if args.estimates == "both" else [args.estimates]
    policies = args.policies.split(",")
    todo = [t for s in shifts for t in tasks(args.traces, workloads, policies, modes, s)]
    rows = phases.run(todo, jobs, kinds=[a[3:] for _, a in todo])  # (policy, estimates) for the ETA
    means = mean_rows(rows)
    if args.json:
        print(json.dumps({"rows": rows, "means": means} if len(shifts) > 1 else rows, indent=2))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {load:.1f}; {jobs} at a time")
    for s in shifts:
        here = [r for r in rows if r["shift"] == s]
        if s or len(shifts) > 1:
            print(f"\narrivals shifted by {s:g} s")
        print(table(here))
        gap = gaps(here)
        if gap:
            print()
            print(gap)
    if len(shifts) > 1:
        print(f"\nmean over the {len(shifts)} phases")
        print(phase_table(means))


def mean_rows(rows: list[dict]) -> list[dict]:
    """Per workload, policy and estimates: the average JCT at each phase and their mean, and the
    mean over `las`'s mean (where it ran) and over the published Pollux figure."""
    means = phases.mean_rows(rows, ("workload", "policy", "estimates"), ("avg_jct_s", "p99_jct_s"))
    las = {m["workload"]: m["avg_jct_s"] for m in means if m["policy"] == "las"}
    for m in means:
        m["vs_pollux"] = m["avg_jct_s"] / POLLUX[m["workload"]]
        m["vs_las"] = m["avg_jct_s"] / las[m["workload"]] if m["workload"] in las else None
    return means


def phase_table(means: list[dict]) -> str:
    shifts = " / ".join(f"{s:g}" for s in means[0]["shifts"])
    lines = [f"| workload | policy | estimates | avg JCT s at {shifts} s | mean | vs las | vs Pollux "
             "| mean p99 JCT s |", "|" + "---|" * 8]
    for m in means:
        each = " / ".join(f"{x:,.0f}" for x in m["avg_jct_s_by_shift"])
        vs_las = f"{m['vs_las']:.3f}×" if m["vs_las"] is not None else "–"
        lines.append(f"| {m['workload']} | {m['policy']} | {m['estimates']} | {each} | {m['avg_jct_s']:,.0f} "
                     f"| {vs_las} | {m['vs_pollux']:.3f}× | {m['p99_jct_s']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
