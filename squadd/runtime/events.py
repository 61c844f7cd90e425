"""The EventBus: fans events out to bounded subscribers without ever blocking the publisher.

Each subscriber has a bounded buffer, and one that falls behind loses events, which are counted
and reported to it with a ``bus.overflow`` event. The event models are in
`squadd.contracts.events`.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from squadd.contracts.events import BaseEvent, BusOverflow, event_matches

T = TypeVar("T")


class Subscription:
    """One subscriber's bounded view of the bus. Iterate it to receive events."""

    def __init__(self, bus: EventBus, maxlen: int, types: frozenset[str] | None,
                 session_id: str | None):
        self._bus = bus
        self._buffer: deque[BaseEvent] = deque()
        self._maxlen = maxlen
        self._types = types
        self._session_id = session_id
        self._ready = anyio.Event()
        self.lost = 0
        self._unreported = 0
        self.closed = False

    def _offer(self, event: BaseEvent) -> None:
        if self.closed or not event_matches(event, self._types, self._session_id):
            return
        if len(self._buffer) >= self._maxlen:
            self.lost += 1
            self._unreported += 1
            return
        self._buffer.append(event)
        self._ready.set()

    def get_nowait(self) -> BaseEvent | None:
        """The next event, or None when the buffer is empty."""
        if self._unreported:
            lost, self._unreported = self._unreported, 0
            return BusOverflow(lost=lost, seq=self._bus.last_seq)
        if self._buffer:
            return self._buffer.popleft()
        return None

    async def get(self, within: float | None = None) -> BaseEvent | None:
        """Wait for the next event; None after `within` seconds or once closed."""
        event = self.get_nowait()
        if event is not None:  # the common case of a busy bus: no timeout scope needed
            await anyio.lowlevel.checkpoint_if_cancelled()
            return event
        if within is None:  # no timeout scope to enter and leave for each event
            return await self._next()
        with anyio.move_on_after(within):
            return await self._next()
        return None

    async def _next(self) -> BaseEvent | None:
        """The next event, once there is one; None once closed."""
        while True:
            event = self.get_nowait()
            if event is not None:
                return event
            if self.closed:
                return None
            self._ready = anyio.Event()
            await self._ready.wait()

    def close(self) -> None:
        self.closed = True
        self._ready.set()
        self._bus._unsubscribe(self)

    async def __aiter__(self) -> AsyncIterator[BaseEvent]:
        while True:
            event = await self.get()
            if event is None:
                return
            yield event
            # What the buffer holds already goes without a checkpoint each: a consumer is
            # still cancelled at the next `get`, a bounded buffer's worth of events later.
            while (event := self.get_nowait()) is not None:
                yield event

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventBus:
    """Fans events out to subscribers without ever blocking the publisher.

    `publish` is safe from any thread: this is the one way to publish events from a worker
    thread. Once the bus is bound to its event loop (`bind`, done by `subscribe` and when the
    runtime starts), a publish from another thread is handed to the loop, where subscribers are
    woken. Other state owned by the loop is reached from a thread the same way, with `on_loop`.
    """

    def __init__(self, *, buffer: int = 1024):
        self._buffer = buffer
        self._subscribers: list[Subscription] = []
        self._seq = itertools.count(1)
        self.last_seq = 0
        self._listeners: list[Callable[[BaseEvent], None]] = []
        self._loop_thread: int | None = None
        self._loop_token: anyio.lowlevel.EventLoopToken | None = None

    def bind(self) -> None:
        """Bind the bus to the running event loop (no-op without one, e.g. in a worker thread)."""
        try:
            self._loop_token = anyio.lowlevel.current_token()
        except RuntimeError:  # no event loop here: publishers are all in this thread
            return
        self._loop_thread = threading.get_ident()

    def on_loop(self, fn: Callable[[T], None], arg: T) -> None:
        """Call `fn(arg)` on the event loop's thread: at once when called there (or when no loop
        is bound), else handed to the loop and waited for."""
        if self._loop_thread is not None and threading.get_ident() != self._loop_thread:
            try:
                anyio.from_thread.run_sync(fn, arg, token=self._loop_token)
                return
            except RuntimeError:  # the loop is gone: nobody is waiting to be woken
                pass
        fn(arg)

    def publish(self, event: BaseEvent) -> None:
        """Stamp `event` with the next `seq` and offer it to every listener and subscriber."""
        self.on_loop(self._publish, event)

    def _publish(self, event: BaseEvent) -> None:
        seq = next(self._seq)
        self.last_seq = seq
        if event.seq == 0:  # a new event its maker hands over: stamped in place, not copied
            object.__setattr__(event, "seq", seq)
            event.model_fields_set.add("seq")
            stamped = event
        else:  # stamped before (published again, or by a cluster worker's bus): a copy
            stamped = event.model_copy(update={"seq": seq})
        for listener in self._listeners:
            listener(stamped)
        for subscription in self._subscribers:
            subscription._offer(stamped)

    def subscribe(self, *, types: Iterable[str] | None = None, session_id: str | None = None,
                  buffer: int | None = None) -> Subscription:
        """A bounded subscription, filtered by event type (``tool.*`` allowed) and session."""
        if self._loop_thread is None:
            self.bind()
        subscription = Subscription(self, buffer or self._buffer,
                                    frozenset(types) if types else None, session_id)
        self._subscribers.append(subscription)
        return subscription

    def add_listener(self, listener: Callable[[BaseEvent], None]) -> None:
        """Call `listener` synchronously for every event (it must be fast and never raise)."""
        self._listeners.append(listener)

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscribers:
            self._subscribers.remove(subscription)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)
