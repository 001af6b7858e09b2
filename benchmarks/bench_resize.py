"""Resize pause, in place versus checkpoint-restart, grow and shrink, side by side, for Horovod
(Horovod Elastic) and torchrun (one elastic agent per GPU, `executors/torchrun_elastic.py`).

The same training (tests/jobs/elastic_train.py's deterministic regression, float64, on CPU,
`STEP_SLEEP` per step) runs as an elastic job (1..2 GPUs of a 2-virtual-GPU host) under
`elastic-fifo`, twice per repetition and launcher: with `resize: "in-place"` and with
checkpoint-restart. Horovod in place runs tests/jobs/hvd_elastic_train.py (`hvd.elastic`), every
other case tests/jobs/elastic_train.py (`Checkpointer`: torchrun's workers restart in place
too, from the checkpoint they save at the step boundary). In
each, once it trains on 2 GPUs, a 1-GPU job arrives (the policy shrinks the elastic job to 1
GPU), and once that job ends the elastic job grows back to 2. The pauses are the scheduler's own
measurement (`resize_pause` events: the last step before the resize -> the first step after, from
the job's reports, see docs/resize.md). Repetitions alternate the two modes so that machine load
hits both alike; figures are medians. Target: in place <= 0.3x the checkpoint-restart pause.

For torchrun the figures come with what a worker's start costs on this machine (`python -c
"import torch.distributed"`, timed between repetitions): in place, every worker restarts.

Run: .venv/bin/python benchmarks/bench_resize.py [--reps 3] [--step-sleep 0.05]
                                                 [--launcher horovod|torchrun|both]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))

from schedulearn import pauses  # noqa: E402
from schedulearn.engine import Engine, RealClock  # noqa: E402
from schedulearn.executors.local import LocalExecutor  # noqa: E402
from schedulearn.model import JobState, virtual_cluster  # noqa: E402

JOBS = ROOT / "tests" / "jobs"


async def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


async def one(launcher: str, mode: str, root: Path, step_sleep: float) -> dict[str, float]:
    """One `launcher` job resized 2 -> 1 -> 2 in `mode` ('in-place' or 'restart'): its pauses."""
    ex = LocalExecutor(root / "jobs", cancel_grace=30)
    eng = Engine(virtual_cluster(1, 2), "elastic-fifo", executor=ex)
    task = asyncio.create_task(eng.run(RealClock(tick=0.1)))
    release = root / "release"
    try:
        hvd_elastic = mode == "in-place" and launcher == "horovod"
        script = "hvd_elastic_train.py" if hvd_elastic else "elastic_train.py"
        spec = {"command": ["python", str(JOBS / script)], "launcher": launcher, "gpus": "auto",
                "min_gpus": 1, "max_gpus": 2, "env": {"TRAIN_STEPS": "100000", "STEP_SLEEP": str(step_sleep)}}
        if mode == "in-place":
            spec["resize"] = "in-place"
        a = eng.submit(spec)
        in_place = mode == "in-place"
        trained = re.compile(r"^(?:\[rank\d+\]: |\[\d+\]<stdout>:)?step \d+ world 2", re.M)
        await _wait(lambda: len(trained.findall(ex.logs(a.id))) >= 5, 180, "the job to train on 2 GPUs")
        b = eng.submit({"command": [sys.executable, str(JOBS / "show_env.py"), str(release)], "gpus": 1})
        await _wait(lambda: len(pauses.measured(a, in_place)) >= 1, 180, "the shrink's pause")
        release.touch()
        await _wait(lambda: b.state.final and len(pauses.measured(a, in_place)) >= 2, 180, "the grow's pause")
        shrink, grow = pauses.measured(a, in_place)[:2]
        assert a.state is JobState.running and a.restarts == (0 if in_place else 2), (a.state, a.restarts)
        return {"shrink": shrink, "grow": grow}
    finally:
        await asyncio.to_thread(ex.terminate_all, 5.0)
        eng.close()
        await task


def torch_start() -> float:
    """Seconds a fresh interpreter takes to import torch.distributed (what a worker restart pays)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch.distributed"], check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--step-sleep", type=float, default=0.05, help="seconds each training step sleeps")
    ap.add_argument("--launcher", choices=("horovod", "torchrun", "both"), default="both")
    args = ap.parse_args()
    launchers = ("horovod", "torchrun") if args.launcher == "both" else (args.launcher,)
    got = {(lc, m): {"shrink": [], "grow": []} for lc in launchers for m in ("in-place", "restart")}
    imports: list[float] = []
    loads: list[float] = []
    for rep in range(args.reps):
        for launcher in launchers:
            for mode in ("in-place", "restart") if rep % 2 == 0 else ("restart", "in-place"):
                with tempfile.TemporaryDirectory() as d:
                    p = asyncio.run(one(launcher, mode, Path(d), args.step_sleep))
                for k, v in p.items():
                    got[launcher, mode][k].append(v)
                loads.append(os.getloadavg()[0])
                print(f"rep {rep + 1} {launcher:8s} {mode:9s} shrink {p['shrink']:6.2f} s  "
                      f"grow {p['grow']:6.2f} s", flush=True)
        imports.append(torch_start())
    print(f"\nmachine: {platform.machine()}, {os.cpu_count()} cores, load (1 min) {min(loads):.2f}.."
          f"{max(loads):.2f}; gloo, CPU, 2 virtual GPUs; {args.reps} reps, step sleep {args.step_sleep} s; "
          f"a fresh `import torch.distributed`: {statistics.median(imports):.2f} s (median)")
    print(f"{'launcher':9s} {'resize':8s} {'in place':>10s} {'restart':>10s} {'ratio':>7s}")
    for launcher in launchers:
        for k in ("shrink", "grow"):
            ip = statistics.median(got[launcher, "in-place"][k])
            rs = statistics.median(got[launcher, "restart"][k])
            print(f"{launcher:9s} {k:8s} {ip:9.2f}s {rs:9.2f}s {ip / rs:7.2f}")


if __name__ == "__main__":
    main()
