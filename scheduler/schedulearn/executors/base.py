"""The executor interface: how the engine's decisions become (real or simulated) runs.

The engine calls `start`, `stop` and `resize` from its round and never waits on them. An
executor reports every end of a run it was asked to start — normal exit, crash, or the end of a
`stop` — exactly once, through `engine.job_exited(...)`. A `resize` is the executor's business
(a checkpoint-restart at the new size): the job stays running from the engine's point of view
and its old process's exit must not be reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import Allocation, Job

if TYPE_CHECKING:
    from ..engine import Engine


class ExecutorError(RuntimeError):
    """A job could not be started (bad image, host down...): the job fails with this reason."""


def launch_failure(e: BaseException) -> str:
    """The one-line reason of a job whose launch raised `e`."""
    text = str(e).strip().splitlines()
    line = text[0] if text else type(e).__name__
    if isinstance(e, ExecutorError):
        return line
    if isinstance(e, OSError) and e.strerror:
        return f"could not start: {e.strerror}" + (f": {e.filename}" if e.filename else "")
    return f"could not start: {type(e).__name__}: {line}"


class Executor:
    engine: Engine | None = None
    #: `resize` reports the end of the old run through `engine.run_released` (live executors)
    confirms_release: bool = False

    def bind(self, engine: Engine) -> None:
        self.engine = engine

    def start(self, job: Job, now: float) -> None:
        """Start `job` on `job.alloc`."""
        raise NotImplementedError

    def stop(self, job: Job, why: str, now: float) -> None:
        """Stop `job` (`why` is 'preempt' or 'cancel'); report its exit when it is gone."""
        raise NotImplementedError

    def resize(self, job: Job, old: Allocation, now: float) -> None:
        """`job.alloc` changed from `old`: checkpoint-restart the job on its new GPUs."""
        raise NotImplementedError

    def advance(self, now: float) -> None:
        """Called before every round: a simulated executor reports the ends of runs up to `now`;
        live executors report ends as they happen (see `jobdir.JobDirExecutor.advance`)."""

    def next_event_time(self) -> float | None:
        """When the next run ends, if the executor can know it (simulation)."""
        return None

    def recover(self, jobs: list[Job]) -> None:
        """After a restart: re-attach to `jobs` (they were running) or report them lost."""
        for job in jobs:
            if self.engine is not None:
                self.engine.job_exited(job.id, -1, "lost on restart")

    def adopt(self, job: Job) -> bool:
        """After a restart, for a job recorded as `starting`: True if its run `job.restarts`
        started (it is re-attached, or its end is reported), False if no process of that run
        ever ran user code (the engine queues the job again)."""
        return False

    def close(self) -> None:
        """Release resources (not the jobs: they go on running where that is possible)."""
