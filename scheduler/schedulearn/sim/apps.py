"""Elastic application model of the trace simulator (Pollux profiles).

Each application (``bert``, ``cifar10``, ``deepspeech2``, ``imagenet``, ``ncf``,
``yolov3``) is described by the measured profiles shipped in ``data/pollux/``
(see ``data/pollux/NOTICE``): ``placements.csv`` and ``scalability.csv`` give
the time of one optimiser step, ``validation-B.csv`` the statistical progress
and gradient statistics per epoch.  :class:`AppProfile` turns them into the
job model of ``traces/README.md`` ("The job model"), which mirrors the
published Pollux simulator (petuum/adaptdl, branch ``osdi21-artifact``,
``simulator/applications.py`` and ``simulator/simulator.py``).

Interpretations (where the README is terse, the published simulator decides):

Progress and epochs
    ``P[0] = 0`` and, for ``e = 1..E``, ``P[e]`` = the smallest ``progress`` of
    row ``e`` (1-based) over all ``validation-B.csv`` files.  Epoch ``e``
    (0-based) is the progress interval ``[P[e], P[e+1])``; a progress exactly at
    a boundary belongs to the next epoch (the original increments its epoch
    counter when the boundary is reached).  ``E`` is the README's epoch count
    (bert 2, cifar10 100, ncf 10, imagenet 90, deepspeech2 80, yolov3 50; for
    an unknown profile folder: the fewest rows of its validation files).
    ``target_progress = P[E]``; a job is complete when its progress reaches it.
    Past the last epoch (progress >= target) the last epoch's gradient
    statistics are used; :meth:`AppProfile.advance` from a completed progress
    returns ``(progress, 0.0)``.

Batch-size configuration (``configure``)
    ``r`` GPUs, global batch ``B``: ``local = ceil(B/r)``,
    ``a = ceil(local/max_local_bsz) - 1`` accumulation steps; on one GPU with
    ``B > init_batch_size`` at least one accumulation step (``a >= 1``; the
    original does this because the gradient statistics need two
    micro-batches); micro-batch ``m = ceil(local/(a+1))``.  As in the
    original, ``m`` is then capped at ``floor(max_batch_size / (r*(a+1)))``
    (and kept >= 1) so the batch actually processed,
    ``effective_batch_size = r*m*(a+1)``, never exceeds the largest validated
    B.  The effective batch (e.g. 2052 for B=2048 on 6 GPUs) is what the
    original feeds into the efficiency formula, so :meth:`goodput` and
    :meth:`advance` use it; :meth:`efficiency` itself takes the batch size
    literally.  Step time with accumulation:
    ``t(m) + a*(t(m) - sync(m))``.

Step time of one micro-batch ``t(m)``, ``sync(m)``
    The placement (GPUs per node, zeros dropped) is rotated (cyclically, not
    permuted) to its lexicographically smallest rotation, e.g. ``(2, 1, 1)`` ->
    ``(1, 1, 2)``, and written as digits (``"112"``).  If ``placements.csv``
    has rows for it, ``t`` and ``sync`` are interpolated linearly in the local
    batch between its rows.  ``placements.csv`` holds every placement of up to
    4 nodes with 1-4 GPUs each, so only placements on 5 or more nodes take the
    other path.  There the original builds a scipy ``LinearNDInterpolator``
    (Delaunay triangulation) over ``(num_nodes, num_replicas, local_bsz)``
    points: the per-(nodes, replicas, local) means of ``placements.csv`` plus
    ``scalability.csv`` (nodes 6, 8, 12, 16), querying
    ``num_nodes = min(nodes, 16)``.  The data lie on a regular grid, so that
    triangulation is degenerate and depends on qhull's tie-breaking; without
    scipy we use a well-defined piecewise-linear scheme on the same points
    instead: (1) per configuration (n, r), linear in the local batch;
    (2) for a node count n in the data, linear in r between the two nearest
    replica counts; (3) between the two node counts n0 <= n <= n1 in the data,
    linear in n at a fixed GPUs-per-node ratio ``u = r/n`` (so
    ``r_k = u*n_k``, always inside the data's range ``[n_k, 4*n_k]``).  It
    reproduces every data point.  Against scipy's triangulation (checked
    once, outside the package, on 5-16 nodes, every replica count, the
    validated B's) the step time differs by a median of 0.7-2 % per
    application, p90 3-9 %, worst cases 9-41 % where the profiles are noisy
    (non-monotone in the local batch) and the two schemes pick different
    neighbours.

Local batch outside the profiled rows of a configuration
    The original raises there (``interp1d`` bounds error / NaN assert).  We
    clamp below the smallest profiled local batch (a micro-batch smaller than
    profiled costs as much as the smallest profiled one) and extrapolate
    linearly from the last two rows above the largest (step time grows about
    linearly in the local batch; the larger configurations of
    ``scalability.csv`` are only profiled up to about ``max_batch_size / r``);
    an extrapolated sync time is kept within ``[0, step_time]``.

Statistical efficiency (per optimiser step)
    ``(var + sqr) / (var/s + sqr)`` with ``s = B / init_batch_size`` and the
    gradient statistics (``grad_sqr``, ``grad_var``) of the current epoch,
    interpolated linearly in B between the two nearest validated batch sizes.
    The original asserts that B lies in the validated range (and never leaves
    it); we clamp the statistics to the nearest validated B outside it (the
    ``s`` in the formula still uses the real B).  A non-positive denominator
    gives 1.0 (as in the original's goodput model).

Advancing
    Within an epoch the rate is constant, so :meth:`advance` is exact and
    piecewise over epochs (via a cached table of cumulative optimiser steps at
    each epoch boundary).  The original rounds the time at which an epoch
    boundary is crossed to whole seconds; we do not round.  The 30 s
    checkpoint-restart cost (``RESTART_PENALTY``) is the engine's business.

Best batch size
    :meth:`best_batch_size` maximises :meth:`goodput` over integer candidate
    batch sizes in ``[max(init_batch_size, r), max_batch_size]``: 64
    geometrically spaced values (the original's optimiser samples 50) plus
    every validated B in range; ties go to the smallest B.  It depends on the
    progress only through the epoch and is cached per (placement, epoch).
"""

from __future__ import annotations

import bisect
import csv
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..estimates import libm

__all__ = [
    "APPLICATIONS",
    "EPOCHS",
    "RESTART_PENALTY",
    "AppProfile",
    "StepConfig",
    "canonical_placement",
    "get_profile",
    "load_profiles",
]

DATA_ROOT = Path(__file__).resolve().parent / "data" / "pollux"

#: Applications of the Pollux artifact, in the order of error messages.
APPLICATIONS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
#: Epochs to completion (README).
EPOCHS: dict[str, int] = {
    "bert": 2,
    "cifar10": 100,
    "ncf": 10,
    "imagenet": 90,
    "deepspeech2": 80,
    "yolov3": 50,
}
#: Largest per-GPU batch where it differs from the profiled one (README).
MAX_LOCAL_BSZ: dict[str, int] = {"yolov3": 8}
#: Seconds without progress after every change of a running job's allocation.
RESTART_PENALTY = 30.0
#: Node-count cap of the scalability interpolation (the original's cluster).
MAX_INTERP_NODES = 16
_GPUS_PER_NODE = 4
_BEST_BSZ_SAMPLES = 64


def canonical_placement(placement) -> tuple[int, ...]:
    """Drop empty nodes and rotate to the lexicographically smallest rotation."""
    p = tuple(int(g) for g in placement if g)
    if len(p) <= 1:
        return p
    return min(p[i:] + p[:i] for i in range(len(p)))


@dataclass(frozen=True)
class StepConfig:
    """How a global batch runs on a placement."""

    num_nodes: int
    num_replicas: int
    local_bsz: int  # ceil(B / r)
    accum_steps: int  # a: the step is a+1 micro-steps
    micro_bsz: int  # per-GPU batch of one micro-step
    effective_batch_size: int  # r * micro * (a+1), what is actually processed


class _Curve:
    """Step and sync time of one configuration as a function of local batch."""

    __slots__ = ("bsz", "step", "sync")

    def __init__(self, points: dict[float, tuple[float, float]]):
        keys = sorted(points)
        self.bsz = [float(k) for k in keys]
        self.step = [points[k][0] for k in keys]
        self.sync = [points[k][1] for k in keys]

    def __call__(self, x: float) -> tuple[float, float]:
        bsz = self.bsz
        if x <= bsz[0] or len(bsz) == 1:
            # Clamp below (and for a single row).
            return self.step[0], self.sync[0]
        i = bisect.bisect_left(bsz, x)
        if i < len(bsz) and bsz[i] == x:
            return self.step[i], self.sync[i]
        if i >= len(bsz):  # above the largest row: extrapolate the last segment
            i = len(bsz) - 1
        x0, x1 = bsz[i - 1], bsz[i]
        w = (x - x0) / (x1 - x0)
        step = self.step[i - 1] + w * (self.step[i] - self.step[i - 1])
        sync = self.sync[i - 1] + w * (self.sync[i] - self.sync[i - 1])
        step = max(step, 1e-9)
        sync = min(max(sync, 0.0), step)
        return step, sync


def _lerp(a: tuple[float, float], b: tuple[float, float], w: float) -> tuple[float, float]:
    return a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])


def _bracket(values: list, x: float) -> tuple[int, int, float]:
    """Indices i <= j of the nearest values around x (clamped) and the weight of j."""
    if x <= values[0]:
        return 0, 0, 0.0
    if x >= values[-1]:
        n = len(values) - 1
        return n, n, 0.0
    j = bisect.bisect_left(values, x)
    if values[j] == x:
        return j, j, 0.0
    return j - 1, j, (x - values[j - 1]) / (values[j] - values[j - 1])


@dataclass(frozen=True)
class AppProfile:
    """One application's job model.  Build with :func:`load_profiles`."""

    name: str
    max_local_bsz: int  # largest per-GPU batch (as profiled; yolov3: 8)
    init_batch_size: int  # smallest validated global B
    max_batch_size: int  # largest validated global B
    target_progress: float  # progress needed to complete: P[E]
    min_local_bsz: int  # smallest profiled per-GPU batch
    epochs: int  # E
    epoch_progress: tuple[float, ...]  # P[0..E], P[0] = 0
    validated_batch_sizes: tuple[int, ...]
    # Internal tables and caches (not part of equality/hash/repr).
    _placements: dict = field(repr=False, compare=False)  # "112" -> _Curve
    _configs: dict = field(repr=False, compare=False)  # n -> (replicas list, curves list)
    _grad_sqr: np.ndarray = field(repr=False, compare=False)  # [epoch, validated B]
    _grad_var: np.ndarray = field(repr=False, compare=False)
    _step_cache: dict = field(default_factory=dict, repr=False, compare=False)
    _eff_cache: dict = field(default_factory=dict, repr=False, compare=False)
    _best_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def check_batch_size(self, batch_size: int) -> None:
        """ValueError unless 1 <= B <= the largest validated batch: past it the model has no data,
        and its gradient accumulation grows without end (B = 1e20 ran for ever)."""
        if not 1 <= batch_size <= self.max_batch_size:
            raise ValueError(f"batch_size: expected an integer from 1 to {self.max_batch_size} "
                             f"({self.name}'s largest validated batch size), got {batch_size}")

    # ----------------------------------------------------------------- time
    def configure(self, placement, batch_size: int) -> StepConfig:
        """Local batch, accumulation steps and micro-batch of B on placement."""
        p = tuple(g for g in placement if g)
        r = sum(p)
        if r <= 0:
            raise ValueError(f"placement: expected at least one GPU, got {tuple(placement)!r}")
        b = int(batch_size)
        if b < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, got {batch_size!r}")
        local = -(-b // r)
        accum = -(-local // self.max_local_bsz) - 1
        if r == 1 and b > self.init_batch_size:
            accum = max(accum, 1)
        micro = -(-local // (accum + 1))
        micro = max(1, min(micro, self.max_batch_size // (r * (accum + 1))))
        return StepConfig(len(p), r, local, accum, micro, r * micro * (accum + 1))

    def _micro_times(self, canon: tuple[int, ...], micro: float) -> tuple[float, float]:
        key = "".join(map(str, canon)) if max(canon) < 10 else None
        curve = self._placements.get(key)
        if curve is not None:
            return curve(micro)
        return self._scaled_times(len(canon), sum(canon), micro)

    def _times_at(self, n: int, r: float, micro: float) -> tuple[float, float]:
        reps, curves = self._configs[n]
        i, j, w = _bracket(reps, r)
        lo = curves[i](micro)
        return lo if i == j else _lerp(lo, curves[j](micro), w)

    def _scaled_times(self, num_nodes: int, num_replicas: int, micro: float) -> tuple[float, float]:
        """Interpolation over configurations (no placement row)."""
        n = min(num_nodes, MAX_INTERP_NODES)
        u = min(max(num_replicas / n, 1.0), float(_GPUS_PER_NODE))
        nodes = self._configs["nodes"]
        i, j, w = _bracket(nodes, n)
        lo = self._times_at(nodes[i], u * nodes[i], micro)
        if i == j:
            return lo
        return _lerp(lo, self._times_at(nodes[j], u * nodes[j], micro), w)

    def _step_entry(self, placement, batch_size: int):
        key = (tuple(placement), int(batch_size))
        entry = self._step_cache.get(key)
        if entry is None:
            cfg = self.configure(placement, batch_size)
            canon = canonical_placement(placement)
            t, s = self._micro_times(canon, cfg.micro_bsz)
            entry = (t + cfg.accum_steps * (t - s), cfg.effective_batch_size)
            self._step_cache[key] = entry
        return entry

    def step_time(self, placement: tuple[int, ...], batch_size: int) -> float:
        """Seconds per optimiser step of global B on placement (GPUs per node),
        gradient accumulation included."""
        return self._step_entry(placement, batch_size)[0]

    # ----------------------------------------------------------- efficiency
    def epoch_of(self, progress: float) -> int:
        """0-based epoch that progress is in (the last epoch once complete)."""
        e = bisect.bisect_right(self.epoch_progress, progress) - 1
        return min(max(e, 0), self.epochs - 1)

    def _efficiencies(self, batch_size: float) -> tuple[list[float], list[float]]:
        """Per-epoch efficiency at B and cumulative steps at each boundary."""
        key = batch_size
        entry = self._eff_cache.get(key)
        if entry is None:
            vb = self.validated_batch_sizes
            i, j, w = _bracket(list(vb), batch_size)
            sqr = self._grad_sqr[:, i] + w * (self._grad_sqr[:, j] - self._grad_sqr[:, i])
            var = self._grad_var[:, i] + w * (self._grad_var[:, j] - self._grad_var[:, i])
            s = batch_size / self.init_batch_size
            denom = var / s + sqr
            with np.errstate(divide="ignore", invalid="ignore"):
                gain = np.where(denom > 0, (var + sqr) / denom, 1.0)
            widths = np.diff(np.asarray(self.epoch_progress))
            steps = np.concatenate(([0.0], np.cumsum(widths / gain)))
            entry = (gain.tolist(), steps.tolist())
            self._eff_cache[key] = entry
        return entry

    def efficiency(self, progress: float, batch_size: int) -> float:
        """Progress per optimiser step at global B in the epoch of progress."""
        return self._efficiencies(batch_size)[0][self.epoch_of(progress)]

    def goodput(self, placement, batch_size: int, progress: float) -> float:
        """Progress per second (efficiency of the effective batch / step time)."""
        t, eff_b = self._step_entry(placement, batch_size)
        return self._efficiencies(eff_b)[0][self.epoch_of(progress)] / t

    def advance(self, progress: float, placement, batch_size: int, dt: float) -> tuple[float, float | None]:
        """Run for dt seconds from progress.

        Returns ``(new_progress, seconds_until_completion)``; the second is
        None unless the job completes within dt (then new_progress is
        target_progress).
        """
        if progress >= self.target_progress:
            return progress, 0.0
        if dt <= 0:
            return progress, None
        t, eff_b = self._step_entry(placement, batch_size)
        gain, steps = self._efficiencies(eff_b)
        bounds = self.epoch_progress
        e = self.epoch_of(progress)
        now = steps[e] + (progress - bounds[e]) / gain[e]
        end = now + dt / t
        if end >= steps[-1]:
            return self.target_progress, min(dt, (steps[-1] - now) * t)
        k = bisect.bisect_right(steps, end) - 1
        new = bounds[k] + (end - steps[k]) * gain[k]
        return min(max(new, progress), self.target_progress), None

    def time_to_complete(self, progress: float, placement, batch_size: int) -> float:
        """Seconds from progress to completion at a fixed configuration."""
        if progress >= self.target_progress:
            return 0.0
        t, eff_b = self._step_entry(placement, batch_size)
        gain, steps = self._efficiencies(eff_b)
        e = self.epoch_of(progress)
        now = steps[e] + (progress - self.epoch_progress[e]) / gain[e]
        return max(0.0, (steps[-1] - now) * t)

    def fraction_done(self, progress: float) -> float:
        """The fraction of its epochs a job at `progress` has done (what its training loop knows)."""
        if progress >= self.target_progress:
            return 1.0
        e = self.epoch_of(progress)
        lo, hi = self.epoch_progress[e], self.epoch_progress[e + 1]
        return (e + (progress - lo) / (hi - lo if hi > lo else 1.0)) / self.epochs

    def report(self, progress: float, placement, batch_size: int) -> dict:
        """What a job at `progress` running B on `placement` measures and reports (the fields of
        `schedulearn.estimates.reports`): its step time and the time of one micro-step without
        synchronisation, the gradient statistics of its current epoch at its batch size, the
        batch sizes it accepts, and the fraction of its epochs done."""
        cfg = self.configure(placement, batch_size)
        t, s = self._micro_times(canonical_placement(placement), cfg.micro_bsz)
        e = self.epoch_of(progress)
        vb = self.validated_batch_sizes
        i, j, w = _bracket(list(vb), cfg.effective_batch_size)
        sqr = self._grad_sqr[e, i] + w * (self._grad_sqr[e, j] - self._grad_sqr[e, i])
        var = self._grad_var[e, i] + w * (self._grad_var[e, j] - self._grad_var[e, i])
        return {
            "step_time": self.step_time(placement, batch_size), "compute_time": t - s,
            "batch_size": int(batch_size), "accum_steps": cfg.accum_steps,
            "grad_sqr": float(sqr), "grad_var": float(var),
            "init_batch_size": self.init_batch_size, "max_batch_size": self.max_batch_size,
            "max_local_bsz": self.max_local_bsz, "progress": self.fraction_done(progress),
        }

    def best_batch_size(self, placement, progress: float) -> int:
        """B in [max(init, r), max_batch_size] maximising goodput on placement."""
        epoch = self.epoch_of(progress)
        canon = canonical_placement(placement)
        key = (canon, epoch)
        best = self._best_cache.get(key)
        if best is None:
            r = sum(canon)
            lo = max(self.init_batch_size, r)
            hi = self.max_batch_size
            if r < 1 or lo > hi:
                raise ValueError(
                    f"{self.name}: no batch size in [{self.init_batch_size}, {hi}]"
                    f" fits {r} GPUs (B must be >= the number of GPUs)"
                )
            cands = {int(round(b)) for b in libm.geomspace(lo, hi, _BEST_BSZ_SAMPLES)}
            cands.update(b for b in self.validated_batch_sizes if lo <= b <= hi)
            cands.update((lo, hi))
            best_g = -1.0
            for b in sorted(cands):
                g = self.goodput(canon, b, self.epoch_progress[epoch])
                if g > best_g:
                    best, best_g = b, g
            self._best_cache[key] = best
        return best


# ------------------------------------------------------------------ loading
_COLUMNS = {  # file kind -> (integer columns, number columns)
    "placements": (("local_bsz",), ("step_time", "sync_time")),
    "scalability": (("num_nodes", "num_replicas", "local_bsz"), ("step_time", "sync_time")),
    "validation": ((), ("progress", "grad_sqr", "grad_var")),
}


def _read_rows(path: Path) -> list[dict[str, str]]:
    """Rows of a profile CSV, checked: a missing file, column or malformed value raises a one-line
    ValueError naming the file and line."""
    ints, nums = _COLUMNS[path.stem.split("-")[0]]
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in ints + nums + (("placement",) if "placement" in path.stem else ())
                       if c not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{path}:1: header: missing column {missing[0]!r}")
            rows = []
            for row in reader:
                for col in ints + nums:
                    text = (row.get(col) or "").strip()
                    try:
                        ok = int(text) >= 1 if col in ints else math.isfinite(float(text))
                    except ValueError:
                        ok = False
                    if not ok:
                        what = "an integer >= 1" if col in ints else "a number"
                        raise ValueError(f"{path}:{reader.line_num}: {col}: expected {what}, got {text!r}")
                pid = (row.get("placement") or "").strip() if "placement" in row else "1"
                if not (pid.isdigit() and "0" not in pid):
                    raise ValueError(f"{path}:{reader.line_num}: placement: expected GPUs per node as "
                                     f"digits 1-9 (e.g. 22), got {pid!r}")
                rows.append(row)
            return rows
    except OSError as e:
        raise ValueError(f"{path}: cannot read the profile file ({e.strerror or e})") from None


def _load_profile(folder: Path) -> AppProfile:
    name = folder.name
    validation: dict[int, list[dict[str, str]]] = {}
    for path in folder.glob("validation-*.csv"):
        validation[int(path.stem.rsplit("-", 1)[1])] = _read_rows(path)
    if not validation:
        raise ValueError(f"{folder}: no validation-B.csv files")
    vb = tuple(sorted(validation))
    epochs = EPOCHS.get(name) or min(len(rows) for rows in validation.values())
    if any(len(rows) < epochs for rows in validation.values()):
        raise ValueError(f"{folder}: a validation file has fewer than {epochs} epochs")
    bounds = [0.0] + [min(float(validation[b][e]["progress"]) for b in vb) for e in range(epochs)]
    sqr = np.array([[float(validation[b][e]["grad_sqr"]) for b in vb] for e in range(epochs)])
    var = np.array([[float(validation[b][e]["grad_var"]) for b in vb] for e in range(epochs)])

    by_placement: dict[str, dict[float, tuple[float, float]]] = {}
    grouped: dict[tuple[int, int, int], list[tuple[float, float]]] = {}
    local_sizes = []
    for row in _read_rows(folder / "placements.csv"):
        pid = row["placement"].strip()
        bsz = int(row["local_bsz"])
        times = float(row["step_time"]), float(row["sync_time"])
        by_placement.setdefault(pid, {})[bsz] = times
        gpus = tuple(int(c) for c in pid)
        grouped.setdefault((len(gpus), sum(gpus), bsz), []).append(times)
        local_sizes.append(bsz)
    # Per-(nodes, replicas, local) means of placements.csv + scalability.csv.
    config_points: dict[tuple[int, int], dict[float, tuple[float, float]]] = {}
    for (n, r, bsz), vals in grouped.items():
        config_points.setdefault((n, r), {})[bsz] = (
            sum(v[0] for v in vals) / len(vals),
            sum(v[1] for v in vals) / len(vals),
        )
    for row in _read_rows(folder / "scalability.csv"):
        n, r, bsz = int(row["num_nodes"]), int(row["num_replicas"]), int(row["local_bsz"])
        config_points.setdefault((n, r), {})[bsz] = (float(row["step_time"]), float(row["sync_time"]))
    configs: dict = {}
    for n, r in sorted(config_points):
        reps, curves = configs.setdefault(n, ([], []))
        reps.append(float(r))
        curves.append(_Curve(config_points[(n, r)]))
    configs["nodes"] = sorted(k for k in configs if k != "nodes")

    return AppProfile(
        name=name,
        max_local_bsz=MAX_LOCAL_BSZ.get(name, max(local_sizes)),
        init_batch_size=vb[0],
        max_batch_size=vb[-1],
        target_progress=bounds[-1],
        min_local_bsz=min(local_sizes),
        epochs=epochs,
        epoch_progress=tuple(bounds),
        validated_batch_sizes=vb,
        _placements={pid: _Curve(pts) for pid, pts in by_placement.items()},
        _configs=configs,
        _grad_sqr=sqr,
        _grad_var=var,
    )


@functools.lru_cache(maxsize=8)
def _load_cached(root: str) -> dict[str, AppProfile]:
    folder = Path(root)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such profile folder")
    apps = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "placements.csv").is_file())
    if not apps:
        raise ValueError(f"{folder}: no application profiles (folders with placements.csv)")
    return {p.name: _load_profile(p) for p in apps}


def load_profiles(root: str | Path | None = None) -> dict[str, AppProfile]:
    """Application profiles under root (default: the package data); cached."""
    path = DATA_ROOT if root is None else Path(root)
    return dict(_load_cached(str(path.resolve())))


def get_profile(name: str) -> AppProfile:
    """The packaged profile of an application; unknown name -> ValueError."""
    profiles = _load_cached(str(DATA_ROOT))
    try:
        return profiles[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"application: unknown {name!r}; expected one of {', '.join(sorted(profiles))}"
        ) from None
