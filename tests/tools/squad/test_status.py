"""squad_status through the real tool pipeline: the seed's listing, the pool line, answers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio

from squadd.contracts.messages import ToolCall
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.tools.base import ToolResult
from squadd.tools.invoke import CallOrigin
from tests.runtime.scripted import Gauge, eventually, make_squad, script, settings, text

LINE = re.compile(r"^- \*\*(\w+)\*\* \[(\w+)\] session=(\S+) age=\d+s idle=\d+s tokens=\d+ "
                  r'(parent=\S+ )?task="[^"]*"$')


async def _status(runtime: SquadRuntime, **arguments: Any) -> ToolResult:
    call = ToolCall(id="call_1", name="squad_status", arguments=arguments)
    return await runtime.invoker.invoke(runtime.tools, call,
                                        CallOrigin(session_id="outside", agent="user"))


async def test_lists_sessions_in_the_seed_format_with_the_pool_line(tmp_path: Path) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("done", tokens=(10, 5))]), hold={"running job": release})
    layout = make_squad(tmp_path / "repo")
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        await runtime.route(RouteRequest(target_agent="fenster", task="first job"))
        await runtime.route(RouteRequest(target_agent="hockney", task="running job",
                                         wait_for_result=False))
        await runtime.route(RouteRequest(target_agent="lead", task="queued job",
                                         wait_for_result=False))
        await eventually(lambda: gauge.active)
        listing = await _status(runtime)
        only_lead = await _status(runtime, agentName="lead")
        release.set()
    lines = listing.text.splitlines()
    assert lines[0] == "**Active Sessions (3):**"
    parsed = [LINE.match(line) for line in lines[1:4]]
    assert all(parsed), lines
    assert [(m.group(1), m.group(2)) for m in parsed if m] == [
        ("fenster", "idle"), ("hockney", "active"), ("lead", "queued")]
    assert 'tokens=15 task="first job"' in lines[1]
    assert lines[4] == "Pool: 1/1 running, 1 queued"
    assert only_lead.text.startswith("**Active Sessions (1):**")


async def test_no_sessions_says_so_and_still_shows_the_pool(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    async with SquadRuntime(layout, settings(), script([text("x")])) as runtime:
        result = await _status(runtime)
        for_agent = await _status(runtime, agentName="fenster")
    assert result.ok and result.text == "No active agent sessions.\nPool: 0/8 running, 0 queued"
    assert for_agent.text.startswith('No active sessions for agent "fenster".')


async def test_session_id_gives_the_answer_once_ended(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    release = anyio.Event()
    gauge = Gauge(script([text("the answer")]), hold={"job": release})
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        started = await runtime.route(RouteRequest(target_agent="fenster", task="job",
                                                   wait_for_result=False))
        session_id = started.session_id
        while_running = await _status(runtime, sessionId=session_id)
        release.set()
        assert await runtime.settle(timeout_s=30)
        ended = await _status(runtime, sessionId=session_id)
        unknown = await _status(runtime, sessionId="20260101-000000-00000000")
    assert while_running.ok and "Still working" in while_running.text
    assert while_running.details["ended"] is False
    assert ended.ok and ended.text.splitlines()[1:3] == ["Final answer:", "the answer"]
    assert ended.details["answer"] == "the answer" and ended.details["ended"] is True
    assert not unknown.ok and "no session 20260101-000000-00000000" in unknown.text


async def test_ended_sessions_are_rebuilt_from_their_transcripts(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    async with SquadRuntime(layout, settings(), script([text("from before")])) as runtime:
        result = await runtime.route(RouteRequest(target_agent="hockney", task="old job"))
    async with SquadRuntime(layout, settings(), script([text("x")])) as runtime:
        listed = await _status(runtime, includeDestroyed=True)
        found = await _status(runtime, sessionId=result.session_id)
        relisted = await _status(runtime, includeDestroyed=True)
    assert listed.text.startswith("No active agent sessions.")
    assert found.ok and found.details["state"] == "destroyed"
    assert found.details["answer"] == "from before"
    assert "[destroyed]" in relisted.text and "hockney" in relisted.text
