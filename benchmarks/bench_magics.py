"""`%%schedulearn` round trip: a cell run as a job (bundle, POST, schedule, start, run, result
back over HTTP) versus running the same code directly as `python main.py`.

A live `jupyter server` with the extension (local executor, 4 virtual GPUs) in a subprocess; the
magics driven through IPython's InteractiveShell in this process, waiting (the plain-text view).
Repetitions interleaved; medians of per-repetition differences and ratios.

    .venv/bin/python benchmarks/bench_magics.py --reps 20 --torch-reps 5
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scheduler"), str(ROOT / "kernel_magics")]

CELLS = {
    "python (sum)": "sum(range(1000))",
    "python + 1 MiB --vars": "len(blob)",
    "torch (import, 1 process)": "import torch\nfloat(torch.ones(3).sum())",
    # the same plot, closed unseen or shown: what bringing one figure back costs, side by side
    "matplotlib, figure closed": "import matplotlib.pyplot as plt\nplt.plot(range(100))\nplt.close('all')\n1",
    "matplotlib, 1 figure shown": "import matplotlib.pyplot as plt\nplt.plot(range(100))\nplt.show()\n1",
}


def direct(cell: str, workdir: Path, variables: dict[str, object]) -> float:
    """`python main.py` of the same runner script (same embedded vars, no scheduler)."""
    from schedulearn_magics import bundle

    packed = bundle.pack_vars(list(variables), variables) if variables else None
    (workdir / "main.py").write_text(bundle.build_script(cell, variables=packed))
    t = time.perf_counter()
    subprocess.run([sys.executable, "-u", "main.py"], cwd=workdir, check=True, capture_output=True,
                   env={**os.environ, "SCHEDULEARN_JOB_DIR": str(workdir)})
    return time.perf_counter() - t


def through_magic(shell, line: str, cell: str) -> float:
    t = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        r = shell.run_cell(f"%%schedulearn {line}\n{cell}")
    elapsed = time.perf_counter() - t
    if not r.success:
        raise SystemExit(f"cell failed: {r.error_in_exec}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--torch-reps", type=int, default=5)
    args = ap.parse_args()

    from IPython.core.interactiveshell import InteractiveShell

    from tests.fixtures.jupyter import LiveServer

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        traits = {"virtual_gpus": 4, "executor": "local", "job_root": str(home / "jobs"),
                  "store_url": f"sqlite:///{home / 'jobs.db'}", "tick": 0.2, "inventory_interval": 0}
        server = LiveServer(home / "srv", traits).start()
        os.environ["SCHEDULEARN_URL"], os.environ["SCHEDULEARN_TOKEN"] = server.url, server.token
        try:
            shell = InteractiveShell.instance()
            shell.run_line_magic("load_ext", "schedulearn_magics")
            shell.user_ns["blob"] = os.urandom(1 << 20)
            work = home / "direct"
            work.mkdir()
            print(f"{'cell':<28} {'reps':>4} {'direct s':>9} {'magic s':>9} {'added s':>8} "
                  f"{'added min..max':>15} {'ratio':>6}")
            for name, cell in CELLS.items():
                reps = args.torch_reps if "torch" in name else args.reps
                line = "--vars blob" if "--vars" in name else ""
                through_magic(shell, line, cell)  # warm up (first import, first job dir)
                d, m = [], []
                for _ in range(reps):
                    d.append(direct(cell, work, {"blob": shell.user_ns["blob"]} if line else {}))
                    m.append(through_magic(shell, line, cell))
                added = [b - a for a, b in zip(d, m, strict=True)]
                ratios = [b / a for a, b in zip(d, m, strict=True)]
                print(f"{name:<28} {reps:>4} {statistics.median(d):>9.3f} {statistics.median(m):>9.3f} "
                      f"{statistics.median(added):>8.3f} {min(added):>7.3f}..{max(added):<7.3f} "
                      f"{statistics.median(ratios):>6.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
