"""What host-wide GPU claims (`schedulearn.gpulocks`) cost: a 4-GPU job's start, submit -> first
log line through the engine and the `LocalExecutor`, with claims and without, side by side
(interleaved repetitions, medians of per-repetition differences and ratios); and an inventory's
look at 8 GPUs, 4 of them claimed, against the inventory read itself (`HostInventory.refresh`).

Run: .venv/bin/python benchmarks/bench_gpu_locks.py [--reps 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_launch import TOKEN, LiveEngine, scheduled  # noqa: E402
from schedulearn.gpulocks import GpuLocks  # noqa: E402
from schedulearn.inventory import HostInventory  # noqa: E402
from schedulearn.model import JobSpec, Node  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=30)
    args = p.parse_args()
    spec = JobSpec(command=[sys.executable, "-c", f"print('{TOKEN}', flush=True)"], gpus=4)
    with tempfile.TemporaryDirectory() as tmp:
        plain, claimed = LiveEngine(Path(tmp) / "plain"), LiveEngine(Path(tmp) / "claimed")
        root = str(claimed.executor.job_root)
        claimed.executor.gpu_locks = GpuLocks(Path(tmp) / "locks", root, virtual=True)
        try:
            scheduled(plain, spec), scheduled(claimed, spec)  # (warm both)
            a, b = [], []
            for _ in range(args.reps):
                a.append(scheduled(plain, spec))
                b.append(scheduled(claimed, spec))
        finally:
            plain.close()
            claimed.close()
        added = [y - x for x, y in zip(a, b, strict=True)]
        ratio = [y / x for x, y in zip(a, b, strict=True)]
        print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"load average {os.getloadavg()[0]:.1f}")
        print(f"4-GPU start, {args.reps} reps: without claims {statistics.median(a) * 1e3:.1f} ms, with "
              f"{statistics.median(b) * 1e3:.1f} ms; added {statistics.median(added) * 1e3:+.2f} ms "
              f"(median), ratio {statistics.median(ratio):.3f}")

        gpus = Node.virtual_node("box", 8).gpus
        locks = GpuLocks(Path(tmp) / "look", "/srv/a", virtual=True)
        held = locks.claim(gpus[:4], {"job": 1, "run": 0, "user": "u"})
        inventory = HostInventory(8, "box")
        n = 2000
        look = timeit.timeit(lambda: locks.holders(gpus), number=n) / n
        read = timeit.timeit(inventory.refresh, number=n) / n
        one = timeit.timeit(lambda: locks.release(locks.claim(gpus[4:], {"job": 2}).values()), number=n) / n
        GpuLocks.release(held.values())
        print(f"inventory read {read * 1e6:.0f} us, claims looked at (8 GPUs, 4 held) {look * 1e6:.0f} us; "
              f"claim and release of 4 GPUs {one * 1e6:.0f} us")


if __name__ == "__main__":
    main()
