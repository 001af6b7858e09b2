"""What a resize costs a running job, measured from the job's own reports, and the price a
policy puts on the next one.

When the engine resizes a running job it leaves a *pending* mark in `job.extra` (`PENDING_KEY`:
when, from how many GPUs to how many, the run number after it, whether it happens in place).
Live executors read the job's reports (`metrics.jsonl`, see `schedulearn.estimates.reports`)
before every round; `measure` finds the first report of the new configuration after the mark
(the new run number after a checkpoint-restart, the new GPU count after a resize in place) and
the report just before it, the last step at the old one. The pause is the time between the
two: from the end of the last step before the resize to the end of the first step after it (so
it holds one step at the new size, on both sides of a comparison; a report covering several
steps, `timed_steps`, ended its first one that many less one step times before its own time).
A job that reports only its progress (`report(progress=...)`, no step times) has no steps to
go by: its pause runs from its last report before the resize (progress p0) to when the new
configuration had done p0 again — its first report past p0, less the work beyond p0 in it at
the rate of its next report (so it needs two; work redone from an older checkpoint counts as
pause). The engine keeps the last `KEEP_PAUSES` per kind in `job.extra[RESIZE_PAUSES_KEY]` and
records a `resize_pause` event.

`price(job, default, family)` is the cost in seconds a policy charges for the job's next resize:
the median of its measured pauses of the kind its next resize will be (in place once it — or a
finished job of its family — has been resized in place, else a checkpoint-restart); until it has
one of that kind, the median of its family's (`family`: the pauses the finished runs of the same
cell or application measured, `estimates.predict.History.pauses_of`: a cell run again is resized as
its earlier runs were); `default` (the policy's constant) where neither has one, and
`IN_PLACE_PRIOR` of it for a running job that asks to be resized in place. `spent(job,
default, family)` is what its past resizes cost by the same prices.

Pure functions on a `Job`; no I/O.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from .model import Job, JobState

#: `Job.extra` key: the measured pauses, {"in_place": [s, ...], "restart": [s, ...]}
RESIZE_PAUSES_KEY = "resize_pauses"
#: `Job.extra` key: how many times the job was resized in place (not counted in `Job.restarts`)
IN_PLACE_KEY = "in_place_resizes"
#: `Job.extra` key: the resize whose pause is not measured yet
PENDING_KEY = "resize_pending"
#: measured pauses kept per kind
KEEP_PAUSES = 5
#: measured pauses kept per kind for a family of jobs (`estimates.predict.History.pauses_of`)
KEEP_FAMILY_PAUSES = 15
#: the share of a restart's default price a first resize in place is charged until one is
#: measured: the bound the project holds them to (docs/benchmarks.md: 0.02-0.09x measured)
IN_PLACE_PRIOR = 0.3
#: a resize not measured within this many seconds is given up (the job stopped reporting)
GIVE_UP_S = 3600.0


def pending(now: float, old: int, new: int, run: int, in_place: bool) -> dict[str, Any]:
    """The mark `Engine._resize` leaves in `job.extra[PENDING_KEY]`."""
    return {"t": now, "from": old, "to": new, "run": run, "in_place": in_place}


def _after(rec: dict[str, Any], mark: dict[str, Any]) -> bool:
    """`rec` is a step of the configuration the resize made."""
    if mark["in_place"]:
        return rec.get("num_gpus") == mark["to"]
    return rec.get("restart") == mark["run"]


def measure(mark: dict[str, Any], records: Iterable[dict[str, Any]],
            epochs: int | None = None, seen: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The pause of the resize `mark` from the job's reports (oldest first): the time from the
    last step before it to the first step after it, or None while that step has not come.
    Reports that carry no step time (progress only) are not steps; where the job reported no
    step at all, its progress reports tell the pause (`_progress_pause`; a report's fraction
    done as the estimates read it, `epochs` its spec's). With `seen` (a dict the caller keeps
    between calls for this mark) the progress reports are read on from where the last call
    left them: what it found is kept there, and each call needs only the reports that are new."""
    before, stepped, timed = None, False, []
    for rec in records:
        t = rec.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
            continue
        timed.append(rec)
        if rec.get("step_time") is None:
            continue
        stepped = True
        if t > mark["t"] and _after(rec, mark):
            if before is None:
                return None
            t = max(_first_step_end(rec, t), before["t"])
            return _pause(mark, before["t"], t)
        before = rec
    return None if stepped else _progress_pause(mark, timed, epochs, {} if seen is None else seen)


def _pause(mark: dict[str, Any], last: float, first: float) -> dict[str, Any]:
    return {"pause_s": round(first - last, 3), "in_place": bool(mark["in_place"]),
            "from": mark["from"], "to": mark["to"], "last_step_t": last, "first_step_t": first}


def _progress_pause(mark: dict[str, Any], records: list[dict[str, Any]], epochs: int | None,
                    seen: dict[str, Any]) -> dict[str, Any] | None:
    """The pause of a job that reports only its progress: from its last report before the
    resize (t0, p0) to the time its new configuration reached p0 — its first report past p0
    (t1, p1) less (p1 - p0) at the rate of the next one (t2, p2). None until both came; what
    was found of them is left in `seen` (a later call goes on from there)."""
    from .estimates.reports import progress_of  # (here: the estimates import this module)

    # (t0, p0), the old configuration's last; (t1, p1), the new one's first
    last, first = _pair(seen.get("last")), _pair(seen.get("first"))
    for rec in records:
        p, t = progress_of(rec, epochs), float(rec["t"])
        if p is None:
            continue
        if t <= mark["t"] or not _after(rec, mark):
            last = (t, p)  # (the old run's reports may come after the mark)
        elif last is None:
            return None  # nothing reported before the resize
        elif first is None:
            if p > last[1]:
                first = (t, p)
        elif p > first[1] and t > first[0]:
            took = (first[1] - last[1]) * (t - first[0]) / (p - first[1])  # its work past p0
            return _pause(mark, last[0], max(first[0] - took, last[0]))
    seen["last"], seen["first"] = last, first
    return None


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return float(value[0]), float(value[1])
    return None


def _first_step_end(rec: dict[str, Any], t: float) -> float:
    """When the first of the steps a report covers ended: a report of `timed_steps` steps
    (`elastic.Monitor` writes one every few seconds) ends the last of them at `t`, one
    `step_time` apart (seen live: a torchrun job's first report after a restart covered 17 steps,
    and the pause read 24 s for some 14)."""
    n, step = rec.get("timed_steps"), rec.get("step_time")
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not isinstance(step, (int, float)) \
            or not (math.isfinite(n) and math.isfinite(step)) or n <= 1 or step <= 0:
        return t
    return t - (n - 1) * step


def _kind(in_place: bool) -> str:
    return "in_place" if in_place else "restart"


def measured(job: Job, in_place: bool) -> list[float]:
    """The job's measured pauses of one kind, oldest first."""
    return list((job.extra.get(RESIZE_PAUSES_KEY) or {}).get(_kind(in_place), []))


def resizes_in_place(job: Job, family: Mapping[str, list[float]] | None = None) -> bool:
    """The job's resizes happen in place: it asked for it and it, or a finished job of its
    `family`, has been resized in place (the executor decides at each resize whether it can)."""
    return job.spec.in_place and (int(job.extra.get(IN_PLACE_KEY, 0)) > 0
                                  or bool((family or {}).get("in_place")))


def _median(job: Job, in_place: bool, family: Mapping[str, list[float]] | None, default: float) -> float:
    seen = measured(job, in_place) or list((family or {}).get(_kind(in_place), ()))
    return statistics.median(seen) if seen else default


def price(job: Job, default: float, family: Mapping[str, list[float]] | None = None) -> float:
    """Seconds of progress the job's next resize costs: the median of its measured pauses of
    that kind, else of its `family`'s, `default` until one is measured — but a running job that
    asks to be resized in place, with no pause measured by it or its family, `IN_PLACE_PRIOR`
    of it (priced as a restart, a lone 2-minute job alone on 4 GPUs was kept on 1 for 88 s;
    should its executor restart it instead, the pause it then measures prices the next)."""
    in_place = resizes_in_place(job, family)
    if (not in_place and job.spec.in_place and job.state is JobState.running
            and not any(measured(job, k) for k in (True, False)) and not any((family or {}).values())):
        return default * IN_PLACE_PRIOR
    return _median(job, in_place, family, default)


def spent(job: Job, default: float, family: Mapping[str, list[float]] | None = None) -> float:
    """What the job's past resizes and preemptions cost, at the prices of their kinds."""
    cost = job.restarts * _median(job, False, family, default) if job.restarts else 0.0
    n = int(job.extra.get(IN_PLACE_KEY, 0))
    if n:
        cost += n * _median(job, True, family, default)
    return cost


def keep(into: dict[str, list[float]], job: Job) -> None:
    """Add the finished `job`'s measured pauses to its family's `into` (the last
    `KEEP_FAMILY_PAUSES` of each kind)."""
    for kind, seen in (job.extra.get(RESIZE_PAUSES_KEY) or {}).items():
        if kind in ("in_place", "restart") and seen:
            into[kind] = [*into.get(kind, []), *(float(s) for s in seen)][-KEEP_FAMILY_PAUSES:]


def record(job: Job, pause: dict[str, Any]) -> None:
    """Keep a measured pause in the job's `extra` (the last `KEEP_PAUSES` of its kind) and
    clear the pending mark."""
    kind = _kind(bool(pause.get("in_place")))
    pauses = {k: list(v) for k, v in (job.extra.get(RESIZE_PAUSES_KEY) or {}).items()}
    pauses[kind] = [*pauses.get(kind, []), float(pause["pause_s"])][-KEEP_PAUSES:]
    job.extra[RESIZE_PAUSES_KEY] = pauses
    job.extra.pop(PENDING_KEY, None)
