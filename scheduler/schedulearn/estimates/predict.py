"""How long a job will run, predicted from the jobs that finished before it.

For jobs that declare no progress, the scheduler has only the job's features and history. The
original Schedulearn predicted a job's duration as the mean of similar past jobs; surveys of
run-time prediction for DL jobs name the model, data set, batch size, epochs and GPU count as the
dominant features. Here:

* `features(job)`: user, name (the notebook cell, or the job's name), command (launcher and
  argv), GPUs, batch size, declared epochs, application — whatever the spec has.
* `Predictor`: a back-off over feature subsets, most specific first (`LEVELS`); the prediction is
  the median of the `recent` most recent finished jobs at the first level with at least
  `min_count` of them, or with any at a level that names the job (its name or command: one
  earlier run of the same cell is its best guess) — durations are heavy-tailed: the median of
  similar recent jobs predicts a typical one far better than the mean, and users re-run the same
  job in bursts.
* `MeanOfSimilar`: the baseline — the mean of all finished jobs at the first level with any.

Both learn online (`add` as jobs finish). `benchmarks/bench_predict.py` measures them on the
Philly and Pollux traces with a time-ordered split (median absolute percentage error).
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from .. import pauses
from ..model import Job, JobState
from . import reports

#: Feature subsets, most specific first; a job matches a level if it has every feature of it.
LEVELS: tuple[tuple[str, ...], ...] = (
    ("user", "name", "command", "gpus", "batch_size", "epochs", "application"),
    ("user", "name", "gpus"),
    ("user", "name"),
    ("user", "command", "gpus"),
    ("user", "command"),
    ("application", "batch_size", "epochs", "gpus"),
    ("application", "batch_size"),
    ("application",),
    ("cluster", "gpus"),
    ("cluster",),
    ("user", "gpus"),
    ("user",),
    ("gpus",),
    (),
)


#: Features that make jobs alike enough to tell a user how long theirs will take: a level
#: without any of them ("your jobs on 2 GPUs", "any job") still guides a policy, but what users
#: read of their job's time (`History.predict(..., similar=True)`) comes from similar jobs only.
SIMILAR = frozenset({"name", "command", "application", "cluster"})


#: Features that name one job (its runs): at a level with one of them, a single earlier run is
#: the prediction (`Predictor.min_count` is for levels where a job is one of many alike).
_RUNS_OF_ONE = frozenset({"name", "command"})


def identity(job: Job) -> str | None:
    """What makes runs one job to the history: the notebook cell it came from (`JobSpec.cell`),
    else its name unless that is the default `job`."""
    s = job.spec
    return s.cell or (s.name if s.name and s.name != "job" else None)


def features(job: Job) -> dict[str, Any]:
    """The features of a job the predictor may use (those its spec has; `user` always: one user's
    jobs are never another's runs, and the runs of a job with no user are still one). `name` is its
    `identity` (a notebook cell's runs share it, though each has a name of its own); `command`,
    the launcher and the first two words of a command's argv (a script job has none: every cell
    is a script)."""
    s = job.spec
    f: dict[str, Any] = {"gpus": s.requested, "user": s.user}  # "": a single-user or simulated job
    ident = identity(job)
    if ident is not None:
        f["name"] = ident
    if s.command:
        f["command"] = " ".join([s.launcher.value, *s.command[:2]])
    for key in ("batch_size", "epochs", "application"):
        v = getattr(s, key)
        if v is not None:
            f[key] = v
    return f


def _key(level: tuple[str, ...], feats: Mapping[str, Any]) -> tuple | None:
    if any(k not in feats for k in level):
        return None
    return (level, *(feats[k] for k in level))


class Predictor:
    """Median of the most recent similar finished jobs (see the module docstring)."""

    name = "recent-median"

    def __init__(self, recent: int = 10, min_count: int = 2, levels=LEVELS):
        self.recent, self.min_count, self.levels = recent, min_count, levels
        self.seen: dict[tuple, deque] = defaultdict(lambda: deque(maxlen=recent))

    def add(self, feats: Mapping[str, Any], value: float) -> None:
        if not (value > 0 and math.isfinite(value)):
            return
        for level in self.levels:
            key = _key(level, feats)
            if key is not None:
                self.seen[key].append(value)

    def predict(self, feats: Mapping[str, Any], similar: bool = False) -> float | None:
        """The prediction at the most specific level with enough jobs; `similar`: only at levels
        with a feature of `SIMILAR` (None where only less similar jobs would tell)."""
        for level in self.levels:
            if similar and SIMILAR.isdisjoint(level):
                continue
            key = _key(level, feats)
            vals = self.seen.get(key) if key is not None else None
            if vals and (len(vals) >= self.min_count or not level or _RUNS_OF_ONE.intersection(level)):
                s = sorted(vals)
                mid = len(s) // 2
                if len(s) % 2:
                    return s[mid]
                g = math.sqrt(s[mid - 1] * s[mid])  # the product of two huge ones overflows
                return g if math.isfinite(g) else math.sqrt(s[mid - 1]) * math.sqrt(s[mid])
        return None


class MeanOfSimilar:
    """The baseline: the mean of every finished job at the most specific level with any."""

    name = "mean-of-similar"

    def __init__(self, levels=LEVELS):
        self.levels = levels
        self.sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0])

    def add(self, feats: Mapping[str, Any], value: float) -> None:
        if not (value > 0 and math.isfinite(value)):
            return
        for level in self.levels:
            key = _key(level, feats)
            if key is not None:
                s = self.sums[key]
                s[0] += value
                s[1] += 1

    def predict(self, feats: Mapping[str, Any]) -> float | None:
        for level in self.levels:
            key = _key(level, feats)
            s = self.sums.get(key) if key is not None else None
            if s and s[1]:
                return s[0] / s[1]
        return None


def family(job: Job) -> tuple:
    """Jobs whose step times are alike: the same application (simulation), else the same user,
    `identity` (the notebook cell, or the name) and launcher."""
    s = job.spec
    if s.application is not None:
        return ("application", s.application)
    return ("job", s.user, identity(job) or s.name, s.launcher.value)


class Prior:
    """What the finished jobs of a family measured: step times per configuration (nodes, GPUs,
    micro-batch, accumulation) as in `reports.state(job)["configs"]` (those each job believed:
    `reports.configs`), the most GPUs seen, and —
    for jobs that succeeded having reported progress and gradient statistics — along their run, per
    stretch of progress (`reports.PATH_BINS`), the work one unit of progress cost them
    (`work_path`, goodput-seconds: the same for every run of one training recipe) and their
    gradient statistics (`grad_path`, the mean; the gradient noise grows as the loss falls, so a
    young job's statistics understate how well its later epochs use large batches)."""

    __slots__ = ("configs", "max_gpus", "version", "grad_path", "_paths", "bounds", "_work", "work_path")

    def __init__(self) -> None:
        self.configs: dict[str, list] = {}
        self.max_gpus = 0
        self.version = 0
        self.grad_path: dict[int, tuple[float, float]] = {}
        self._paths: dict[int, list[float]] = {}  # stretch -> [sum sqr, sum var, count]
        self.bounds: dict[str, int] = {}  # the batch sizes the family accepts (as reported)
        self._work: dict[int, list[float]] = {}  # stretch -> [goodput-seconds, progress]
        self.work_path: dict[int, float] = {}  # stretch -> goodput-seconds per unit of progress

    def add(self, state: dict, work_per_progress: float | None = None) -> None:
        """Fold in a finished job's reports (`reports.state`): the step times of the placements
        it believed (`reports.configs`: run on for `SETTLE_S` or more, unless none was — a
        placement left seconds after a resize timed a worker's warm-up, not its speed)."""
        for key, (n, step, comp) in reports.configs(state).items():
            old = self.configs.get(key)
            if old is None:
                self.configs[key] = [n, step, comp]
                continue
            total = old[0] + n
            old[1] = (old[1] * old[0] + step * n) / total
            if comp is not None:
                old[2] = comp if old[2] is None else (old[2] * old[0] + comp * n) / total
            old[0] = total
        self.max_gpus = max(self.max_gpus, state.get("max_gpus", 0))
        for key in ("init_batch_size", "max_batch_size", "max_local_bsz"):
            if state.get(key):
                self.bounds[key] = state[key]
        if work_per_progress is not None and work_per_progress > 0 and math.isfinite(work_per_progress):
            for key, (sqr, var) in (state.get("grad_path") or {}).items():
                acc = self._paths.setdefault(int(key), [0.0, 0.0, 0])
                acc[0] += sqr
                acc[1] += var
                acc[2] += 1
            self.grad_path = {b: (a[0] / a[2], a[1] / a[2]) for b, a in self._paths.items()}
            for key, (work, done) in (state.get("path_work") or {}).items():
                acc = self._work.setdefault(int(key), [0.0, 0.0])
                acc[0] += work
                acc[1] += done
            self.work_path = {b: a[0] / a[1] for b, a in self._work.items() if a[1] > 1e-6}
        self.version += 1


class History:
    """The jobs an engine has seen end (restored from its store): what predictions learn from —
    the work a job needed (seconds on one GPU where its reports told, else its attained
    GPU-seconds), the step times each family of jobs measured (`Prior`), and the resize pauses
    it measured (`pauses_of`)."""

    def __init__(self) -> None:
        self.predictor = Predictor()
        self.count = 0
        self._new: list[Job] = []  # folded in on the first prediction (replays never pay for it)
        self._cache: dict[tuple[int, bool], tuple[int, float | None]] = {}
        self.priors: dict[tuple, Prior] = {}
        self._pauses: dict[tuple, dict[str, list[float]]] = {}

    def add(self, job: Job) -> None:
        """A job ended: learn from it (its run time only if it succeeded)."""
        if job.extra.get(pauses.RESIZE_PAUSES_KEY):
            pauses.keep(self._pauses.setdefault(family(job), {}), job)
        state = job.extra.get("reports")
        if state and state.get("configs"):
            work = job.extra.get("work_k") if job.state is JobState.succeeded else None
            self.priors.setdefault(family(job), Prior()).add(state, work)
        if job.state is JobState.succeeded:
            self._new.append(job)
            self.count += 1

    def prior(self, job: Job) -> Prior | None:
        """The step times measured by finished jobs of `job`'s family, if any."""
        return self.priors.get(family(job)) if self.priors else None

    def pauses_of(self, job: Job) -> dict[str, list[float]] | None:
        """The resize pauses the finished jobs of `job`'s family measured, by kind
        (`schedulearn.pauses`: what its first resize of a kind is priced at)."""
        return self._pauses.get(family(job)) if self._pauses else None

    def predict(self, job: Job, similar: bool = False) -> float | None:
        """Predicted total work of `job` in seconds on one GPU (None without history). `similar`:
        only from jobs alike enough to tell its user (`Predictor.predict`)."""
        if not self.count:
            return None
        for done in self._new:
            work = done.extra.get("work_s1") or done.attained_base
            self.predictor.add(features(done), float(work))
        self._new.clear()
        key = (job.id, similar)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == self.count:
            return hit[1]
        value = self.predictor.predict(features(job), similar)
        self._cache[key] = (self.count, value)
        return value


def mdape(pairs: Iterable[tuple[float, float]]) -> float:
    """Median absolute percentage error of (predicted, actual) pairs, in per cent."""
    errs = sorted(abs(p - a) / a for p, a in pairs if a > 0)
    if not errs:
        return math.nan
    n = len(errs)
    return 100.0 * (errs[n // 2] if n % 2 else (errs[n // 2 - 1] + errs[n // 2]) / 2)
