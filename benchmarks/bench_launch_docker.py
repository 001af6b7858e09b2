"""Launch overhead of the Docker executor: submit -> first log line, versus `docker run` of the
same command directly, for the `python` and `torchrun` launchers.

Both sides run the same image, argv, environment and container options (host network, init,
1g shm, the job directory and the venv mounted), built by `schedulearn.executors.launch`, and are
timed the same way (1 ms polling of a log file for a line starting with the token, see
bench_launch.py): the direct side is `docker run --rm ... > log` from the Popen; the scheduled
side is `engine.submit` on the engine's loop, through `DockerExecutor` (create + start over the
API, the log streamed into the job's log file by a follower thread). Repetitions interleaved;
medians of per-repetition differences and ratios. Target: <= 0.3 s added, <= 1.1x for a torch job.

Needs root and `dockerd` (a private daemon is started in /tmp and stopped afterwards, with the
registry-free test image; or give `--socket` of a running daemon that has the image).

Run: .venv/bin/python benchmarks/bench_launch_docker.py [--reps 10] [--torch-reps 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_launch import TOKEN, TORCH_JOB, LiveEngine, wait_line  # noqa: E402
from schedulearn.engine import Engine  # noqa: E402
from schedulearn.executors.docker import DockerExecutor  # noqa: E402
from schedulearn.executors.launch import SCRIPT_NAME, build_workers  # noqa: E402
from schedulearn.model import JobSpec  # noqa: E402

IMAGE = "schedulearn-test:latest"
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def volumes() -> list[str]:
    base = sys.base_prefix
    pyenv = os.path.expanduser("~/.pyenv")
    base = pyenv if base.startswith(pyenv + "/") else base
    return [f"{ROOT}:{ROOT}:ro", f"{base}:{base}:ro"]


class LiveDocker(LiveEngine):
    """bench_launch's engine-on-a-thread, with a Docker executor."""

    def __init__(self, root: Path, url: str):  # not super().__init__: that starts a local executor
        import asyncio
        import threading

        self.executor = DockerExecutor(f"h0={url}?gpus=4", root, image=IMAGE, python=PYTHON,
                                       volumes=volumes(), cancel_grace=5, health_interval=0)
        self.engine = Engine(self.executor.nodes(), "fifo", executor=self.executor)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()


def direct(spec: JobSpec, workdir: Path, url: str) -> float:
    (w,) = build_workers(spec, 0, {"h0": (0,)}, workdir, python=PYTHON)
    d = str(workdir)
    args = ["docker", "-H", url, "run", "--rm", "--network", "host", "--init", "--shm-size", "1g",
            "-v", f"{d}:{d}:rw", "-w", d]
    for v in volumes():
        args += ["-v", v]
    for k, v in {**spec.env, **w.env}.items():
        args += ["-e", f"{k}={v}"]
    log = workdir / "log.txt"
    log.unlink(missing_ok=True)
    with open(log, "ab") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen([*args, IMAGE, *w.argv], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    t = wait_line(log) - t0
    if p.wait(120) != 0:
        raise RuntimeError(f"docker run failed: {log.read_text()[-2000:]}")
    return t


def scheduled(live: LiveDocker, spec: JobSpec) -> float:
    t0 = time.perf_counter()
    job_id = live.submit(spec.model_dump(exclude_none=True))
    t = wait_line(live.executor.log_path(job_id)) - t0
    live.wait_final(job_id)
    job = live.engine.jobs[job_id]
    if job.state.value != "succeeded":
        raise RuntimeError(f"scheduled run {job.state.value}: {job.reason}")
    return t


def measure(name: str, spec: JobSpec, reps: int, live: LiveDocker, tmp: Path, url: str) -> dict:
    workdir = tmp / f"direct-{name}"
    workdir.mkdir()
    (workdir / SCRIPT_NAME).write_text(spec.script or "")
    scheduled(live, spec)  # warm the page cache for both sides
    d, s = [], []
    for _ in range(reps):
        d.append(direct(spec, workdir, url))
        s.append(scheduled(live, spec))
    added = [b - a for a, b in zip(d, s, strict=True)]
    ratio = [b / a for a, b in zip(d, s, strict=True)]
    return {"name": name, "reps": reps, "direct": statistics.median(d), "scheduled": statistics.median(s),
            "added": statistics.median(added), "ratio": statistics.median(ratio),
            "added_min": min(added), "added_max": max(added)}


def start_daemon() -> tuple[Path, str]:
    d = Path(tempfile.mkdtemp(prefix="sl-bench-", dir="/tmp"))
    sock = d / "d.sock"
    subprocess.run([str(ROOT / "scripts" / "dockerd.sh"), "start", str(d), str(sock)], check=True,
                   capture_output=True)
    subprocess.run([str(ROOT / "scripts" / "build_test_image.sh"), str(sock), IMAGE], check=True,
                   capture_output=True)
    return d, f"unix://{sock}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="repetitions for the python launcher")
    ap.add_argument("--torch-reps", type=int, default=5, help="repetitions for torchrun (0: skip)")
    ap.add_argument("--socket", help="a running dockerd's unix socket (with the test image)")
    args = ap.parse_args()
    own = None
    if args.socket:
        url = f"unix://{os.path.abspath(args.socket)}"
    else:
        own, url = start_daemon()
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, Python {platform.python_version()}, dockerd {url}")
    try:
        with tempfile.TemporaryDirectory(prefix="sl-bench-jobs-") as tmpdir:
            tmp = Path(tmpdir)
            live = LiveDocker(tmp / "jobs", url)
            spec = JobSpec(script=f"print('{TOKEN}', flush=True)")
            rows = [measure("python", spec, args.reps, live, tmp, url)]
            if args.torch_reps:
                spec = JobSpec(script=TORCH_JOB, launcher="torchrun", gpus=1)
                rows.append(measure("torchrun", spec, args.torch_reps, live, tmp, url))
            live.close()
    finally:
        if own is not None:
            subprocess.run([str(ROOT / "scripts" / "dockerd.sh"), "stop", str(own), str(own / "d.sock")],
                           capture_output=True)
            shutil.rmtree(own, ignore_errors=True)
    print(f"{'launcher':<10} {'reps':>4} {'docker run s':>12} {'scheduled s':>12} {'added s':>8} "
          f"{'added min..max':>16} {'ratio':>6}")
    for r in rows:
        print(f"{r['name']:<10} {r['reps']:>4} {r['direct']:>12.3f} {r['scheduled']:>12.3f} "
              f"{r['added']:>8.3f} {r['added_min']:>7.3f}..{r['added_max']:<7.3f} {r['ratio']:>6.2f}")


if __name__ == "__main__":
    main()
