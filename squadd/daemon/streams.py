"""`GET /v1/events`: the event bus as Server-Sent Events, filtered by type and session, with
heartbeats, up to `recent` past events first, and a bound on open streams and on each one's
buffer (a slow reader loses events and is told so with `bus.overflow`).

Streams that follow a route (`reserve=route`, as `squadd route` asks) may also use a reserve
of their own, so that watchers holding every ordinary stream never block a route.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from squadd.contracts.events import EVENT_TYPES, BaseEvent, event_matches, type_matches
from squadd.daemon.handler_context import (
    RECENT_EVENTS,
    DaemonContext,
    context_of,
    flag,
    query_count,
)
from squadd.daemon.wire import SSE_HEARTBEAT_S, SUBSCRIBED
from squadd.errors import ApiError, InvalidNameError
from squadd.runtime.events import Subscription
from squadd.state.layout import safe_id

MAX_EVENT_STREAMS = 64
"""Event streams that may be open at once; one more gets a 503 (but see the reserve)."""
ROUTE_STREAM_RESERVE = 64
"""More streams kept for following routes (`reserve=route`) once the ordinary ones are taken."""
MAX_DASHBOARD_STREAMS = 64
"""The dashboard's event streams (browser tabs) that may be open at once, counted apart from
the API's: however many tabs are open, `squadd events` and `squadd top` still get a stream."""


def _event_types(raw: str | None) -> list[str] | None:
    if not raw:
        return None
    wanted = [part.strip() for part in raw.split(",") if part.strip()]
    for kind in wanted:
        if not any(type_matches(known, kind) for known in EVENT_TYPES):
            shown = kind if len(kind) <= 60 else kind[:57] + "..."
            raise ApiError(422, f"unknown event type {shown!r} (known: {', '.join(EVENT_TYPES)};"
                                " 'tool.*' style globs work too)")
    return wanted


async def events(request: Request) -> Response:
    ctx = context_of(request)
    types = _event_types(request.query_params.get("type"))
    session_id = request.query_params.get("session") or None
    if session_id is not None:
        try:
            safe_id(session_id)
        except InvalidNameError as exc:
            raise ApiError(422, f"query parameter session: {exc}") from None
    recent_count = query_count(request, "recent", limit=RECENT_EVENTS) or 0
    follow = flag(request, "follow", True)
    reserve = request.query_params.get("reserve")
    if reserve not in (None, "route"):
        raise ApiError(422, f"query parameter reserve={reserve[:40]!r}: the only reserve is "
                            "'route'")
    limit = MAX_EVENT_STREAMS + (ROUTE_STREAM_RESERVE if reserve == "route" else 0)
    subscription = open_stream(ctx, limit, types=types, session_id=session_id)
    # Subscribed and the recent events copied in one step: no event is missed or sent twice.
    replay = [e for e in ctx.recent if event_matches(e, types, session_id)][-recent_count:] \
        if recent_count else []
    if not follow:
        subscription.close()
    return stream_response(ctx, subscription, replay)


def open_stream(ctx: DaemonContext, limit: int = MAX_EVENT_STREAMS, *,
                types: list[str] | None = None, session_id: str | None = None,
                dashboard: bool = False) -> Subscription:
    """Subscribe one more event stream and count it as open, among the API's streams or (with
    `dashboard`) the dashboard's; 503 while squadd stops or when `limit` streams of that kind
    are open already."""
    if ctx.stopping:
        raise ApiError(503, "squadd is stopping")
    pool = ctx.dashboard_streams if dashboard else ctx.streams
    if len(pool) >= limit:
        what = "dashboard event streams (tabs)" if dashboard else "event streams"
        raise ApiError(503, f"{len(pool)} {what} are open already; close one first",
                       limit=limit)
    subscription = ctx.runtime.bus.subscribe(types=types, session_id=session_id)
    pool.add(subscription)
    return subscription


class _EventStream(StreamingResponse):
    """An SSE answer that lets go of its subscription however it ends, also when the client
    is gone before the first frame (the body, a generator, then never even starts)."""

    def __init__(self, ctx: DaemonContext, subscription: Subscription,
                 frames: AsyncIterator[str]):
        super().__init__(frames, media_type="text/event-stream",
                         headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
        self._ctx, self._subscription = ctx, subscription

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            _release(self._ctx, self._subscription)


def _release(ctx: DaemonContext, subscription: Subscription) -> None:
    ctx.streams.discard(subscription)
    ctx.dashboard_streams.discard(subscription)
    subscription.close()


def stream_response(ctx: DaemonContext, subscription: Subscription, replay: list[BaseEvent],
                    prelude: list[str] | None = None) -> StreamingResponse:
    """The SSE answer for a stream `open_stream` admitted (see `sse_stream`)."""
    return _EventStream(ctx, subscription, sse_stream(subscription, replay, prelude))


def _frame(event: BaseEvent) -> str:
    kind = getattr(event, "type", "event")
    return f"id: {event.seq}\nevent: {kind}\ndata: {event.model_dump_json()}\n\n"


async def sse_stream(subscription: Subscription, replay: list[BaseEvent],
                     prelude: list[str] | None = None) -> AsyncIterator[str]:
    """The frames of one event stream: `prelude` (ready-made frames), `replay`, then the live
    events with heartbeats, until the subscription closes (`stream_response` then forgets
    it)."""
    yield f": {SUBSCRIBED}\n\n"
    for frame in prelude or ():
        yield frame
    for past in replay:
        yield _frame(past)
    while True:
        event = await subscription.get(within=SSE_HEARTBEAT_S)
        if event is None:
            if subscription.closed:
                return
            yield ": ping\n\n"
            continue
        yield _frame(event)
