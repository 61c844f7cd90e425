"""`squadd mcp`: a stdio MCP server (the official `mcp` SDK's low-level `Server`) that forwards to
the repo's daemon. It lists every tool the daemon offers with the same JSON schema, and runs each
call through the daemon's one tool pipeline (`POST /v1/tools/{name}`). stdout is the protocol:
logs go to stderr only. A request the SDK cannot read (bad JSON, nested too deeply, a lone
surrogate) is answered with a JSON-RPC error instead of being dropped, so no client waits forever.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import anyio
import mcp.types as types
import structlog
from anyio.abc import ObjectSendStream
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from squadd._version import __version__
from squadd.daemon.client import AsyncDaemonClient
from squadd.errors import DaemonError, DaemonNotRunningError, UntrustedInputError
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool
from squadd.untrusted import check_document, has_surrogate

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    Context: TypeAlias = ServerRequestContext[Any]

log = structlog.get_logger("squadd.mcp")

SERVER_NAME = "squadd"
LIST_TIMEOUT_S = 10.0
"""How long `tools/list` waits for the daemon before it answers from the squad tools alone."""
MAX_ARGUMENT_VALUES = 1_000_000
"""Most values a call's arguments may hold (the daemon's 4 MiB body limit comes first)."""


def squad_tool_descriptions() -> list[dict[str, Any]]:
    """The five squad tools and the workspace tools as `GET /v1/tools` describes them, without
    a daemon: what a client is offered while none runs (each call then says to start one)."""
    from squadd.config import Settings
    from squadd.tools.builtin import workspace_tools
    from squadd.tools.squad.ask import SquadAsk
    from squadd.tools.squad.decide import SquadDecide
    from squadd.tools.squad.memory import SquadMemory
    from squadd.tools.squad.route import SquadRoute
    from squadd.tools.squad.skill import SquadSkill
    from squadd.tools.squad.status import SquadStatus

    described = []
    squad: tuple[type[Tool[Any]], ...] = (SquadRoute, SquadDecide, SquadMemory, SquadStatus,
                                          SquadSkill, SquadAsk)
    for tool in squad:  # classes: an instance needs the daemon's layout and runtime
        schema = tool.args_model.model_json_schema()
        schema.pop("title", None)
        described.append({"name": tool.name, "label": tool.label,
                          "description": tool.description, "parameters": schema})
    for builtin in workspace_tools(Settings()):  # the same list the runtime offers
        spec = builtin.spec()
        described.append({"name": builtin.name, "label": builtin.label,
                          "description": spec.description, "parameters": spec.parameters})
    return described


INBOX_TOOL = "squad_inbox"
INBOX_ACTIONS = ("list", "show", "approve", "deny", "answer", "resume", "dismiss")
INBOX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(INBOX_ACTIONS),
                   "description": "list (the default), show ID, or the action that resolves "
                                  "item ID"},
        "id": {"type": "string", "description": "The item's id (from list)"},
        "answer": {"type": "string", "description": "For answer: the text the agent gets"},
        "budget": {"type": "number", "exclusiveMinimum": 0,
                   "description": "For approve of a budget item: how much more to allow"},
        "reason": {"type": "string", "description": "Why (the agent sees it)"},
    },
    "additionalProperties": False,
}


def inbox_tool() -> types.Tool:
    """The inbox as an MCP tool, for a person's client (not offered to a session's own)."""
    return types.Tool(
        name=INBOX_TOOL, title="Squad inbox", input_schema=INBOX_SCHEMA,
        description="What waits on a person in the squad: approvals, agents' questions, "
                    "sessions parked by a budget, failed sessions, landings that need "
                    "attention. List them, show one, or resolve one (approve, deny, answer, "
                    "resume, dismiss), as 'squadd inbox' does.")


def mcp_tool(described: Mapping[str, Any]) -> types.Tool:
    """A tool of `GET /v1/tools` as an MCP tool: same name, description and input schema."""
    schema = dict(described.get("parameters") or {})
    schema.setdefault("type", "object")  # MCP requires an object schema at the root
    name = str(described["name"])
    label = described.get("label")
    return types.Tool(name=name, title=str(label) if label and label != name else None,
                      description=described.get("description") or None, input_schema=schema)


def text_result(text: str, *, is_error: bool) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error)


def mcp_result(result: Mapping[str, Any]) -> types.CallToolResult:
    """A daemon `ToolResult` as an MCP result: its text and images, `isError` unless it
    succeeded, and a route's landing (`squad_route`) as `structuredContent.landing`."""
    content: list[types.TextContent | types.ImageContent] = [
        types.TextContent(text=str(result.get("text", "")))]
    for image in result.get("images") or ():
        if isinstance(image, Mapping) and isinstance(image.get("data"), str):
            content.append(types.ImageContent(data=image["data"],
                                              mime_type=str(image.get("mime_type", ""))))
    details = result.get("details")
    landing = details.get("landing") if isinstance(details, Mapping) else None
    return types.CallToolResult(content=list(content),
                                structured_content={"landing": landing}
                                if isinstance(landing, Mapping) else None,
                                is_error=result.get("result_type") != "success")


class DaemonBridge:
    """The MCP handlers: each one asks the daemon through `client`.

    `agent` is who the calls are made as (the daemon's default, "user", when None), from
    `session_id`: the daemon lists and runs only the tools that agent's charter and that
    session allow. While no
    daemon answers, `tools/list` offers the squad tools and each call fails with the message
    that says to start one; once the daemon answers again, clients that saw that fallback are
    told the tool list changed, so they pick up the custom tools too.
    """

    def __init__(self, client: AsyncDaemonClient, *, agent: str | None = None,
                 session_id: str | None = None):
        self.client = client
        self.agent = agent
        self.session_id = session_id
        self._listed_without_daemon = False

    async def list_tools(self, ctx: Context,
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            with anyio.fail_after(LIST_TIMEOUT_S):
                described = await self.client.tools(agent=self.agent,
                                                    session_id=self.session_id)
        except (DaemonError, TimeoutError) as exc:
            reason = str(exc) if isinstance(exc, DaemonError) else (
                f"the daemon did not list its tools within {LIST_TIMEOUT_S:g}s")
            log.warning("offering the squad tools only", reason=reason)
            self._listed_without_daemon = True
            described = squad_tool_descriptions()
        else:
            self._listed_without_daemon = False
        tools = [mcp_tool(tool) for tool in described]
        if self.agent is None and self.session_id is None:
            tools.append(inbox_tool())
        return types.ListToolsResult(tools=tools)

    async def _inbox(self, arguments: Mapping[str, Any]) -> types.CallToolResult:
        action = arguments.get("action") or "list"
        item_id = arguments.get("id")
        if action not in INBOX_ACTIONS:
            return text_result(f"action must be one of {', '.join(INBOX_ACTIONS)}",
                               is_error=True)
        if action == "list":
            items = (await self.client.inbox())["items"]
            if not items:
                return text_result("The inbox is empty: nothing waits on a person.",
                                   is_error=False)
            lines = [f"- {i['id']} [{i['kind']}] {i.get('agent') or '-'}: {i['reason'][:200]} "
                     f"(resolve with: {', '.join(i['actions'])})" for i in items]
            return text_result("\n".join(lines), is_error=False)
        if not isinstance(item_id, str) or not item_id:
            return text_result(f"{action} needs the item's id", is_error=True)
        if action == "show":
            item = await self.client.inbox_item(item_id)
            return text_result(json.dumps(item["item"], indent=2), is_error=False)
        budget = arguments.get("budget")
        done = await self.client.inbox_resolve(
            item_id, action, answer=str(arguments.get("answer") or ""),
            budget=float(budget) if isinstance(budget, int | float) else None,
            reason=str(arguments.get("reason") or ""))
        return text_result(f"{action}: {done['item']['id']} ({done['item']['kind']})",
                           is_error=False)

    async def call_tool(self, ctx: Context,
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:  # the SDK reads NaN and huge integers, which the daemon's JSON cannot carry
            check_document(arguments, max_values=MAX_ARGUMENT_VALUES)
            json.dumps(arguments)
        except (UntrustedInputError, ValueError, RecursionError) as exc:
            return text_result(f"{params.name} did not run: its arguments cannot be sent as "
                               f"JSON: {exc}", is_error=True)
        if params.name == INBOX_TOOL and self.agent is None and self.session_id is None:
            try:
                return await self._inbox(arguments)
            except DaemonError as exc:
                return text_result(f"{INBOX_TOOL}: {exc}", is_error=True)
        try:
            result = await self.client.call_tool(params.name, arguments, agent=self.agent,
                                                 session_id=self.session_id,
                                                 traceparent=_traceparent(params))
        except DaemonNotRunningError as exc:
            log.warning("tool call without a daemon", tool=params.name)
            return text_result(str(exc), is_error=True)
        except DaemonError as exc:
            log.warning("tool call failed", tool=params.name, error=str(exc))
            return text_result(f"{params.name} did not run: {exc}", is_error=True)
        if self._listed_without_daemon:
            self._listed_without_daemon = False
            await self._tell_tools_changed(ctx)
        return mcp_result(result)

    @staticmethod
    async def _tell_tools_changed(ctx: Context) -> None:
        try:
            await ctx.session.send_tool_list_changed()
        except MCPError as exc:  # a transport with no channel for it: the client re-lists later
            log.debug("tool list change not sent", reason=exc.message)


def _traceparent(params: types.CallToolRequestParams) -> str | None:
    """The W3C `traceparent` an MCP client sent in the call's `_meta`, passed on to the daemon
    so the call's spans join the client's trace."""
    meta: Mapping[str, Any] = params.meta or {}
    value = meta.get("traceparent")
    return value if isinstance(value, str) and len(value) < 256 else None


def instructions(layout: SquadLayout) -> str:
    return (f"The Squad of {layout.repo}: a team of AI agents with charters in "
            f"{layout.root.name}/. Hand work to an agent with squad_route, record team "
            "decisions with squad_decide and learnings with squad_memory, and see who is "
            "working on what with squad_status.")


def build_server(bridge: DaemonBridge, layout: SquadLayout) -> Server[Any]:
    return Server(SERVER_NAME, version=__version__, title="squadd",
                  instructions=instructions(layout),
                  on_list_tools=bridge.list_tools, on_call_tool=bridge.call_tool)


_LEADING_ID = re.compile(
    r'\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")')
"""The id of a request whose envelope starts the usual way, found without parsing the rest."""


def refusal(line: str, exc: ValidationError) -> types.JSONRPCError | None:
    """The JSON-RPC error that answers a line the SDK could not read: with the request's id
    when plain JSON parsing (or the line's start) gives one, else with none (a parse error);
    None for a notification, which gets no answer."""
    errors = exc.errors()
    reason = str(errors[0]["msg"]) if errors else str(exc)
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        leading = _LEADING_ID.match(line)
        found = json.loads(leading.group(1)) if leading else None
        return types.JSONRPCError(jsonrpc="2.0", id=found, error=types.ErrorData(
            code=types.PARSE_ERROR, message=f"Parse error: {reason}"))
    request_id = data.get("id") if isinstance(data, dict) and "method" in data else None
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    if isinstance(request_id, str) and has_surrogate(request_id):
        request_id = None  # it could not be written back: the answer names no request
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(
        code=types.INVALID_REQUEST, message=f"Invalid request: {reason}"))


class CheckedLines:
    """stdin's lines for the SDK's transport, less those it would drop unanswered: each of
    those gets its `refusal` on the write stream (given once serving starts) instead."""

    def __init__(self, lines: AsyncIterator[str]):
        self._lines = lines
        self._replies: ObjectSendStream[SessionMessage] | None = None
        self._serving = anyio.Event()

    def answer_on(self, replies: ObjectSendStream[SessionMessage]) -> None:
        self._replies = replies
        self._serving.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._checked()

    async def _checked(self) -> AsyncIterator[str]:
        async for line in self._lines:
            try:
                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
            except ValidationError as exc:
                reply = refusal(line, exc)
                log.warning("unreadable MCP message", reason=str(exc.errors()[:1])[:300])
                if reply is not None:
                    await self._serving.wait()
                    assert self._replies is not None
                    await self._replies.send(SessionMessage(reply))
                continue
            yield line


async def _stdin_lines() -> AsyncIterator[str]:
    # A duplicate of fd 0: closing it leaves the process's own stdin alone.
    raw = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    with io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace") as text:
        async for line in anyio.wrap_file(text):
            yield line


async def serve_stdio(layout: SquadLayout, *, agent: str | None = None,
                      session_id: str | None = None) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    async with AsyncDaemonClient(layout) as client:
        bridge = DaemonBridge(client, agent=agent, session_id=session_id)
        server = build_server(bridge, layout)
        options = server.create_initialization_options(NotificationOptions(tools_changed=True))
        log.info("squadd mcp serving on stdio", repo=str(layout.repo), agent=agent or "user")
        lines = CheckedLines(_stdin_lines())
        async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
            lines.answer_on(write_stream)
            await server.run(read_stream, write_stream, options)
