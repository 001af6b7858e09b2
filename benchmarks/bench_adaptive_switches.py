"""How often an adaptive job changes its batch size, with and without the switching threshold.

`tests/jobs/gns_train.py` alone on one process (linear regression with known gradient
statistics, a sleep per sample for a GPU's compute), its batch adapted by
`schedulearn.elastic.Monitor` (`adaptive=True`, batch 32..256, a report every 2 s), run until its
work of `--steps` steps at the initial batch is done, two ways side by side, alternating:

- `any`: the best batch size by each report's refit, whatever it promises over the batch the job
  has (`elastic.SWITCH_GAIN` = 1; the Monitor until 2026-12-05);
- `5%`: only where it promises 5 % more goodput (`SWITCH_GAIN` = 1.05, AdaptDL's threshold: now).

Per run: batch-size changes (and how many went back to the initial batch), wall seconds,
optimiser steps, the loss on 4,096 fresh samples at the end (noise floor sigma^2/2 = 0.125).

Run: python benchmarks/bench_adaptive_switches.py [--steps 3000] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "gns_train.py"
WAYS = {"any": 1.0, "5%": 1.05}
# the job with the Monitor's threshold set first (the product has no knob for it)
WRAP = "import runpy, sys; from schedulearn import elastic; elastic.SWITCH_GAIN = float(sys.argv[1]); " \
       "runpy.run_path(sys.argv[2], run_name='__main__')"


def run(gain: float, steps: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'scheduler'}{os.pathsep}{ROOT}", "STEPS": str(steps),
           "B0": "32", "MAXB": "256", "ADAPTIVE": "1", "LR": "0.05", "PER_SAMPLE": "0.002",
           "SYNC": "0.005", "REPORT_EVERY": "2"}
    env.pop("SCHEDULEARN_JOB_DIR", None)
    with tempfile.TemporaryDirectory() as cwd:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", WRAP, str(gain), str(JOB)], cwd=cwd, env=env,
                             capture_output=True, text=True, check=True).stdout
        wall = time.perf_counter() - t0
    res = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    b = res["batches"]
    return {"switches": len(b) - 1, "to_b0": sum(1 for x in b[1:] if x == b[0]), "wall_s": wall,
            "steps": res["steps"], "loss": res["loss_after"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="total_steps (default 3000)")
    ap.add_argument("--reps", type=int, default=2, help="runs per way (default 2)")
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}; one process, total_steps={args.steps}, batch 32..256")
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    for rep in range(args.reps):
        for way, gain in WAYS.items():
            r = run(gain, args.steps)
            runs[way].append(r)
            print(f"  rep {rep + 1} {way:>3}: {r['switches']} changes ({r['to_b0']} back to the initial "
                  f"batch), {r['wall_s']:.1f} s, {r['steps']} steps, loss {r['loss']:.4f}", flush=True)
    print(f"{'way':>4} {'changes':>8} {'wall s':>8} {'steps':>7} {'loss':>7}  (medians)")
    for way, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{way:>4} {med['switches']:>8.0f} {med['wall_s']:>8.1f} {med['steps']:>7.0f} "
              f"{med['loss']:>7.4f}")


if __name__ == "__main__":
    main()
