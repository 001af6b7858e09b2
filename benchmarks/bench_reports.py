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

Run: PYTHONPATH=scheduler python benchmarks/bench_reports.py [--lines 10000,100000,1000000] [--reps 5]
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", default="10000,100000,1000000", help="file lengths, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    try:
        lengths = [int(x) for x in args.lines.split(",")]
    except ValueError:
        ap.error(f"--lines: expected comma-separated integers, got {args.lines!r}")
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{MINUTE} new lines per round, median of {args.reps}")
    print("| lines in the file | MB | whole file ms/round | new lines only ms/round | ratio |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for n in lengths:
            r = one_length(n, args.reps, Path(d))
            print(f"| {n:,} | {r['mb']:.1f} | {r['whole']:.1f} | {r['new']:.2f} | "
                  f"{r['whole'] / r['new']:.0f}x |", flush=True)


if __name__ == "__main__":
    main()
