"""A charter's `## Tools` and a session's `availableTools` hold for every way in: MCP as an
agent (`SQUADD_AGENT`) and from a session (`SQUADD_SESSION_ID`). A real `squadd serve`, a real
`squadd mcp` under the SDK's stdio client. The daemon's tool API holds callers to the same rules
in process: tests/daemon/test_tool_api.py."""

from __future__ import annotations

import pytest

from squadd.state.layout import SquadLayout
from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer
from tests.test_mcp import call, mcp_session, text_of

TESTER_TOOLS = "\n## Tools\n- squad_status\n- squad_m*\n"


def _tester_tools(layout: SquadLayout) -> None:
    """lead (no `## Tools`) and tester (squad_status and squad_m* only)."""
    charter = layout.charter("tester")
    charter.write_text(charter.read_text(encoding="utf-8") + TESTER_TOOLS, encoding="utf-8")


pytestmark = [pytest.mark.slow, pytest.mark.daemon(
    agents=("lead", "tester"), prepare=_tester_tools, shared=True)]


DECIDE = {"title": "Sneak a decision in", "agentName": "tester", "body": "not allowed"}


@pytest.mark.parametrize("how", ["env", "flag"])
async def test_an_agent_over_mcp_gets_only_its_charters_tools(
        daemon: DaemonProcess, how: str) -> None:
    args, env = (("--agent", "tester"), None) if how == "flag" else ((), {"SQUADD_AGENT":
                                                                         "tester"})
    async with mcp_session(daemon.layout, *args, env=env) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        decide = await call(session, "squad_decide", DECIDE)
        skill = await call(session, "squad_skill", {"name": "x", "content": "y"})
        status = await call(session, "squad_status", {})
    assert listed == {"squad_status", "squad_memory"}
    for refused in (decide, skill):
        assert refused.is_error
        assert "tester's charter allows only squad_status, squad_m*" in text_of(refused)
    assert not status.is_error, text_of(status)
    assert not any(daemon.layout.inbox_dir.glob("tester-sneak*"))


async def test_calls_from_a_session_keep_to_its_available_tools_and_identity(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.text_turn("ready"))
    started = daemon.client.route("Get ready", "lead", available_tools=["squad_status",
                                                                        "squad_route"])
    assert started["ok"], started
    session_id = started["session_id"]
    env = {"SQUADD_AGENT": "lead", "SQUADD_SESSION_ID": session_id}
    async with mcp_session(daemon.layout, env=env) as session:
        listed = {tool.name for tool in (await session.list_tools()).tools}
        decide = await call(session, "squad_decide", dict(DECIDE, agentName="lead"))
        status = await call(session, "squad_status", {})
        # A route from the session is the session's: routing to its own agent is a cycle.
        cycle = await call(session, "squad_route", {"targetAgent": "lead", "task": "again"})
    assert listed == {"squad_status", "squad_route"}
    assert decide.is_error and "availableTools" in text_of(decide)
    assert not status.is_error
    assert cycle.is_error and "cycle" in text_of(cycle)
    # The session's agent is who calls from it; another agent naming it is refused.
    async with mcp_session(daemon.layout, env={"SQUADD_AGENT": "tester",
                                               "SQUADD_SESSION_ID": session_id}) as session:
        other = await call(session, "squad_status", {})
    assert other.is_error and f"session {session_id} belongs to lead" in text_of(other)
    # And a later task of the same session keeps to the same tools.
    model_server.script(OpenAIServer.text_turn("still ready"))
    again = daemon.client.route("Once more", session_id=session_id)
    assert again["ok"], again
    sent = model_server.requests[-1].body
    assert {tool["function"]["name"] for tool in sent["tools"]} == {"squad_status",
                                                                     "squad_route"}
