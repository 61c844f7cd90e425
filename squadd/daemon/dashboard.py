"""The live dashboard (`squadd serve --ui`): its page and static files, a snapshot of the squad,
a session's transcript, the event bus as Server-Sent Events with `Last-Event-ID` resume, and
approvals through the same handler as `squadd approve`. Every route sits behind
`DashboardGuard` (token, loopback Host, no cross-origin actions).

What the bus says and no endpoint keeps (the tool running in each session and its progress,
turns so far, tokens spent over time) is followed here, in bounded memory.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from squadd.contracts.events import (
    AgentCompleted,
    AgentSpawned,
    AgentStateChanged,
    BaseEvent,
    SessionMessage,
    ToolCompleted,
    ToolStarted,
    ToolUpdated,
)
from squadd.contracts.sessions import LIVE_STATES
from squadd.daemon.dashboard_access import DashboardGuard
from squadd.daemon.handler_context import (
    DaemonContext,
    Handler,
    answering_errors,
    context_of,
    json_answer,
    transcript_records,
)
from squadd.daemon.inbox_api import resolve_item, shown_item
from squadd.daemon.streams import MAX_DASHBOARD_STREAMS, open_stream, stream_response
from squadd.errors import ApiError
from squadd.statcache import StatCache
from squadd.state.decisions import parse_decisions
from squadd.tools.approvals import ApprovalBroker, arguments_bytes, arguments_text

__all__ = ["UI_PREFIX", "Dashboard", "dashboard_app"]

UI_PREFIX = "/ui"
STATIC_FILES = ("app.js", "app.css")
"""The files under `squadd/daemon/static/` the page may load (nothing else is served)."""
_CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                  ".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8"}
TRACKED_SESSIONS = 2_000
"""Sessions whose turns and current tool are followed; the oldest is forgotten past this."""
TOKEN_POINTS = 2_000
"""Points of the tokens-per-agent series kept (one per finished task)."""
DECISIONS_SHOWN = 20
TRANSCRIPT_TAIL = 200
"""Transcript records a click on a session shows (its latest ones)."""
SESSIONS_SHOWN = 500


@dataclass
class ToolNow:
    tool: str
    call_id: str
    started: dt.datetime
    message: str = ""
    fraction: float | None = None


@dataclass
class Dashboard:
    """The dashboard's token and what it follows on the bus (call `observe` for each event).
    Without a token (no `--ui`) it still follows the bus, for `GET /v1/dashboard`."""

    token: str
    url: str = ""
    """Set once the UI port is bound: `http://127.0.0.1:PORT/ui/`."""
    turns: OrderedDict[str, int] = field(default_factory=OrderedDict)
    tools: OrderedDict[str, ToolNow] = field(default_factory=OrderedDict)
    token_points: deque[dict[str, Any]] = field(
        default_factory=lambda: deque(maxlen=TOKEN_POINTS))
    decisions: StatCache[list[dict[str, Any]]] = field(
        default_factory=lambda: StatCache(_decision_views, limit=1))
    """The latest decisions as shown, parsed again only when decisions.md changes."""

    @property
    def link(self) -> str:
        """The URL with the token: what `squadd ui` prints or opens."""
        return f"{self.url}?token={self.token}"

    def observe(self, event: BaseEvent) -> None:
        """Follow one event (a bus listener: fast, never raises)."""
        session = event.session_id
        if isinstance(event, AgentSpawned) and session:
            _put(self.turns, session, 0)
        elif isinstance(event, SessionMessage) and session and event.role == "assistant":
            _put(self.turns, session, self.turns.get(session, 0) + 1)
        elif isinstance(event, ToolStarted) and session:
            _put(self.tools, session, ToolNow(event.tool, event.call_id, event.ts))
        elif isinstance(event, ToolUpdated) and session:
            now = self.tools.get(session)
            if now is not None and now.call_id == event.call_id:
                now.message, now.fraction = event.message, event.fraction
        elif isinstance(event, ToolCompleted) and session:
            now = self.tools.get(session)
            if now is not None and now.call_id == event.call_id:
                del self.tools[session]
        elif isinstance(event, AgentStateChanged) and session and \
                event.state not in LIVE_STATES:
            # A task that ended (cancelled mid-call, say) ran its last tool, completed or not.
            self.tools.pop(session, None)
        elif isinstance(event, AgentCompleted):
            self.token_points.append({
                "ts": event.ts.isoformat(), "agent": event.agent or "?",
                "session_id": session, "input_tokens": event.input_tokens,
                "output_tokens": event.output_tokens})

    def tool_view(self, session_id: str) -> dict[str, Any] | None:
        now = self.tools.get(session_id)
        if now is None:
            return None
        return {"tool": now.tool, "call_id": now.call_id, "started": now.started.isoformat(),
                "message": now.message, "fraction": now.fraction}


def _put(table: OrderedDict[str, Any], key: str, value: Any) -> None:
    table[key] = value
    table.move_to_end(key)
    while len(table) > TRACKED_SESSIONS:
        table.popitem(last=False)


def dashboard_of(request: Request) -> Dashboard:
    board: Dashboard = request.app.state.dashboard
    return board


def _static_text(name: str) -> str:
    return files("squadd.daemon").joinpath("static", name).read_text(encoding="utf-8")


async def page(request: Request) -> Response:
    board = dashboard_of(request)
    text = await anyio.to_thread.run_sync(_static_text, "index.html")
    text = text.replace("{{token}}", html.escape(board.token, quote=True))
    return Response(text, media_type="text/html; charset=utf-8")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC_FILES:
        raise ApiError(404, f"no static file {name[:80]!r}")
    text = await anyio.to_thread.run_sync(_static_text, name)
    return Response(text, media_type=_CONTENT_TYPES[name[name.rfind("."):]])


def _decisions(ctx: DaemonContext, board: Dashboard) -> list[dict[str, Any]]:
    """The latest decisions, newest first: a stat per call while decisions.md is unchanged."""
    try:
        return board.decisions.get(ctx.runtime.layout.decisions_md)
    except FileNotFoundError:
        return []


def _decision_views(path: Path) -> list[dict[str, Any]]:
    entries = parse_decisions(path).entries[-DECISIONS_SHOWN:]
    return [{"title": e.title, "date": e.date.isoformat() if e.date else None, "by": e.by,
             "category": e.category, "body": _prose(e.body)} for e in reversed(entries)]


def _prose(body: str) -> str:
    """An entry's text without its `**By:**`-style field lines (shown apart)."""
    lines = [line for line in body.strip().splitlines()
             if not re.match(r"\*\*(By|Date|Category):\*\*", line.strip())]
    return "\n".join(lines).strip()[:2000]


def _approvals(ctx: DaemonContext) -> list[dict[str, Any]]:
    broker = ctx.runtime.invoker.approvals
    waiting = [{"approval_id": item.id, "tool": item.details.get("tool", ""),
                "arguments": item.details.get("arguments", {}),
                "arguments_text": arguments_text(item.details.get("arguments", {})),
                "arguments_bytes": arguments_bytes(item.details.get("arguments", {})),
                "question": item.details.get("question", item.reason),
                "session_id": item.session_id, "agent": item.agent, "timeout_s": 0,
                "created": dt.datetime.fromtimestamp(item.created, dt.UTC).isoformat()}
               for item in ctx.runtime.inbox.items() if item.kind == "approval"]
    if not isinstance(broker, ApprovalBroker):
        return waiting
    return waiting + [{"approval_id": p.approval_id, "tool": p.tool, "arguments": p.arguments,
             "arguments_text": arguments_text(p.arguments),
             "arguments_bytes": arguments_bytes(p.arguments),
             "question": p.question, "session_id": p.session_id, "agent": p.agent,
             "timeout_s": p.timeout_s,
             "created": dt.datetime.fromtimestamp(p.created, dt.UTC).isoformat()}
            for p in broker.pending()]


async def state(request: Request) -> Response:
    """Everything the page draws, as of `seq`; the event stream carries it on from there."""
    ctx, board = context_of(request), dashboard_of(request)
    runtime = ctx.runtime
    seq = runtime.bus.last_seq  # read first: an event after this one is streamed, not lost
    report = await runtime.status(include_destroyed=True)  # views taken before its first await
    sessions = []
    for view in report.sessions[:SESSIONS_SHOWN]:
        shown = view.model_dump(mode="json")
        shown["turns"] = board.turns.get(view.session_id, 0)
        shown["tool"] = board.tool_view(view.session_id)
        sessions.append(shown)
    queue = sorted((s for s in sessions if s["state"] == "queued"),
                   key=lambda s: (s["priority"] != "urgent", s["created"] or ""))
    pool = report.pool
    decisions = await anyio.to_thread.run_sync(_decisions, ctx, board)
    return json_answer({
        "seq": seq, "repo": str(runtime.layout.repo), "pool": pool.model_dump(),
        "at_capacity": pool.running >= pool.max_concurrent, "sessions": sessions,
        "queue": [s["session_id"] for s in queue], "approvals": _approvals(ctx),
        "decisions": decisions, "tokens": list(board.token_points),
        "inbox": [shown_item(item) for item in runtime.inbox.items()],
        "spending": report.spending.model_dump(mode="json") if report.spending else None,
    })


async def session(request: Request) -> Response:
    ctx = context_of(request)
    session_id = request.path_params["session_id"]
    view = await ctx.runtime.session(session_id)
    if view is None:
        raise ApiError(404, f"no session {session_id[:80]}")
    records, total = await transcript_records(ctx.runtime, session_id, TRANSCRIPT_TAIL)
    return json_answer({"session": view.model_dump(mode="json"),
                        "transcript": records, "total": total})


def _last_event_id(request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.query_params.get("since")
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ApiError(422, f"Last-Event-ID {raw[:40]!r} must be an event's seq (a number)")
    return int(raw)


async def events(request: Request) -> Response:
    """The bus as SSE. With `Last-Event-ID` (or `?since=`), the kept events after that seq come
    first; when some are no longer kept, a `reset` event says to fetch the state again."""
    ctx = context_of(request)
    last = _last_event_id(request)
    subscription = open_stream(ctx, MAX_DASHBOARD_STREAMS, dashboard=True)
    replay: list[BaseEvent] = []
    reset = False
    if last is not None:
        replay = [e for e in ctx.recent if e.seq > last]
        oldest_kept = replay[0].seq if replay else ctx.runtime.bus.last_seq + 1
        reset = oldest_kept > last + 1 or last > ctx.runtime.bus.last_seq
    prelude = [f"event: reset\ndata: {{\"seq\": {ctx.runtime.bus.last_seq}}}\n\n"] if reset \
        else []
    return stream_response(ctx, subscription, replay, prelude)


def dashboard_app(context: DaemonContext, board: Dashboard, approve: Handler) -> DashboardGuard:
    """The dashboard's routes (mounted at `UI_PREFIX`), behind its guard. `approve` is the
    API's approval handler: the page's buttons answer through the very same code."""
    routes: list[tuple[str, str, Handler]] = [
        ("GET", "/", page),
        ("GET", "/static/{name}", static),
        ("GET", "/api/state", state),
        ("GET", "/api/sessions/{session_id}", session),
        ("GET", "/api/events", events),
        ("POST", "/api/approvals/{approval_id}", approve),
        ("POST", "/api/inbox/{item_id}", resolve_item),
    ]
    app = Starlette(routes=[Route(path, answering_errors(handler), methods=[method])
                            for method, path, handler in routes])
    app.state.daemon = context
    app.state.dashboard = board
    return DashboardGuard(app, board.token)
