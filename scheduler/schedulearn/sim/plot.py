"""Figures of simulation results (matplotlib, no display needed).

`plot_results(results, path)` draws two panels: the JCT CDF of every policy, and a GPU timeline
(Gantt: one row per GPU, a bar per job on it, coloured by job) of one policy (`gantt_policy`;
by default `goodput` when it is among the results, else the first). The timeline needs
the allocation history that `simulate(..., record=True)` keeps (`schedulearn simulate --plot`
asks for it); without it the panel says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

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
    """Write the figure to `path` (the format follows the suffix; PNG for `.png`)."""
    fig = make_figure(results, gantt_policy)
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def make_figure(results: Sequence[SimResult], gantt_policy: str | None = None) -> plt.Figure:
    """The figure: JCT CDF (top axes), GPU timeline (bottom axes)."""
    if not results:
        raise ValueError("results: expected at least one simulation result")
    names = [r.policy for r in results]
    if gantt_policy is not None and gantt_policy not in names:
        raise ValueError(f"gantt_policy: expected one of {', '.join(names)}, got {gantt_policy!r}")
    default = "goodput" if "goodput" in names else names[0]
    chosen = next(r for r in results if r.policy == (gantt_policy or default))
    fig, (cdf, gantt) = plt.subplots(2, 1, figsize=(11, 9), gridspec_kw={"height_ratios": [1, 1.6]})

    for r in results:
        jct = np.sort([j.end_time - j.submit_time for j in r.jobs if j.end_time is not None])
        if len(jct):
            cdf.step(jct, np.arange(1, len(jct) + 1) / len(jct), where="post",
                     label=f"{r.policy} (avg {jct.mean():,.0f} s)")
    cdf.set_xscale("log")
    cdf.set_xlabel("job completion time (s)")
    cdf.set_ylabel("fraction of jobs")
    cdf.set_title("JCT CDF")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(loc="lower right", fontsize="small")

    rows = [(n.name, g.index) for n in chosen.engine.nodes for g in n.gpus]
    segments = gpu_segments(chosen)
    colours = plt.get_cmap("tab20")
    for y, gpu in enumerate(rows):
        bars = segments.get(gpu, [])
        if bars:
            gantt.broken_barh([(s, e - s) for s, e, _ in bars], (y - 0.4, 0.8),
                              facecolors=[colours(job % 20) for _, _, job in bars], linewidth=0)
    gantt.set_ylim(-0.5, len(rows) - 0.5)
    step = max(1, len(rows) // 16)
    gantt.set_yticks(range(0, len(rows), step), [f"{n}:{i}" for n, i in rows[::step]], fontsize="x-small")
    gantt.set_xlabel("time (s)")
    gantt.set_ylabel("GPU")
    title = f"GPU timeline: {chosen.policy}"
    if not chosen.history:
        title += " (no allocation history: simulate with record=True)"
    gantt.set_title(title)
    fig.tight_layout()
    return fig
