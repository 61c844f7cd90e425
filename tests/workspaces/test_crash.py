"""A kill -9 at any step of create, commit or land, then start-up reconcile: the target is at
its old tip or the fully landed one, no commit is lost, no worktree is left without a record,
and the session's work can still land."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from squadd.contracts.events import NullSink
from squadd.workspaces import Workspaces
from squadd.workspaces.reconcile import registered_worktrees
from squadd.workspaces.records import KILL_ENV
from tests.workspaces.conftest import git, make_repo, settings_with

KILL_POINTS = [
    "create.before_add", "create.after_add", "create.after_record", "commit.before", "commit.after",
    "land.before_rebase", "land.after_squash", "land.after_rebase", "land.after_check",
    "land.before_advance",
    "land.after_advance", "land.after_record",
    # A spare made ahead, then taken by the session.
    "spare.before_add", "spare.after_add", "spare.after_checkout", "spare.before_move",
    "spare.after_move",
    "spare.after_branch",
]
SESSION = "20260101-000000-0000c0de"
DRIVER = Path(__file__).with_name("crash_driver.py")


def _session_subjects(repo: Path) -> list[str]:
    listed = git(repo, "log", "--all", "--format=%s", "--grep=Squad-Session: " + SESSION)
    return [line for line in listed.splitlines() if line]


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
async def test_kill_at_any_step_leaves_the_target_old_or_new_and_loses_nothing(
        tmp_path: Path, point: str) -> None:
    layout = make_repo(tmp_path / "repo")
    repo = layout.repo
    old = git(repo, "rev-parse", "main")
    env = {**os.environ, KILL_ENV: point, "PYTHONPATH": str(Path.cwd())}
    mode = "spare" if point.startswith("spare.") else ""
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, str(DRIVER), str(layout.root), SESSION, mode], env=env,
            check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    committed_before = _session_subjects(repo)

    settings = settings_with(layout, land_check="test -f added.txt")
    spaces = Workspaces(layout, settings, NullSink())
    await spaces.reconcile()

    tip = git(repo, "rev-parse", "main")
    if tip != old:  # landed: main is the old tip plus exactly the session's commit
        assert git(repo, "rev-parse", f"{tip}~1") == old
        assert (repo / "added.txt").read_text() == "added\n"
    else:
        assert not (repo / "added.txt").exists()
    assert set(committed_before) <= set(_session_subjects(repo))
    records = {r.path: r for r in await spaces.listing()}
    for tree in await registered_worktrees(spaces.git, repo):
        assert str(tree) in records, f"worktree {tree} has no session record"
    for folder in layout.worktrees_dir.glob("*"):
        assert str(folder) in records, f"folder {folder} is left without a record"
    for record in records.values():
        assert record.state not in ("creating", "committing", "landing")
        if record.state == "spare":  # a spare kept is whole: detached at main's old tip
            assert git(Path(record.path), "rev-parse", "HEAD") == old
            assert git(Path(record.path), "status", "--porcelain") == ""
            continue
        gitdir = Path(git(Path(record.path), "rev-parse", "--absolute-git-dir"))
        assert not (gitdir / "rebase-merge").exists()

    # What the session did is not lost: landing it now (again) puts it on main.
    if SESSION in {r.session_id for r in records.values()}:
        result = await spaces.land(SESSION)
        assert result.ok, result.message
        if point.startswith(("create.", "spare.")):  # killed before the session's work
            assert result.reason == "nothing"
            return
        assert (repo / "added.txt").read_text() == "added\n"
        assert "TWO" in (repo / "app.txt").read_text()
    else:
        assert point.startswith(("create.", "spare."))
