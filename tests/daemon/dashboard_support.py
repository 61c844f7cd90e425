"""An in-process squad for the dashboard tests: a real runtime over a replay model, with tools
the test steers (one that reports progress and waits on the test, one that needs approval, one
that prints a secret), the daemon's app with its dashboard, and a reader of its event stream
that speaks ASGI directly (httpx's ASGI transport waits for a response to end; a stream never
does)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
from pydantic import BaseModel
from starlette.types import ASGIApp, Message

from squadd.config import PoolSettings, Settings, ToolsSettings
from squadd.daemon.app import create_app
from squadd.daemon.dashboard import UI_PREFIX, Dashboard
from squadd.daemon.dashboard_access import UiPortOnly
from squadd.daemon.handler_context import DaemonContext
from squadd.providers.base import Provider
from squadd.runtime.events import EventBus
from squadd.runtime.runtime import SquadRuntime
from squadd.tools.approvals import ApprovalBroker
from squadd.tools.base import Tool, ToolContext, ToolOutput, VariableSpec
from squadd.tools.invoke import ToolInvoker
from tests.runtime.scripted import make_squad

TOKEN = "t0ken-for-the-dashboard-tests-0123456789"
HOST = "http://127.0.0.1:8765"
SECRET = "hunter2-very-secret-value"
SECRET_NAME = "SQUADD_TEST_DEPLOY_KEY"


class NoArgs(BaseModel):
    pass


@dataclass
class Gate:
    """Where the `steps` tool stops: it reports half-way, then waits for `release`."""

    halfway: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)


class Steps(Tool[NoArgs]):
    name = "steps"
    description = "Works in two steps"
    args_model = NoArgs

    def __init__(self, gate: Gate):
        self.gate = gate

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutput:
        ctx.progress("step 1 of 2 done", 0.5)
        self.gate.halfway.set()
        with anyio.fail_after(30):
            await self.gate.release.wait()
        return "both steps done"


class Deploy(Tool[NoArgs]):
    name = "deploy"
    description = "Deploys, with the key"
    args_model = NoArgs
    default_approval = "ask"
    variables = (VariableSpec(name=SECRET_NAME, type="secret"),)

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutput:
        ctx.progress(f"pushing with {ctx.variables[SECRET_NAME]}", 0.9)
        return f"deployed with key {ctx.variables[SECRET_NAME]}"


@dataclass
class Squad:
    runtime: SquadRuntime
    context: DaemonContext
    board: Dashboard
    app: ASGIApp
    http: httpx.AsyncClient
    gate: Gate


@asynccontextmanager
async def running_squad(tmp_path: Path, provider: Provider, *,
                        max_concurrent: int = 8) -> AsyncIterator[Squad]:
    layout = make_squad(tmp_path / "repo")
    settings = Settings(tools=ToolsSettings(approval_timeout_s=60),
                        pool=PoolSettings(max_concurrent=max_concurrent))
    bus = EventBus()
    invoker = ToolInvoker(layout, settings, bus, approvals=ApprovalBroker(settings, bus))
    gate = Gate()
    runtime = SquadRuntime(layout, settings, provider, bus=bus, invoker=invoker,
                           extra_tools=lambda: [Steps(gate), Deploy()])
    async with runtime:
        context = DaemonContext(runtime=runtime, request_stop=lambda reason: None)
        board = Dashboard(token=TOKEN, url=f"{HOST}{UI_PREFIX}/")
        app = UiPortOnly(create_app(context, board), UI_PREFIX)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url=HOST) as http:
            try:
                yield Squad(runtime, context, board, app, http, gate)
            finally:
                gate.release.set()
                context.close_streams()


def auth() -> dict[str, str]:
    return {"x-squadd-token": TOKEN}


async def read_stream(app: ASGIApp, path: str, *, headers: dict[str, str] | None = None,
                      until: Callable[[list[dict[str, Any]]], bool],
                      timeout_s: float = 20.0) -> tuple[int, list[dict[str, Any]]]:
    """GET `path` as a browser's EventSource would, read frames until `until(frames)` holds,
    then hang up. Each frame is `{"event", "id", "data"}` (data parsed as JSON)."""
    target, _, query = path.partition("?")
    raw_headers = [(b"host", b"127.0.0.1:8765"), (b"accept", b"text/event-stream")]
    raw_headers += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": target, "raw_path": target.encode(),
             "query_string": query.encode(), "root_path": "", "headers": raw_headers,
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8765)}
    frames: list[dict[str, Any]] = []
    status = 0
    buffer = ""
    done = anyio.Event()
    sent_request = False

    async def receive() -> Message:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal status, buffer
        if message["type"] == "http.response.start":
            status = message["status"]
            if status != 200:
                done.set()
            return
        buffer += message.get("body", b"").decode()
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            frame: dict[str, Any] = {}
            for line in block.split("\n"):
                name, _, value = line.partition(": ")
                if name in ("event", "id"):
                    frame[name] = value
                elif name == "data":
                    frame["data"] = json.loads(value)
            if "data" in frame:
                frames.append(frame)
        if until(frames):
            done.set()

    with anyio.fail_after(timeout_s):
        async with anyio.create_task_group() as group:
            group.start_soon(app, scope, receive, send)
            await done.wait()
            group.cancel_scope.cancel()
    return status, frames
