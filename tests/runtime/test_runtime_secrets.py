"""The runtime's secret registry knows the provider's API key from the start: a tool that
prints it (a `.env` file read) returns it redacted, like any declared secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.runtime.runtime import SquadRuntime, provider_key
from squadd.tools.base import ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.invoke import CallOrigin
from tests.tools.conftest import make_squad

KEY = "sk-proj-4fZ9xQ2mW8vB1nC7"


async def test_the_providers_key_is_redacted_from_what_a_tool_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    layout = make_squad(tmp_path / "repo")
    settings = Settings()
    runtime = SquadRuntime.from_settings(layout, settings)
    assert runtime.secrets.snapshot() == {"OPENAI_API_KEY": KEY}
    (layout.repo / ".env").write_text(f"OPENAI_API_KEY={KEY}\n", encoding="utf-8")
    result = await runtime.invoker.invoke(
        ToolSet(workspace_tools(settings)),
        ToolCall(id="c1", name="read", arguments={"path": ".env"}),
        CallOrigin(session_id="s-1", agent="fenster"))
    assert result.ok and KEY not in result.text
    assert "OPENAI_API_KEY=[secret:OPENAI_API_KEY]" in result.text


def test_a_provider_without_a_key_adds_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")
    anthropic = Settings().model_copy(update={"provider": Settings().provider.model_copy(
        update={"kind": "anthropic"})})
    assert provider_key(anthropic) == {}
    replay = Settings().model_copy(update={"provider": Settings().provider.model_copy(
        update={"kind": "replay"})})
    assert provider_key(replay) == {}
