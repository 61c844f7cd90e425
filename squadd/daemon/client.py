"""Talk to a repo's daemon: `DaemonClient` (sync) and `AsyncDaemonClient` (async), one method per
endpoint of its HTTP API, over the repo's Unix socket (or over TCP with the bearer token).

Answers are the daemon's JSON as plain dicts, shaped like `squadd.contracts`' models
(`RouteResult`, `StatusReport`, `SessionView`). Failures raise `SquaddError` subclasses::

    DaemonNotRunningError   nothing answers on the socket (the message names the repo and the fix)
    DaemonRequestError      the daemon answered with an error status (`.status`, `.payload`)
    DaemonError             the daemon did not answer in time, or dropped the connection

A route that cannot run (pool full, unknown agent) is not an exception: `route` returns the
`RouteResult` with `ok: false` and its `reason`, as the `squad_route` tool does.

The blocking client speaks the standard library's `http.client` (`_unix.Connection`), one
connection an exchange: `squadd status` starts in a fraction of the time importing httpx takes.
The async client speaks httpx, its requests queued in two bounded lanes (long waits, the rest)
so that a thousand routes in flight cost each what eight do. One mapper (`_Base._failed`)
turns what either raises into the `DaemonError` it is.
"""

from __future__ import annotations

import http.client  # imported by `_unix` in any case
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

from squadd.daemon import _unix
from squadd.daemon.wire import (
    API,
    DEFAULT_TIMEOUT_S,
    ROUTE_WAIT_LIMIT_S,
    SSE_HEARTBEAT_S,
    TOKEN_HEADER,
    Call,
    Calls,
    asubscribed,
    read_answer,
    route_wire,
    subscribed,
)
from squadd.errors import DaemonError, DaemonNotRunningError, DaemonRequestError
from squadd.state.layout import SquadLayout

TYPE_CHECKING = False  # no `typing` at run time: `squadd status` starts fast
if TYPE_CHECKING:
    from typing import Any, Self

    import anyio
    import httpx

    from squadd.contracts.events import Event

__all__ = [
    "API", "ROUTE_WAIT_LIMIT_S", "SSE_HEARTBEAT_S", "AsyncDaemonClient", "DaemonClient",
    "DaemonError", "DaemonNotRunningError", "DaemonRequestError", "not_running",
]

MAX_CONNECTIONS = 32
"""The async client's requests in flight in each lane; more wait, first come first served."""
SHARD = 8  # connections an httpx pool of the async client holds, about (see `_client`)
KEEPALIVE_S = 0.5
"""How long an idle connection is reused: well inside the daemon's keep-alive (1 s at least)."""
LONG_WAIT_S = DEFAULT_TIMEOUT_S * 3
"""A call that may take longer than this (a waiting route, a landing) goes in the long lane."""


def not_running(layout: SquadLayout) -> DaemonNotRunningError:
    return DaemonNotRunningError(
        f"no squadd daemon is running for {layout.repo}: start one with 'squadd serve'")


_ERRORS = (OSError, ValueError, http.client.HTTPException)
"""What a blocking exchange can raise: socket errors, refusals, malformed answers."""


def _httpx_errors() -> tuple[type[Exception], ...]:
    """What a request through httpx can raise (evaluated only once something was raised)."""
    import httpx

    return (httpx.HTTPError, httpx.InvalidURL)


def _limit(call: Call, cap: float | None) -> float:
    return call.timeout if cap is None else min(call.timeout, cap)


class _Base:
    def __init__(self, layout: SquadLayout, *, tcp: str | None = None, token: str | None = None,
                 timeout: float | None = None):
        self.layout = layout
        self.tcp = tcp
        self.token = token
        self.timeout = timeout
        self._address: _unix.SocketAddress | None = None

    @classmethod
    def find(cls, start: Path | None = None, **options: Any) -> Self:
        """A client for the squad dir at or above `start` (default: the working directory)."""
        return cls(SquadLayout.find(start), **options)

    def _transport_target(self) -> tuple[str, str | None]:
        """The base URL and the socket path (None on TCP)."""
        if self.tcp is not None:
            return f"http://{self.tcp}", None
        if self._address is None:
            try:
                self._address = _unix.SocketAddress(self.layout.socket)
            except OSError:
                raise not_running(self.layout) from None
        return "http://squadd", self._address.usable

    def _headers(self) -> dict[str, str]:
        return {TOKEN_HEADER: f"Bearer {self.token}"} if self.token else {}

    def _failed(self, call: Call, exc: Exception) -> DaemonError:
        """The `DaemonError` a failed exchange is, by how it failed, whichever library raised it."""
        path = call.path if len(call.path) <= 120 else call.path[:117] + "..."
        if type(exc).__module__.startswith("httpx"):
            import httpx

            if isinstance(exc, httpx.ConnectError):
                exc = _unix.NotListening(str(exc))
            elif isinstance(exc, httpx.TimeoutException):
                exc = TimeoutError(f"no answer within {_limit(call, self.timeout):g}s")
            elif isinstance(exc, httpx.InvalidURL):
                exc = _unix.RequestRefused(f"{exc} ({_unix.TOO_LONG})")
        if isinstance(exc, _unix.NotListening):
            return not_running(self.layout)
        if isinstance(exc, TimeoutError):
            said = str(exc)
            if said in ("", "timed out"):  # the socket's own words
                said = f"no answer within {_limit(call, self.timeout):g}s"
            return DaemonError(f"the daemon did not answer {call.method} {path} in time: {said}")
        if isinstance(exc, ValueError) and not isinstance(exc, UnicodeDecodeError):
            return DaemonError(f"{call.method} {path} cannot be sent: {exc}")
        return DaemonError(f"the connection to the daemon broke during {call.method} "
                           f"{path}: {str(exc) or type(exc).__name__} (did the daemon stop? "
                           "'squadd status' tells)")

    def _close_address(self) -> None:
        if self._address is not None:
            self._address.close()
            self._address = None


class DaemonClient(_Base):
    """A blocking client for one repo's daemon. Use it as a context manager, or `close()` it.

    `tcp="127.0.0.1:PORT"` with `token=` talks TCP instead of the socket. `timeout` caps every
    call (None: each call's own default).
    """

    def _where(self, call: Call) -> dict[str, Any]:
        _base, uds = self._transport_target()
        return {"uds": uds, "tcp": self.tcp, "headers": self._headers(),
                "limit": _limit(call, self.timeout)}

    def _send(self, call: Call) -> dict[str, Any]:
        try:
            connection, response = _unix.open_exchange(call, **self._where(call))
            try:
                answer = _unix.Answer(response.status, response.read())
            finally:
                response.close()
                connection.close()
        except _ERRORS as exc:
            raise self._failed(call, exc) from None
        result: dict[str, Any] = read_answer(call, answer)
        return result

    def close(self) -> None:
        self._close_address()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The endpoints.
    def health(self) -> dict[str, Any]:
        """`GET /v1/health`: pid, version, repo, uptime_s, stopping, pool totals."""
        return self._send(Calls.health())

    def status(self, *, agent: str | None = None,
               include_ended: bool = False) -> dict[str, Any]:
        """`GET /v1/sessions`: a StatusReport, `{"sessions": [...], "pool": {...}}`."""
        return self._send(Calls.status(agent, include_ended))

    def session(self, session_id: str, *, transcript: bool = True,
                tail: int | None = None) -> dict[str, Any]:
        """`GET /v1/sessions/{id}`: `{"session": SessionView, "transcript": [records]}`."""
        return self._send(Calls.session(session_id, transcript, tail))

    def route(self, task: str, agent: str | None = None, *, context: str | None = None,
              priority: str = "normal", wait: bool = True, model: str | None = None,
              session_id: str | None = None, available_tools: Sequence[str] | None = None,
              timeout_s: float | None = None, isolation: str | None = None,
              land: bool = False) -> dict[str, Any]:
        """`POST /v1/route`: the RouteResult (also when `ok` is false: read its `reason`)."""
        return self.route_args(route_wire(task, agent, context, priority, wait, model,
                                          session_id, available_tools, timeout_s,
                                          isolation, land))

    def route_args(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """`POST /v1/route` with `squad_route`'s own (camelCase) arguments, as MCP sends them."""
        return self._send(Calls.route(arguments))

    def resume(self, session_id: str, *, wait: bool = True) -> dict[str, Any]:
        """`POST /v1/sessions/{id}/resume`: continue an interrupted session; a RouteResult."""
        return self._send(Calls.resume(session_id, wait))

    def cancel(self, session_id: str) -> dict[str, Any]:
        """`POST /v1/sessions/{id}/cancel`: `{"session_id", "cancelled": true}`."""
        return self._send(Calls.cancel(session_id))

    def land(self, session_id: str) -> dict[str, Any]:
        """`POST /v1/sessions/{id}/land`: land through the daemon's queue and wait; a
        LandResult with its `landing` outcome (a landing refused is still an answer)."""
        return self._send(Calls.land(session_id))

    def reload(self) -> dict[str, Any]:
        """`POST /v1/reload`: read the settings files again now; what was applied, what
        waits for a restart, or why the files were refused (`ok` false)."""
        return self._send(Calls.reload())

    def tools(self, *, agent: str | None = None,
              session_id: str | None = None) -> list[dict[str, Any]]:
        """`GET /v1/tools`: name, label, description, parameters (JSON schema), source, kind,
        file and squad_tool of every tool a session can be given (with `agent` and/or
        `session_id`: of those such a caller may use)."""
        result: list[dict[str, Any]] = self._send(Calls.tools(agent, session_id))["tools"]
        return result

    def call_tool(self, name: str, arguments: Mapping[str, Any], *, agent: str | None = None,
                  session_id: str | None = None,
                  limit_s: float = ROUTE_WAIT_LIMIT_S,
                  traceparent: str | None = None) -> dict[str, Any]:
        """`POST /v1/tools/{name}`: a ToolResult, `{"result_type", "text", "details"}`
        (a failure is a result too, e.g. bad arguments or an unknown tool). `limit_s` bounds
        the wait (a squad_route call waits for its agent). `traceparent` (W3C) makes the
        call's spans part of the caller's trace."""
        return self._send(
            Calls.call_tool(name, arguments, agent, session_id, limit_s, traceparent))

    def resolve_approval(self, approval_id: str, approved: bool,
                         reason: str = "") -> dict[str, Any]:
        """`POST /v1/approvals/{id}`: `{"approval_id", "approved"}`; 404 when none waits."""
        return self._send(Calls.approval(approval_id, approved, reason))

    def inbox(self, *, include_resolved: bool = False) -> dict[str, Any]:
        """`GET /v1/inbox`: `{"items": [...]}`, open items oldest first (`all`: resolved too)."""
        return self._send(Calls.inbox(include_resolved))

    def inbox_item(self, item_id: str) -> dict[str, Any]:
        """`GET /v1/inbox/{id}`: `{"item": {...}}`; 404 for an unknown id."""
        return self._send(Calls.inbox_item(item_id))

    def inbox_resolve(self, item_id: str, action: str, *, answer: str = "",
                      budget: float | None = None, reason: str = "") -> dict[str, Any]:
        """`POST /v1/inbox/{id}`: resolve an item; `{"item": {...}}` as resolved."""
        return self._send(Calls.inbox_resolve(
            item_id, action, answer=answer, budget=budget, reason=reason))

    def dashboard(self) -> dict[str, Any]:
        """`GET /v1/dashboard`: what the dashboard draws, as of event `seq` (pool, sessions
        with their turns and current tool, queue, pending approvals, decisions, tokens)."""
        return self._send(Calls.dashboard())

    def ui(self) -> dict[str, Any]:
        """`GET /v1/ui`: the dashboard's `url` and `link` (the URL with its token); 404 when
        the daemon serves no dashboard."""
        return self._send(Calls.ui())

    def set_variable(self, name: str, value: str) -> dict[str, Any]:
        """`POST /v1/variables/{name}`: `{"name", "stored_in", "waiting_calls"}` (never the
        value)."""
        return self._send(Calls.variable(name, value))

    def shutdown(self) -> dict[str, Any]:
        """`POST /v1/shutdown`: the daemon starts its graceful stop and answers at once."""
        return self._send(Calls.shutdown())

    @contextmanager
    def subscribe(self, *, types: Sequence[str] | None = None,
                  session_id: str | None = None, recent: int = 0,
                  follow: bool = True) -> Iterator[Iterator[dict[str, Any]]]:
        """`GET /v1/events`: on entry the subscription is in place; iterate for event dicts.

        `types` are event types, `tool.*` style globs allowed. The stream starts with up to
        `recent` past events (the daemon keeps the last 512); with `follow=False` it ends
        there. Leaving the block ends it.
        """
        call = Calls.events(types, session_id, recent, follow)
        try:
            connection, response = _unix.open_exchange(call, **self._where(call), close=False)
            try:
                if response.status >= 400:
                    read_answer(call, _unix.Answer(response.status, response.read()))
                yield subscribed(_unix.stream_lines(connection, response,
                                                    _limit(call, self.timeout)))
            finally:
                response.close()
                connection.close()
        except _ERRORS as exc:
            raise self._failed(call, exc) from None

    def events(self, *, types: Sequence[str] | None = None, session_id: str | None = None,
               recent: int = 0, follow: bool = True) -> Iterator[dict[str, Any]]:
        """Event dicts as they happen, until the daemon stops (or the caller stops iterating)."""
        with self.subscribe(types=types, session_id=session_id, recent=recent,
                            follow=follow) as stream:
            yield from stream


class AsyncDaemonClient(_Base):
    """The same API as `DaemonClient`, awaitable; `subscribe` yields parsed `Event` models
    (`subscribe_raw` yields dicts). Use it as an async context manager, or `aclose()` it."""

    def __init__(self, layout: SquadLayout, *, tcp: str | None = None, token: str | None = None,
                 timeout: float | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 max_connections: int = MAX_CONNECTIONS):
        """`transport` replaces the socket (or TCP) connection, as httpx's own `transport=`
        does: e.g. `httpx.ASGITransport(app=create_app(context))` talks to an app in this
        process. `max_connections`: requests in flight in each of the two lanes (long waits,
        and the rest); those past it wait their turn here. Event streams are not counted."""
        super().__init__(layout, tcp=tcp, token=token, timeout=timeout)
        self._transport = transport
        self._http: list[httpx.AsyncClient] = []
        self._max = max_connections
        self._lanes: tuple[anyio.Semaphore, anyio.Semaphore] | None = None
        self._turn = 0

    def _client(self, shard: int = 0) -> httpx.AsyncClient:
        """One of the httpx clients (the first serves event streams): httpcore walks a pool's
        queue and connections at each request, so the lanes queue and pools stay small."""
        import httpx

        while len(self._http) <= shard:
            transport = self._transport or httpx.AsyncHTTPTransport(
                uds=self._transport_target()[1], limits=httpx.Limits(
                    max_connections=None, max_keepalive_connections=2 * SHARD,
                    keepalive_expiry=KEEPALIVE_S))
            self._http.append(httpx.AsyncClient(
                base_url=self._transport_target()[0] if self._transport is None
                else "http://squadd", transport=transport, headers=self._headers(),
                timeout=DEFAULT_TIMEOUT_S))
        return self._http[shard]

    def _timeout(self, call: Call) -> httpx.Timeout:
        import httpx

        limit = _limit(call, self.timeout)
        return httpx.Timeout(limit, connect=min(limit, 5.0))

    def _lane(self, call: Call) -> anyio.Semaphore:
        if self._lanes is None:
            import anyio

            self._lanes = (anyio.Semaphore(self._max), anyio.Semaphore(self._max))
        return self._lanes[call.timeout > LONG_WAIT_S]

    async def _send(self, call: Call) -> dict[str, Any]:
        try:
            async with self._lane(call):
                self._turn += 1
                shards = 1 if self._transport else -(-2 * self._max // SHARD)
                response = await self._client(self._turn % shards).request(
                    call.method, call.path, params=call.params, json=call.body,
                    headers=call.headers or None, timeout=self._timeout(call))
        except _httpx_errors() as exc:
            raise self._failed(call, exc) from None
        result: dict[str, Any] = read_answer(call, response)
        return result

    async def aclose(self) -> None:
        for client in self._http:
            await client.aclose()
        self._http = []
        self._close_address()

    async def __aenter__(self) -> AsyncDaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def health(self) -> dict[str, Any]:  # the endpoints: see `DaemonClient`'s
        return await self._send(Calls.health())

    async def status(self, *, agent: str | None = None,
                     include_ended: bool = False) -> dict[str, Any]:
        return await self._send(Calls.status(agent, include_ended))

    async def session(self, session_id: str, *, transcript: bool = True,
                      tail: int | None = None) -> dict[str, Any]:
        return await self._send(Calls.session(session_id, transcript, tail))

    async def route(self, task: str, agent: str | None = None, *, context: str | None = None,
                    priority: str = "normal", wait: bool = True, model: str | None = None,
                    session_id: str | None = None,
                    available_tools: Sequence[str] | None = None,
                    timeout_s: float | None = None, isolation: str | None = None,
                    land: bool = False) -> dict[str, Any]:
        return await self.route_args(route_wire(task, agent, context, priority, wait, model,
                                                session_id, available_tools, timeout_s,
                                                isolation, land))

    async def route_args(self, arguments: Mapping[str, Any], view: bool = False
                         ) -> dict[str, Any]:  # view: with the SessionView, as `session`
        return await self._send(Calls.route(arguments, view))

    async def resume(self, session_id: str, *, wait: bool = True,
                     view: bool = False) -> dict[str, Any]:
        return await self._send(Calls.resume(session_id, wait, view))

    async def cancel(self, session_id: str) -> dict[str, Any]:
        return await self._send(Calls.cancel(session_id))

    async def tools(self, *, agent: str | None = None,
                    session_id: str | None = None) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = (
            await self._send(Calls.tools(agent, session_id)))["tools"]
        return result

    async def call_tool(self, name: str, arguments: Mapping[str, Any], *,
                        agent: str | None = None, session_id: str | None = None,
                        limit_s: float = ROUTE_WAIT_LIMIT_S,
                        traceparent: str | None = None) -> dict[str, Any]:
        """As `DaemonClient.call_tool`; `traceparent` makes the call part of that trace."""
        return await self._send(
            Calls.call_tool(name, arguments, agent, session_id, limit_s, traceparent))

    async def resolve_approval(self, approval_id: str, approved: bool,
                               reason: str = "") -> dict[str, Any]:
        return await self._send(Calls.approval(approval_id, approved, reason))

    async def inbox(self, *, include_resolved: bool = False) -> dict[str, Any]:
        return await self._send(Calls.inbox(include_resolved))

    async def inbox_item(self, item_id: str) -> dict[str, Any]:
        return await self._send(Calls.inbox_item(item_id))

    async def inbox_resolve(self, item_id: str, action: str, *, answer: str = "",
                            budget: float | None = None, reason: str = "") -> dict[str, Any]:
        return await self._send(Calls.inbox_resolve(
            item_id, action, answer=answer, budget=budget, reason=reason))

    async def dashboard(self) -> dict[str, Any]:
        return await self._send(Calls.dashboard())

    async def set_variable(self, name: str, value: str) -> dict[str, Any]:
        return await self._send(Calls.variable(name, value))

    async def shutdown(self) -> dict[str, Any]:
        return await self._send(Calls.shutdown())

    @asynccontextmanager
    async def subscribe_raw(self, *, types: Sequence[str] | None = None,
                            session_id: str | None = None, recent: int = 0,
                            follow: bool = True, reserve: bool = False
                            ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """`GET /v1/events` as event dicts; the subscription is in place on entry (see
        `DaemonClient.subscribe` for `recent` and `follow`). `reserve`: the stream follows a
        route, and may use the streams the daemon keeps for that."""
        call = Calls.events(types, session_id, recent, follow, reserve)
        try:
            async with self._client().stream(call.method, call.path, params=call.params,
                                             timeout=self._timeout(call)) as response:
                if response.status_code >= 400:
                    await response.aread()
                    read_answer(call, response)
                yield await asubscribed(response.aiter_lines())
        except _httpx_errors() as exc:
            raise self._failed(call, exc) from None

    @asynccontextmanager
    async def subscribe(self, *, types: Sequence[str] | None = None,
                        session_id: str | None = None, recent: int = 0,
                        follow: bool = True) -> AsyncIterator[AsyncIterator[Event]]:
        """`GET /v1/events` as typed events (`squadd.runtime.events.parse_event`)."""
        from squadd.contracts.events import parse_event

        async def parsed(raw: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Event]:
            async for data in raw:
                yield parse_event(data)

        async with self.subscribe_raw(types=types, session_id=session_id, recent=recent,
                                      follow=follow) as stream:
            yield parsed(stream)

    async def events(self, *, types: Sequence[str] | None = None,
                     session_id: str | None = None) -> AsyncIterator[Event]:
        """Typed events as they happen, until the daemon stops (or the caller stops)."""
        async with self.subscribe(types=types, session_id=session_id) as stream:
            async for event in stream:
                yield event
