"""What live executors share: one directory per job under `job_root` (the bundle, `log.txt`,
checkpoints, `metrics.jsonl`, the result), reading and following its log, picking up the step
times the job reports, and the job's result key and its signed result (`schedulearn.results`)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

from .. import joblogs
from ..model import Job
from .base import Executor
from .launch import SCRIPT_NAME

CHECKPOINT_DIR = "checkpoints"


class JobDirExecutor(Executor):
    job_root: Path

    def job_dir(self, job_id: int) -> Path:
        return self.job_root / str(job_id)

    def log_path(self, job_id: int) -> Path:
        return self.job_dir(job_id) / joblogs.LOG_NAME

    def prepare(self, job: Job, now: float) -> Path:
        """The job's directory, ready for a (re)start: bundle written, checkpoints folder made."""
        d = self.job_dir(job.id)
        first = job.restarts == 0 and job.start_time == now
        if first and d.exists() and any(d.iterdir()):
            # left by an earlier server that reused this id without a store: keep it aside
            d.rename(d.with_name(f"{job.id}.old-{int(time.time() * 1000)}"))
        (d / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
        if job.spec.script is not None:
            (d / SCRIPT_NAME).write_text(job.spec.script)
        return d

    # -- results (see schedulearn.results) ---------------------------------------------------------
    def result_key(self, job_id: int) -> str:
        """The key job `job_id` signs its result with (given to it as `SCHEDULEARN_RESULT_KEY`)."""
        from ..results import job_key, server_secret

        return job_key(server_secret(self.job_root), job_id)

    def read_result(self, job_id: int) -> bytes:
        """The job's `result.pkl` when its own run wrote it (`NoResult`, `ForgedResult`)."""
        from ..results import read_result, server_secret

        return read_result(server_secret(self.job_root), job_id, self.job_dir(job_id))

    def _done_fn(self, job_id: int) -> Callable[[], bool]:
        raise NotImplementedError

    def logs(self, job_id: int, tail: int | None = None) -> str:
        """The job's log (every run), or its last `tail` lines."""
        return joblogs.tail(self.log_path(job_id), tail)

    def follow(
        self, job_id: int, done: Callable[[], bool] | None = None, interval: float = 0.1,
        timeout: float | None = None,
    ) -> Iterator[str]:
        """Yield log lines as they come until the job is over (`done`, by default: the engine
        says the job is final, or, unbound, no run of it is left here)."""
        return joblogs.follow(self.log_path(job_id), done or self._done_fn(job_id), interval, timeout=timeout)

    def afollow(
        self, job_id: int, done: Callable[[], bool] | None = None, interval: float = 0.1
    ) -> AsyncIterator[str]:
        return joblogs.afollow(self.log_path(job_id), done or self._done_fn(job_id), interval)

    def advance(self, now: float) -> None:
        """Before every round: pick up the step times running jobs reported with
        `schedulearn.elastic.report` (what the goodput policy sizes them by)."""
        if self.engine is None:
            return
        from ..speedup import refresh

        for job in list(self.engine.running.values()):
            refresh(job, self.job_dir(job.id) / "metrics.jsonl")
