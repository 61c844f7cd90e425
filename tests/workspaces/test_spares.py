"""Spare worktrees: made ahead, detached at the target's tip, taken by a new session, counted in
`max_worktrees`, kept or dropped at start-up, and removed by prune."""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.contracts.events import NullSink
from squadd.contracts.workspaces import WorkspaceView
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces, records
from squadd.workspaces import spares as spares_module
from squadd.workspaces.git import Ran
from squadd.workspaces.spares import SPARE_PREFIX, spare_id
from tests.workspaces.conftest import git, settings_with

SESSION = "20260101-000000-5a5e0001"


def _admin_name(tree: Path) -> str:
    """The name of the worktree's folder under the repository's .git/worktrees/ (fixed when
    git added it, kept through a move)."""
    return Path(git(tree, "rev-parse", "--absolute-git-dir")).name


async def _spares(spaces: Workspaces) -> list[str]:
    return [r.session_id for r in await spaces.listing() if r.state == "spare"]


async def test_a_session_takes_the_ready_spare_and_works_on_its_own_branch(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    assert await spaces.refill_spares() == 1
    [spare] = await spaces.listing()
    assert spare.state == "spare" and spare.session_id.startswith(SPARE_PREFIX)
    assert spare.branch == "" and spare.agent == ""
    main_tip = git(squad_repo.repo, "rev-parse", "main")
    assert git(Path(spare.path), "rev-parse", "HEAD") == main_tip
    assert git(Path(spare.path), "status", "--porcelain") == ""
    admin = _admin_name(Path(spare.path))

    record = await spaces.open(SESSION, "lead")

    assert record is not None and record.state == "active"
    tree = Path(record.path)
    assert tree == squad_repo.worktree(SESSION)
    assert _admin_name(tree) == admin  # the spare's worktree, moved, not a new checkout
    assert not Path(spare.path).exists()
    assert git(tree, "symbolic-ref", "HEAD") == f"refs/heads/{record.branch}"
    assert git(tree, "rev-parse", "HEAD") == main_tip
    assert [r.session_id for r in await spaces.listing()] == [SESSION]
    (tree / "new.txt").write_text("new\n")
    await spaces.close(record, title="work in a taken spare")
    landed = await spaces.land(SESSION)
    assert landed.ok, landed.message
    assert (squad_repo.repo / "new.txt").read_text() == "new\n"


async def test_a_spare_behind_the_target_is_brought_to_the_targets_tip(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    assert await spaces.refill_spares() == 1
    (squad_repo.repo / "app.txt").write_text("moved on\n")
    git(squad_repo.repo, "commit", "--quiet", "-am", "main moves after the spare was made")
    record = await spaces.open(SESSION, "lead")
    assert record is not None
    tree = Path(record.path)
    assert record.base_commit == git(squad_repo.repo, "rev-parse", "main")
    assert git(tree, "rev-parse", "HEAD") == record.base_commit
    assert (tree / "app.txt").read_text() == "moved on\n"
    assert git(tree, "status", "--porcelain") == ""


async def test_spares_count_in_max_worktrees_and_never_take_a_sessions_place(
        squad_repo: SquadLayout) -> None:
    spaces = Workspaces(squad_repo, settings_with(squad_repo, max_worktrees=2, spares=1),
                        NullSink())
    assert await spaces.refill_spares() == 1
    first = await spaces.open("20260101-000000-00000a01", "lead")  # takes the spare
    assert first is not None
    assert await spaces.refill_spares() == 1  # one session + one spare = 2
    second = await spaces.open("20260101-000000-00000a02", "lead")  # takes it too
    assert second is not None
    assert await spaces.refill_spares() == 0  # no room left for a spare
    assert len(git(squad_repo.repo, "worktree", "list").splitlines()) == 3  # main + 2


async def test_no_spare_is_made_when_spares_is_0(squad_repo: SquadLayout) -> None:
    spaces = Workspaces(squad_repo, settings_with(squad_repo, spares=0), NullSink())
    assert await spaces.refill_spares() == 0
    assert await spaces.listing() == []
    with anyio.fail_after(5):  # the background maker ends at once: nothing to keep
        await spaces.keep_spares()


async def test_an_unusable_spare_is_removed_and_the_session_gets_a_new_worktree(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    assert await spaces.refill_spares() == 1
    [spare] = await spaces.listing()
    # Its administrative folder gone: git no longer knows the spare, so it cannot be moved.
    shutil.rmtree(squad_repo.repo / ".git" / "worktrees" / _admin_name(Path(spare.path)))
    record = await spaces.open(SESSION, "lead")
    assert record is not None and record.state == "active"
    assert git(Path(record.path), "symbolic-ref", "HEAD") == f"refs/heads/{record.branch}"
    assert [r.session_id for r in await spaces.listing()] == [SESSION]
    assert not Path(spare.path).exists()


async def test_start_up_keeps_a_ready_spare_and_drops_one_whose_folder_is_gone(
        squad_repo: SquadLayout) -> None:
    spaces = Workspaces(squad_repo, settings_with(squad_repo, spares=2), NullSink())
    assert await spaces.refill_spares() == 2
    gone, kept = await spaces.listing()
    shutil.rmtree(gone.path)
    notes = await spaces.reconcile()
    assert any(gone.session_id in note for note in notes)
    assert not any("orphan" in note for note in notes)
    assert await _spares(spaces) == [kept.session_id]
    assert gone.path not in git(squad_repo.repo, "worktree", "list")


async def test_prune_removes_the_spares(squad_repo: SquadLayout, spaces: Workspaces) -> None:
    assert await spaces.refill_spares() == 1
    [spare] = await spaces.listing()
    done = await spaces.prune()
    assert done == [f"{spare.session_id} (spare): removed"]
    assert await spaces.listing() == []
    assert not Path(spare.path).exists()
    assert spare.path not in git(squad_repo.repo, "worktree", "list")


async def test_prune_leaves_a_spare_still_being_made(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    checking_out, go_on = anyio.Event(), anyio.Event()
    real_settle = spares_module.settle

    async def held_settle(*args: Any) -> Any:
        checking_out.set()
        await go_on.wait()
        return await real_settle(*args)

    monkeypatch.setattr(spares_module, "settle", held_settle)
    async with anyio.create_task_group() as tg:
        tg.start_soon(spaces.refill_spares)
        with anyio.fail_after(30):
            await checking_out.wait()
        [making] = await spaces.listing()
        assert making.state == "creating"
        assert await spaces.prune() == []  # its checkout goes on undisturbed
        go_on.set()
    [ready] = await spaces.listing()
    assert ready.session_id == making.session_id and ready.state == "spare"
    assert await spaces.prune() == [f"{ready.session_id} (spare): removed"]


@pytest.mark.parametrize("folder_made", [False, True])
async def test_prune_undoes_a_spare_a_crash_left_creating_once_it_is_old(
        squad_repo: SquadLayout, spaces: Workspaces, folder_made: bool) -> None:
    sid = spare_id()
    left = WorkspaceView(session_id=sid, agent="", branch="", target="main",
                         base_commit=git(squad_repo.repo, "rev-parse", "HEAD"),
                         path=str(squad_repo.worktree(sid)), created=records.now_iso())
    records.save(squad_repo, left)
    if folder_made:  # killed inside `git worktree add`: a folder git does not know
        Path(left.path).mkdir(parents=True)
    soon = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    assert await spaces.prune(now=soon) == []  # maybe still being made
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    assert await spaces.prune(now=later) == [f"{sid} (spare): removed"]
    assert records.load(squad_repo, sid) is None
    # A folder without git's `.git` file is never deleted (it may not be squadd's), as at start.
    assert Path(left.path).exists() == folder_made


async def test_the_spare_maker_logs_an_unexpected_failure_and_keeps_serving(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    failed, refilled = anyio.Event(), anyio.Event()

    async def refill() -> int:
        calls.append(len(calls))
        if len(calls) == 1:
            failed.set()
            raise RuntimeError("a bug in the spare maker")
        refilled.set()
        return 0

    monkeypatch.setattr(spaces, "refill_spares", refill)
    async with anyio.create_task_group() as tg:
        tg.start_soon(spaces.keep_spares)  # worktrees are the setting: it refills at once
        with anyio.fail_after(30):
            await failed.wait()
            spaces.want_spares()
            await refilled.wait()
        tg.cancel_scope.cancel()
    assert calls == [0, 1]


async def test_a_session_opens_while_a_spare_is_being_checked_out(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spare maker's lock is held while git adds a worktree, never while it writes a
    whole tree's files: a session does not wait for a spare's checkout."""
    writing, release = anyio.Event(), anyio.Event()
    spares_dir = str(squad_repo.worktrees_dir / SPARE_PREFIX)
    ran = spaces.git.ran

    async def gated(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> Ran:
        adding = "add" in args and "--no-checkout" not in args and \
            any(a.startswith(spares_dir) for a in args)
        if adding or (str(cwd).startswith(spares_dir) and "checkout" in args):
            writing.set()  # the spare's files are being written: held until the session opened
            await release.wait()
        return await ran(cwd, *args, env=env)

    opened = anyio.Event()
    released_before_open: list[bool] = []

    async def let_go() -> None:
        with anyio.move_on_after(30):  # a guard only: a maker holding the lock would hang
            await opened.wait()
        released_before_open.append(not opened.is_set())
        release.set()

    monkeypatch.setattr(spaces.git, "ran", gated)
    async with anyio.create_task_group() as tg:
        tg.start_soon(spaces.refill_spares)
        tg.start_soon(let_go)
        with anyio.fail_after(60):
            await writing.wait()
        record = await spaces.open(SESSION, "lead")
        opened.set()
    assert released_before_open == [False]
    assert record is not None and record.state == "active"
    assert await _spares(spaces) != []  # the spare was made too, after the session opened


async def test_a_spare_record_edited_to_name_a_sessions_worktree_never_hands_it_over(
        squad_repo: SquadLayout) -> None:
    from squadd.contracts.workspaces import WorkspaceView
    from squadd.workspaces import records
    spaces = Workspaces(squad_repo, settings_with(squad_repo, spares=0), NullSink())
    first = await spaces.open("20260101-000000-00000f01", "lead")
    assert first is not None
    (Path(first.path) / "draft.txt").write_text("first's work in progress\n")
    records.save(squad_repo, WorkspaceView(
        session_id=f"{SPARE_PREFIX}20260101-000000-0000beef", agent="", branch="",
        target="main", base_commit=first.base_commit, path=first.path, state="spare"))
    with_spares = Workspaces(squad_repo, settings_with(squad_repo, spares=1), NullSink())
    second = await with_spares.open(SESSION, "lead")
    assert second is not None and second.path != first.path
    assert (Path(first.path) / "draft.txt").read_text() == "first's work in progress\n"
    assert git(Path(first.path), "symbolic-ref", "HEAD") == f"refs/heads/{first.branch}"
    assert not (Path(second.path) / "draft.txt").exists()
