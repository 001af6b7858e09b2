"""Virtual time for the simulator: jump straight to the next thing that can change a decision."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..model import JobSpec

if TYPE_CHECKING:
    from ..engine import Engine


class VirtualClock:
    """Feeds `arrivals` (time, spec) to the engine and decides when the next round is.

    Event-driven by default: a round at every arrival and run end (and every `tick` seconds
    while a time-driven policy has something to decide). With `interval`, rounds happen only
    at multiples of `interval` (the published elastic simulators' 60 s rounds).
    `actions` are (time, callable(engine)) pairs run at their time: a policy switch, say.
    """

    def __init__(
        self,
        arrivals: list[tuple[float, JobSpec]],
        interval: float | None = None,
        tick: float = 60.0,
        actions: list[tuple[float, Callable[[Engine], object]]] = (),
    ):
        self.arrivals = sorted(arrivals, key=lambda a: a[0])
        self.actions = sorted(actions, key=lambda a: a[0])
        self.interval = interval
        self.tick = tick
        self.t = 0.0 if interval else (self.arrivals[0][0] if self.arrivals else 0.0)
        self.i = self.k = 0
        self.done = False

    def now(self) -> float:
        return self.t

    def _next_input(self) -> float:
        a = self.arrivals[self.i][0] if self.i < len(self.arrivals) else math.inf
        b = self.actions[self.k][0] if self.k < len(self.actions) else math.inf
        return min(a, b)

    async def wait(self, engine: Engine) -> bool:
        nxt_input = self._next_input()
        nxt_end = engine.executor.next_event_time()
        nxt_end = math.inf if nxt_end is None else nxt_end
        if self.interval:
            if nxt_input == math.inf and not engine.active:
                self.done = True
                return True
            t = self.t + self.interval
            if not engine.active and nxt_input > t:  # nothing to do until the next arrival
                t = math.ceil(nxt_input / self.interval) * self.interval
            woke = False  # every interval boundary is a tick: time-driven policies decide each round
        else:
            ticking = self.t + self.tick if engine.needs_tick() else math.inf
            t = min(nxt_input, nxt_end, ticking, engine.next_time_limit())
            if t == math.inf:
                if engine.active:  # jobs that can never finish (they wait for GPUs that never free)
                    left = len(engine.active)
                    raise RuntimeError(f"simulation stalled at t={self.t} with {left} jobs left")
                self.done = True
                return True
            woke = t < ticking
        self.t = t
        self._feed(engine, t)
        return woke

    def _feed(self, engine: Engine, t: float) -> None:
        while self.k < len(self.actions) and self.actions[self.k][0] <= t:
            self.actions[self.k][1](engine)
            self.k += 1
        while self.i < len(self.arrivals) and self.arrivals[self.i][0] <= t:
            at, spec = self.arrivals[self.i]
            engine.submit(spec, now=at)
            self.i += 1
