"""Plain-Python jobs (one process: one host) on many hosts: GPUs left idle and CPU per round.

A cluster of `--hosts` x 4 GPUs and a queue of live notebook jobs, most of them plain Python
(1-3 GPUs, one host), every fifth a torchrun job that may span hosts. Per policy:
- fill: the first round, from an empty cluster;
- steady: rounds each after one running job (picked at random) is cancelled, median;
- idle: GPUs left free with jobs still queued, after the fill and on average over the steady
  rounds (the jobs cannot run anywhere else: every idle GPU is lost work).

Times are CPU time of this process (`time.process_time`); the load average is printed.
Run: PYTHONPATH=scheduler python benchmarks/bench_one_host.py [--hosts 250] [--jobs 1500]
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

from schedulearn.engine import Engine  # noqa: E402
from schedulearn.model import JobSpec, JobState, virtual_cluster  # noqa: E402
from schedulearn.sim.executor import SimExecutor, live_model  # noqa: E402


def bench(policy: str, hosts: int, jobs: int, rounds: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    # The server's `sim` executor: runs without processes, which never end here (the clock never
    # advances) but when the benchmark cancels one.
    executor = SimExecutor(model=live_model)
    engine = Engine(virtual_cluster(hosts, 4), policy, executor=executor, clock=lambda: 0.0)
    for i in range(jobs):
        launcher = "torchrun" if i % 5 == 0 else "python"
        engine.submit(JobSpec(name=f"j{i}", command=["train"], gpus=rng.choice((1, 2, 3)), launcher=launcher),
                      now=0.0)
    gc.collect()
    gc.freeze()
    t0 = time.process_time()
    engine.round(0.0)
    fill = time.process_time() - t0
    fill_idle = engine.pool.total
    times, idle = [], []
    for k in range(1, rounds + 1):
        running = [j for j in engine.active.values() if j.state is JobState.running]
        if not running:
            break
        engine.cancel(rng.choice(running).id, now=float(k))
        t0 = time.process_time()
        engine.round(float(k))
        times.append(time.process_time() - t0)
        if engine._qjobs:
            idle.append(engine.pool.total)
    gc.unfreeze()
    return {"fill": fill, "fill_idle": fill_idle, "steady": statistics.median(times),
            "idle": statistics.mean(idle) if idle else 0.0,
            "running": sum(1 for j in engine.active.values() if j.state is JobState.running)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=250)
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--rounds", type=int, default=200, help="steady rounds")
    ap.add_argument("--policy", action="append", help="policy name (default: las, goodput, qoe, edf, fifo)")
    args = ap.parse_args()
    names = args.policy or ["las", "goodput", "qoe", "edf", "fifo"]
    print(f"{args.hosts} hosts x 4 GPUs, {args.jobs} queued live jobs (4 in 5 plain Python); "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'policy':<10}{'fill ms':>9}{'idle after fill':>17}{'steady p50 ms':>15}{'idle steady':>13}"
          f"{'running at end':>16}")
    for name in names:
        r = bench(name, args.hosts, args.jobs, args.rounds)
        print(f"{name:<10}{r['fill'] * 1000:>9.1f}{r['fill_idle']:>17}{r['steady'] * 1000:>15.2f}"
              f"{r['idle']:>13.1f}{r['running']:>16}", flush=True)


if __name__ == "__main__":
    main()
