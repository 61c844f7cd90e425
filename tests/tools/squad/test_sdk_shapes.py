"""The five squad tools accept the shipped Squad SDK's argument shapes as aliases of PRD 2's,
refuse garbage, and show models one shape: PRD 2's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.runtime.runtime import SquadRuntime
from squadd.state.history import learnings
from squadd.state.layout import SquadLayout
from squadd.state.skills import front_matter, list_skills
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.squad import file_tools
from tests.runtime.scripted import Gauge, eventually, make_squad, script, settings, text

ORIGIN = CallOrigin(session_id="s-1", agent="vector")


async def _run(layout: SquadLayout, name: str, **arguments: Any) -> ToolResult:
    settings_ = Settings()
    tools = ToolSet(file_tools(layout, settings_))
    call = ToolCall(id="call_1", name=name, arguments=arguments)
    return await ToolInvoker(layout, settings_).invoke(tools, call, ORIGIN)


async def test_decide_takes_author_summary_and_references(team: SquadLayout) -> None:
    result = await _run(team, "squad_decide", author="VECTOR", summary="Cache the orders list",
                        body="Reads dominate.", references=["ORBIT", "PRD-7"])
    assert result.ok, result.text
    [path] = team.inbox_dir.iterdir()
    assert path.name == "vector-cache-the-orders-list.md"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].endswith(": Cache the orders list")
    assert lines[2:4] == ["**By:** VECTOR", "**Category:** general"]
    assert lines[5:] == ["**References:** ORBIT, PRD-7", "", "Reads dominate."]


async def test_decide_by_line_uses_the_teams_display_name(team: SquadLayout) -> None:
    assert (await _run(team, "squad_decide", title="Trace every request", body="b",
                       agentName="telemetry")).ok
    [path] = team.inbox_dir.iterdir()
    assert path.name.startswith("telemetry-")
    assert "**By:** TELEMETRY\n" in path.read_text(encoding="utf-8")


async def test_memory_takes_agent_section_and_content(team: SquadLayout) -> None:
    result = await _run(team, "squad_memory", agent="Marlow", section="learnings",
                        content="The navbar is a web component.")
    update = await _run(team, "squad_memory", agent="marlow", section="updates",
                        content="ORBIT owns the design review now.")
    assert result.ok and update.ok, (result.text, update.text)
    items = learnings(team.history("marlow").read_text(encoding="utf-8"))
    # Marlow's history keeps learnings as `###` blocks: new ones are written in that style.
    assert sum("The navbar is a web component." in item for item in items) == 1
    assert sum("ORBIT owns the design review now." in item for item in items) == 1


async def test_skill_takes_operation_and_confidence_and_writes_to_github(
        team: SquadLayout) -> None:
    written = await _run(team, "squad_skill", skillName="flag-rollouts", operation="write",
                         content="---\ndescription: Rolling out behind flags.\n---\n# Flags\n",
                         confidence="medium")
    assert written.ok, written.text
    path = team.repo / ".github" / "skills" / "flag-rollouts" / "SKILL.md"
    data, body = front_matter(path.read_text(encoding="utf-8"))
    assert data == {"description": "Rolling out behind flags.", "confidence": "medium"}
    assert body == "# Flags\n"
    read = await _run(team, "squad_skill", skillName="api-errors", operation="read")
    assert read.ok and "# API errors" in read.text and "Old API" not in read.text
    info = {s.name: s for s in list_skills(team)}["flag-rollouts"]
    assert (info.source, info.summary) == ("github", "Rolling out behind flags.")


@pytest.mark.parametrize("name, arguments, expected", [
    ("squad_decide", {"author": "vector", "agentName": "vector", "summary": "s", "body": "b"},
     "not both"),
    ("squad_decide", {"author": "vector", "summary": "s", "body": "b", "references": "x"},
     "references"),
    ("squad_decide", {"author": "../../etc", "summary": "s", "body": "b"},
     "invalid agent name"),
    ("squad_memory", {"agent": "vector", "content": "c", "section": "diary"}, "section"),
    ("squad_memory", {"agent": "vector", "content": "c", "learning": "l"}, "not both"),
    ("squad_memory", {"agent": "vector", "content": "c", "mood": "calm"}, "mood"),
    ("squad_skill", {"skillName": "x", "operation": "delete"}, "action"),
    ("squad_skill", {"skillName": "x", "operation": "write", "content": "c",
                     "confidence": "total"}, "confidence"),
    ("squad_skill", {"skillName": "x", "operation": "read", "action": "read"}, "not both"),
])
async def test_sdk_shaped_garbage_is_refused_and_nothing_written(
        team: SquadLayout, name: str, arguments: dict[str, Any], expected: str) -> None:
    before = sorted(p for p in team.repo.rglob("*") if p.is_file() and "run" not in p.parts)
    result = await _run(team, name, **arguments)
    assert not result.ok and expected in result.text, result.text
    after = sorted(p for p in team.repo.rglob("*") if p.is_file() and "run" not in p.parts)
    assert after == before


def test_models_see_one_shape_prd_2s() -> None:
    layout = SquadLayout.at(Path("/tmp/squad-schema-test/.squad"))
    schemas = {tool.name: tool.parameters_schema() for tool in file_tools(layout, Settings())}
    assert set(schemas["squad_decide"]["properties"]) == {"title", "body", "agentName",
                                                          "category"}
    assert set(schemas["squad_memory"]["properties"]) == {"agentName", "learning", "category"}
    assert set(schemas["squad_skill"]["properties"]) == {"action", "skillName", "content"}
    assert all(schema["additionalProperties"] is False for schema in schemas.values())


async def _tool(runtime: SquadRuntime, name: str, **arguments: Any) -> ToolResult:
    call = ToolCall(id="call_1", name=name, arguments=arguments)
    return await runtime.invoker.invoke(runtime.tools, call,
                                        CallOrigin(session_id="outside", agent="user"))


async def test_route_maps_sdk_priorities_and_status_takes_status_and_verbose(
        tmp_path: Path) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("first done"), text("second done")]),
                  hold={"held job": release})
    async with SquadRuntime(make_squad(tmp_path / "repo"), settings(), gauge) as runtime:
        done = await _tool(runtime, "squad_route", targetAgent="fenster", task="quick job",
                           priority="low")
        held = await _tool(runtime, "squad_route", targetAgent="hockney", task="held job",
                           priority="critical", waitForResult=False)
        await eventually(lambda: gauge.active)
        views = {v.agent: v for v in runtime.snapshot().sessions}
        ended = await _tool(runtime, "squad_status", status="completed", verbose=True)
        live = await _tool(runtime, "squad_status", status="active")
        refused = await _tool(runtime, "squad_status", status="sleepy")
        schema = runtime.tools.get("squad_status")
        route_schema = runtime.tools.get("squad_route")
        release.set()
    assert done.ok and held.ok, (done.text, held.text)
    assert (views["fenster"].priority, views["hockney"].priority) == ("normal", "urgent")
    assert ended.ok and ended.details["sessions"] == 1
    assert "**fenster** [idle]" in ended.text and "Final answer:\nfirst done" in ended.text
    assert live.ok and live.details["sessions"] == 1 and "**hockney** [active]" in live.text
    assert not refused.ok and "unknown status 'sleepy'" in refused.text
    assert schema is not None and route_schema is not None
    assert set(schema.parameters_schema()["properties"]) == {"agentName", "includeDestroyed",
                                                             "sessionId"}
    priority = route_schema.parameters_schema()["properties"]["priority"]
    assert priority["enum"] == ["normal", "urgent"]
