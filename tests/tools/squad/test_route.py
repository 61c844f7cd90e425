"""squad_route through the real tool pipeline: arguments, answers, session ids and refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from squadd.contracts.messages import ToolCall
from squadd.contracts.routes import MAX_TASK_CHARS, RouteRequest
from squadd.providers.base import Provider
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolResult
from squadd.tools.invoke import CallOrigin
from tests.runtime.scripted import Gauge, make_squad, script, settings, text


async def _route(runtime: SquadRuntime, origin: CallOrigin | None = None,
                 **arguments: Any) -> ToolResult:
    call = ToolCall(id="call_1", name="squad_route", arguments=arguments)
    return await runtime.invoker.invoke(runtime.tools, call,
                                        origin or CallOrigin(session_id="outside", agent="user"))


def _runtime(tmp_path: Path, provider: Provider, **pool: Any) -> SquadRuntime:
    return SquadRuntime(make_squad(tmp_path / "repo"), settings(**pool), provider)


async def test_invalid_arguments_are_a_failure_naming_the_fields(tmp_path: Path) -> None:
    gauge = Gauge(script([text("x")]))
    async with _runtime(tmp_path, gauge) as runtime:
        result = await _route(runtime, targetAgent="fenster", priority="asap")
    assert not result.ok
    assert "task: required, but missing" in result.text and "priority" in result.text
    assert gauge.turns == 0


async def test_wait_for_result_returns_the_agents_answer(tmp_path: Path) -> None:
    async with _runtime(tmp_path, script([text("tests written")])) as runtime:
        result = await _route(runtime, targetAgent="hockney", task="write tests")
    assert result.ok and result.text == "tests written"
    assert result.details["agent"] == "hockney" and result.details["state"] == "idle"
    assert result.details["session_id"]


async def test_no_wait_returns_the_session_id_at_once(tmp_path: Path) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("later")]), hold={"slow work": release})
    async with _runtime(tmp_path, gauge) as runtime:
        result = await _route(runtime, targetAgent="fenster", task="slow work",
                              waitForResult=False)
        assert not runtime.snapshot().sessions[0].answer
        release.set()
        session_id = result.details["session_id"]
        assert result.ok and session_id in result.text
        assert f'squad_status(sessionId="{session_id}")' in result.text
        assert await runtime.settle(timeout_s=30)
        view = (await runtime.status(session_id=session_id)).sessions[0]
    assert view.answer == "later"


async def test_unknown_agent_and_full_pool_are_failures_with_reasons(tmp_path: Path) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("x")]), hold={"hold the slot": release})
    async with _runtime(tmp_path, gauge, max_concurrent=1, max_queued=0) as runtime:
        unknown = await _route(runtime, targetAgent="nobody", task="t")
        await _route(runtime, targetAgent="fenster", task="hold the slot", waitForResult=False)
        full = await _route(runtime, targetAgent="hockney", task="t")
        release.set()
    assert not unknown.ok and 'unknown agent "nobody"' in unknown.text
    assert unknown.details["reason"] == "unknown_agent"
    assert not full.ok and full.details["reason"] == "pool_full"
    assert "1/1 sessions running" in full.text and "0/0 routes queued" in full.text
    assert full.details["pool"]["max_concurrent"] == 1


async def test_the_callers_depth_and_lineage_come_from_the_tool_context(tmp_path: Path) -> None:
    async with _runtime(tmp_path, script([text("x")])) as runtime:
        deep = await _route(runtime, CallOrigin(session_id="s-3", agent="hockney", depth=3,
                                                lineage=("lead", "fenster", "hockney")),
                            targetAgent="lead", task="t")
        fine = await _route(runtime, CallOrigin(session_id="s-1", agent="lead", depth=1,
                                                lineage=("lead",)),
                            targetAgent="fenster", task="t")
    assert not deep.ok and deep.details["reason"] == "cycle"
    assert fine.ok


def test_route_arguments_follow_the_seed(tmp_path: Path) -> None:
    layout: SquadLayout = make_squad(tmp_path / "repo")
    runtime = SquadRuntime(layout, settings(), script([text("x")]))
    tool = runtime.tools.get("squad_route")
    assert tool is not None
    schema = tool.parameters_schema()
    assert set(schema["properties"]) == {
        "targetAgent", "task", "context", "priority", "waitForResult", "model", "sessionId",
        "availableTools", "timeoutSeconds", "isolation", "land"}
    assert schema["required"] == ["task"]
    assert schema["properties"]["waitForResult"]["default"] is True
    assert schema["properties"]["priority"]["enum"] == ["normal", "urgent"]


def test_a_boolean_timeout_and_an_over_long_task_are_refused_before_routing() -> None:
    for timeout in (True, False):
        with pytest.raises(ValidationError, match="not true or false"):
            RouteRequest.model_validate({"task": "t", "timeoutSeconds": timeout})
    assert RouteRequest.model_validate({"task": "t", "timeoutSeconds": 5}).timeout_s == 5
    with pytest.raises(ValidationError, match=f"at most {MAX_TASK_CHARS} characters"):
        RouteRequest.model_validate({"task": "x" * (MAX_TASK_CHARS + 1)})
