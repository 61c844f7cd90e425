"""Connection limits for each listener, which uvicorn lacks: a deadline for a request's headers
(from the connection, or from the end of the previous response) and a cap on open connections.

uvicorn's own `timeout_keep_alive` closes a connection idle after a response, but a connection
that never sends a request, or sends its headers a byte at a time, is held forever; and its
`limit_concurrency` answers 503 only once headers arrive. `guarded_protocol` builds uvicorn's
HTTP protocol class (httptools or h11) with a guard that refuses a connection past the cap at
once (503, then close, logged) and closes one whose headers do not arrive in time, so idle
sockets cannot use up the daemon's file descriptors and lock out even Unix-socket clients.
"""

from __future__ import annotations

import asyncio
import json
import resource
from dataclasses import dataclass

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is optional: uvicorn then parses with h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

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


class _Refusals:
    """Counts refused connections; logs the first and then every 1000th (a flood must not
    flood the log)."""

    def __init__(self) -> None:
        self.count = 0

    def note(self, limits: ListenerLimits, open_now: int) -> None:
        self.count += 1
        if self.count == 1 or self.count % 1000 == 0:
            log.warning("connection refused: listener at its connection cap (503)",
                        listener=limits.name, max_connections=limits.max_connections,
                        open=open_now, refused_so_far=self.count)


class _Guard:
    """One connection's header deadline, shared by the two protocol classes below."""

    def __init__(self, protocol: H11Protocol | HttpToolsProtocol, limits: ListenerLimits):
        self.protocol = protocol
        self.limits = limits
        self.timer: asyncio.TimerHandle | None = None
        self.refused = False

    def admit(self, transport: asyncio.Transport, refusals: _Refusals, refusal: bytes) -> bool:
        """False (and the connection answered 503 and closed) past the listener's cap."""
        open_now = len(self.protocol.connections)
        if open_now > self.limits.max_connections:
            self.refused = True
            refusals.note(self.limits, open_now)
            transport.write(refusal)
            transport.close()
            return False
        self.arm()
        return True

    def arm(self) -> None:
        """Start (again) the time the client has to send a request's headers."""
        self.disarm()
        if not self.protocol.transport.is_closing():
            self.timer = self.protocol.loop.call_later(self.limits.header_timeout_s, self._late)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _late(self) -> None:
        self.timer = None
        cycle = self.protocol.cycle
        serving = cycle is not None and not cycle.response_complete
        if not serving and not self.protocol.transport.is_closing():
            self.protocol.transport.close()


def guarded_protocol(limits: ListenerLimits, *, parser: str = "auto") -> type[asyncio.Protocol]:
    """The HTTP protocol class for one listener, enforcing `limits`: uvicorn's httptools
    protocol where httptools is installed (as uvicorn itself would choose, `parser="auto"`),
    else (or with `parser="h11"`) h11."""
    refusals = _Refusals()
    refusal = _refusal(f"too many open connections to squadd's {limits.name} listener (at most "
                       f"{limits.max_connections}): try again shortly")

    class GuardedH11(H11Protocol):
        guard: _Guard

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self.guard = _Guard(self, limits)
            super().connection_made(transport)
            self.guard.admit(transport, refusals, refusal)

        def data_received(self, data: bytes) -> None:
            if self.guard.refused:
                return
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self.guard.disarm()  # the request's headers are in

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self.guard.arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self.guard.disarm()
            super().connection_lost(exc)

    if HttpToolsProtocol is None or parser == "h11":
        return GuardedH11

    class GuardedHttpTools(HttpToolsProtocol):
        guard: _Guard

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            self.guard = _Guard(self, limits)
            super().connection_made(transport)
            self.guard.admit(transport, refusals, refusal)

        def data_received(self, data: bytes) -> None:
            if not self.guard.refused:
                super().data_received(data)

        def on_headers_complete(self) -> None:
            self.guard.disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.pipeline:
                self.guard.arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self.guard.disarm()
            super().connection_lost(exc)

    return GuardedHttpTools


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
