"""What reading a live job's reports costs the server each round, as its `metrics.jsonl` grows.

A training loop that calls `schedulearn.elastic.report` every step writes a line per step: at
10 steps a second, 36,000 lines an hour. Before every round the server folds what each running
job appended since the last round (`estimates.refresh`). This measures, side by side at each
file length, one round's read of a minute of new reports (600 lines) two ways:

- `whole`: the file parsed whole, the records after those already read folded (how
  `refresh` read until 2026-11-27);
- `new`: only the bytes after the last read, folded (`refresh` now).

Median of `--reps` rounds per length, alternating the two; wall milliseconds per round and per
job (the read runs on the server's event loop, so a round with eight such jobs blocks it eight
times as long).

`--pause`: a job that reports only its progress (`report(progress=...)`, a line per step), with
a resize's pause pending (its new run redoing work from an older checkpoint, not yet back where
it was): one round's `advance` two ways, the new lines folded and the pause looked for in

- `whole`: the whole file read back (how the local executor measured it until 2026-12-05);
- `now`: the local executor's `advance`: the new lines only, from where the last round's look
  left off (the first look after the resize reads back the last 8 MiB at most: shown apart,
  the median is of the rounds after it).

Run: PYTHONPATH=scheduler python benchmarks/bench_reports.py [--lines 10000,100000,1000000] [--reps 5]
     [--pause]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scheduler"))

from schedulearn import pauses  # noqa: E402
from schedulearn.estimates import ingest, load_reports, refresh  # noqa: E402
from schedulearn.model import Job, JobSpec  # noqa: E402

MINUTE = 600  # lines a job reporting 10 steps a second writes between two 60 s rounds


def line(i: int) -> str:
    return json.dumps({"t": 1.0e9 + i * 0.1, "step_time": 0.1, "compute_time": 0.08, "batch_size": 256,
                       "num_gpus": 4, "num_nodes": 1, "restart": 0, "grad_sqr": 1.5, "grad_var": 30.0,
                       "progress": min(i / 2.0e6, 1.0)}) + "\n"


def whole(job: Job, path: Path) -> None:
    """The former read: the whole file, then the records not yet folded."""
    records = load_reports(path)
    seen = int(job.extra.get("_seen", 0))
    job.extra["_seen"] = len(records)
    ingest(job, records[seen:])


def one_length(n: int, reps: int, folder: Path) -> dict[str, float]:
    path = folder / f"metrics-{n}.jsonl"
    with path.open("w") as f:
        f.writelines(line(i) for i in range(n))
    jobs = {k: Job(id=1, spec=JobSpec(command=["train"], gpus=4), submit_time=0.0) for k in ("whole", "new")}
    whole(jobs["whole"], path)
    refresh(jobs["new"], path)
    times: dict[str, list[float]] = {"whole": [], "new": []}
    written = n
    for _ in range(reps):
        for kind, read in (("whole", whole), ("new", refresh)):
            with path.open("a") as f:  # a minute of new reports, then the round's read
                f.writelines(line(i) for i in range(written, written + MINUTE))
            written += MINUTE
            began = time.perf_counter()
            read(jobs[kind], path)
            times[kind].append(time.perf_counter() - began)
    out = {k: 1000 * statistics.median(v) for k, v in times.items()}
    out["mb"] = path.stat().st_size / 1e6
    path.unlink()
    return out


def progress_line(i: int, run: int, p: float) -> str:
    return json.dumps({"t": 1.0e9 + i * 0.1, "progress": p, "num_gpus": 1, "restart": run}) + "\n"


class _Engine:
    """What `LocalExecutor.advance` calls of its engine."""

    def __init__(self, job: Job):
        self.running, self.paused = {job.id: job}, []

    def resize_paused(self, job_id: int, pause: dict, now: float) -> None:
        self.paused.append(pause)


def pending_pause(n: int, reps: int, folder: Path) -> dict[str, float]:
    """One round of a progress-only job whose pause is pending, both ways: `whole` (the new lines
    folded, the pause looked for in the whole file, as `advance` did) and `now` (the local
    executor's `advance` itself); neither finds the pause yet, as checked each round."""
    from schedulearn.executors.local import LocalExecutor

    mark = pauses.pending(1.0e9 + (n - 0.5) * 0.1, 1, 2, 1, False)  # between the two runs
    jobs, paths = {}, {}
    for kind in ("whole", "now"):
        ex = LocalExecutor(folder / f"{kind}-{n}")
        jobs[kind] = Job(id=1, spec=JobSpec(command=["train"], gpus=1), submit_time=0.0)
        ex.engine = _Engine(jobs[kind])
        paths[kind] = ex.job_dir(1) / "metrics.jsonl"
        paths[kind].parent.mkdir(parents=True)
        with paths[kind].open("w") as f:
            f.writelines(progress_line(i, 0, i / (2.0 * n)) for i in range(n))  # run 0, to p0 = 0.5
        while int(jobs[kind].extra.get("reports_offset") or 0) < paths[kind].stat().st_size:
            refresh(jobs[kind], paths[kind])
        jobs[kind].extra[pauses.PENDING_KEY] = mark
        if kind == "now":
            advance_now = ex.advance

    def whole(job: Job) -> None:
        refresh(job, paths["whole"])
        assert pauses.measure(mark, load_reports(paths["whole"])) is None

    def now(job: Job) -> None:
        advance_now(0.0)
        assert not job.extra.get(pauses.RESIZE_PAUSES_KEY) and pauses.PENDING_KEY in job.extra

    times: dict[str, list[float]] = {"whole": [], "now": []}
    written = n
    for _ in range(reps):
        lines = [progress_line(i, 1, 0.4 + (i - n) * 1e-7) for i in range(written, written + MINUTE)]
        written += MINUTE  # the new run, from an older checkpoint: below p0 still
        for kind, advance in (("whole", whole), ("now", now)):
            with paths[kind].open("a") as f:
                f.writelines(lines)
            began = time.perf_counter()
            advance(jobs[kind])
            times[kind].append(time.perf_counter() - began)
    out = {"whole": 1000 * statistics.median(times["whole"]), "first": 1000 * times["now"][0],
           "now": 1000 * statistics.median(times["now"][1:] or times["now"])}  # (the first look apart)
    out["mb"] = paths["now"].stat().st_size / 1e6
    for path in paths.values():
        path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", default="10000,100000,1000000", help="file lengths, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pause", action="store_true", help="a progress-only job's pending pause instead")
    args = ap.parse_args()
    try:
        lengths = [int(x) for x in args.lines.split(",")]
    except ValueError:
        ap.error(f"--lines: expected comma-separated integers, got {args.lines!r}")
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{MINUTE} new lines per round, median of {args.reps}")
    if args.pause:
        header = "| lines in the file | MB | whole file ms/round | now: first look, ms | now: later, ms |"
        measure = pending_pause

        def row(r: dict[str, float]) -> str:
            return f"{r['whole']:.1f} | {r['first']:.1f} | {r['now']:.2f} | {r['whole'] / r['now']:.0f}x"
    else:
        header = "| lines in the file | MB | whole file ms/round | new lines only ms/round |"
        measure = one_length

        def row(r: dict[str, float]) -> str:
            return f"{r['whole']:.1f} | {r['new']:.2f} | {r['whole'] / r['new']:.0f}x"
    print(header + " ratio |")
    print("|---" * (header.count("|")) + "|")
    with tempfile.TemporaryDirectory() as d:
        for n in lengths:
            r = measure(n, args.reps, Path(d))
            print(f"| {n:,} | {r['mb']:.1f} | {row(r)} |", flush=True)

if __name__ == "__main__":
    main()
