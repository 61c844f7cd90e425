"""Connection limits for each listener, which uvicorn lacks: a deadline for a request's headers
(from the connection, or from the end of the previous response) and a cap on open connections.

uvicorn's own `timeout_keep_alive` closes a connection idle after a response, but a connection
that never sends a request, or sends its headers a byte at a time, is held forever; and its
`limit_concurrency` answers 503 only once headers arrive. `limited` wraps one listener through
uvicorn's two public hooks, with no subclass of its protocol classes: the `http=` protocol
factory (`LimitedConnection` wraps the protocol uvicorn would use, by composition) sees each
connection open and close, refuses one past the cap at once (503, then close, logged) and
closes one whose headers do not arrive in time; an ASGI middleware tells the connection when
a request reached the app (its headers are in) and when its answer ended (the clock starts
again). The two meet through a context variable: uvicorn starts a request's task inside the
protocol's `data_received`, so the task inherits the connection that received it.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

log = structlog.get_logger("squadd.daemon")

FD_RESERVE = 256
"""Descriptors kept free of both listeners' caps: files, transcripts, pipes, subprocesses."""


@dataclass(frozen=True)
class ListenerLimits:
    """What one listener allows (from the `[daemon]` settings)."""

    name: str
    max_connections: int
    header_timeout_s: float
    keep_alive_s: int


def _refusal(message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            b"connection: close\r\nretry-after: 1\r\ncontent-length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


class _Listener:
    """One listener's open connections and refusals. The first refusal is logged, then every
    1000th (a flood must not flood the log)."""

    def __init__(self, limits: ListenerLimits):
        self.limits = limits
        self.open = 0
        self.refused = 0
        self.refusal = _refusal(f"too many open connections to squadd's {limits.name} listener "
                                f"(at most {limits.max_connections}): try again shortly")

    def note_refusal(self) -> None:
        self.refused += 1
        if self.refused == 1 or self.refused % 1000 == 0:
            log.warning("connection refused: listener at its connection cap (503)",
                        listener=self.limits.name, max_connections=self.limits.max_connections,
                        open=self.open, refused_so_far=self.refused)


_connection: contextvars.ContextVar[LimitedConnection | None] = contextvars.ContextVar(
    "squadd_connection", default=None)
"""The connection whose `data_received` is running (and, inherited, its requests' tasks)."""


class LimitedConnection(asyncio.Protocol):
    """One connection: uvicorn's own protocol inside, the listener's limits around it.
    `limited` makes the subclass for one listener (its `listener` and uvicorn's `protocol`);
    uvicorn builds one per connection with its own arguments, handed on to `protocol`."""

    listener: _Listener
    protocol: Callable[..., asyncio.Protocol]

    def __init__(self, **uvicorn_arguments: Any):
        self.inner = self.protocol(**uvicorn_arguments)
        self.loop = uvicorn_arguments.get("_loop") or asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.serving = 0
        """Requests that reached the app and have not finished their answer."""
        self.refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        listener = self.listener
        listener.open += 1
        if listener.open > listener.limits.max_connections:
            self.refused = True
            listener.note_refusal()
            transport.write(listener.refusal)
            transport.close()
            return
        self.inner.connection_made(transport)
        self.arm()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        token = _connection.set(self)
        try:
            self.inner.data_received(data)
        finally:
            _connection.reset(token)

    def eof_received(self) -> bool | None:
        if self.refused:
            return None
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener.open -= 1
        self.disarm()
        if not self.refused:
            self.inner.connection_lost(exc)

    def request_started(self) -> None:
        """A request's headers are in (the app has it): no deadline while it is served."""
        self.serving += 1
        self.disarm()

    def request_ended(self) -> None:
        """Its answer has ended: the client has `header_timeout_s` for its next headers."""
        self.serving -= 1
        if self.serving == 0:
            self.arm()

    def arm(self) -> None:
        """Start (again) the time the client has to send a request's headers."""
        self.disarm()
        if self.transport is not None and not self.transport.is_closing():
            self.timer = self.loop.call_later(self.listener.limits.header_timeout_s, self._late)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _late(self) -> None:
        self.timer = None
        if self.serving == 0 and self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class _Tracked:
    """The ASGI half: tells the connection a request reached the app and when it ended."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        connection = _connection.get() if scope["type"] == "http" else None
        if connection is None:
            await self.app(scope, receive, send)
            return
        connection.request_started()
        ended = False

        async def tracked_send(message: Message) -> None:
            nonlocal ended
            await send(message)
            if (message["type"] == "http.response.body" and not message.get("more_body")
                    and not ended):
                ended = True
                connection.request_ended()

        try:
            await self.app(scope, receive, tracked_send)
        finally:
            if not ended:
                ended = True
                connection.request_ended()


def limited(app: ASGIApp, limits: ListenerLimits, *, parser: str = "auto"
            ) -> tuple[ASGIApp, type[asyncio.Protocol]]:
    """The app and the `http=` protocol class to give `uvicorn.Config` for one listener that
    enforces `limits`. `parser` is uvicorn's own `http` choice: "auto" (httptools where
    installed, else h11), "h11" or "httptools"."""
    attributes = {"listener": _Listener(limits),
                  "protocol": import_from_string(HTTP_PROTOCOLS[parser])}
    return _Tracked(app), type(f"Limited{limits.name.title()}Connection", (LimitedConnection,),
                               attributes)


def ensure_descriptors(caps: list[int]) -> None:
    """Make sure the listeners' caps fit under the process's descriptor limit: raise the soft
    limit toward the hard one when they would not, and warn if even that is short."""
    needed = sum(caps) + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < needed:
        log.warning("the descriptor limit is below what the connection caps need: lower "
                    "daemon.max_connections or raise 'ulimit -n'", limit=soft, needed=needed)
