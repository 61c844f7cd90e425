"""`squadd mcp` as an MCP client sees it: the SDK's own stdio client starts `python -m squadd mcp`
in a repo whose daemon (a real `squadd serve` process) talks to the test model server."""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from squadd.state.layout import SquadLayout
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, clean_env, make_repo
from tests.support.model_servers import OpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.daemon(agents=("lead", "backend"), shared=True)]

CALL_TIMEOUT_S = 30.0


class Notifications:
    """The notifications a client session received, and an event set at the first one."""

    def __init__(self) -> None:
        self.received: list[types.ServerNotification] = []
        self.arrived = anyio.Event()

    def add(self, notification: types.ServerNotification) -> None:
        self.received.append(notification)
        self.arrived.set()


@asynccontextmanager
async def mcp_session(layout: SquadLayout, *args: str,
                      notifications: Notifications | None = None,
                      env: dict[str, str] | None = None,
                      ) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with `python -m squadd mcp ARGS` run in the repo."""
    async def on_message(message: types.ServerNotification | Exception) -> None:
        if notifications is not None and not isinstance(message, Exception):
            notifications.add(message)

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "squadd", "mcp", *args], cwd=layout.repo,
        env=clean_env(XDG_CONFIG_HOME=str(layout.repo.parent / "xdg-config"), **(env or {})))
    with (layout.repo.parent / "mcp-stderr.log").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S,
                              message_handler=on_message) as session:
            with anyio.fail_after(CALL_TIMEOUT_S):
                await session.initialize()
            yield session


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content
                     if isinstance(block, types.TextContent))


async def call(session: ClientSession, name: str, arguments: dict[str, Any]
               ) -> types.CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT_S):
        return await session.call_tool(name, arguments)


async def test_lists_every_daemon_tool_with_the_same_schema(daemon: DaemonProcess) -> None:
    expected = {tool["name"]: tool for tool in daemon.client.tools()}
    async with mcp_session(daemon.layout) as session:
        listed = (await session.list_tools()).tools
    assert {tool.name for tool in listed} == set(expected) | {"squad_inbox"}  # a person's
    assert {"squad_route", "squad_decide", "squad_memory", "squad_status",
            "squad_skill"} <= set(expected)
    for tool in listed:
        if tool.name == "squad_inbox":  # the client's own: the inbox, not a daemon tool
            continue
        assert tool.input_schema == expected[tool.name]["parameters"]
        assert tool.description == expected[tool.name]["description"]


def _inbox_of(daemon: DaemonProcess, session_id: str) -> list[dict[str, Any]]:
    """The open inbox items once one is the session's: read now, then again at each of the
    session's `inbox.added` events (followed on the daemon's event stream)."""
    items: list[dict[str, Any]] = []
    with contextlib.suppress(TimeoutError), daemon.follow_events(
            CALL_TIMEOUT_S, types=["inbox.added"], session_id=session_id) as added:
        for _ in itertools.chain([None], added):
            items = daemon.client.inbox()["items"]
            if any(item["session_id"] == session_id for item in items):
                return [item for item in items if item["session_id"] == session_id]
    raise TimeoutError(f"no inbox item for {session_id}: {items}")


async def test_an_agent_question_is_answered_through_the_inbox_tool(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.tool_call_turn(("squad_ask", {"question": "Tabs?"})),
                        OpenAIServer.text_turn("spaces it is"))
    session_id = daemon.client.route("format the code", "backend", wait=False)["session_id"]
    items = await anyio.to_thread.run_sync(_inbox_of, daemon, session_id)
    async with mcp_session(daemon.layout) as session:
        listed = text_of(await call(session, "squad_inbox", {}))
        assert items[0]["id"] in listed and "Tabs?" in listed
        done = await call(session, "squad_inbox", {"action": "answer", "id": items[0]["id"],
                                                   "answer": "spaces"})
        assert not done.is_error, text_of(done)
        async with mcp_session(daemon.layout, "--session", session_id) as own:
            assert "squad_inbox" not in {t.name for t in (await own.list_tools()).tools}
    view = await anyio.to_thread.run_sync(daemon.wait_for_state, session_id, {"idle"})
    assert view["answer"] == "spaces it is"


async def test_workspace_tools_are_offered_and_run_over_mcp(daemon: DaemonProcess) -> None:
    (daemon.layout.repo / "notes.txt").write_text("alpha\n", encoding="utf-8")
    async with mcp_session(daemon.layout) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        edited = await call(session, "edit", {"path": "notes.txt", "old": "alpha",
                                              "new": "beta"})
        escaped = await call(session, "read", {"path": "../outside.txt"})
    assert {"read", "write", "edit", "find", "grep", "bash"} <= listed
    assert not edited.is_error, text_of(edited)
    assert (daemon.layout.repo / "notes.txt").read_text(encoding="utf-8") == "beta\n"
    assert escaped.is_error and "leads out of the workspace" in text_of(escaped)


async def test_squad_decide_writes_the_inbox_file(daemon: DaemonProcess) -> None:
    async with mcp_session(daemon.layout) as session:
        result = await call(session, "squad_decide", {
            "title": "Use MCP for the editor integration", "agentName": "backend",
            "body": "Every client gets the same tools.", "category": "architecture"})
    assert not result.is_error, text_of(result)
    inbox = daemon.layout.inbox_dir / "backend-use-mcp-for-the-editor-integration.md"
    # The daemon's Scribe may already have merged it: then it is in decisions.md.
    merged = "Use MCP for the editor integration" in daemon.layout.decisions_md.read_text()
    assert inbox.is_file() or merged
    assert inbox.name in text_of(result)


async def test_a_squad_sdk_shaped_call_is_accepted(daemon: DaemonProcess) -> None:
    async with mcp_session(daemon.layout) as session:
        result = await call(session, "squad_memory", {
            "agent": "backend", "section": "learnings",
            "content": "The editor talks to squadd over MCP."})
    assert not result.is_error, text_of(result)
    history = daemon.layout.history("backend").read_text(encoding="utf-8")
    assert "The editor talks to squadd over MCP." in history


async def test_squad_route_runs_an_agent_on_the_model_server(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.text_turn("lead here: the plan is ready"))
    asked_before = len(model_server.requests)
    async with mcp_session(daemon.layout) as session:
        result = await call(session, "squad_route", {
            "targetAgent": "lead", "task": "Plan the MCP work", "waitForResult": True})
        status = await call(session, "squad_status", {"agentName": "lead"})
    assert not result.is_error, text_of(result)
    assert "lead here: the plan is ready" in text_of(result)
    assert len(model_server.requests) == asked_before + 1
    sent = model_server.requests[-1].body["messages"]
    assert sent[-1]["role"] == "user" and "Plan the MCP work" in sent[-1]["content"]
    assert not status.is_error, text_of(status)
    assert "**lead**" in text_of(status) and "Plan the MCP work" in text_of(status)


async def test_a_failure_comes_back_as_an_error_result(daemon: DaemonProcess) -> None:
    async with mcp_session(daemon.layout) as session:
        empty_title = await call(session, "squad_decide", {
            "title": "", "agentName": "backend", "body": "no title"})
        unknown = await call(session, "squad_nonsense", {})
    assert empty_title.is_error
    assert "title" in text_of(empty_title)
    assert unknown.is_error
    assert "squad_nonsense" in text_of(unknown) and "squad_decide" in text_of(unknown)


async def test_agent_option_makes_the_calls_as_that_agent(daemon: DaemonProcess) -> None:
    async with mcp_session(daemon.layout, "--agent", "backend") as session:
        result = await call(session, "squad_status", {})
    assert not result.is_error, text_of(result)
    recent = list(daemon.client.events(types=["tool.completed"], recent=20, follow=False))
    status_calls = [event for event in recent if event.get("tool") == "squad_status"]
    assert status_calls and status_calls[-1]["agent"] == "backend"


async def test_a_command_provider_session_passes_its_agent_through_the_environment(
        daemon: DaemonProcess) -> None:
    async with mcp_session(daemon.layout, env={"SQUADD_AGENT": "lead"}) as session:
        result = await call(session, "squad_status", {})
    assert not result.is_error, text_of(result)
    recent = list(daemon.client.events(types=["tool.completed"], recent=20, follow=False))
    status_calls = [event for event in recent if event.get("tool") == "squad_status"]
    assert status_calls and status_calls[-1]["agent"] == "lead"


async def test_without_a_daemon_calls_fail_naming_squadd_serve(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo", ("lead",), FAST_CONFIG)
    async with mcp_session(layout) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        result = await call(session, "squad_decide", {
            "title": "t", "agentName": "lead", "body": "b"})
    assert listed == {"squad_route", "squad_decide", "squad_memory", "squad_status",
                      "squad_skill", "squad_ask", "squad_inbox",
                      "read", "write", "edit", "find", "grep", "bash"}
    assert result.is_error
    assert "no squadd daemon is running" in text_of(result)
    assert "squadd serve" in text_of(result)
    assert not any(layout.inbox_dir.glob("*.md"))


async def test_tool_list_changes_once_the_daemon_answers(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        process = DaemonProcess.in_new_repo(tmp_path, server.url, config=FAST_CONFIG)
        notifications = Notifications()
        try:
            async with mcp_session(process.layout, notifications=notifications) as session:
                await session.list_tools()  # no daemon yet: the squad tools alone
                await anyio.to_thread.run_sync(process.start)
                result = await call(session, "squad_status", {})
                with anyio.fail_after(30):
                    await notifications.arrived.wait()
        finally:
            process.close()
    assert not result.is_error, text_of(result)
    assert any(isinstance(n, types.ToolListChangedNotification)
               for n in notifications.received)


def _unreadable(line: str) -> types.JSONRPCError | None:
    from pydantic import ValidationError

    from squadd.mcp_server import refusal

    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        return refusal(line, exc)
    raise AssertionError(f"the SDK read {line[:60]!r}")


def test_a_request_the_sdk_cannot_read_gets_an_error_with_its_id() -> None:
    nested = ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x", '
              '"arguments": ' + "[" * 300 + "]" * 300 + "}}")
    surrogate = '{"jsonrpc": "2.0", "id": "a", "method": "tools/call", "params": {"x": "\\ud800"}}'
    for line, request_id in ((nested, 7), (surrogate, "a")):
        reply = _unreadable(line)
        assert reply is not None and reply.id == request_id
        assert reply.error.code == types.INVALID_REQUEST and "Invalid JSON" in reply.error.message


def test_a_line_that_is_not_json_gets_a_parse_error_with_the_id_it_starts_with() -> None:
    deep = '{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": ' + "[" * 100_000
    reply = _unreadable(deep)
    assert reply is not None and reply.id == 12 and reply.error.code == types.PARSE_ERROR
    garbage = _unreadable("\ufffd\ufffd{")
    assert garbage is not None and garbage.id is None
    assert _unreadable('{"jsonrpc": "2.0", "method": "x", "params": "\\ud800"}') is None
    unwritable = _unreadable('{"jsonrpc": "2.0", "id": "\\ud800", "method": "x"}')
    assert unwritable is not None and unwritable.id is None
    assert unwritable.model_dump_json()  # the answer itself can be sent


async def test_nan_or_a_huge_integer_in_arguments_is_an_error_result(tmp_path: Path) -> None:
    from squadd.daemon.client import AsyncDaemonClient
    from squadd.mcp_server import DaemonBridge

    layout = make_repo(tmp_path / "repo", ("lead",), FAST_CONFIG)
    async with AsyncDaemonClient(layout) as client:
        bridge = DaemonBridge(client)
        for arguments in ({"t": float("nan")}, {"t": [float("inf")]}, {"t": 7 * 10**5000}):
            params = types.CallToolRequestParams(name="squad_status", arguments=arguments)
            result = await bridge.call_tool(None, params)  # type: ignore[arg-type]
            assert result.is_error and "cannot be sent as JSON" in text_of(result)


def test_a_result_with_images_keeps_them_as_image_content() -> None:
    from squadd.mcp_server import mcp_result

    result = mcp_result({"result_type": "success", "text": "see",
                         "images": [{"data": "iVBORw0K", "mime_type": "image/png"}]})
    assert [c.type for c in result.content] == ["text", "image"]
    assert result.content[1].data == "iVBORw0K"  # type: ignore[union-attr]
    assert result.content[1].mime_type == "image/png"  # type: ignore[union-attr]
    assert not result.is_error
