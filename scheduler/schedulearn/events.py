"""The event fan-out: the engine's job, policy and inventory events, delivered to every
subscriber (the `events` websocket of either server) on the event loop's thread, whatever thread
emitted them. Each delivered event gets a sequence number (`seq`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

log = logging.getLogger("schedulearn.server")

View = Callable[[dict[str, Any]], dict[str, Any]]  # what one subscriber sees of an event


class EventStream(Protocol):
    """What a subscription is to its reader: events until it is closed."""

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...
    def close(self) -> None: ...


class Subscription:
    """One subscriber's queue of events; iterate it, `close()` it when done."""

    def __init__(self, hub: EventHub, maxsize: int, view: View | None = None):
        self.hub = hub
        self.view = view  # what this subscriber sees of an event (None: all of it)
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize)
        self.closed = False

    def put(self, event: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:  # a subscriber that does not read loses its subscription
            log.warning("events: a subscriber fell %d events behind; dropping it", self.queue.maxsize)
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.hub.subscribers.discard(self)
            with contextlib.suppress(asyncio.QueueFull):
                self.queue.put_nowait(None)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self.closed and self.queue.empty():
            raise StopAsyncIteration
        event = await self.queue.get()
        if event is None:
            raise StopAsyncIteration
        return event if self.view is None else self.view(event)

    async def get(self, timeout: float | None = None) -> dict[str, Any] | None:
        return await asyncio.wait_for(self.__anext__(), timeout)


class EventHub:
    """Fans events out to subscribers, on the loop's thread whatever thread emits them."""

    def __init__(self, maxsize: int = 10_000):
        self.subscribers: set[Subscription] = set()
        self.maxsize = maxsize
        self.loop: asyncio.AbstractEventLoop | None = None
        self.seq = 0

    def subscribe(self, view: View | None = None) -> Subscription:
        sub = Subscription(self, self.maxsize, view)
        self.subscribers.add(sub)
        return sub

    def publish(self, event: dict[str, Any]) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._deliver, event)
                return
        self._deliver(event)

    def _deliver(self, event: dict[str, Any]) -> None:
        self.seq += 1
        event = {**event, "seq": self.seq}
        for sub in list(self.subscribers):
            sub.put(event)

    def close(self) -> None:
        for sub in list(self.subscribers):
            sub.close()
