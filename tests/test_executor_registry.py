"""Adding an executor takes one registration and no edit elsewhere: a trivial one (its runs are
threads) registered here is accepted by the settings, made by the service, runs and cancels jobs
through the shared run lifecycle, and gets its own setting in `schedulearn serve`'s flags and the
Jupyter extension's settings."""

from __future__ import annotations

import argparse
import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from schedulearn.executors import registry
from schedulearn.executors.lifecycle import Run, RunExecutor, start_line
from schedulearn.model import Allocation, Job, JobSpec, SpecError
from schedulearn.service import SchedulerService, Settings


@dataclass(eq=False, kw_only=True)
class ThreadRun(Run):
    seconds: float
    signalled: threading.Event = field(default_factory=threading.Event)


class ThreadExecutor(RunExecutor):
    """`command: ["sleep", "S"]` runs as a thread that waits S seconds (or for a signal)."""

    run_noun = "thread"

    def __init__(self, job_root: str, cancel_grace: float, greeting: str):
        self.job_root = Path(job_root)
        self.job_root.mkdir(parents=True, exist_ok=True)
        self.cancel_grace = cancel_grace
        self.greeting = greeting
        self._init_runs()

    def _launch(self, job_id: int, spec: JobSpec, alloc: Allocation, restarts: int) -> Run:
        run = ThreadRun(job_id=job_id, restarts=restarts, seconds=float(spec.command[-1]))
        with self._open_log(job_id) as log:
            log.write(start_line(job_id, restarts, "", " ".join(spec.command)).encode())
            log.write(f"{self.greeting}\n".encode())
        self._watch(run)
        return run

    def _watch(self, run: Run) -> None:
        assert isinstance(run, ThreadRun)

        def wait() -> None:
            code = -15 if run.signalled.wait(run.seconds) else 0
            self._run_over(run, code, self._end_reason(run, code))

        threading.Thread(target=wait, daemon=True).start()

    def _signal(self, run: Run, sig: int) -> None:
        assert isinstance(run, ThreadRun)
        run.signalled.set()

    def _reattach(self, job: Job) -> Run | None:
        self._report(job.id, None, "lost on restart")
        return None

    def _append_log(self, run: Run, text: str) -> None:
        with open(self.log_path(run.job_id), "a") as f:
            f.write(text)

    def _failure(self, run: Run, code: int | None) -> str:
        return f"exit code {code}"


GREETING = registry.Option("thread_greeting", "hello", "the first line of every job's log")


@pytest.fixture
def threads_kind():
    kind = registry.register(registry.ExecutorKind(
        "threads", "threads in the server (a test)", ThreadExecutor,
        lambda s: ThreadExecutor(s.job_root, s.cancel_grace, s.options.get("thread_greeting", "hello")),
        (GREETING,)))
    yield kind
    registry.unregister("threads")


def test_one_registration_makes_an_executor_the_service_runs(threads_kind, tmp_path):
    settings = Settings(executor="threads", virtual_gpus=2, job_root=str(tmp_path / "jobs"), tick=0.05,
                        inventory_interval=0, options={"thread_greeting": "good morning"})

    async def main():
        service = SchedulerService(settings)
        assert isinstance(service.executor, ThreadExecutor) and service.engine.total_gpus == 2
        service.start()
        quick = await service.submit({"command": ["sleep", "0.1"]}, "me")
        slow = await service.submit({"command": ["sleep", "60"]}, "me")
        async with asyncio.timeout(10):
            while service.engine.get(quick["id"]).state.value != "succeeded":
                await asyncio.sleep(0.02)
            while service.engine.get(slow["id"]).state.value != "running":
                await asyncio.sleep(0.02)
            await service.cancel(slow["id"], "me")  # the lifecycle's stop: signal, grace, report
            while service.engine.get(slow["id"]).state.value != "cancelled":
                await asyncio.sleep(0.02)
        assert (await service.get_job(slow["id"]))["reason"] == "cancelled"
        log = await service.logs(quick["id"])
        assert "good morning\n" in log and "exit of run #0: code 0 ===" in log
        await service.stop()

    asyncio.run(main())


def test_its_settings_are_checked_and_named(threads_kind):
    with pytest.raises(SpecError, match=r"^docker_hosts: not a setting of the threads executor "
                                        r"\(its settings: thread_greeting\)"):
        Settings(executor="threads", options={"docker_hosts": []}).validate()
    with pytest.raises(SpecError,
                       match=r"^executor: expected one of local, docker, slurm, sim, threads, got 'x'"):
        Settings(executor="x").validate()


def test_it_gets_a_serve_flag_and_an_extension_setting(threads_kind, monkeypatch, tmp_path):
    from schedulearn_jupyter import serve
    from schedulearn_jupyter.app import SchedulearnApp

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert "threads" in parser.format_help() and "--thread-greeting" in parser.format_help()
    args = parser.parse_args(["--executor", "threads", "--thread-greeting", "hi", "--job-root", str(tmp_path),
                              "--store", f"sqlite:///{tmp_path / 's.db'}"])
    assert serve.settings_from_args(args).options == {"thread_greeting": "hi"}

    monkeypatch.setenv("SCHEDULEARN_THREAD_GREETING", "from the environment")
    app = SchedulearnApp(executor="threads")
    assert app.scheduler_settings().options == {"thread_greeting": "from the environment"}
