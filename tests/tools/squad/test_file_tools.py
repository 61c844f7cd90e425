"""squad_decide, squad_memory and squad_skill through the real pipeline and real files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from squadd.config import LimitsSettings, Settings
from squadd.contracts.messages import ToolCall
from squadd.state.history import learnings
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.squad import file_tools


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


async def _run(layout: SquadLayout, name: str, settings: Settings | None = None,
               **arguments: Any) -> ToolResult:
    settings = settings or Settings()
    invoker = ToolInvoker(layout, settings)
    tools = ToolSet(file_tools(layout, settings))
    call = ToolCall(id="call_1", name=name, arguments=arguments)
    return await invoker.invoke(tools, call, CallOrigin(session_id="s-1", agent="fenster"))


async def test_decide_writes_inbox_entry_in_design_format(layout: SquadLayout) -> None:
    result = await _run(layout, "squad_decide", title="Use JWT for auth", body="Because.",
                        agentName="fenster", category="security")
    assert result.ok, result.text
    path = layout.inbox_dir / "fenster-use-jwt-for-auth.md"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("### ") and lines[0].endswith(": Use JWT for auth")
    assert lines[1:5] == ["", "**By:** fenster", "**Category:** security", ""]
    assert lines[5] == "Because."
    assert path.name in result.text


async def test_decide_same_title_twice_never_overwrites(layout: SquadLayout) -> None:
    for body in ("one", "two"):
        assert (await _run(layout, "squad_decide", title="Same", body=body,
                           agentName="fenster")).ok
    names = sorted(p.name for p in layout.inbox_dir.iterdir())
    assert names == ["fenster-same-2.md", "fenster-same.md"]


@pytest.mark.parametrize("arguments, expected", [
    ({"title": "", "body": "b", "agentName": "fenster"}, "- title:"),
    ({"title": "t", "body": "b", "agentName": "fenster", "category": "vibes"}, "- category:"),
    ({"title": "t", "body": "b", "agentName": "../../etc"}, "invalid agent name"),
    ({"title": "t", "body": "b", "agentName": "a\x00b"}, "invalid agent name"),
    ({"title": "t", "body": "b", "agentName": "fenster", "extra": 1}, "- extra:"),
])
async def test_decide_bad_input_fails_and_writes_nothing(
    layout: SquadLayout, arguments: dict[str, Any], expected: str
) -> None:
    before = _files(layout.repo.parent)
    result = await _run(layout, "squad_decide", **arguments)
    assert not result.ok and expected in result.text
    assert _files(layout.repo.parent) == before


async def test_decide_oversized_body_names_the_limit(layout: SquadLayout) -> None:
    settings = Settings(limits=LimitsSettings(max_entry_bytes=1000))
    result = await _run(layout, "squad_decide", settings, title="t", body="x" * 1001,
                        agentName="fenster")
    assert not result.ok and "limit of 1000 bytes" in result.text
    assert not any(layout.inbox_dir.iterdir())


async def test_memory_appends_learning_to_history(layout: SquadLayout) -> None:
    result = await _run(layout, "squad_memory", agentName="fenster",
                        learning="Parser tests live in tests/parser", category="technical")
    assert result.ok, result.text
    items = learnings(layout.history("fenster").read_text(encoding="utf-8"))
    assert len(items) == 1  # no learning yet: Squad's `### YYYY-MM-DD: title` style
    assert re.fullmatch(r"### \d{4}-\d{2}-\d{2}: Parser tests live in tests/parser\n\n"
                        r"Parser tests live in tests/parser", items[0])


async def test_memory_unknown_agent_lists_agents(layout: SquadLayout) -> None:
    result = await _run(layout, "squad_memory", agentName="ghost", learning="x")
    assert not result.ok and "ghost" in result.text and "fenster" in result.text
    assert not (layout.root / "agents" / "ghost").exists()


async def test_memory_traversal_is_refused(layout: SquadLayout) -> None:
    result = await _run(layout, "squad_memory", agentName="../../etc", learning="x")
    assert not result.ok and "invalid agent name" in result.text and "must match" in result.text
    assert not (layout.repo.parent / "etc").exists()


async def test_skill_write_read_list(layout: SquadLayout) -> None:
    written = await _run(layout, "squad_skill", action="write", skillName="git-flow",
                         content="# Git flow\nRebase, then merge.")
    assert written.ok, written.text
    read = await _run(layout, "squad_skill", action="read", skillName="git-flow")
    assert read.ok and "Rebase, then merge." in read.text
    listed = await _run(layout, "squad_skill", action="list")
    assert listed.ok and "git-flow" in listed.text


async def test_skill_reads_github_skills_too(layout: SquadLayout) -> None:
    folder = layout.repo / ".github" / "skills" / "deploy"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("# Deploy\nUse the pipeline.\n", encoding="utf-8")
    read = await _run(layout, "squad_skill", action="read", skillName="deploy")
    assert read.ok and "Use the pipeline." in read.text


@pytest.mark.parametrize("arguments, expected", [
    ({"action": "read"}, "skillName is required"),
    ({"action": "write", "skillName": "x"}, "content is required"),
    ({"action": "read", "skillName": "../../etc"}, "invalid skill name"),
    ({"action": "write", "skillName": "../up", "content": "x"}, "invalid skill name"),
    ({"action": "read", "skillName": "missing"}, "no skill named 'missing'"),
    ({"action": "delete"}, "- action:"),
])
async def test_skill_bad_input_fails_and_writes_nothing(
    layout: SquadLayout, arguments: dict[str, Any], expected: str
) -> None:
    before = _files(layout.repo.parent)
    result = await _run(layout, "squad_skill", **arguments)
    assert not result.ok and expected in result.text
    assert _files(layout.repo.parent) == before
