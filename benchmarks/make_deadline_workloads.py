"""Deadline versions of the Pollux workloads, by the recipe of `traces/README.md`.

Each job of `traces/pollux/workloads/workload-N.csv` is timed alone on 16x4 GPUs with its
requested GPU count (packed on the fewest nodes) and batch size, no restart cost: T. Its deadline
is lambda * T + 90 s, lambda uniform in [0.5, 1.5] (numpy's default generator, seed 1000 + N,
one draw per job in file order), rounded to whole seconds. Workloads 1-4 were made by the same
recipe before this script (their lambdas are checked, not regenerated); 5-8 are made by it and
are the tuning set of the deadline policies (held out from the reported figures of 1-4).

    python benchmarks/make_deadline_workloads.py [--workloads 5,6,7,8]   # write the files
    python benchmarks/make_deadline_workloads.py --check                 # every file follows the recipe

`--check` exits 1 when a job's lambda, (deadline - 90) / T, lies outside [0.5, 1.5], or when a
generated file differs from what the script makes now.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scheduler"))

from schedulearn.estimates.job import packed_shape  # noqa: E402
from schedulearn.sim.apps import get_profile  # noqa: E402

SOURCE = ROOT / "traces" / "pollux" / "workloads"
TARGET = ROOT / "traces" / "pollux" / "workloads-deadline"
GENERATED = (5, 6, 7, 8)  # the ones this script writes (1-4 predate it)
LAMBDA = (0.5, 1.5)
GRACE_S = 90  # the first 60 s round and the 30 s start
PER_NODE = 4


def alone_s(application: str, gpus: int, batch_size: int) -> float:
    """T: seconds the job takes alone on `gpus` packed GPUs at its batch size, no restart."""
    return get_profile(application).time_to_complete(0.0, packed_shape(gpus, PER_NODE), batch_size)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def make(w: int) -> str:
    """The CSV text of workload w with its `deadline` column."""
    rows = _rows(SOURCE / f"workload-{w}.csv")
    rng = np.random.default_rng(1000 + w)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*rows[0].keys(), "deadline"])
    for r in rows:
        lam = rng.uniform(*LAMBDA)
        t = alone_s(r["application"], int(r["num_replicas"]), int(r["batch_size"]))
        writer.writerow([*r.values(), round(lam * t + GRACE_S)])
    return out.getvalue()


def lambdas(path: Path) -> list[tuple[float, float]]:
    """(lambda, T) of every job of a deadline workload: lambda = (deadline - 90) / T."""
    out = []
    for r in _rows(path):
        t = alone_s(r["application"], int(r["num_replicas"]), int(r["batch_size"]))
        out.append(((float(r["deadline"]) - GRACE_S) / t, t))
    return out


def outside(lam: float, t: float) -> bool:
    """Whether lambda lies outside [0.5, 1.5] by more than rounding to whole seconds moves it."""
    return not LAMBDA[0] - 0.5 / t <= lam <= LAMBDA[1] + 0.5 / t


def check() -> int:
    bad = 0
    for path in sorted(TARGET.glob("workload-*.csv")):
        pairs = lambdas(path)
        lams = [lam for lam, _ in pairs]
        off = [lam for lam, t in pairs if outside(lam, t)]
        w = int(path.stem.split("-")[1])
        same = w not in GENERATED or path.read_text() == make(w)
        print(f"{path.name}: {len(lams)} jobs, lambda {min(lams):.3f}..{max(lams):.3f}"
              f"{'' if not off else f', {len(off)} outside {LAMBDA}'}"
              f"{'' if same else ', differs from what this script makes'}")
        bad += bool(off) or not same
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default=",".join(map(str, GENERATED)),
                    help="comma-separated workload numbers to write (default: 5,6,7,8)")
    ap.add_argument("--check", action="store_true", help="check every file against the recipe")
    args = ap.parse_args()
    if args.check:
        return check()
    for w in (int(x) for x in args.workloads.split(",")):
        if not (SOURCE / f"workload-{w}.csv").exists():
            ap.error(f"--workloads: no {SOURCE.relative_to(ROOT)}/workload-{w}.csv (1-8 exist)")
        (TARGET / f"workload-{w}.csv").write_text(make(w))
        print(f"wrote {(TARGET / f'workload-{w}.csv').relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
