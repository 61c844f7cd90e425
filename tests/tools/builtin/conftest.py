"""Fixtures for the workspace tools: a real repository with a squad, a folder outside it that
no call may touch, and `Calls` to run the tools through the real invocation pipeline."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from squadd.config import Settings
from squadd.contracts.events import BaseEvent
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.invoke import CallOrigin, ToolInvoker
from tests.tools.conftest import make_squad


class Calls:
    """Runs workspace tool calls the way a session does, recording their events."""

    def __init__(self, layout: SquadLayout, settings: Settings):
        self.layout = layout
        self.settings = settings
        self.events: list[BaseEvent] = []
        self.tools = ToolSet(workspace_tools(settings))
        # No one can be asked here (fail closed): `bash`, which asks by default, is allowed.
        tools = settings.tools.model_copy(
            update={"approvals": {**settings.tools.approvals, "bash": "allow"}})
        self.invoker = ToolInvoker(layout, settings.model_copy(update={"tools": tools}), self)
        self._ids = itertools.count(1)

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)

    async def __call__(self, name: str, **arguments: Any) -> ToolResult:
        call = ToolCall(id=f"call-{next(self._ids)}", name=name, arguments=arguments)
        return await self.invoker.invoke(self.tools, call,
                                         CallOrigin(session_id="s-1", agent="fenster"))


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and mtime (to prove nothing changed)."""
    seen: dict[str, tuple[bytes, int]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            seen[str(path.relative_to(folder))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return seen


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    make_squad(folder)
    return folder


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("the outside secret\n", encoding="utf-8")
    return folder


@pytest.fixture
def calls(repo: Path) -> Calls:
    return Calls(SquadLayout.at(repo / ".squad"), Settings())


def git(repo: Path, *args: str) -> None:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)
