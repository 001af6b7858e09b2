"""Figures of simulation results (matplotlib, no display needed).

`plot_results(results, path)` draws two panels: the JCT CDF of every policy (policies with
identical results share one curve, labelled with all their names), and a GPU timeline (Gantt: one
row per GPU, a bar per job on it, coloured by job, job names on bars wide enough, a colour key of
the jobs with the most GPU time, a red cross where a job that missed its deadline was due) of one
policy (`gantt_policy`; by default `goodput` when it is
among the results, else the first). Times read as durations (`5 min`, `2 h`); legends sit beside
the axes, never over the curves. The timeline needs
the allocation history that `simulate(..., record=True)` keeps (`schedulearn simulate --plot`
asks for it); without it the panel says so.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, MultipleLocator, NullFormatter  # noqa: E402

from .simulate import SimResult  # noqa: E402


def gpu_segments(result: SimResult) -> dict[tuple[str, int], list[tuple[float, float, int]]]:
    """(node, gpu) -> [(start, end, job id)] from the recorded allocation history."""
    held: dict[int, tuple[float, dict[str, list[int]]]] = {}
    out: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    for t, job_id, alloc in sorted(result.history, key=lambda h: h[0]):
        if job_id in held:
            since, old = held.pop(job_id)
            for node, idx in old.items():
                for i in idx:
                    out.setdefault((node, i), []).append((since, t, job_id))
        if alloc:
            held[job_id] = (t, alloc)
    return out


def plot_results(results: Sequence[SimResult], path: str | Path, gantt_policy: str | None = None) -> Path:
    """Write the figure to `path`, whole or not at all (through a temporary file beside it); the
    format follows the suffix (`image_format`), PNG where there is none — written to `path` as
    given, not to `path.png` as matplotlib alone would."""
    path = Path(path)
    fmt = image_format(path)
    fig = make_figure(results, gantt_policy)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fig.savefig(tmp, dpi=100, format=fmt)
        tmp.replace(path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def image_format(path: str | Path) -> str:
    """The image format `path`'s suffix names (`png` where it has none), or a one-line
    `ValueError` naming the formats there are."""
    suffix = Path(path).suffix.lower().lstrip(".")
    known = dict(FigureCanvasBase.get_supported_filetypes())
    if shutil.which(matplotlib.rcParams["pgf.texsystem"]) is None:  # (PGF is written by LaTeX)
        known.pop("pgf", None)
    if not suffix:
        return "png"
    if suffix not in known:
        raise ValueError(f"plot: unknown image format '.{suffix}' in {str(path)!r}; "
                         f"use one of: {', '.join('.' + k for k in sorted(known))}")
    return suffix


def check_writable(path: str | Path) -> Path:
    """`path` if an image can be written there (its folder exists and takes a file; it is not a
    folder), else a one-line `ValueError`: checked before a simulation of minutes, not after."""
    path = Path(path)
    if path.is_dir():
        example = str(path / "jct.png")
        raise ValueError(f"plot: {str(path)!r} is a folder; give a file name such as {example!r}")
    image_format(path)
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"plot: no folder {str(folder)!r} to write {path.name!r} into")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise ValueError(f"plot: cannot write into {str(folder)!r} ({e.strerror})") from None
    return path


def fmt_duration(seconds: float, _pos: object = None) -> str:
    """`45 s`, `5 min`, `2 h`, `1.5 d`: axis labels a person reads at a glance."""
    if seconds < 60:  # (a legend's average of short jobs read `avg 5.80526 s`)
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    if seconds < 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} d"


def same_results(results: Sequence[SimResult]) -> list[tuple[list[str], np.ndarray]]:
    """The JCTs (sorted) of each group of policies whose JCTs are identical: `[(names, jct)]`,
    so that one curve carries every name instead of one hiding the others."""
    groups: list[tuple[list[str], np.ndarray]] = []
    results_met = {r.policy: r.metrics.get("deadline_met") for r in results}  # (and the same share met)
    for r in results:
        jct = np.sort([j.end_time - j.submit_time for j in r.jobs if j.end_time is not None])
        for names, other in groups:
            met = {results_met.get(n) for n in names} | {r.metrics.get("deadline_met")}
            if other.shape == jct.shape and np.array_equal(other, jct) and len(met) == 1:
                names.append(r.policy)
                break
        else:
            groups.append(([r.policy], jct))
    return groups


#: 60 distinct colours (tab20, tab20b, tab20c): a job's colour is its id modulo 60.
_PALETTE = [plt.get_cmap(m)(i) for m in ("tab20", "tab20b", "tab20c") for i in range(20)]


def job_colour(job_id: int) -> tuple[float, float, float, float]:
    return _PALETTE[job_id % len(_PALETTE)]


def nice_step(span: float, most: int = 8) -> float:
    """A tick step in durations people think in, giving at most `most` ticks over `span`."""
    for step in (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400):
        if span / step <= most:
            return float(step)
    return 86400.0 * max(1, round(span / 86400 / most))


#: Where the (log-scale) JCT axis puts its ticks: durations people think in.
NICE_DURATIONS = (1, 10, 60, 300, 900, 3600, 3 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400)
#: Job names are written on timeline bars at least this share of the time axis wide.
LABEL_MIN_WIDTH = 0.06
#: The colour key lists at most this many jobs (those with the most GPU time).
KEY_JOBS = 12


def make_figure(results: Sequence[SimResult], gantt_policy: str | None = None) -> plt.Figure:
    """The figure: JCT CDF (top axes), GPU timeline (bottom axes); legends beside the axes."""
    if not results:
        raise ValueError("results: expected at least one simulation result")
    names = [r.policy for r in results]
    if gantt_policy is not None and gantt_policy not in names:
        raise ValueError(f"gantt_policy: expected one of {', '.join(names)}, got {gantt_policy!r}")
    default = "goodput" if "goodput" in names else names[0]
    chosen = next(r for r in results if r.policy == (gantt_policy or default))
    fig, (cdf, gantt) = plt.subplots(2, 1, figsize=(11, 9), gridspec_kw={"height_ratios": [1, 1.6]})
    duration = FuncFormatter(fmt_duration)

    met = {r.policy: r.metrics["deadline_met"] for r in results if "deadline_met" in r.metrics}
    for group, jct in same_results(results):
        if len(jct):
            label = " = ".join(group) + f" (avg {fmt_duration(float(jct.mean()))}"
            label += f", deadlines met {met[group[0]]:.0%})" if group[0] in met else ")"
            cdf.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post", label=label)
    cdf.set_xscale("log")
    lo, hi = cdf.get_xlim()
    cdf.xaxis.set_major_locator(FixedLocator([t for t in NICE_DURATIONS if lo <= t <= hi] or [lo, hi]))
    cdf.xaxis.set_major_formatter(duration)
    cdf.xaxis.set_minor_formatter(NullFormatter())
    cdf.set_xlabel("job completion time")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_title("JCT CDF (policies with identical results share a curve)")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", borderaxespad=0)

    rows = [(n.name, g.index) for n in chosen.engine.nodes for g in n.gpus]
    segments = gpu_segments(chosen)
    job_names = {j.id: j.spec.name for j in chosen.jobs}
    span = max((e for bars in segments.values() for _, e, _ in bars), default=1.0)
    gpu_time: dict[int, float] = {}
    widest: dict[int, tuple[float, float, int]] = {}  # job -> (width, middle, row) of its widest bar
    for y, gpu in enumerate(rows):
        bars = segments.get(gpu, [])
        if bars:
            gantt.broken_barh([(s, e - s) for s, e, _ in bars], (y - 0.4, 0.8),
                              facecolors=[job_colour(job) for _, _, job in bars], linewidth=0)
        for s, e, job in bars:
            gpu_time[job] = gpu_time.get(job, 0.0) + e - s
            if e - s > widest.get(job, (0.0,))[0]:
                widest[job] = (e - s, (s + e) / 2, y)
    for job, (width, middle, y) in widest.items():  # one name a job, on its widest bar
        if width >= LABEL_MIN_WIDTH * span:
            gantt.text(middle, y, job_names.get(job, f"#{job}"), ha="center", va="center",
                       fontsize="xx-small", clip_on=True)
    missed = [(j.spec.deadline, widest[j.id][2]) for j in chosen.jobs if j.id in widest
              and j.spec.deadline is not None and (j.end_time is None or j.end_time > j.spec.deadline)]
    if missed:  # a red cross where each job that missed its deadline was due, on its widest bar's GPU
        gantt.plot(*zip(*missed, strict=True), "x", color="red", markersize=5, zorder=3)
    keyed = sorted(gpu_time, key=lambda j: (-gpu_time[j], j))[:KEY_JOBS]
    if keyed:
        handles = [Patch(color=job_colour(j), label=job_names.get(j, f"#{j}")) for j in keyed]
        if missed:
            handles.append(Line2D([], [], color="red", marker="x", linestyle="",
                                  label="missed deadline (due)"))
        more = len(gpu_time) - len(keyed)
        gantt.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small",
                     borderaxespad=0, title=f"jobs (most GPU time{f'; {more} more' if more > 0 else ''})",
                     title_fontsize="x-small")
    gantt.xaxis.set_major_locator(MultipleLocator(nice_step(span)))
    gantt.set_ylim(-0.5, len(rows) - 0.5)
    step = max(1, len(rows) // 16)
    gantt.set_yticks(range(0, len(rows), step), [f"{n}:{i}" for n, i in rows[::step]], fontsize="x-small")
    gantt.xaxis.set_major_formatter(duration)
    gantt.set_xlabel("time since the first submission")
    gantt.set_ylabel("GPU")
    title = f"GPU timeline: {chosen.policy}"
    if not chosen.history:
        title += " (no allocation history: simulate with record=True)"
    gantt.set_title(title)
    fig.tight_layout()
    return fig
