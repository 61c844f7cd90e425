"""The daemon's HTTP API in this process: the runtime `squadd serve` builds (same settings
layers, same `SquadRuntime.from_settings`), its Starlette app, and clients whose transport calls
the app directly (no socket, no subprocess).

    async with api_in_process(layout, model_url) as daemon:
        assert (await daemon.http.get("/v1/health")).json()["ok"]
        await daemon.client.route("hi", "lead")      # the AsyncDaemonClient squadd itself uses
        async with daemon.client.subscribe(types=["tool.*"]) as events: ...

Unlike `httpx.ASGITransport`, which waits for a response to end, `StreamingASGITransport` hands
over each body chunk as the app sends it: an event stream can be followed, and closing it is
the client leaving (`http.disconnect`). Lifecycle, signals and the socket itself are tested
against a real process (`tests.support.daemon_process.DaemonProcess`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio
import httpx
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream
from starlette.types import ASGIApp, Message

from squadd.config import Settings, load_settings
from squadd.daemon.app import create_app
from squadd.daemon.client import AsyncDaemonClient
from squadd.daemon.handler_context import DaemonContext
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout

START_TIMEOUT_S = 60.0
"""How long a request waits for the app to start its answer when httpx gives no read timeout."""


def settings_for(layout: SquadLayout, model_url: str) -> Settings:
    """As `squadd serve --provider openai --base-url URL --model test-model` loads them in the
    repo (its `.squad/config.toml` included), with no provider retries."""
    return load_settings(layout.root, overrides={"provider": {
        "kind": "openai", "base_url": model_url, "model": "test-model", "max_attempts": 1}})


class _Body(httpx.AsyncByteStream):
    def __init__(self, messages: MemoryObjectReceiveStream[Message], left: anyio.Event,
                 errors: list[BaseException]):
        self._messages = messages
        self._left = left
        self._errors = errors

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for message in self._messages:
            if message["type"] != "http.response.body":
                continue
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                break
        if self._errors:
            raise self._errors[0]

    async def aclose(self) -> None:
        self._left.set()  # the app's next `receive()` is the client's disconnect
        self._messages.close()


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """An httpx transport over an ASGI app whose requests run as tasks of `group`; the body of
    each answer streams as the app sends it. An exception the app raises is raised to the
    caller (as `httpx.ASGITransport` does)."""

    def __init__(self, app: ASGIApp, group: TaskGroup):
        self.app = app
        self.group = group

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        sender, receiver = anyio.create_memory_object_stream[Message](64)
        left = anyio.Event()
        errors: list[BaseException] = []
        asked = False

        async def receive() -> Message:
            nonlocal asked
            if not asked:
                asked = True
                return {"type": "http.request", "body": body, "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            if not left.is_set():
                await sender.send(message)

        async def run() -> None:
            async with sender:
                try:
                    await self.app(_scope(request), receive, send)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass  # the client hung up while the app still wrote
                except Exception as exc:
                    errors.append(exc)

        self.group.start_soon(run)
        wait_s = (request.extensions.get("timeout") or {}).get("read") or START_TIMEOUT_S
        with anyio.fail_after(wait_s):
            try:
                start = await receiver.receive()
            except anyio.EndOfStream:
                if errors:
                    raise errors[0] from None
                raise RuntimeError("the app ended without an answer") from None
        return httpx.Response(start["status"], headers=start.get("headers", []),
                              stream=_Body(receiver, left, errors), request=request)


def _scope(request: httpx.Request) -> dict[str, Any]:
    url = request.url
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "method": request.method, "scheme": url.scheme, "path": unquote(url.path),
        "raw_path": url.raw_path.split(b"?")[0], "query_string": url.query, "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "client": ("127.0.0.1", 50000), "server": (url.host, url.port or 80),
    }


@dataclass
class InProcessDaemon:
    """A running runtime and its API: `http` for raw statuses and headers, `client` for the
    API as squadd's own client speaks it."""

    layout: SquadLayout
    runtime: SquadRuntime
    context: DaemonContext
    http: httpx.AsyncClient
    client: AsyncDaemonClient
    stops: list[str]
    """Why `POST /v1/shutdown` (or anything else) asked the daemon to stop, in order."""

    async def wait_for_state(self, session_id: str, states: set[str],
                             within_s: float = 15.0) -> dict[str, Any]:
        """The session's view (through the API) once its state is one of `states`: read now,
        then again at each `agent.state` event of the session (the pool publishes every
        change of state), subscribed before the first read so that none is missed."""
        with anyio.fail_after(within_s), self.runtime.bus.subscribe(
                types=["agent.state"], session_id=session_id) as changes:
            while True:
                view: dict[str, Any] = (await self.client.session(
                    session_id, transcript=False))["session"]
                if view["state"] in states:
                    return view
                if await changes.get() is None:
                    raise AssertionError(f"the event bus closed with session {session_id} "
                                         f"{view['state']}, not {sorted(states)}")


@asynccontextmanager
async def api_in_process(layout: SquadLayout, model_url: str, *,
                         settings: Settings | None = None) -> AsyncIterator[InProcessDaemon]:
    """The API over a fresh runtime; enter it in the test itself (the runtime's task group
    lives and ends in one task)."""
    stops: list[str] = []
    runtime = SquadRuntime.from_settings(layout, settings or settings_for(layout, model_url))
    async with runtime, anyio.create_task_group() as group:
        context = DaemonContext(runtime=runtime, request_stop=stops.append)
        transport = StreamingASGITransport(create_app(context), group)
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://squadd",
                                         timeout=30) as http, \
                    AsyncDaemonClient(layout, timeout=30, transport=transport) as client:
                yield InProcessDaemon(layout, runtime, context, http, client, stops)
        finally:
            context.close_streams()
            group.cancel_scope.cancel()
