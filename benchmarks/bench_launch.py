"""Launch overhead of the local executor: submit -> first log line, versus running the same
command directly, for the `python` and `torchrun` launchers.

Both sides run the same argv and environment (built by `schedulearn.executors.launch`) and are
timed the same way: from the call (Popen, or `engine.submit` on the engine's loop) until the
job's first own output line is in its log file. Repetitions are interleaved (direct, scheduled,
direct, ...) so that machine load hits both alike; figures are medians over repetitions of the
per-repetition difference and ratio. Target: <= 0.3 s added, <= 1.1x for a torch job.

Run: .venv/bin/python benchmarks/bench_launch.py [--reps 10] [--torch-reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from schedulearn.engine import Engine, RealClock  # noqa: E402
from schedulearn.executors.launch import build_workers  # noqa: E402
from schedulearn.executors.local import LocalExecutor  # noqa: E402
from schedulearn.model import JobSpec, virtual_cluster  # noqa: E402

TOKEN = "FIRST-LINE"
TORCH_JOB = f"""
import os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    print("{TOKEN}", torch.__version__, flush=True)
dist.destroy_process_group()
"""


def wait_line(path: Path, timeout: float = 120.0) -> float:
    """Poll `path` (1 ms) until a line starts with the token (the executor's marker line quotes
    the command, token included, so only a line start counts); return when it was seen."""
    deadline = time.perf_counter() + timeout
    token = TOKEN.encode()
    while time.perf_counter() < deadline:
        try:
            data = path.read_bytes()
            if data.startswith(token) or b"\n" + token in data:
                return time.perf_counter()
        except FileNotFoundError:
            pass
        time.sleep(0.001)
    raise TimeoutError(f"no {TOKEN} in {path} after {timeout} s")


class LiveEngine:
    """An engine with a local executor on its own asyncio loop, in a thread (as in the server)."""

    def __init__(self, root: Path):
        self.executor = LocalExecutor(root, cancel_grace=5)
        self.engine = Engine(virtual_cluster(1, 4), "fifo", executor=self.executor)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.engine.run(RealClock(tick=1.0)))

    def submit(self, spec: dict) -> int:
        async def go():
            return self.engine.submit(spec).id

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result()

    def wait_final(self, job_id: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.engine.jobs[job_id].state.final:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not end")
            time.sleep(0.01)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.engine.close)
        self.thread.join(10)


def direct(spec: JobSpec, workdir: Path, executor: LocalExecutor) -> float:
    (w,) = build_workers(spec, 0, {"node0": (0,)}, workdir, python=sys.executable)
    env = executor._env(spec, w.env)  # the environment the executor gives a job
    log = workdir / "log.txt"
    log.unlink(missing_ok=True)
    with open(log, "ab") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(w.argv, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    t = wait_line(log) - t0
    if p.wait(120) != 0:
        raise RuntimeError(f"direct run failed: {log.read_text()[-2000:]}")
    return t


def scheduled(live: LiveEngine, spec: JobSpec) -> float:
    t0 = time.perf_counter()
    job_id = live.submit(spec.model_dump(exclude_none=True))
    t = wait_line(live.executor.log_path(job_id)) - t0
    live.wait_final(job_id)
    state = live.engine.jobs[job_id]
    if state.state.value != "succeeded":
        raise RuntimeError(f"scheduled run {state.state.value}: {state.reason}")
    return t


def measure(name: str, spec: JobSpec, reps: int, live: LiveEngine, tmp: Path) -> dict:
    d, s = [], []
    workdir = tmp / f"direct-{name}"
    workdir.mkdir()
    scheduled(live, spec)  # warm the page cache for both sides
    for _ in range(reps):
        d.append(direct(spec, workdir, live.executor))
        s.append(scheduled(live, spec))
    added = [b - a for a, b in zip(d, s, strict=True)]
    ratio = [b / a for a, b in zip(d, s, strict=True)]
    return {"name": name, "reps": reps, "direct": statistics.median(d), "scheduled": statistics.median(s),
            "added": statistics.median(added), "ratio": statistics.median(ratio),
            "added_min": min(added), "added_max": max(added)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="repetitions for the python launcher")
    ap.add_argument("--torch-reps", type=int, default=5, help="repetitions for torchrun (0: skip)")
    args = ap.parse_args()
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        live = LiveEngine(tmp / "jobs")
        script = tmp / "torch_job.py"
        script.write_text(TORCH_JOB)
        rows = [measure("python", JobSpec(command=["python", "-c", f"print('{TOKEN}', flush=True)"]),
                        args.reps, live, tmp)]
        if args.torch_reps:
            spec = JobSpec(command=["python", str(script)], launcher="torchrun", gpus=1)
            rows.append(measure("torchrun", spec, args.torch_reps, live, tmp))
        live.close()
    print(f"{'launcher':<10} {'reps':>4} {'direct s':>9} {'scheduled s':>12} {'added s':>8} "
          f"{'added min..max':>16} {'ratio':>6}")
    for r in rows:
        print(f"{r['name']:<10} {r['reps']:>4} {r['direct']:>9.3f} {r['scheduled']:>12.3f} "
              f"{r['added']:>8.3f} {r['added_min']:>7.3f}..{r['added_max']:<7.3f} {r['ratio']:>6.2f}")


if __name__ == "__main__":
    main()
