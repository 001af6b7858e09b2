"""Slurm executor figures (issue 14).

1. Submit -> first log line: a one-GPU Python job through the real Engine, the same program on the
   same machine, through the Slurm executor (the dev cluster of scripts/slurm-dev.sh) and through
   the local executor, alternated run by run; median and spread of each, and their ratio.
2. A scheduling round with the Slurm inventory at 100 nodes x 8 GPUs: `sinfo --json` and
   `squeue --json` documents of that size (half the GPUs held by jobs, a quarter of them by jobs
   Schedulearn did not submit) parsed into nodes (`SlurmExecutor.nodes`), the engine's pool rebuilt
   from them (`Engine.set_nodes`) and one round over 1,000 queued jobs. CPU time, median of 30.

Run (as root, Slurm installed: scripts/setup.sh):
    eval "$(scripts/slurm-dev.sh up)"
    PYTHONPATH=scheduler .venv/bin/python benchmarks/bench_slurm.py [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from schedulearn.engine import Engine, RealClock  # noqa: E402
from schedulearn.executors.local import LocalExecutor  # noqa: E402
from schedulearn.executors.slurm import SlurmExecutor  # noqa: E402
from schedulearn.executors.slurmcli import SlurmCli  # noqa: E402
from schedulearn.model import JobSpec, virtual_cluster  # noqa: E402

HELLO = "print('hello from the job', flush=True)\n"


async def first_line(make, nodes) -> float:
    ex = make()
    eng = Engine(nodes(ex), "fifo", executor=ex)
    task = asyncio.create_task(eng.run(RealClock(tick=0.05)))
    try:
        t0 = time.perf_counter()
        job = eng.submit({"name": "hello", "script": HELLO, "gpus": 1})
        while "hello from the job" not in ex.logs(job.id):
            if time.perf_counter() - t0 > 120:
                raise TimeoutError(f"no first line in 120 s: {job.state.value} {job.reason}")
            await asyncio.sleep(0.005)
        took = time.perf_counter() - t0
        while not job.state.final:
            await asyncio.sleep(0.05)
        return took
    finally:
        eng.close()
        await asyncio.wait_for(task, 10)


def bare_sbatch(out: Path) -> float:
    """Slurm alone: `sbatch --wrap` of the same Python line, to its first output line."""
    cli = SlurmCli()
    t0 = time.perf_counter()
    cli.run("sbatch", "--parsable", "--gres=gpu:1", f"--output={out}", "--wrap",
            f'{sys.executable} -c "{HELLO.strip()}"')
    while "hello from the job" not in (out.read_text() if out.exists() else ""):
        if time.perf_counter() - t0 > 120:
            raise TimeoutError("no first line from sbatch in 120 s")
        time.sleep(0.005)
    return time.perf_counter() - t0


def submit_to_first_line(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    slurm, local, bare = [], [], []
    for i in range(runs):
        slurm.append(asyncio.run(first_line(
            lambda i=i: SlurmExecutor(root / f"slurm{i}", poll_interval=0.2), lambda ex: ex.nodes())))
        local.append(asyncio.run(first_line(
            lambda i=i: LocalExecutor(root / f"local{i}"), lambda ex: virtual_cluster(1, 4))))
        bare.append(bare_sbatch(root / f"bare{i}.out"))
    s, lo, b = statistics.median(slurm), statistics.median(local), statistics.median(bare)
    print(f"submit -> first log line, {runs} runs each, alternated:")
    print(f"  slurm executor  median {s:6.3f} s  (min {min(slurm):.3f}, max {max(slurm):.3f})")
    print(f"  bare sbatch     median {b:6.3f} s  (min {min(bare):.3f}, max {max(bare):.3f})")
    print(f"  local executor  median {lo:6.3f} s  (min {min(local):.3f}, max {max(local):.3f})")
    print(f"  ratio slurm executor / local {s / lo:.1f}x; slurm executor / bare sbatch {s / b:.2f}x "
          f"(+{s - b:.3f} s)")


class CannedCli(SlurmCli):
    """Slurm's answers for a cluster of `nodes` x `gpus` (no daemons): the documents `sinfo --json`
    and `squeue --json` print, parsed by the real code."""

    def __init__(self, nodes: int, gpus: int):
        super().__init__()
        names = [f"gpu{i:03d}" for i in range(nodes)]
        self.sinfo = json.dumps({"meta": {}, "errors": [], "nodes": [
            {"name": n, "address": f"10.0.{i // 250}.{i % 250}", "hostname": n, "state": "mixed",
             "state_flags": [], "gres": f"gpu:a100:{gpus}(S:0-1)", "gres_used": "gpu:a100:4(IDX:0-3)",
             "partitions": ["gpu"], "reason": "", "cpus": 64} for i, n in enumerate(names)]})
        jobs = []
        for i, n in enumerate(names):  # half of each node held: by this server's jobs or others'
            ours = i % 2 == 0
            jobs.append({"job_id": 1000 + i, "het_job_id": 0, "name": f"sl{i}.0-x" if ours else "other",
                         "user_name": "alice" if ours else "bob", "partition": "gpu", "job_state": "RUNNING",
                         "state_reason": "None", "exit_code": 0, "nodes": n,
                         "gres_detail": [f"gpu:a100:{gpus // 2}(IDX:0-{gpus // 2 - 1})"],
                         "comment": f"{{tag}}:{i}:0" if ours else ""})
        self.squeue_template = json.dumps({"meta": {}, "errors": [], "jobs": jobs})
        self.squeue = self.squeue_template

    def run(self, *argv: str, input: str | None = None) -> str:
        if argv[0] == "sinfo":
            return self.sinfo if "--json" in argv else "gpu*\n"
        if argv[0] == "squeue":
            return self.squeue
        raise AssertionError(argv)


def round_with_slurm_inventory(nodes: int, gpus: int, queued: int, repeats: int) -> None:
    cli = CannedCli(nodes, gpus)
    ex = SlurmExecutor(tempfile.mkdtemp(prefix="bench-slurm-"), cli=cli)
    cli.squeue = cli.squeue_template.replace("{tag}", ex.tag)
    rng = random.Random(2)
    parse, rebuild, rounds = [], [], []
    for _ in range(repeats):
        eng = Engine(ex.nodes(), "las", executor=_NoRuns(), clock=lambda: 0.0)
        for i in range(queued):
            eng.submit(JobSpec(name=f"j{i}", gpus=rng.choice([1, 1, 1, 2, 4, 8]), script="pass"), now=0.0)
        t0 = time.process_time()
        found = ex.nodes()
        t1 = time.process_time()
        eng.set_nodes(found)
        t2 = time.process_time()
        eng.round(0.0)
        t3 = time.process_time()
        parse.append(t1 - t0)
        rebuild.append(t2 - t1)
        rounds.append(t3 - t2)
    held = sum(1 for n in found for g in n.gpus if g.held_by)
    total = [a + b + c for a, b, c in zip(parse, rebuild, rounds, strict=True)]
    print(f"round with the Slurm inventory: {nodes} nodes x {gpus} GPUs ({held} GPUs held by other "
          f"people's jobs), {queued} queued, las, CPU time, median of {repeats}:")
    print(f"  sinfo+squeue JSON -> nodes {statistics.median(parse) * 1000:7.2f} ms")
    print(f"  pool rebuilt (set_nodes)   {statistics.median(rebuild) * 1000:7.2f} ms")
    print(f"  the round                  {statistics.median(rounds) * 1000:7.2f} ms")
    worst = max(total) * 1000
    print(f"  all of it                  {statistics.median(total) * 1000:7.2f} ms (max {worst:.2f})")


class _NoRuns:
    """An executor that starts nothing (the round's cost without launching)."""

    confirms_release = False
    simulated = True
    engine = None

    def bind(self, engine):
        self.engine = engine

    def start(self, job, now):
        pass

    def advance(self, now):
        pass

    def next_event_time(self):
        return None

    def close(self):
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="submit -> first line runs per executor")
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--queued", type=int, default=1000)
    ap.add_argument("--no-cluster", action="store_true", help="only the round (no Slurm needed)")
    args = ap.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    round_with_slurm_inventory(args.nodes, args.gpus, args.queued, 30)
    if not args.no_cluster:
        if not os.environ.get("SLURM_CONF"):
            sys.exit('SLURM_CONF is not set: eval "$(scripts/slurm-dev.sh up)" first (or --no-cluster)')
        submit_to_first_line(args.runs)


if __name__ == "__main__":
    main()
