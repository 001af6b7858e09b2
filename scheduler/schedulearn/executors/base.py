"""The executor interface: how the engine's decisions become (real or simulated) runs.

The engine calls `start`, `stop` and `resize` from its round and never waits on them. An
executor reports every end of a run it was asked to start — normal exit, crash, or the end of a
`stop` — exactly once, through `engine.job_exited(...)` (from its own threads:
`engine.report_exit(...)`, which is thread-safe); as it applies that end, the engine first calls
`collect`, for the job's last reports. A `resize` is the executor's business (a
checkpoint-restart at the new size): the job stays running from the engine's point of view and
its old process's exit must not be reported. A job that asks to be resized in place and runs
where the executor can do it (`resizes_in_place`) gets `resize_in_place` instead: its workers
are added or removed while the others keep running, and its run goes on.

Besides the engine's calls, an executor answers what the API reads of a job's runs: its
directory (`job_dir`), its log (`logs`, `afollow`), its result (`open_result`), and the nodes
it can run jobs on (`nodes`, from its `inventory`). The defaults here are those of an executor
whose runs leave nothing behind (the simulator): no directory, an empty log, no result.

Executors that run programs share one run lifecycle (`lifecycle.RunExecutor`); an executor is
made available to the server by registering it (`registry.register`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ..inventory import HostInventory, Inventory
from ..model import Allocation, Job, JobSpec, Node

if TYPE_CHECKING:
    from ..results import SignedResult


class EngineLink(Protocol):
    """What an executor may use of the engine that binds it (`Engine` satisfies it): the
    thread-safe doors, the exit and release reports on the engine's loop, and read-only views of
    its jobs and nodes. Executors report through this, never by importing the engine."""

    nodes: list[Node]
    jobs: Mapping[int, Job]
    active: Mapping[int, Job]
    running: Mapping[int, Job]

    def job_exited(self, job_id: int, exit_code: int | None, reason: str = "",
                   now: float | None = None) -> None: ...
    def run_released(self, job_id: int, now: float | None = None) -> None: ...
    def report_exit(self, job_id: int, exit_code: int | None, reason: str = "") -> None: ...
    def report_released(self, job_id: int) -> None: ...
    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None: ...
    def placed(self, job_id: int, alloc: Allocation, now: float | None = None) -> None: ...
    def withdrawn(self, job_id: int, nodes: Iterable[Node], reason: str,
                  now: float | None = None) -> None: ...
    def run_note(self, job_id: int, note: str, now: float | None = None) -> None: ...
    def set_nodes(self, nodes: Iterable[Node]) -> None: ...


class ExecutorError(RuntimeError):
    """A job could not be started (bad image, host down...): the job fails with this reason."""


class Unavailable(ExecutorError):
    """A run could not start because GPUs it was placed on were taken outside the scheduler
    since the engine last read the inventory (another scheduler's job on this host): the job is
    placed anew, not failed. `nodes`: the inventory as it is now (those GPUs marked held)."""

    def __init__(self, message: str, nodes: list[Node]):
        super().__init__(message)
        self.nodes = nodes


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
    engine: EngineLink | None = None
    #: `resize` reports the end of the old run through `engine.run_released` (live executors)
    confirms_release: ClassVar[bool] = False
    #: runs are simulated (a spec's `duration` or `application` model), not programs
    simulated: ClassVar[bool] = False
    #: where `nodes` reads the GPUs from (default: this host's, NVML or none)
    inventory: Inventory | None = None

    def bind(self, engine: EngineLink) -> None:
        self.engine = engine

    # -- the engine's calls ----------------------------------------------------------------------
    def start(self, job: Job, now: float) -> None:
        """Start `job` on `job.alloc`."""
        raise NotImplementedError

    def stop(self, job: Job, why: str, now: float) -> None:
        """Stop `job` (`why` is 'preempt', 'cancel' or 'time-limit'); report its exit when it is gone."""
        raise NotImplementedError

    def resize(self, job: Job, old: Allocation, now: float) -> None:
        """`job.alloc` changed from `old`: checkpoint-restart the job on its new GPUs."""
        raise NotImplementedError

    def resizes_in_place(self, job: Job, alloc: Allocation) -> bool:
        """Whether the running `job`, which asks to be resized in place (`JobSpec.resize`), can
        move to `alloc` without a restart: its framework adds or removes workers while the
        others keep running (see docs/resize.md). False (the default): `resize` restarts it."""
        return False

    def resize_in_place(self, job: Job, old: Allocation, now: float) -> None:
        """`job.alloc` changed from `old` and `resizes_in_place` said yes: tell the job's
        framework (a shrink's GPUs are confirmed free through `engine.run_released` once the
        workers that held them are gone, where `confirms_release`)."""
        raise NotImplementedError

    def start_blocker(self) -> tuple[str, str] | None:
        """Why no job can start now, for a reason of the scheduler's machine rather than of a job
        (the job root's disk is full): (why, until when), or None. Asked at every round and
        tick; while it says so the engine pauses scheduling on its own (`Engine.check_blocker`),
        and resumes it when it no longer does. Default: never."""
        return None

    def advance(self, now: float) -> None:
        """Called before every round: a simulated executor reports the ends of runs up to `now`;
        live executors report ends as they happen (see `jobdir.JobDirExecutor.advance`)."""

    def collect(self, job: Job, now: float) -> None:
        """Called as `job`'s run ends, before the engine acts on its end: fold what the job
        reported since the last round (live: the rest of its `metrics.jsonl`), so that a
        finished job's progress, what later jobs learn from it, and a preempted job's progress
        while it waits are what it last reported. A simulated executor emits its jobs' last
        reports itself."""

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

    def check_spec(self, spec: JobSpec) -> None:
        """Refuse, with `SpecError` (one line naming the field: the API's 400), a spec that this
        executor could never run, at submission rather than at its start. The default: none."""

    def account_problem(self, account: Any) -> str | None:
        """Why jobs run as `account` (`accounts.Account`, the shared set-up) cannot start here,
        or None: checked once at start-up, so the operator learns it before a user does."""
        return None

    # -- what the API reads ----------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """The nodes this executor can run jobs on, read now. The default: its `inventory`
        (this host's GPUs unless it was given another); an executor that runs jobs elsewhere
        (Docker hosts, Slurm nodes) reads its own."""
        if self.inventory is None:
            self.inventory = HostInventory()
        return self.inventory.refresh()

    def spec_defaults(self) -> dict[str, Any]:
        """Fields a submitted spec gets when it leaves them empty (the executor's default image...)."""
        return {}

    def job_dir(self, job_id: int) -> Path | None:
        """The job's directory (its log, checkpoints, result); None where runs have none."""
        return None

    def logs(self, job_id: int, tail: int | None = None) -> str:
        """The job's log (every run), or its last `tail` lines."""
        return ""

    def log_page(self, job_id: int, offset: int) -> tuple[bytes, int, int]:
        """The log's bytes from `offset` (at most `joblogs.PAGE`), the offset after them and
        the log's size (`joblogs.page`)."""
        return b"", offset, 0

    async def afollow(self, job_id: int, done: Callable[[], bool], interval: float = 0.1,
                      tail: int | None = None) -> AsyncIterator[str]:
        """The log (its last `tail` lines, or all of it), then its lines as they come, until
        `done()` says the job is over and all is read."""
        while not done():
            await asyncio.sleep(interval)
        for line in ():
            yield line

    def shown_page(self, job_id: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """What a notebook cell's job showed from byte `offset` of its live record on (records its
        run signed, `liveshown.page`) and the next page's offset; none where runs have no directory."""
        return [], offset

    def open_result(self, job_id: int) -> SignedResult:
        """The job's result, written and signed by its own run, open, its signature checked
        (`results.open_result`; `results.NoResult`, `results.ForgedResult`): what `GET result`
        hands out a block at a time."""
        from ..results import NoResult

        raise NoResult(f"result: job {job_id} has no result")
