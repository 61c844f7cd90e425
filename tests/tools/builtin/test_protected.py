"""`write` and `edit` never silently create or change a file that squadd, git or a later
session will execute: tool folders of every kind, hook folders, `.gitattributes`, hook settings.
Such a call becomes an approval request naming the file; unanswered or denied, nothing changes."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.config import Settings
from squadd.contracts.events import ApprovalRequested, BaseEvent
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.approvals import ApprovalBroker
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.discovery import tool_dirs
from squadd.tools.invoke import CallOrigin, ToolInvoker
from tests.tools.builtin.conftest import Calls, git

YAML_TOOL = "name: x\ndescription: x\ncommand: touch /tmp/owned\n"

PROTECTED_WRITES = [
    ".cycod/tools/x.yaml", "./.cycod/tools/x.yaml", ".cycod/./tools/../tools/x.yml",
    ".CYCOD/Tools/x.yaml", ".cy\u200bcod/tools/x.yaml", ".squad/tools/x.py",
    ".husky/pre-commit", ".husky/_/husky.sh", ".githooks/pre-commit", ".gitattributes",
    "src/deep/.gitattributes", "src/.GitAttributes", ".claude/settings.json",
    ".claude/settings.local.json", ".squad/hooks.json", "sub/../.cycod/tools/new.yaml",
]


@pytest.fixture
def squad_writes(repo: Path) -> Calls:
    """Tools that may write `.squad/` (so the protection, not the `.squad/` rule, refuses)."""
    settings = Settings().model_copy(update={"workspace_tools": Settings().workspace_tools
                                             .model_copy(update={"allow_squad_writes": True})})
    return Calls(SquadLayout.at(repo / ".squad"), settings)


@pytest.mark.parametrize("path", PROTECTED_WRITES)
async def test_write_to_an_executed_file_asks_and_unanswered_writes_nothing(
        repo: Path, squad_writes: Calls, path: str) -> None:
    result = await squad_writes("write", path=path, content=YAML_TOOL)
    assert not result.ok, result.text
    assert "needs approval" in result.text
    shown = os.path.normpath(path).replace("\u200b", "")
    assert shown.split("/")[-1].casefold() in result.text.casefold()
    assert not (repo / os.path.normpath(path)).exists()


async def test_every_discovered_tool_folder_is_protected_whatever_its_kind(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list comes from discovery itself: an extra folder (relative and absolute), the
    user's, and the CYCOD ones (switched off here) are all protected."""
    home = repo / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    tools = Settings().tools.model_copy(update={"extra_dirs": ["team-tools", str(repo / "abs")],
                                                "cycod_dirs": False,
                                                "cycod_global_dir": str(repo / "etc-cycod")})
    squad_writes = Settings().workspace_tools.model_copy(update={"allow_squad_writes": True})
    calls = Calls(SquadLayout.at(repo / ".squad"),
                  Settings().model_copy(update={"tools": tools,
                                                "workspace_tools": squad_writes}))
    layout = SquadLayout.at(repo / ".squad")
    every = tools.model_copy(update={"cycod_dirs": True})
    folders = tool_dirs(layout, Settings().model_copy(update={"tools": every}))
    assert len(folders) == 7
    for folder in folders:
        target = folder.path / "tool.yaml"
        relative = os.path.relpath(target, repo)
        result = await calls("write", path=relative, content=YAML_TOOL)
        assert not result.ok and "needs approval" in result.text, (folder.source, result.text)
        assert "tool folder" in result.text and folder.source in result.text
        assert not target.exists()
    assert (await calls("write", path="team-tools-not/x.yaml", content="fine")).ok


async def test_a_symlink_into_a_protected_folder_is_caught_both_ways(
        repo: Path, calls: Calls) -> None:
    (repo / ".cycod" / "tools").mkdir(parents=True)
    (repo / "innocent").symlink_to(".cycod/tools")
    result = await calls("write", path="innocent/x.yaml", content=YAML_TOOL)
    assert not result.ok and ".cycod/tools/x.yaml" in result.text
    # The other way: a tool folder is a symlink to an ordinary-looking folder.
    for folder, target in ((repo / ".squad" / "tools", "../lib"),
                           (repo / ".husky", "hooks-lib")):
        (repo / target.removeprefix("../")).mkdir()
        folder.symlink_to(target)
        inside = target.removeprefix("../")
        result = await calls("write", path=f"{inside}/x.py", content="print(1)\n")
        assert not result.ok and "needs approval" in result.text, result.text
        assert not list((repo / inside).iterdir())


async def test_creating_the_folder_first_does_not_open_it(repo: Path, calls: Calls) -> None:
    (repo / ".cycod" / "tools").mkdir(parents=True)
    assert not (await calls("write", path=".cycod/tools/.keep", content="")).ok
    assert not (await calls("write", path=".cycod/tools/x.yaml", content=YAML_TOOL)).ok
    assert list((repo / ".cycod" / "tools").iterdir()) == []
    # Outside the tool folder, the same names are ordinary files.
    assert (await calls("write", path="docs/.cycod-tools.yaml", content="x")).ok
    assert (await calls("write", path="src/tools/x.yaml", content="x")).ok


async def test_edit_of_an_existing_hook_or_configured_hooks_path_asks(
        repo: Path, calls: Calls) -> None:
    git(repo, "init", "-q")
    hooks = repo / "scripts" / "git-hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (repo / ".husky").mkdir()
    (repo / ".husky" / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    git(repo, "config", "core.hooksPath", "scripts/git-hooks")
    for path in ("scripts/git-hooks/pre-commit", ".husky/pre-push"):
        result = await calls("edit", path=path, old="exit 0", new="touch /tmp/owned")
        assert not result.ok and "needs approval" in result.text, result.text
        assert "touch" not in (repo / path).read_text()
    result = await calls("write", path="scripts/git-hooks/post-commit", content="#!/bin/sh\n")
    assert not result.ok and "core.hooksPath" in result.text


async def test_dot_git_in_another_case_is_refused_or_asked(repo: Path, calls: Calls) -> None:
    for path in (".GIT/hooks/pre-commit", ".Git/Hooks/post-commit"):
        result = await calls("write", path=path, content="#!/bin/sh\n")
        assert not result.ok, path
        assert not (repo / path).exists()


class _Answering:
    """A sink that answers each approval request: yes or no, keeping what it was asked."""

    def __init__(self, approve: bool):
        self.approve = approve
        self.requests: list[ApprovalRequested] = []
        self.events: list[BaseEvent] = []
        self.asked = anyio.Event()

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)
        if isinstance(event, ApprovalRequested):
            self.requests.append(event)
            self.asked.set()


async def _through_broker(repo: Path, approve: bool, **arguments: Any
                          ) -> tuple[ToolResult, _Answering]:
    settings = Settings()
    sink = _Answering(approve)
    broker = ApprovalBroker(settings, sink)
    invoker = ToolInvoker(SquadLayout.at(repo / ".squad"), settings, sink, approvals=broker)
    tools = ToolSet(workspace_tools(settings))
    ids = itertools.count(1)
    result: list[ToolResult] = []

    async def call() -> None:
        result.append(await invoker.invoke(
            tools, ToolCall(id=f"c{next(ids)}", name="write", arguments=arguments),
            CallOrigin(session_id="s-1", agent="fenster")))

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        with anyio.fail_after(10):
            await sink.asked.wait()
        broker.resolve(sink.requests[0].approval_id, approve)
    return result[0], sink


@pytest.mark.parametrize("approve", [True, False])
async def test_the_approval_request_names_the_file_and_shows_the_content(
        repo: Path, approve: bool) -> None:
    result, sink = await _through_broker(repo, approve, path=".cycod/tools/x.yaml",
                                         content=YAML_TOOL)
    asked = sink.requests[0]
    assert asked.tool == "write" and ".cycod/tools/x.yaml" in asked.question
    assert asked.arguments["content"] == YAML_TOOL
    assert result.ok is approve
    assert (repo / ".cycod" / "tools" / "x.yaml").exists() is approve


async def test_ordinary_writes_still_need_no_approval(repo: Path, calls: Calls) -> None:
    for path in ("src/app.py", "tools.yaml", "docs/hooks.md", ".github/workflows/ci.yml"):
        assert (await calls("write", path=path, content="x\n")).ok, path
