"""What live executors share: one directory per job under `job_root` (the bundle, `log.txt`,
checkpoints, `metrics.jsonl`, the result), reading and following its log, picking up the step
times the job reports, and the job's result key and its signed result (`schedulearn.results`).

With `run_as` (the shared set-up: Schedulearn user -> `accounts.Account`), a job's directory
belongs to its user's account, mode 0700; the server (root) still writes its markers there and
reads logs and results back, never following a link the job may have put in place of a file
(`nofollow`)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import joblogs, nofollow
from ..jobfiles import CHECKPOINT_DIR, LOG_NAME, METRICS_FILE, SCRIPT_NAME
from ..model import Job, JobSpec, SpecError
from .base import Executor, ExecutorError

if TYPE_CHECKING:
    from ..results import SignedResult


def check_host_workdir(spec: JobSpec, account: Any = None) -> None:
    """For an executor that runs jobs in a directory of the scheduler's machine (local; Slurm, on
    a shared file system): a `workdir` that is not a directory there, or that the job's OS
    account (`account`, the shared set-up) cannot enter, is refused at submission, rather than
    failing the job when its turn comes (checked again at each start: `JobDirExecutor.host_workdir`)."""
    if spec.workdir is None:
        return
    if not Path(spec.workdir).is_dir():
        raise SpecError(f"workdir: {spec.workdir!r} is not a directory on the scheduler's machine")
    if account is not None and not account.can_enter(spec.workdir):
        raise SpecError(f"workdir: {spec.workdir!r}: {spec.user}'s jobs run as the OS account "
                        f"{account.name}, which cannot enter it (the permissions of it or of a folder above)")


def check_no_image(spec: JobSpec, executor: str) -> None:
    """For an executor that runs jobs as processes of the scheduler's machine (local; Slurm): a
    container `image` is refused at submission. It was silently dropped: `%%schedulearn --image
    pytorch/pytorch` ran the cell in the server's Python, not in the image."""
    if spec.image is not None:
        raise SpecError(f"image: a container image needs the 'docker' executor; this server runs jobs "
                        f"with the {executor!r} executor, as processes in its own environment "
                        f"(leave --image out)")


#: the job root's free space below which no job starts (the scheduler pauses itself): a job's
#: start writes its bundle (a cell's variables may be megabytes) and its log grows from there
MIN_FREE_BYTES = 64 * 2**20


def free_bytes(path: Path) -> int | None:
    """Free bytes on `path`'s file system, for an unprivileged writer (None: not known)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def size_text(n: float) -> str:
    """`0 B`, `512 KiB`, `63.9 MiB`, `1.2 GiB`."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or n >= 100 or n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class JobDirExecutor(Executor):
    job_root: Path
    min_free_bytes: int = MIN_FREE_BYTES
    #: user name -> `accounts.Account` to run that user's jobs as (None: the server's account)
    run_as: Callable[[str], Any] | None = None

    def account_for(self, spec: JobSpec) -> Any:
        """The OS account the job runs as; None for the server's own."""
        if self.run_as is None:
            return None
        try:
            return self.run_as(spec.user or "")
        except SpecError as e:  # never fall back to the server's account
            raise ExecutorError(str(e)) from None

    def start_blocker(self) -> tuple[str, str] | None:
        """The job root's disk is full (under `min_free_bytes` free): a start would fail, or
        the job soon after, unable to write its log."""
        free = free_bytes(self.job_root)
        if free is None or free >= self.min_free_bytes:
            return None
        need = size_text(self.min_free_bytes)
        return (f"the disk of the job root {self.job_root} is full: under {need} free",
                f"it has {need} free again")

    def disk_note(self, *paths: Path | str | None) -> str:
        """`the disk of /srv/jobs was full (0 B free)` for each of `paths` whose file system is
        under `min_free_bytes` free: said in a failed job's reason, its likely cause."""
        seen, notes = set(), []
        for path in paths:
            if path is None:
                continue
            try:
                dev = os.stat(path).st_dev
            except OSError:
                continue
            free = free_bytes(Path(path))
            if dev not in seen and free is not None and free < self.min_free_bytes:
                notes.append(f"the disk of {path} was full as it ended ({size_text(free)} free)")
            seen.add(dev)
        return "; ".join(notes)

    def host_workdir(self, job_id: int, spec: JobSpec, account: Any) -> Path:
        """Where a run starts, for an executor that runs jobs in this machine's directories: the
        job's `workdir`, or its job directory. Checked at each start as at submission
        (`check_host_workdir`: a folder may be gone, or closed to the job's account, since)."""
        if spec.workdir is None:
            return self.job_dir(job_id)
        try:
            check_host_workdir(spec, account)
        except SpecError as e:
            raise ExecutorError(str(e)) from None
        return Path(spec.workdir)

    def job_dir(self, job_id: int) -> Path:
        return self.job_root / str(job_id)

    def log_path(self, job_id: int) -> Path:
        return self.job_dir(job_id) / LOG_NAME

    def prepare(self, job: Job, now: float) -> Path:
        """The job's directory, ready for a (re)start: bundle written, checkpoints folder made."""
        try:
            return self._prepare(job, now)
        except OSError as e:  # e.g. a link the job left in place of main.py: this job fails, not the round
            raise ExecutorError(f"job {job.id}: cannot prepare its directory: {e.strerror}"
                                + (f": {e.filename}" if e.filename else "")) from None

    def _prepare(self, job: Job, now: float) -> Path:
        d = self.job_dir(job.id)
        prepared: set[int] = self.__dict__.setdefault("_prepared", set())  # (by this executor)
        first = job.restarts == 0 and job.start_time == now and job.id not in prepared
        if first and d.exists() and any(d.iterdir()):
            # left by an earlier server that reused this id without a store: keep it aside (not
            # the folder of a first start put back in the queue here: its log says why)
            d.rename(d.with_name(f"{job.id}.old-{int(time.time() * 1000)}"))
        prepared.add(job.id)
        account = self.account_for(job.spec)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(d, 0o700)  # private to the job's user (mkdir's mode is cut by the umask)
        (d / CHECKPOINT_DIR).mkdir(exist_ok=True)
        if job.spec.script is not None:
            nofollow.write_text(d / SCRIPT_NAME, job.spec.script)
        if account is not None:
            for p in (d, d / CHECKPOINT_DIR, d / SCRIPT_NAME):
                try:  # lchown: a link the job left here is not followed
                    os.chown(p, account.uid, account.gid, follow_symlinks=False)
                except FileNotFoundError:
                    pass
        return d

    # -- results (see schedulearn.results) ---------------------------------------------------------
    def result_key(self, job_id: int) -> str:
        """The key job `job_id` signs its result with (given to it as `SCHEDULEARN_RESULT_KEY`)."""
        from ..results import job_key, server_secret

        return job_key(server_secret(self.job_root), job_id)

    def open_result(self, job_id: int) -> SignedResult:
        """The job's `result.pkl` when its own run wrote it (`NoResult`, `ForgedResult`)."""
        from ..results import open_result, server_secret

        return open_result(server_secret(self.job_root), job_id, self.job_dir(job_id))

    def shown_page(self, job_id: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """What the job's cell showed, from byte `offset` of its live record (`liveshown.page`)."""
        from ..liveshown import page

        return page(self.result_key(job_id), job_id, self.job_dir(job_id), offset)

    # -- logs ------------------------------------------------------------------------------------
    def is_running(self, job_id: int) -> bool:
        """Whether a run of the job is under way here (started, not yet reported over)."""
        raise NotImplementedError

    def _done_fn(self, job_id: int) -> Callable[[], bool]:
        """The job is over: the engine says it is final, or (unbound) no run of it is left here."""
        engine = self.engine

        def done() -> bool:
            if engine is not None and job_id in engine.jobs:
                return engine.jobs[job_id].state.final
            return not self.is_running(job_id)

        return done

    def logs(self, job_id: int, tail: int | None = None) -> str:
        """The job's log (every run), or its last `tail` lines."""
        return joblogs.tail(self.log_path(job_id), tail)

    def log_page(self, job_id: int, offset: int) -> tuple[bytes, int, int]:
        return joblogs.page(self.log_path(job_id), offset)

    def follow(
        self, job_id: int, done: Callable[[], bool] | None = None, interval: float = 0.1,
        timeout: float | None = None,
    ) -> Iterator[str]:
        """Yield log lines as they come until the job is over (`done`, by default: the engine
        says the job is final, or, unbound, no run of it is left here)."""
        return joblogs.follow(self.log_path(job_id), done or self._done_fn(job_id), interval, timeout=timeout)

    async def afollow(
        self, job_id: int, done: Callable[[], bool] | None = None, interval: float = 0.1,
        tail: int | None = None,
    ) -> AsyncIterator[str]:
        """`follow` for asyncio servers; with `tail`, the last `tail` lines first, then what
        comes after them."""
        path, done = self.log_path(job_id), done or self._done_fn(job_id)
        if tail is not None:
            head = joblogs.tail(path, tail)
            if head:
                yield head
        async for line in joblogs.afollow(path, done, interval, from_start=tail is None):
            yield line

    def collect(self, job: Job, now: float) -> None:
        from ..estimates import refresh

        refresh(job, self.job_dir(job.id) / METRICS_FILE)

    def advance(self, now: float) -> None:
        """Before every round: pick up the step times running jobs reported with
        `schedulearn.elastic.report` (what the goodput policy sizes them by), and measure the
        pause of a resize from them once the first step after it is there (`pauses.measure`; for a
        job that reports only its progress, once it passed where it was)."""
        if self.engine is None:
            return
        from .. import pauses
        from ..estimates import refresh
        from ..estimates.reports import load_recent

        for job in list(self.engine.running.values()):
            path = self.job_dir(job.id) / METRICS_FILE
            new = refresh(job, path)
            if not new:
                continue
            mark = job.extra.get(pauses.PENDING_KEY)
            if mark is None:
                continue
            before = job.extra.get("_step_before")  # the last step of the reports read before
            seen = job.extra.get("_pause_seen")  # how far a progress-only job's were looked at
            if before:
                recent, seen = [before, *new], None
            elif isinstance(seen, dict) and seen.get("mark") == mark["t"]:
                recent = new
            else:  # the first look at this resize (or the first since the server started): the
                # last lines read, a bounded window, never the whole file a job may have grown
                recent = load_recent(path, int(job.extra.get("reports_offset") or 0))
                job.extra["_pause_seen"] = seen = {"mark": mark["t"]}
            pause = pauses.measure(mark, recent, job.spec.epochs, seen)
            if pause is not None:
                job.extra.pop("_pause_seen", None)
                self.engine.resize_paused(job.id, pause, now)
            elif now - mark["t"] > pauses.GIVE_UP_S:
                job.extra.pop(pauses.PENDING_KEY, None)
                job.extra.pop("_pause_seen", None)
