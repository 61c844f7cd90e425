"""The daemon's HTTP API: a Starlette app over one running `SquadRuntime`.

Every answer is JSON (errors are `{"error": message, ...}` with the right status, never a
traceback); `GET /v1/events` is a Server-Sent Events stream. Endpoint contracts are in the
`squadd.daemon.client` methods that call them. Authentication is the server's business: the
TCP listener wraps this app in `BearerAuth`, the Unix socket is guarded by its 0600 mode.
"""

from __future__ import annotations

import hmac
import secrets
import time
from typing import Any

import anyio
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from squadd._version import __version__
from squadd.contracts.messages import ToolCall
from squadd.contracts.names import safe_name
from squadd.contracts.routes import RouteRequest, RouteResult
from squadd.daemon import inbox_api
from squadd.daemon.dashboard import UI_PREFIX, Dashboard, dashboard_app
from squadd.daemon.dashboard import state as dashboard_state
from squadd.daemon.handler_context import (
    DaemonContext,
    Handler,
    answering_errors,
    context_of,
    error_answer,
    flag,
    invalid,
    json_answer,
    object_body,
    query_count,
    transcript_records,
)
from squadd.daemon.streams import events
from squadd.errors import ApiError, InvalidNameError, VariableValueError
from squadd.runtime.callers import OUTSIDE_SESSION, CallerError, CallScope
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import safe_id
from squadd.tools.approvals import ApprovalBroker
from squadd.tools.base import Tool, ToolSet
from squadd.tools.variables import SquadVariables, secrets_file_path, store_variable

__all__ = ["BearerAuth", "DaemonContext", "create_app"]

POOL_FULL_RETRY_AFTER_S = 2
MAX_TAIL = 1_000_000
EXTERNAL_SESSION = OUTSIDE_SESSION
"""The session id of tool calls made over the API from no session (spilled outputs go there)."""

_ROUTE_STATUS = {
    "pool_full": 503, "queue_timeout": 503, "shutting_down": 503,
    "unknown_agent": 404, "unknown_session": 404, "no_route": 404,
    "invalid": 422, "too_deep": 422, "cycle": 422, "busy": 409,
}
"""HTTP status of a route that did not run; one that ran (even into an error) is a 200."""


def _route_answer(result: RouteResult, **beside: Any) -> JSONResponse:
    status = 200 if result.ok or result.reason is None else _ROUTE_STATUS.get(result.reason, 200)
    headers = ({"retry-after": str(POOL_FULL_RETRY_AFTER_S)}
               if result.reason in ("pool_full", "queue_timeout") else None)
    return json_answer({**result.model_dump(mode="json"), **beside} if beside else result,
                       status, headers)


# Endpoints.
async def health(request: Request) -> Response:
    ctx = context_of(request)
    runtime = ctx.runtime
    return json_answer({
        "ok": True, "pid": ctx.pid, "version": __version__, "repo": str(runtime.layout.repo),
        "squad_dir": str(runtime.layout.root), "stopping": ctx.stopping,
        "uptime_s": round(time.monotonic() - ctx.started, 3),
        "provider": runtime.settings.provider.kind, "event_streams": len(ctx.streams),
        "dashboard_streams": len(ctx.dashboard_streams),
        "pool": runtime.pool.totals().model_dump(),
        "pool_problems": runtime.pool.invariant_violations(),
    })


def _name(value: object, field: str) -> str:
    """`value` if it is an agent name (the naming rule), else a 422 naming `field`."""
    try:
        safe_name(value)  # type: ignore[arg-type]
    except InvalidNameError as exc:
        raise ApiError(422, f"{field}: {exc}",
                       fields=[{"field": field, "message": "must be an agent name"}]) from None
    return str(value)


async def list_sessions(request: Request) -> Response:
    runtime = context_of(request).runtime
    include_ended = flag(request, "all", False)
    agent = request.query_params.get("agent") or None
    report = await runtime.status(agent=_name(agent, "agent") if agent else None,
                                  include_destroyed=True)
    seen: set[str] = set()
    sessions = []
    for view in report.sessions:  # live records come first; an older memory of one is dropped
        if view.session_id in seen or (view.state == "destroyed" and not include_ended):
            continue
        seen.add(view.session_id)
        sessions.append(view.model_dump(mode="json"))
    answer: dict[str, Any] = {"sessions": sessions, "pool": report.pool.model_dump(),
                              "spending": report.spending.model_dump(mode="json")
                              if report.spending is not None else None}
    coordinator = context_of(request).coordinator
    if coordinator is not None:
        answer["cluster"] = await coordinator.report()
    live = context_of(request).live_settings
    if live is not None and (live.restart_needed or live.error):
        answer["settings"] = live.report()
    return json_answer(answer)


async def get_session(request: Request) -> Response:
    runtime = context_of(request).runtime
    session_id = request.path_params["session_id"]
    with_transcript = flag(request, "transcript", True)
    tail = query_count(request, "tail", limit=MAX_TAIL)
    view = await runtime.session(session_id)
    if view is None:
        raise ApiError(404, f"no session {session_id}: 'squadd sessions list' shows them")
    data: dict[str, Any] = {"session": view.model_dump(mode="json")}
    if with_transcript:
        data["transcript"], _ = await transcript_records(runtime, session_id, tail)
    return json_answer(data)


async def route(request: Request) -> Response:
    runtime = context_of(request).runtime
    body = await object_body(request)
    try:
        route_request = RouteRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid("route request", exc) from None
    result = await runtime.route(route_request)
    return await _route_answer_with_view(request, result)


async def resume_session(request: Request) -> Response:
    runtime = context_of(request).runtime
    result = await runtime.resume(request.path_params["session_id"],
                                  wait=flag(request, "wait", True))
    return await _route_answer_with_view(request, result)


async def _route_answer_with_view(request: Request, result: RouteResult) -> Response:
    """The route's answer; with `?view=session`, the session's view as it ended beside it
    (`squadd route` prints it), so that the caller needs no second request."""
    if request.query_params.get("view") != "session" or result.session_id is None:
        return _route_answer(result)
    view = await context_of(request).runtime.session(result.session_id)
    return _route_answer(result, session=view.model_dump(mode="json") if view else None)


async def land_session(request: Request) -> Response:
    """Land the session's worktree branch through the daemon's landing queue, and wait: a
    LandResult with its `landing` outcome (one that did not land is still a 200: read `ok`,
    `reason` and `landing.state`)."""
    runtime = context_of(request).runtime
    session_id = request.path_params["session_id"]
    try:
        safe_id(session_id)
    except InvalidNameError as exc:
        raise ApiError(422, str(exc)) from None
    result = await runtime.land(session_id)
    return json_answer({**result.model_dump(mode="json"),
                        "landing": result.outcome().model_dump(mode="json")})


async def list_workspaces(request: Request) -> Response:
    views = await context_of(request).runtime.workspaces.listing()
    return json_answer({"workspaces": [view.model_dump(mode="json") for view in views]})


async def cancel_session(request: Request) -> Response:
    runtime = context_of(request).runtime
    session_id = request.path_params["session_id"]
    if await runtime.cancel(session_id):
        return json_answer({"session_id": session_id, "cancelled": True})
    view = await runtime.session(session_id)
    if view is None:
        raise ApiError(404, f"no session {session_id}: 'squadd sessions list' shows them")
    raise ApiError(409, f"session {session_id} is {view.state}: it has no task to cancel",
                   state=view.state)


async def _toolset(runtime: SquadRuntime) -> ToolSet:
    tools = runtime.tools
    extra = runtime.extra_tools
    if extra is not None:
        extras = await anyio.to_thread.run_sync(extra)
        tools = tools.merged(extras if isinstance(extras, ToolSet) else list(extras))
    return tools


def describe_tool(tool: Tool[Any]) -> dict[str, Any]:
    """A tool as `GET /v1/tools` lists it: what MCP clients need to offer it."""
    spec = tool.spec()
    return {
        "name": tool.name, "label": tool.label or tool.name, "description": spec.description,
        "parameters": spec.parameters, "source": tool.source, "kind": tool.kind,
        "file": str(tool.file) if tool.file is not None else None,
        "squad_tool": tool.squad_tool, "default_approval": tool.default_approval,
    }


async def _scope(runtime: SquadRuntime, tools: ToolSet, agent: str | None,
                 session_id: object) -> CallScope:
    if session_id is not None:
        try:
            safe_id(session_id if isinstance(session_id, str) else "")
        except InvalidNameError as exc:
            raise ApiError(422, f"sessionId: {exc}") from None
    try:
        return await runtime.scope_call(tools, agent=agent, session_id=(
            str(session_id) if session_id is not None else None))
    except CallerError as exc:
        raise ApiError(exc.status, str(exc)) from None


async def list_tools(request: Request) -> Response:
    """All tools; with `agent` and/or `session`, those such a caller may use."""
    runtime = context_of(request).runtime
    tools = await _toolset(runtime)
    agent = request.query_params.get("agent") or None
    session_id = request.query_params.get("session") or None
    if agent is not None or session_id is not None:
        tools = (await _scope(runtime, tools, _name(agent, "agent") if agent else None,
                              session_id)).tools
    return json_answer({"tools": [describe_tool(tool) for tool in tools]})


async def call_tool(request: Request) -> Response:
    runtime = context_of(request).runtime
    name = request.path_params["name"]
    body = await object_body(request)
    unknown = sorted(set(body) - {"arguments", "agent", "sessionId"})
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}: the body is "
                            '{"arguments": {...}, "agent": ..., "sessionId": ...}')
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ApiError(422, "arguments must be a JSON object of the tool's parameters",
                       fields=[{"field": "arguments", "message": "must be an object"}])
    agent = _name(body["agent"], "agent") if body.get("agent") else None
    # The caller's tool set: that session's and that agent's charter's, as in the session.
    scope = await _scope(runtime, await _toolset(runtime), agent, body.get("sessionId") or None)
    tools = scope.tools
    call = ToolCall(id=f"api-{secrets.token_hex(6)}", name=name, arguments=arguments)
    result = await runtime.invoker.invoke(tools, call, scope.origin)
    status = 200 if name in tools else 403 if tools.refusal(name) is not None else 404
    data = result.model_dump(mode="json")
    if status != 200:
        data["error"] = result.text
    return json_answer(data, status)


async def resolve_approval(request: Request) -> Response:
    runtime = context_of(request).runtime
    approval_id = request.path_params["approval_id"]
    body = await object_body(request)
    unknown = sorted(set(body) - {"approved", "reason"})
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}: the body is "
                            '{"approved": true or false, "reason": "..."}')
    approved, reason = body.get("approved"), body.get("reason", "")
    if not isinstance(approved, bool):
        raise ApiError(422, "approved: required, true or false",
                       fields=[{"field": "approved", "message": "must be true or false"}])
    if not isinstance(reason, str):
        raise ApiError(422, "reason: must be a string",
                       fields=[{"field": "reason", "message": "must be a string"}])
    item = runtime.inbox.get(approval_id)
    if item is not None and item.kind == "approval" and item.open:  # it waits in the inbox
        await inbox_api.resolve(runtime, approval_id, "approve" if approved else "deny",
                                reason=reason)
        return json_answer({"approval_id": approval_id, "approved": approved})
    broker = runtime.invoker.approvals
    if not isinstance(broker, ApprovalBroker) or not broker.resolve(approval_id, approved,
                                                                     reason):
        raise ApiError(404, f"no pending approval {approval_id}: it was answered, timed out, "
                            "or never existed ('squadd events --type approval.*' shows them)")
    return json_answer({"approval_id": approval_id, "approved": approved})


async def ui_link(request: Request) -> Response:
    board: Dashboard = request.app.state.dashboard
    if not board.url:
        raise ApiError(404, "the dashboard is off: start the daemon with 'squadd serve --ui'")
    return json_answer({"url": board.url, "link": board.link})


async def set_variable(request: Request) -> Response:
    """Store a variable's value in the secrets file and wake the calls waiting for it. The
    value is never logged nor sent back."""
    runtime = context_of(request).runtime
    name = request.path_params["name"]
    body = await object_body(request)
    unknown = sorted(set(body) - {"value"})
    if unknown:
        raise ApiError(422, f"unknown field(s) {', '.join(unknown)}: the body is "
                            '{"value": "..."}')
    value = body.get("value")
    if not isinstance(value, str):
        raise ApiError(422, "value: required, a string",
                       fields=[{"field": "value", "message": "must be a string"}])
    resolver = runtime.invoker.variables
    path = resolver.secrets_file.path if isinstance(resolver, SquadVariables) \
        else secrets_file_path(runtime.settings)
    try:
        await anyio.to_thread.run_sync(store_variable, path, name, value)
    except VariableValueError as exc:
        raise ApiError(422, str(exc)) from None
    broker = runtime.invoker.approvals
    woken = broker.provided(name) if isinstance(broker, ApprovalBroker) else 0
    return json_answer({"name": name, "stored_in": str(path), "waiting_calls": woken})


async def reload_settings(request: Request) -> Response:
    """Read the settings files again now (as SIGHUP does): what was applied, what waits for a
    restart, or the error that refused the files (a 422; the running settings stay)."""
    live = context_of(request).live_settings
    if live is None:
        raise ApiError(409, "this daemon does not read its settings again: restart it")
    reloaded = await live.reload("squadd reload")
    return json_answer(reloaded.answer(), 200 if reloaded.ok else 422)


async def shutdown(request: Request) -> Response:
    ctx = context_of(request)
    ctx.request_stop("requested over the API")
    return json_answer({"stopping": True, "pid": ctx.pid}, 202)


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    if status == 404:
        detail = f"no such endpoint: {request.method} {request.url.path} (see /v1/...)"
    elif status == 405:
        detail = f"{request.method} is not allowed on {request.url.path}"
    return error_answer(status, str(detail))


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/v1/health", health),
    ("GET", "/v1/sessions", list_sessions),
    ("GET", "/v1/sessions/{session_id}", get_session),
    ("POST", "/v1/sessions/{session_id}/cancel", cancel_session),
    ("POST", "/v1/sessions/{session_id}/resume", resume_session),
    ("POST", "/v1/sessions/{session_id}/land", land_session),
    ("GET", "/v1/workspaces", list_workspaces),
    ("POST", "/v1/route", route),
    ("GET", "/v1/tools", list_tools),
    ("POST", "/v1/tools/{name}", call_tool),
    ("GET", "/v1/events", events),
    ("POST", "/v1/approvals/{approval_id}", resolve_approval),
    ("POST", "/v1/variables/{name}", set_variable),
    ("POST", "/v1/shutdown", shutdown),
    ("POST", "/v1/reload", reload_settings),
    ("GET", "/v1/ui", ui_link),
    ("GET", "/v1/dashboard", dashboard_state),
    *inbox_api.ROUTES,
]


def create_app(context: DaemonContext, dashboard: Dashboard | None = None) -> Starlette:
    """The API over `context.runtime`; with `dashboard`, its page under `UI_PREFIX` too.
    What the dashboard draws is followed either way: `GET /v1/dashboard` (`squadd top`)."""
    board = dashboard if dashboard is not None else Dashboard(token="")
    context.runtime.bus.add_listener(board.observe)
    routes: list[BaseRoute] = [Route(path, answering_errors(handler), methods=[method])
                               for method, path, handler in ROUTES]
    if dashboard is not None:
        routes.append(Mount(UI_PREFIX, app=dashboard_app(context, dashboard, resolve_approval)))
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.daemon = context
    app.state.dashboard = board
    return app


class BearerAuth:
    """ASGI middleware: a request without `Authorization: Bearer <token>` gets a 401."""

    def __init__(self, app: ASGIApp, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                response = error_answer(401, "missing or wrong bearer token: send 'Authorization: "
                                       "Bearer <token>' with the token in .squad/run/token")
                response.headers["www-authenticate"] = "Bearer"
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
