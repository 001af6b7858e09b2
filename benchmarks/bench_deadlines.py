"""Deadline attainment: the deadline-annotated Pollux workloads through the real engine.

For each workload (`traces/pollux/workloads-deadline/workload-N.csv`: 160 jobs, deadline =
lambda x the job's run time alone on its requested GPUs + 90 s; 16x4 GPUs, 60 s rounds, 30 s per
checkpoint-restart) and policy: the share of deadlines met, the average tardiness, the average
JCT, restarts, and the simulation's wall time. Policies learn of jobs what they report
(`--estimates reported`, as live: the headline); `--estimates oracle` feeds them the job models'
ground truth (an upper bound, never the headline).

`--mixed`: every other job (by arrival) loses its deadline. Then also the best-effort jobs'
average JCT under each policy over theirs under `goodput` on the same mixed workload.

`--ceiling`: four references per workload. *Alone under goodput* (and *under qoe*): each job alone
on the empty cluster, arriving when it arrives in the workload, under `goodput` (deadline-blind,
report-fed; `qoe`: planning for the deadline from the same reports), the share that makes its
deadline — with no other job, so no finished job of its family to learn from either. *Feasible
alone on a fixed size* (from the job models' ground truth: a reference no live scheduler has): the
share of jobs for which some fixed GPU count, packed, started in the first round after the job
arrives (and 30 s of start), at the job's batch size (an adaptive job: the best one of each
epoch) finishes by the deadline — what a scheduler that knew every job's true speed-up could
promise each job on an empty cluster without resizing it. *Fit the GPU-seconds together* (truth,
fluid): the share of jobs that fit beside each other, each at its cheapest such fixed size, when
GPU-seconds could be shared at will between its first round and its deadline (`fit_together`):
whether the load itself leaves room, not what a scheduler can reach.

    python benchmarks/bench_deadlines.py [--workloads 1,2,3,4] [--policies qoe,goodput,edf,las]
                                         [--estimates reported|oracle] [--mixed] [--ceiling]
                                         [--shift S[,S...]] [--jobs N] [--by-app] [--json]

`--by-app`: after the table, each run's deadlines met by application (met / with a deadline) and
its near misses (jobs that ended late by under a minute): where a change's deadlines went, the
first question of every trace in docs/benchmarks.md.

`--shift S`: every arrival and deadline S seconds later — the same trace at another phase against
the 60 s rounds (`sim.traces.shifted`); the shares met move by a few points with it. Several
(`--shift 0,15,30,45`): a table per phase, then each workload and policy's share met at every
phase and their mean — a steadier figure than one phase (`benchmarks/phases.py`). `--jobs N`:
N simulations side by side in their own processes (the same figures, sooner; the sim wall
times then include the other processes' load).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler")]

from schedulearn.estimates.job import packed_shape  # noqa: E402
from schedulearn.model import JobSpec, parse_cluster  # noqa: E402
from schedulearn.sim.adaptive import AdaptiveBatch  # noqa: E402
from schedulearn.sim.apps import get_profile  # noqa: E402
from schedulearn.sim.simulate import simulate  # noqa: E402
from schedulearn.sim.traces import TraceJob, load_trace, shifted  # noqa: E402

from benchmarks import phases  # noqa: E402

POLICIES = ("qoe", "goodput", "edf", "las")
SETUP = {"interval": 60, "restart_penalty": 30}
CLUSTER, PER_NODE = 64, 4
WORKLOADS = range(1, 9)  # 1-4 reported, 5-8 the tuning set
NEAR_S = 60.0  # a job that ended later than its deadline by less than this is a near miss


def workload(traces: Path, w: int, mixed: bool, shift: float = 0.0) -> list[TraceJob]:
    trace = shifted(load_trace(traces / "pollux" / "workloads-deadline" / f"workload-{w}.csv"), shift)
    if mixed:  # every other job best effort
        trace = [TraceJob(tj.submit_time, tj.spec.model_copy(update={"deadline": None}), tj.where)
                 if i % 2 else tj for i, tj in enumerate(trace)]
    return trace


def one(trace: list[TraceJob], w: int, policy: str, estimates: str, shift: float = 0.0) -> dict:
    r = simulate(trace, parse_cluster("16x4"), policy, estimates=estimates, **SETUP)
    m = r.metrics
    at = f" (shift {shift:g} s)" if shift else ""
    print(f"workload-{w}{at} {policy}: {m['deadline_met']:.1%} met, {r.wall_s:.1f} s wall",
          file=sys.stderr, flush=True)
    return {"workload": w, "shift": shift, "policy": policy, "estimates": estimates,
            "deadline_jobs": m["deadline_jobs"],
            "deadline_met": m["deadline_met"], "avg_tardiness_s": m["avg_tardiness_s"],
            "avg_jct_s": m["avg_jct_s"], "be_avg_jct_s": m["be_avg_jct_s"],
            "restarts": sum(j.restarts for j in r.jobs), "wall_s": round(r.wall_s, 2),
            **by_application(r.jobs)}


def by_application(jobs: list) -> dict:
    """The deadline jobs met per application (`{app: [met, with a deadline]}`) and the near misses
    (ended late by under `NEAR_S`)."""
    apps: dict[str, list[int]] = {}
    near = 0
    for j in jobs:
        if j.spec.deadline is None:
            continue
        tally = apps.setdefault(j.spec.application or j.spec.name, [0, 0])
        tally[1] += 1
        if j.end_time is not None and j.end_time <= j.spec.deadline:
            tally[0] += 1
        elif j.end_time is not None and j.end_time - j.spec.deadline < NEAR_S:
            near += 1
    return {"met_by_app": dict(sorted(apps.items())), "near_misses": near}


def one_at(traces: Path, w: int, mixed: bool, shift: float, policy: str, estimates: str) -> dict:
    """`one` on workload w at that phase (a task for `phases.run`)."""
    return one(workload(traces, w, mixed, shift), w, policy, estimates, shift)


def ceilings_at(traces: Path, w: int, mixed: bool, shift: float) -> tuple[float, float, float, float]:
    """The four references of `--ceiling` for workload w's deadline jobs at that phase: alone
    under goodput, alone under qoe, feasible alone on a fixed size, fit together (a task)."""
    timed = [tj for tj in workload(traces, w, mixed, shift) if tj.spec.deadline is not None]
    costs = alone_costs(timed)  # the job models' truth, worked out once for both
    return ceiling(timed), ceiling(timed, "qoe"), feasible_alone(timed, costs), load_fits(timed, costs)


def ceiling(trace: list[TraceJob], policy: str = "goodput") -> float:
    """The share of jobs that make their deadline alone on the empty cluster under `policy`, each
    arriving when it arrives in the workload: the same phase against the rounds, so its first round
    comes as many seconds after its arrival as it does there (a job moved to time 0 waited a whole
    60-s interval for it, and short jobs missed for that alone)."""
    met = 0
    for tj in trace:
        job = simulate([tj], parse_cluster("16x4"), policy, **SETUP).jobs[0]
        met += job.end_time <= job.spec.deadline
    return met / len(trace)


def alone_fixed_s(spec: JobSpec, n: int) -> float:
    """True seconds `spec` takes alone on n packed GPUs from the start, no restart (an adaptive
    job at the best batch size of each epoch); inf where no batch size fits n GPUs."""
    profile = get_profile(spec.application)
    model = AdaptiveBatch(profile) if spec.adaptive_batch else profile
    try:
        batch = None if spec.adaptive_batch else spec.batch_size
        _, left = model.advance(0.0, packed_shape(n, PER_NODE), batch, float("inf"))
    except ValueError:  # more GPUs than its largest batch size has samples
        return float("inf")
    return float("inf") if left is None else left


def first_round(at: float) -> float:
    """When a job submitted at `at` is first scheduled: the next round boundary (the simulator's
    clock starts at 0 and its first round is one interval later)."""
    interval = SETUP["interval"]
    return max(interval, math.ceil(at / interval) * interval)


def alone_costs(trace: list[TraceJob]) -> list[tuple[float, float, float]]:
    """Each job's (first round, deadline, GPU-seconds of its cheapest fixed size that makes the
    deadline alone, started in its first round: `cheapest_alone`; inf where none does)."""
    costs = []
    for tj in trace:
        start = first_round(tj.submit_time)
        budget = tj.spec.deadline - start - SETUP["restart_penalty"]
        costs.append((start, tj.spec.deadline, cheapest_alone(tj.spec, budget)))
    return costs


def feasible_alone(trace: list[TraceJob], costs: list | None = None) -> float:
    """The share of jobs that some fixed GPU count finishes by the deadline when started in the
    first round after it arrives (ground truth; a policy that resizes may do better). `costs`:
    the trace's `alone_costs`, where already worked out."""
    costs = alone_costs(trace) if costs is None else costs
    return sum(math.isfinite(c) for _, _, c in costs) / len(trace)


def cheapest_alone(spec: JobSpec, budget: float) -> float:
    """The fewest GPU-seconds in which some fixed GPU count finishes `spec` alone within `budget`
    seconds (ground truth); inf where none does."""
    runs = ((n, alone_fixed_s(spec, n)) for n in range(spec.min_size, spec.max_size(CLUSTER) + 1))
    return min((n * t for n, t in runs if t <= budget), default=math.inf)


def fit_together(jobs: list[tuple[float, float, float]], capacity: int = CLUSTER) -> int:
    """How many of `jobs` (first round, deadline, GPU-seconds) fit the cluster's GPU-seconds: in
    earliest-deadline order, each is kept while every window from an arrival to its deadline
    holds the GPU-seconds of the kept jobs inside it, else the costliest job of the first window
    that overflows gives way (Moore-Hodgson). A fluid view — GPU-seconds are shared at will,
    no placement, no restart — so the share it keeps says whether the load leaves room, not
    what a scheduler can reach."""
    kept: list[tuple[float, float, float]] = []
    for job in sorted((j for j in jobs if math.isfinite(j[2])), key=lambda j: j[1]):
        kept.append(job)
        while (over := _overflowing(kept, job[1], capacity)) is not None:
            kept.remove(max(over, key=lambda k: k[2]))
    return len(kept)


def _overflowing(kept: list[tuple[float, float, float]], due: float, capacity: int) -> list | None:
    """The kept jobs that arrive from the first arrival whose window up to `due` (the latest
    deadline of `kept`) holds fewer GPU-seconds than they need; None where every window holds."""
    for t1 in sorted({k[0] for k in kept}):
        inside = [k for k in kept if k[0] >= t1]
        if sum(k[2] for k in inside) > capacity * (due - t1):
            return inside
    return None


def load_fits(trace: list[TraceJob], costs: list | None = None) -> float:
    """The share of jobs whose cheapest fixed size (truth) fits the cluster's GPU-seconds beside
    the others (`fit_together`). `costs`: the trace's `alone_costs`, where already worked out."""
    return fit_together(alone_costs(trace) if costs is None else costs) / len(trace)


def table(rows: list[dict], ceilings: dict[int, tuple[float, float, float, float]]) -> str:
    base = {(r["workload"], r["policy"]): r for r in rows}
    head = ("| workload | policy | deadlines met | vs goodput | vs edf | avg tardiness s | avg JCT s "
            "| best-effort JCT vs goodput | restarts | sim wall s |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        w = r["workload"]
        vs = [f"{100 * (r['deadline_met'] - base[(w, p)]['deadline_met']):+.1f} pts"
              if (w, p) in base else "–" for p in ("goodput", "edf")]
        g = base.get((w, "goodput"))
        be = (f"{r['be_avg_jct_s'] / g['be_avg_jct_s']:.3f}×" if r["be_avg_jct_s"] and g and g["be_avg_jct_s"]
              else "–")
        lines.append(f"| {w} | {r['policy']} | {r['deadline_met']:.1%} of {r['deadline_jobs']} | {vs[0]} "
                     f"| {vs[1]} | {r['avg_tardiness_s']:,.0f} | {r['avg_jct_s']:,.0f} | {be} "
                     f"| {r['restarts']} | {r['wall_s']:.1f} |")
    for w, (alone, alone_qoe, feasible, fits) in ceilings.items():
        lines.append(f"| {w} | each job alone (goodput) | {alone:.1%} | | | | | | | |")
        lines.append(f"| {w} | each job alone (qoe) | {alone_qoe:.1%} | | | | | | | |")
        lines.append(f"| {w} | feasible alone on a fixed size (truth) | {feasible:.1%} | | | | | | | |")
        lines.append(f"| {w} | fit the GPU-seconds together (truth, fluid) | {fits:.1%} | | | | | | | |")
    return "\n".join(lines)


def app_lines(rows: list[dict]) -> str:
    """`--by-app`: one line per run."""
    out = []
    for r in rows:
        at = f" at {r['shift']:g} s" if r["shift"] else ""
        apps = ", ".join(f"{a} {m}/{n}" for a, (m, n) in r["met_by_app"].items())
        out.append(f"workload {r['workload']}{at}, {r['policy']}: {apps}; "
                   f"{r['near_misses']} late by under {NEAR_S:.0f} s")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="1,2,3,4",
                    help="1-4: the reported workloads; 5-8: the tuning set (make_deadline_workloads.py)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--estimates", choices=("reported", "oracle"), default="reported")
    ap.add_argument("--mixed", action="store_true", help="every other job without a deadline")
    ap.add_argument("--ceiling", action="store_true",
                    help="also each job alone under goodput and under qoe, the share feasible alone "
                         "and the share that fits the cluster's GPU-seconds together (truth)")
    ap.add_argument("--shift", default="0", metavar="S[,S...]",
                    help="every arrival and deadline S seconds later: another phase of the rounds; "
                         "several (0,15,30,45): each phase and the mean")
    ap.add_argument("--jobs", default="1", metavar="N", help="simulations side by side (processes)")
    ap.add_argument("--traces", type=Path, default=ROOT / "traces")
    ap.add_argument("--by-app", action="store_true",
                    help="also each run's deadlines met by application and its near misses")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args()
    try:
        shifts, jobs = phases.parse_shifts(args.shift), phases.parse_jobs(args.jobs)
    except ValueError as e:
        ap.error(str(e))
    try:
        workloads = [int(w) for w in args.workloads.split(",")]
        if not all(w in WORKLOADS for w in workloads):
            raise ValueError
    except ValueError:
        ap.error(f"--workloads: expected numbers among 1-8, got {args.workloads!r}")
    policies = args.policies.split(",")
    began = time.perf_counter()
    tasks = [(one_at, (args.traces, w, args.mixed, s, p, args.estimates))
             for s in shifts for w in workloads for p in policies]
    marks = [(w, s) for s in shifts for w in workloads] if args.ceiling else []
    tasks += [(ceilings_at, (args.traces, w, args.mixed, s)) for w, s in marks]
    done = phases.run(tasks, jobs, kinds=[a[4] if fn is one_at else "ceiling" for fn, a in tasks])
    cut = len(done) - len(marks)
    rows, ceilings = done[:cut], dict(zip(marks, done[cut:], strict=True))
    means = phases.mean_rows(rows, ("workload", "policy"), ("deadline_met", "avg_tardiness_s", "avg_jct_s"))
    if args.json:
        if len(shifts) == 1:  # the shape of one phase, as before
            out = {"rows": rows, "ceiling": {w: c for (w, _), c in ceilings.items()}}
        else:
            out = {"rows": rows, "ceiling": [{"workload": w, "shift": s, "references": c}
                                             for (w, s), c in ceilings.items()], "means": means}
        print(json.dumps(out, indent=2))
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"load average {load:.1f}; estimates {args.estimates}{', mixed' if args.mixed else ''}; "
          f"{jobs} at a time; {time.perf_counter() - began:.0f} s in all")
    for s in shifts:
        if s or len(shifts) > 1:
            print(f"\narrivals shifted by {s:g} s")
        print(table([r for r in rows if r["shift"] == s], {w: c for (w, t), c in ceilings.items() if t == s}))
        if args.by_app:
            print("\nmet by application (met / with a deadline):")
            print(app_lines([r for r in rows if r["shift"] == s]))
    if len(shifts) > 1:
        print(f"\nmean over the {len(shifts)} phases")
        print(phase_table(means))


def phase_table(means: list[dict]) -> str:
    """Per workload and policy: the share met at each phase, their mean, and the mean's margin
    over goodput's and edf's means (where they ran)."""
    base = {(m["workload"], m["policy"]): m["deadline_met"] for m in means}
    shifts = " / ".join(f"{s:g}" for s in means[0]["shifts"])
    lines = [f"| workload | policy | met at {shifts} s | mean met | vs goodput | vs edf | mean avg JCT s |",
             "|" + "---|" * 7]
    for m in means:
        w, v = m["workload"], m["deadline_met"]
        vs = [f"{100 * (v - base[(w, p)]):+.1f} pts" if (w, p) in base else "–" for p in ("goodput", "edf")]
        each = " / ".join(f"{100 * x:.1f}" for x in m["deadline_met_by_shift"])
        lines.append(f"| {w} | {m['policy']} | {each} % | {v:.1%} | {vs[0]} | {vs[1]} "
                     f"| {m['avg_jct_s']:,.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
