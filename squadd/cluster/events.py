"""The cluster's event stream: workers publish their bus's events to one capped stream, each
in an envelope naming the worker; the coordinator reads the stream and publishes every event
on its own bus (with `worker` set), so `squadd events`, status, MCP and the dashboard see the
whole cluster.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import structlog
from pydantic import ValidationError

from squadd.cluster import keys
from squadd.cluster.connection import BLOCK_S, RedisGuard
from squadd.cluster.wire import EventEnvelope
from squadd.contracts.events import BaseEvent, parse_event

log = structlog.get_logger("squadd.cluster")
PUBLISH_BATCH = 64
"""Most events a worker sends in one round trip."""


async def publish_events(guard: RedisGuard, worker: str, next_event: Callable[[], Any], *,
                         maxlen: int,
                         ready: Callable[[], list[BaseEvent]] = lambda: []) -> None:
    """Forward events from `next_event()` (an awaitable giving the next one, None to skip)
    to the stream, trimmed near `maxlen`, with those `ready()` has at hand then (at most
    `PUBLISH_BATCH` of them) in one round trip. Runs until cancelled."""
    client = guard.client
    while True:
        event: BaseEvent | None = await next_event()
        if event is None:
            continue
        data = [EventEnvelope(worker=worker, event=e.model_dump(mode="json")).dump()
                for e in (event, *ready())]
        await guard.run(functools.partial(_publish, client, data, maxlen))


async def _publish(client: Any, data: list[str], maxlen: int) -> None:
    async with client.pipeline(transaction=False) as pipe:
        for one in data:
            pipe.xadd(keys.EVENTS, {"data": one}, maxlen=maxlen, approximate=True)
        await pipe.execute()


async def relay_events(guard: RedisGuard, publish: Callable[[BaseEvent], None], *,
                       start: str = "$") -> None:
    """Publish every event that arrives on the stream (from `start`: new ones by default),
    with its worker named. Runs until cancelled."""
    client = guard.client
    last = start
    if last == "$":  # pin the position now, so nothing added during a reconnect is skipped
        info: Any = await guard.run(lambda: client.xinfo_stream(keys.EVENTS)) \
            if await guard.run(lambda: client.exists(keys.EVENTS)) else None
        last = str(info["last-generated-id"]) if info else "0-0"
    while True:
        result: Any = await guard.run(lambda c=last: client.xread(  # type: ignore[misc]
            {keys.EVENTS: c}, count=256, block=int(BLOCK_S * 1000)))
        for _, entries in result or []:
            for entry_id, fields in entries:
                last = str(entry_id)
                try:
                    envelope = EventEnvelope.model_validate_json((fields or {}).get("data", ""))
                    event = parse_event(envelope.event)
                except ValidationError as exc:
                    log.warning("malformed cluster event dropped", entry=last,
                                error=str(exc)[:300])
                    continue
                publish(event.model_copy(update={"worker": envelope.worker}))
