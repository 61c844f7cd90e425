"""The hostile-path table: no workspace tool reads or writes anything outside the workspace.

Each row is a path a model might send; each must be refused with a message naming the rule,
and the folder outside the workspace must be exactly as it was (bytes and mtimes).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from squadd.tools.builtin.confine import Parts
from tests.tools.builtin.conftest import Calls, snapshot


def _hostile(repo: Path, outside: Path) -> list[tuple[str, str]]:
    """(path given, the rule its refusal names); the symlinks are made on disk here."""
    (repo / "link-out.txt").symlink_to(outside / "secret.txt")
    (repo / "dir-out").symlink_to(outside)
    (repo / "chain").symlink_to("dir-out")
    return [
        ("../outside/secret.txt", "through '..'"),
        ("src/../../outside/secret.txt", "through '..'"),
        (str(outside / "secret.txt"), "outside the workspace"),
        ("/etc/passwd", "outside the workspace"),
        ("link-out.txt", "through a symlink"),
        ("dir-out/secret.txt", "through a symlink"),
        ("chain/secret.txt", "through a symlink"),
        ("notes\0.txt", "not a path"),
    ]


@pytest.mark.parametrize("tool", ["read", "write", "edit", "grep", "find"])
async def test_hostile_paths_are_refused_and_nothing_outside_changes(
        tool: str, calls: Calls, repo: Path, outside: Path) -> None:
    rows = _hostile(repo, outside)
    before = snapshot(outside)
    for path, rule in rows:
        arguments: dict[str, object] = {"path": path}
        if tool == "write":
            arguments["content"] = "pwned\n"
        elif tool == "edit":
            arguments.update(old="the outside secret", new="pwned")
        elif tool in ("grep", "find"):
            arguments["pattern"] = "secret" if tool == "grep" else "*"
        result = await calls(tool, **arguments)
        assert not result.ok, (tool, path, result.text)
        assert rule in result.text, (tool, path, result.text)
        assert "the outside secret" not in result.text
    assert snapshot(outside) == before


async def test_absolute_path_inside_the_workspace_is_accepted(calls: Calls, repo: Path) -> None:
    (repo / "notes.txt").write_text("inside\n", encoding="utf-8")
    result = await calls("read", path=str(repo / "notes.txt"))
    assert result.ok and result.text == "1\tinside"


async def test_symlink_that_stays_inside_is_followed(calls: Calls, repo: Path) -> None:
    (repo / "lib").mkdir()
    (repo / "lib" / "real.py").write_text("x = 1\n", encoding="utf-8")
    (repo / "alias").symlink_to("lib")
    result = await calls("read", path="alias/real.py")
    assert result.ok and result.details["path"] == "lib/real.py"
    edited = await calls("edit", path="alias/real.py", old="x = 1", new="x = 2")
    assert edited.ok, edited.text
    assert (repo / "lib" / "real.py").read_text(encoding="utf-8") == "x = 2\n"


async def test_symlink_swapped_in_after_the_check_cannot_escape_a_read(
        calls: Calls, repo: Path, outside: Path) -> None:
    (repo / "victim.txt").write_text("harmless\n", encoding="utf-8")

    def swap(parts: Parts) -> None:
        (repo / "victim.txt").unlink()
        (repo / "victim.txt").symlink_to(outside / "secret.txt")

    calls.tools.get("read").on_checked = swap  # type: ignore[union-attr]
    result = await calls("read", path="victim.txt")
    assert not result.ok
    assert "became a symlink while it was being opened" in result.text
    assert "the outside secret" not in result.text


async def test_folder_swapped_for_a_symlink_cannot_redirect_a_write(
        calls: Calls, repo: Path, outside: Path) -> None:
    (repo / "pkg").mkdir()
    before = snapshot(outside)

    def swap(parts: Parts) -> None:
        (repo / "pkg").rename(repo / "pkg-moved")
        (repo / "pkg").symlink_to(outside)

    calls.tools.get("write").on_checked = swap  # type: ignore[union-attr]
    result = await calls("write", path="pkg/secret.txt", content="pwned\n")
    assert not result.ok and "became a symlink" in result.text
    assert snapshot(outside) == before
    assert not (repo / "pkg-moved" / "secret.txt").exists()


async def test_fifo_is_refused_without_blocking(calls: Calls, repo: Path) -> None:
    os.mkfifo(repo / "pipe")
    for tool, extra in (("read", {}), ("write", {"content": "x"}),
                        ("edit", {"old": "a", "new": "b"})):
        result = await calls(tool, path="pipe", **extra)
        assert not result.ok and "is a FIFO" in result.text, (tool, result.text)
    assert stat.S_ISFIFO((repo / "pipe").lstat().st_mode)  # write did not replace it
    found = await calls("grep", pattern=".")
    assert "pipe" not in found.text


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
async def test_device_inside_the_workspace_is_refused(calls: Calls, repo: Path) -> None:
    os.mknod(repo / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # like /dev/zero
    result = await calls("read", path="zero")
    assert not result.ok and "is a device" in result.text


async def test_symlink_to_a_device_is_refused(calls: Calls, repo: Path) -> None:
    (repo / "zero").symlink_to("/dev/zero")
    result = await calls("read", path="zero")
    assert not result.ok and "through a symlink" in result.text


async def test_huge_sparse_file_is_refused_by_size_not_read(calls: Calls, repo: Path) -> None:
    with (repo / "huge.log").open("wb") as handle:
        handle.truncate(1 << 30)  # 1 GB of holes: no real disk
    result = await calls("read", path="huge.log")
    assert not result.ok
    assert "1073741824 bytes, over the limit" in result.text
    assert "workspace_tools.max_read_bytes" in result.text
    edited = await calls("edit", path="huge.log", old="a", new="b")
    assert not edited.ok and "over the limit" in edited.text
    searched = await calls("grep", pattern="x")
    assert searched.ok and "1 files over" in searched.text


async def test_non_utf8_file_is_read_with_a_note_and_not_edited(calls: Calls,
                                                                repo: Path) -> None:
    (repo / "latin.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    result = await calls("read", path="latin.txt")
    assert result.ok
    assert "not valid UTF-8" in result.text and "caf\ufffd au lait" in result.text
    edited = await calls("edit", path="latin.txt", old="au", new="with")
    assert not edited.ok and "not UTF-8 text" in edited.text
    assert (repo / "latin.txt").read_bytes() == "caf\xe9 au lait\n".encode("latin-1")


@pytest.mark.parametrize("path,rule", [
    (".git/config", "inside .git/"),
    ("sub/.git/hooks/pre-commit", "inside .git/"),
    (".squad/run/squadd.sock", "inside .squad/run/"),
    (".squad/decisions.md", "changes only through the squad tools"),
])
async def test_protected_folders_are_off_limits_to_write_and_edit(
        calls: Calls, repo: Path, path: str, rule: str) -> None:
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n", encoding="utf-8")
    before = snapshot(repo)
    written = await calls("write", path=path, content="x")
    edited = await calls("edit", path=path, old="[core]", new="x")
    assert not written.ok and rule in written.text
    assert not edited.ok and rule in edited.text
    assert snapshot(repo) == before


async def test_symlink_into_git_is_off_limits_too(calls: Calls, repo: Path) -> None:
    (repo / ".git").mkdir()
    (repo / "innocent").symlink_to(".git")
    result = await calls("write", path="innocent/config", content="x")
    assert not result.ok and "inside .git/" in result.text
    assert not (repo / ".git" / "config").exists()


async def test_squad_writes_can_be_allowed_but_never_run(repo: Path) -> None:
    settings = Settings.model_validate({"workspace_tools": {"allow_squad_writes": True}})
    allowed = Calls(SquadLayout.at(repo / ".squad"), settings)
    written = await allowed("write", path=".squad/notes.md", content="ok\n")
    assert written.ok and (repo / ".squad" / "notes.md").read_text(encoding="utf-8") == "ok\n"
    refused = await allowed("write", path=".squad/run/x", content="x")
    assert not refused.ok and "inside .squad/run/" in refused.text


async def test_tools_work_in_the_sessions_workspace_not_the_repository(
        calls: Calls, repo: Path, tmp_path: Path) -> None:
    from squadd.contracts.messages import ToolCall
    from squadd.tools.invoke import CallOrigin

    worktree = tmp_path / "worktree"
    worktree.mkdir()
    call = ToolCall(id="w-1", name="write", arguments={"path": "a.txt", "content": "w\n"})
    result = await calls.invoker.invoke(calls.tools, call, CallOrigin(
        session_id="s-2", agent="fenster", workspace_dir=worktree))
    assert result.ok
    assert (worktree / "a.txt").read_text(encoding="utf-8") == "w\n"
    assert not (repo / "a.txt").exists()
    escape = ToolCall(id="w-2", name="read", arguments={"path": str(repo / ".squad" /
                                                                    "decisions.md")})
    refused = await calls.invoker.invoke(calls.tools, escape, CallOrigin(
        session_id="s-2", agent="fenster", workspace_dir=worktree))
    assert not refused.ok and "outside the workspace" in refused.text


async def test_a_workspace_inside_squad_worktrees_may_be_written_by_absolute_path(
        calls: Calls, repo: Path) -> None:
    """Session worktrees live under .squad/worktrees/: the rules apply inside the workspace,
    not to the folders above it."""
    from squadd.contracts.messages import ToolCall
    from squadd.tools.invoke import CallOrigin

    worktree = repo / ".squad" / "worktrees" / "s-3"
    worktree.mkdir(parents=True)
    call = ToolCall(id="a-1", name="write", arguments={"path": str(worktree / "src" / "a.py"),
                                                       "content": "a = 1\n"})
    result = await calls.invoker.invoke(calls.tools, call, CallOrigin(
        session_id="s-3", agent="fenster", workspace_dir=worktree))
    assert result.ok, result.text
    assert (worktree / "src" / "a.py").read_text(encoding="utf-8") == "a = 1\n"
