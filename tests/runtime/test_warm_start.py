"""A session whose files are all cached and unchanged starts on the event loop: its charter,
prompt files, skills and custom tools cost a `stat` each, with no file read and no
worker-thread trip. An edited file sends the start back to a thread, and the edit is seen."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript

GREET_TOOL = """\
description: Says hello
tags: [read]
bash: echo hello
"""
WAVE_TOOL = """\
description: Waves
tags: [read]
bash: echo wave
"""
SKILL = "---\nname: {name}\ndescription: {description}\n---\n\n# {name}\n"


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The qualified name of each function sent to a worker thread, in order."""
    sent: list[str] = []
    real = anyio.to_thread.run_sync

    async def counting(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        sent.append(getattr(func, "__qualname__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counting)
    return sent


def _settings(tmp_path: Path) -> Settings:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"default": [{"text": "done"}]}), encoding="utf-8")
    return Settings.model_validate({"provider": {"kind": "replay",
                                                 "replay_file": str(replay)}})


def _squad_with_tool_and_skill(layout: SquadLayout) -> None:
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "greet.yaml").write_text(GREET_TOOL, encoding="utf-8")
    skill = layout.root / "skills" / "testing"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL.format(name="testing", description="How we test"),
                                    encoding="utf-8")


def _first_records(layout: SquadLayout, session_id: str | None) -> tuple[str, list[str]]:
    """A session's system prompt and the tools its meta names."""
    assert session_id is not None
    transcript = read_transcript(layout.transcript(session_id))
    [system] = [m["content"] for m in transcript.messages if m["role"] == "system"]
    return system, list(transcript.meta["tools"])


async def _route(runtime: SquadRuntime, trips: list[str], task: str,
                 before: Callable[[], Awaitable[None]] | None = None,
                 ) -> tuple[str | None, list[str]]:
    """Route `task` to fenster; its session id and the trips it made."""
    if before is not None:
        await before()
    trips.clear()
    result = await runtime.route(RouteRequest(target_agent="fenster", task=task))
    assert result.ok, result.message
    return result.session_id, list(trips)


START_TRIPS = {"CharterCache.get", "_open_read"}


async def test_a_warm_start_reads_nothing_in_a_thread(layout: SquadLayout,
                                                      tmp_path: Path, trips: list[str]) -> None:
    _squad_with_tool_and_skill(layout)
    async with SquadRuntime.from_settings(layout, _settings(tmp_path)) as runtime:
        cold_id, cold = await _route(runtime, trips, "first")
        warm_id, warm = await _route(runtime, trips, "second")
    # The first start loaded the charter and the prompt's files in threads; the second
    # answered both from the caches, on the loop.
    assert set(cold) >= START_TRIPS
    assert not START_TRIPS & set(warm), warm
    cold_prompt, cold_tools = _first_records(layout, cold_id)
    warm_prompt, warm_tools = _first_records(layout, warm_id)
    assert warm_prompt == cold_prompt
    assert "- testing: How we test" in warm_prompt
    assert "greet" in warm_tools and warm_tools == cold_tools


@pytest.mark.parametrize("edit", ["charter", "history", "decisions", "skill", "tool"])
async def test_an_edited_file_is_read_in_a_thread_and_seen(
        layout: SquadLayout, tmp_path: Path, trips: list[str], edit: str) -> None:
    _squad_with_tool_and_skill(layout)

    async def change() -> None:
        if edit == "charter":
            path = layout.charter("fenster")
            path.write_text(path.read_text(encoding="utf-8") + "\nAlways say MARKER.\n",
                            encoding="utf-8")
        elif edit == "history":
            path = layout.history("fenster")
            path.write_text(path.read_text(encoding="utf-8") + "\n- MARKER learned\n",
                            encoding="utf-8")
        elif edit == "decisions":
            layout.decisions_md.write_text(
                layout.decisions_md.read_text(encoding="utf-8")
                + "\n### 2026-11-26: MARKER\n**By:** fenster\n\nWe chose it.\n",
                encoding="utf-8")
        elif edit == "skill":
            (layout.root / "skills" / "testing" / "SKILL.md").write_text(
                SKILL.format(name="testing", description="MARKER"), encoding="utf-8")
        else:
            (layout.tools_dir / "wave.yaml").write_text(WAVE_TOOL, encoding="utf-8")

    async with SquadRuntime.from_settings(layout, _settings(tmp_path)) as runtime:
        await _route(runtime, trips, "first")
        await _route(runtime, trips, "warm")
        edited_id, edited = await _route(runtime, trips, "after the edit", change)
    prompt, tools = _first_records(layout, edited_id)
    assert "_open_read" in edited
    if edit == "tool":
        assert "wave" in tools and "greet" in tools
    else:
        assert "MARKER" in prompt



async def test_a_charter_swapped_for_a_link_out_of_the_repository_is_not_served_from_the_cache(
        layout: SquadLayout, tmp_path: Path, trips: list[str]) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("# fenster\n\n## Identity\n- **Role:** OUTSIDE SECRET\n", encoding="utf-8")
    async with SquadRuntime.from_settings(layout, _settings(tmp_path)) as runtime:
        await _route(runtime, trips, "first")
        await _route(runtime, trips, "warm")
        charter = layout.charter("fenster")
        charter.unlink()
        charter.symlink_to(outside)
        trips.clear()
        result = await runtime.route(RouteRequest(target_agent="fenster", task="after"))
    # The link's target has another stat signature: the charter was looked at in a thread,
    # where the layout's check refuses a charter leading outside the repository.
    assert "CharterCache.get" in trips
    assert not result.ok and result.reason == "unknown_agent"
    assert "not a regular file inside the repository" in result.message
    assert "OUTSIDE SECRET" not in result.message
