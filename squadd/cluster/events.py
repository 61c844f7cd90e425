"""The cluster's event stream: workers publish their bus's events to one capped stream, each
in an envelope naming the worker; the coordinator reads the stream and publishes every event
on its own bus (with `worker` set), so `squadd events`, status, MCP and the dashboard see the
whole cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import structlog
from pydantic import ValidationError

from squadd.cluster import keys
from squadd.cluster.connection import BLOCK_S, RedisGuard
from squadd.cluster.wire import EventEnvelope
from squadd.contracts.events import BaseEvent, parse_event

log = structlog.get_logger("squadd.cluster")
PUBLISH_BATCH = 64
"""Most events a worker sends in one round trip."""
STOP_SEND_S = 2.0
"""How long a forwarder stopped while it gathers may take to send what it holds."""
READ_BATCH = 256
"""Most events the coordinator reads in one round trip."""
GATHER_S = 0.02
"""How long a worker's forwarder, and the coordinator's reader, wait after an event for those
that follow it, so that one round trip carries them all: a route's events come at two
moments of its session, and at a cluster's rate each round trip carried one. A watcher of
`squadd events` sees a worker's event at most twice this later."""


async def publish_events(guard: RedisGuard, worker: str, next_event: Callable[[], Any], *,
                         maxlen: int,
                         ready: Callable[[], list[BaseEvent]] = lambda: [],
                         gather_s: float = GATHER_S,
                         pause: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
    """Forward events from `next_event()` (an awaitable giving the next one, None to skip)
    to the stream, trimmed near `maxlen`, with those `ready()` has at hand `gather_s` later
    (at most `PUBLISH_BATCH` of them) in one round trip. Runs until cancelled."""
    client = guard.client

    async def send(first: BaseEvent) -> None:
        data = [EventEnvelope(worker=worker, event=e.model_dump(mode="json")).dump()
                for e in (first, *ready())]
        await guard.run(functools.partial(_publish, client, data, maxlen))

    while True:
        event: BaseEvent | None = await next_event()
        if event is None:
            continue
        try:
            await pause(gather_s)
        except anyio.get_cancelled_exc_class():
            # Stopped while it gathered: what it holds goes out first (within a bound).
            with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_SEND_S):
                await send(event)
            raise
        await send(event)


class EventSource(Protocol):
    """A subscription to a bus: the next event (None: nothing to forward), or one at hand."""

    async def get(self) -> BaseEvent | None: ...

    def get_nowait(self) -> BaseEvent | None: ...


async def forward_events(guard: RedisGuard, worker: str, source: EventSource, *,
                         skip: Callable[[BaseEvent], bool], maxlen: int,
                         retry_s: float) -> None:
    """A worker's bus to the stream (`publish_events`), the events `skip` names left out; a
    failure is logged and forwarding starts again `retry_s` later (the events meanwhile are
    lost: the bus is bounded). Runs until cancelled."""
    def wanted(event: BaseEvent | None) -> BaseEvent | None:
        return None if event is None or skip(event) else event

    async def next_event() -> BaseEvent | None:
        return wanted(await source.get())

    def ready() -> list[BaseEvent]:
        found: list[BaseEvent] = []
        for _ in range(PUBLISH_BATCH - 1):
            event = source.get_nowait()
            if event is None:
                break
            if wanted(event) is not None:
                found.append(event)
        return found

    while True:
        try:
            await publish_events(guard, worker, next_event, ready=ready, maxlen=maxlen)
        except Exception as exc:
            log.error("events not forwarded; trying again", worker=worker,
                      error=f"{type(exc).__name__}: {exc}")
            await anyio.sleep(retry_s)


async def _publish(client: Any, data: list[str], maxlen: int) -> None:
    async with client.pipeline(transaction=False) as pipe:
        for one in data:
            pipe.xadd(keys.EVENTS, {"data": one}, maxlen=maxlen, approximate=True)
        await pipe.execute()


async def relay_events(guard: RedisGuard, publish: Callable[[BaseEvent], None], *,
                       start: str = "$", gather_s: float = GATHER_S,
                       pause: Callable[[float], Awaitable[None]] = anyio.sleep) -> None:
    """Publish every event that arrives on the stream (from `start`: new ones by default),
    with its worker named; after a read that found fewer than `READ_BATCH`, the next waits
    `gather_s` for more to come. Runs until cancelled."""
    client = guard.client
    last = start
    if last == "$":  # pin the position now, so nothing added during a reconnect is skipped
        info: Any = await guard.run(lambda: client.xinfo_stream(keys.EVENTS)) \
            if await guard.run(lambda: client.exists(keys.EVENTS)) else None
        last = str(info["last-generated-id"]) if info else "0-0"
    while True:
        result: Any = await guard.run(lambda c=last: client.xread(  # type: ignore[misc]
            {keys.EVENTS: c}, count=READ_BATCH, block=int(BLOCK_S * 1000)))
        read = 0
        for _, entries in result or []:
            read += len(entries)
            for entry_id, fields in entries:
                last = str(entry_id)
                try:
                    envelope = EventEnvelope.model_validate_json((fields or {}).get("data", ""))
                    envelope.event["worker"] = envelope.worker
                    event = parse_event(envelope.event)
                except ValidationError as exc:
                    log.warning("malformed cluster event dropped", entry=last,
                                error=str(exc)[:300])
                    continue
                publish(event)
        if 0 < read < READ_BATCH:
            await pause(gather_s)
