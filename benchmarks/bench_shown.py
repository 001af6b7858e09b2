"""What showing a cell's figures live costs: the job side (each figure also recorded, signed, in
`shown.jsonl`) and the waiting cell's extra poll (`GET jobs/{id}/shown`).

1. The same cell — `--figures` loss curves, each `plt.show()`n — run directly as the job's
   `main.py` (the runner script `%%schedulearn` builds) with and without the job's key
   (`$SCHEDULEARN_RESULT_KEY`: with it, rank 0 records each figure as it shows it); reps
   interleaved; medians of per-rep differences and ratios.
2. A live `jupyter server` with the extension: one poll of a running job as the waiting cell
   makes it, `GET jobs/{id}` alone against `GET jobs/{id}` + `GET jobs/{id}/shown` with nothing
   new (what each poll of a kernel's waiting cell adds), interleaved; and the whole record of
   that cell read back a page at a time (MB/s).

    .venv/bin/python benchmarks/bench_shown.py --reps 15 --polls 300
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler"), str(ROOT / "kernel_magics")]

CELL = """\
import matplotlib.pyplot as plt
losses = []
for epoch in range({n}):
    losses.append(1 / (epoch + 1))
    plt.plot(losses); plt.title(f"epoch {{epoch}}"); plt.show()
len(losses)
"""


def run_direct(workdir: Path, key: str | None) -> float:
    (workdir / "shown.jsonl").unlink(missing_ok=True)
    env = {**os.environ, "SCHEDULEARN_JOB_DIR": str(workdir)}
    env.pop("SCHEDULEARN_RESULT_KEY", None)
    if key:
        env["SCHEDULEARN_RESULT_KEY"] = key
    t = time.perf_counter()
    subprocess.run([sys.executable, "-u", "main.py"], cwd=workdir, check=True, capture_output=True, env=env)
    return time.perf_counter() - t


def median_line(name: str, base: list[float], other: list[float], unit: float = 1.0, fmt: str = ".3f") -> str:
    added = [(b - a) * unit for a, b in zip(base, other, strict=True)]
    ratio = [b / a for a, b in zip(base, other, strict=True)]
    return (f"{name:<34} {statistics.median(base) * unit:>9{fmt}} {statistics.median(other) * unit:>9{fmt}} "
            f"{statistics.median(added):>9{fmt}} {statistics.median(ratio):>6.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--figures", type=int, default=20)
    ap.add_argument("--polls", type=int, default=300)
    args = ap.parse_args()

    from schedulearn.client import Client
    from schedulearn_magics import bundle

    from tests.fixtures.jupyter import LiveServer

    script = bundle.build_script(CELL.format(n=args.figures))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        work = home / "direct"
        work.mkdir()
        (work / "main.py").write_text(script)
        run_direct(work, "ab" * 32)  # warm up (imports, font cache)
        plain, recorded = [], []
        for _ in range(args.reps):
            plain.append(run_direct(work, None))
            recorded.append(run_direct(work, "ab" * 32))
        size = (work / "shown.jsonl").stat().st_size
        print(f"{'job side':<34} {'plain s':>9} {'live s':>9} {'added s':>9} {'ratio':>6}")
        print(median_line(f"{args.figures} figures, {args.reps} reps", plain, recorded))
        per_figure = statistics.median([b - a for a, b in zip(plain, recorded, strict=True)]) / args.figures
        print(f"  record: {size / 1e6:.2f} MB for {args.figures} figures; added per figure "
              f"{per_figure * 1e3:.1f} ms")

        traits = {"virtual_gpus": 2, "executor": "local", "job_root": str(home / "jobs"),
                  "store_url": f"sqlite:///{home / 'jobs.db'}", "tick": 0.2, "inventory_interval": 0}
        server = LiveServer(home / "srv", traits).start()
        try:
            c = Client(server.url, server.token)
            shows = c.submit({"script": script, "name": "shows"})
            while c.job(shows["id"])["state"] not in ("succeeded", "failed"):
                time.sleep(0.2)
            running = c.submit({"command": [sys.executable, "-c", "import time; time.sleep(600)"]})
            while c.job(running["id"])["state"] != "running":
                time.sleep(0.2)
            job_only, with_shown = [], []
            for _ in range(args.polls):
                t = time.perf_counter()
                c.job(running["id"])
                job_only.append(time.perf_counter() - t)
                t = time.perf_counter()
                c.job(running["id"])
                c.shown(running["id"], 0)
                with_shown.append(time.perf_counter() - t)
            print(f"\n{'a poll of a running job':<34} {'job ms':>9} {'+shown ms':>9} {'added ms':>9} "
                  f"{'ratio':>6}")
            print(median_line(f"{args.polls} polls, nothing new", job_only, with_shown, unit=1e3, fmt=".2f"))
            reads = []
            for _ in range(5):
                t, offset, items = time.perf_counter(), 0, []
                while True:
                    page, after = c.shown(shows["id"], offset)
                    if after == offset:
                        break
                    items, offset = items + page, after
                reads.append(time.perf_counter() - t)
            took = statistics.median(reads)
            print(f"  the job's whole record read back: {len(items)} records, {offset / 1e6:.2f} MB in "
                  f"{took * 1e3:.0f} ms ({offset / 1e6 / took:.0f} MB/s)")
            c.cancel(running["id"])
        finally:
            server.stop()


if __name__ == "__main__":
    main()
