"""Replay a trace through the real engine and policies on a virtual clock."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine import Engine
from ..model import Job, Node, SpecError
from ..policies import Policy
from .clock import VirtualClock
from .executor import SimExecutor
from .metrics import summarize
from .traces import TraceJob


@dataclass
class SimResult:
    policy: str
    jobs: list[Job]
    metrics: dict
    rounds: int
    wall_s: float
    engine: Engine = field(repr=False)
    #: with record=True: (time, job id, allocation) at every start, resize, stop and end
    history: list[tuple[float, int, dict[str, list[int]]]] = field(default_factory=list, repr=False)


_ENDS = frozenset({"succeeded", "failed", "cancelled"})


def check_fits(trace: list[TraceJob], nodes: list[Node]) -> int:
    """The cluster's GPUs; `SpecError` naming the trace line of a job that needs more."""
    total = sum(len(n.gpus) for n in nodes)
    for tj in trace:
        if tj.spec.min_size > total:
            raise SpecError(
                f"{tj.where}: gpus: at most {total} (the GPUs of the cluster), got {tj.spec.min_size}")
    return total


def simulate(
    trace: list[TraceJob],
    nodes: list[Node],
    policy: str | Policy,
    *,
    interval: float | None = None,
    tick: float = 60.0,
    restart_penalty: float = 0.0,
    actions: list[tuple[float, Callable[[Engine], object]]] = (),
    executor: SimExecutor | None = None,
    record: bool = False,
    estimates: str = "reported",
    in_place_penalty: float | dict[str, float] | None = None,
    progress: Callable[[int, float], object] | None = None,
    deadline_watch_s: float | None = None,
) -> SimResult:
    """Replay `trace` on `nodes` under `policy`. `estimates`: what policies learn of a job —
    `reported` (what the simulated job reports, as live) or `oracle` (the job model's ground
    truth: an upper bound for comparison). `in_place_penalty`: seconds a resize in place pauses
    a job that asks for one (`resize: in-place`), one figure or one per launcher
    (`SimExecutor`); `restart_penalty` for every other resize, start and preemption.
    `progress(jobs ended, simulated seconds)` is called as each job ends. `deadline_watch_s`:
    the engine's look at deadline statuses between rounds (`Engine.deadline_watch_s`; off by
    default here: the `deadline` events it sends are for users watching live)."""
    total = check_fits(trace, nodes)
    clock = VirtualClock([(tj.submit_time, tj.spec) for tj in trace], interval, tick, list(actions))
    executor = executor or SimExecutor(restart_penalty=restart_penalty, estimates=estimates,
                                       in_place_penalty=in_place_penalty)
    engine = Engine(nodes, policy, executor=executor, clock=clock.now)
    engine.deadline_watch_s = deadline_watch_s
    history: list = []
    if record:  # allocation history for timelines (sim.plot); costs a job dict per event
        def listen(event: dict) -> None:
            job = event.get("job")
            if job is not None and event["event"] != "submitted":
                t = job["end_time"] if job["end_time"] is not None else clock.now()
                history.append((t, job["id"], job["alloc"]))

        engine.listeners.append(listen)
    if progress is not None:
        ended = 0

        def count(event: dict) -> None:
            nonlocal ended
            if event["event"] in _ENDS:
                ended += 1
                progress(ended, clock.now())

        engine.listeners.append(count)
    began = time.perf_counter()
    collecting = gc.isenabled()
    gc.disable()  # the replay makes few reference cycles; collecting them cost 30% of its time
    try:
        asyncio.run(engine.run(clock))
    finally:
        if collecting:
            gc.enable()
    wall = time.perf_counter() - began
    jobs = list(engine.jobs.values())
    return SimResult(engine.policy.name, jobs, summarize(engine.policy.name, jobs, total),
                     engine.rounds, wall, engine, history)
