"""Fixtures for tool tests: a real squad dir in tmp_path with one agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from tests.tools.custom_tools import Recorder


def make_squad(repo: Path, agents: tuple[str, ...] = ("fenster",)) -> SquadLayout:
    root = repo / ".squad"
    (root / "decisions" / "inbox").mkdir(parents=True)
    (root / "decisions.md").write_text("# Decisions\n", encoding="utf-8")
    for agent in agents:
        folder = root / "agents" / agent
        folder.mkdir(parents=True)
        (folder / "charter.md").write_text(
            f"# {agent}\n\n## Identity\n- **Role:** Backend\n\n## Model\nPreferred: auto\n",
            encoding="utf-8",
        )
        (folder / "history.md").write_text("# Project Context\n\n## Learnings\n",
                                           encoding="utf-8")
    return SquadLayout.at(root)


@pytest.fixture
def layout(tmp_path: Path) -> SquadLayout:
    return make_squad(tmp_path / "repo")


@pytest.fixture
def settings() -> Settings:
    return Settings()


@pytest.fixture
def recorder() -> Recorder:
    """An event sink that keeps every event (custom tool tests)."""
    return Recorder()
