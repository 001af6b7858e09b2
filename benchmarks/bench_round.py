"""One scheduling round on 1,000 hosts x 8 GPUs with 10,000 queued jobs, per policy.

Target: <= 10 ms a round. Figures per policy:
- fill: the first round, which starts jobs until the cluster is full (thousands of starts);
- steady: later rounds with the cluster full and the queue long, each after one running job
  ends (the common case in a live cluster and in a replay), median and worst over the rounds;
- tick (time-driven policies only): a clock tick with nothing else changed.

Times are CPU time of this process (`time.process_time`), so that other load on a shared
machine does not inflate them; the load average is printed alongside. The jobs built before
timing are moved out of the cyclic garbage collector's reach (`gc.freeze`): otherwise a
collection that happens to fall in a round walks all of them (a 25-75 ms outlier).

Run: PYTHONPATH=scheduler python benchmarks/bench_round.py [--hosts 1000] [--jobs 10000]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from schedulearn import policies  # noqa: E402
from schedulearn.engine import Engine  # noqa: E402
from schedulearn.model import JobSpec, JobState, virtual_cluster  # noqa: E402
from schedulearn.sim.executor import SimExecutor  # noqa: E402

# Philly-like sizes: mostly single-GPU jobs, a few 2/4/8 and rare bigger ones.
SIZES = [1] * 40 + [2] * 2 + [4] * 2 + [8] * 2 + [16]


def build(policy: str, hosts: int, jobs: int, seed: int = 1) -> Engine:
    rng = random.Random(seed)
    engine = Engine(virtual_cluster(hosts, 8), policy, executor=SimExecutor(), clock=lambda: 0.0)
    for i in range(jobs):
        g = rng.choice(SIZES)
        spec = JobSpec(name=f"j{i}", gpus=g, duration=rng.uniform(600, 36_000),
                       max_gpus=2 * g if i % 10 == 0 else None)
        engine.submit(spec, now=0.0)
    return engine


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f}"


def bench(policy: str, hosts: int, jobs: int, steady_rounds: int) -> dict:
    engine = build(policy, hosts, jobs)
    gc.collect()
    gc.freeze()  # the 10,000 jobs built above are not garbage: keep collections from walking them
    t0 = time.process_time()
    engine.round(0.0)
    fill = time.process_time() - t0
    running = sum(1 for j in engine.active.values() if j.state is JobState.running)
    queued = len(engine.active) - running
    # Steady state: advance to each next run end (one job leaves), then one round.
    ex = engine.executor
    times = []
    for _ in range(steady_rounds):
        t = ex.next_event_time()
        if t is None:
            break
        ex.advance(t)
        t0 = time.process_time()
        engine.round(t)
        times.append(time.process_time() - t0)
    tick = None
    if engine.policy.time_driven:
        ticks = []
        now = t
        for _ in range(20):
            now += 60.0
            t0 = time.process_time()
            engine.round(now, tick=True)
            ticks.append(time.process_time() - t0)
        tick = statistics.median(ticks)
    gc.unfreeze()
    return {"policy": policy, "fill": fill, "running": running, "queued": queued,
            "steady_med": statistics.median(times), "steady_max": max(times), "tick": tick,
            "queued_after": sum(1 for j in engine.active.values() if j.state is JobState.queued)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=200, help="steady-state rounds to time")
    ap.add_argument("--policy", action="append", help="policy name (default: all built-in)")
    args = ap.parse_args()
    names = args.policy or [p["name"] for p in policies.available()]
    print(f"{args.hosts} hosts x 8 GPUs, {args.jobs} queued jobs; CPU ms per round (target <= 10); "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'policy':<14}{'fill':>9}{'started':>9}{'steady p50':>12}{'steady max':>12}{'tick':>9}  meets")
    for name in names:
        r = bench(name, args.hosts, args.jobs, args.rounds)
        tick = ms(r["tick"]) if r["tick"] is not None else "       -"
        meets = [k for k, v in (("fill", r["fill"]), ("steady", r["steady_med"])) if v <= 0.010]
        print(f"{name:<14}{ms(r['fill']):>9}{r['running']:>9}{ms(r['steady_med']):>12}"
              f"{ms(r['steady_max']):>12}{tick:>9}  {','.join(meets) or 'none'}", flush=True)


if __name__ == "__main__":
    main()
