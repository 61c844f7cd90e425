"""A session's worktree: made on its own branch, committed by the agent, removed safely."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import anyio.from_thread
import pytest

from squadd.contracts.workspaces import WorkspaceView
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces, charter_isolation, worktrees
from tests.workspaces.conftest import Events, git, make_repo, settings_with


async def test_session_commits_on_its_own_branch_as_the_agent(
        squad_repo: SquadLayout, spaces: Workspaces, events: Events) -> None:
    main_tip = git(squad_repo.repo, "rev-parse", "main")
    record = await spaces.open("20260101-000000-abcdef12", "lead")
    assert record is not None
    tree = Path(record.path)
    assert record.branch == "squad/lead/abcdef12"
    assert tree.parent == squad_repo.root / "worktrees"
    (tree / "new.txt").write_text("hello\n")
    (tree / ".squad" / "stray.md").parent.mkdir(exist_ok=True)
    (tree / ".squad" / "stray.md").write_text("never committed\n")
    await spaces.close(record, title="Add a greeting", display_name="Lead Dev")

    log = git(squad_repo.repo, "log", "-1", "--format=%an|%ae|%B", record.branch)
    assert log.startswith("Lead Dev|lead@squad.local|Add a greeting")
    assert "Squad-Session: 20260101-000000-abcdef12" in log
    files = git(squad_repo.repo, "show", "--name-only", "--format=", record.branch).split()
    assert files == ["new.txt"]
    assert record.state == "committed" and len(record.commits) == 1
    assert "1 file changed" in record.diffstat
    assert git(squad_repo.repo, "rev-parse", "main") == main_tip
    assert "worktrees/" in (squad_repo.root / ".gitignore").read_text().split()
    assert "worktrees" not in git(squad_repo.repo, "status", "--porcelain", "--ignored=no",
                                  "--untracked-files=all")
    assert events.types() == ["workspace.created", "workspace.committed"]


async def test_a_continued_session_reuses_its_worktree(spaces: Workspaces) -> None:
    first = await spaces.open("20260101-000000-00000001", "lead")
    assert first is not None
    await spaces.close(first, title="nothing yet")
    again = await spaces.open("20260101-000000-00000001", "lead")
    assert again is not None and again.path == first.path and again.branch == first.branch


async def test_removing_keeps_a_branch_with_unlanded_commits(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    kept = await spaces.open("20260101-000000-00000002", "lead")
    empty = await spaces.open("20260101-000000-00000003", "lead")
    assert kept is not None and empty is not None
    (Path(kept.path) / "work.txt").write_text("work\n")
    await spaces.close(kept, title="work")
    assert await spaces.remove(kept.session_id) is True
    assert await spaces.remove(empty.session_id) is False
    branches = git(squad_repo.repo, "branch", "--list", "squad/*")
    assert kept.branch in branches and empty.branch not in branches
    assert not Path(kept.path).exists() and not Path(empty.path).exists()
    assert str(squad_repo.root / "worktrees") not in git(squad_repo.repo, "worktree", "list")


async def test_a_removed_worktree_is_moved_aside_and_deleted_by_the_running_emptier(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """A landing (and any removal) moves the worktree out of git's sight in one rename; a
    daemon's emptier deletes its files afterwards, so the caller does not wait for them."""
    record = await spaces.open("20260101-000000-0000a51d", "lead")
    assert record is not None
    (Path(record.path) / "work.txt").write_text("work\n")
    await spaces.close(record, title="work")
    aside = squad_repo.removed_worktrees_dir
    send, passes = anyio.create_memory_object_stream[int](8)
    real_empty = worktrees.empty_removed

    def watched(layout: SquadLayout) -> int:
        # What the emptier finds when it runs (in its thread): the worktree already gone
        # from its place and from git's list, its files still there to delete.
        moved = list(aside.iterdir()) if aside.exists() else []
        if moved:
            assert not Path(record.path).exists()
            assert str(Path(record.path)) not in git(layout.repo, "worktree", "list")
            assert (moved[0] / "work.txt").read_text() == "work\n"
        gone = real_empty(layout)
        anyio.from_thread.run_sync(send.send_nowait, len(moved))
        return gone

    with pytest.MonkeyPatch.context() as patch, anyio.fail_after(60):
        patch.setattr(worktrees, "empty_removed", watched)
        async with anyio.create_task_group() as tg:
            tg.start_soon(spaces.keep_emptied)
            assert await passes.receive() == 0  # its first pass, at its start: nothing
            assert await spaces.remove(record.session_id) is True
            assert await passes.receive() == 1
            tg.cancel_scope.cancel()
    assert list(aside.iterdir()) == []
    assert record.branch in git(squad_repo.repo, "branch", "--list", "squad/*")


async def test_without_an_emptier_a_removal_deletes_what_it_moved_aside_at_once(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """A command that removes a worktree and exits (no daemon) leaves nothing behind; what a
    crash left aside goes with it."""
    leftover = squad_repo.removed_worktrees_dir / "20251231-000000-00000000.dead"
    (leftover / "pkg").mkdir(parents=True)
    (leftover / "pkg" / "old.txt").write_text("left by a crash\n")
    record = await spaces.open("20260101-000000-0000a51e", "lead")
    assert record is not None
    assert await spaces.remove(record.session_id) is False
    assert not Path(record.path).exists()
    assert list(squad_repo.removed_worktrees_dir.iterdir()) == []


async def test_a_worktree_that_is_not_squadds_own_folder_is_removed_by_git_in_place(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """Only the folder squadd made for the session is moved aside: a record that names
    another place is left to `git worktree remove`, which deletes a worktree of its own
    only."""
    from squadd.workspaces import records
    record = await spaces.open("20260101-000000-0000a51f", "lead")
    assert record is not None
    elsewhere = squad_repo.repo / "elsewhere"
    git(squad_repo.repo, "worktree", "move", "-f", "-f", record.path, str(elsewhere))
    record.path = str(elsewhere)
    records.save(squad_repo, record)
    assert await spaces.remove(record.session_id) is False
    assert not elsewhere.exists()
    assert not squad_repo.removed_worktrees_dir.exists()


async def test_a_folder_that_is_not_a_git_repository_works_shared(
        tmp_path: Path, events: Events) -> None:
    from squadd.state.scaffold import init_squad
    (tmp_path / "plain").mkdir()
    layout = SquadLayout.at(init_squad(tmp_path / "plain").squad_dir)
    spaces = Workspaces(layout, settings_with(layout), events)
    assert await spaces.open("20260101-000000-00000004", "lead") is None
    assert not (layout.root / "worktrees").exists()


async def test_a_repository_without_commits_works_shared(tmp_path: Path, events: Events) -> None:
    from squadd.state.scaffold import init_squad
    (tmp_path / "fresh").mkdir()
    git(tmp_path / "fresh", "init", "--quiet", "-b", "main")
    layout = SquadLayout.at(init_squad(tmp_path / "fresh").squad_dir)
    spaces = Workspaces(layout, settings_with(layout), events)
    assert await spaces.open("20260101-000000-00000005", "lead") is None


async def test_past_max_worktrees_a_session_works_shared(tmp_path: Path, events: Events) -> None:
    layout = make_repo(tmp_path / "r")
    spaces = Workspaces(layout, settings_with(layout, max_worktrees=1), events)
    assert await spaces.open("20260101-000000-00000006", "lead") is not None
    assert await spaces.open("20260101-000000-00000007", "lead") is None


async def test_a_failing_setup_is_a_clear_error_and_leaves_no_worktree(
        tmp_path: Path, events: Events) -> None:
    import pytest

    from squadd.errors import WorkspaceError
    layout = make_repo(tmp_path / "r")
    spaces = Workspaces(layout, settings_with(layout, setup=["echo preparing; exit 3"]), events)
    with pytest.raises(WorkspaceError, match="exited 3") as caught:
        await spaces.open("20260101-000000-00000008", "lead")
    assert "preparing" in str(caught.value)
    assert await spaces.listing() == []
    assert "worktrees" not in git(layout.repo, "worktree", "list")


def test_isolation_layers_route_over_agent_over_charter_over_settings(
        squad_repo: SquadLayout, events: Events) -> None:
    from squadd.config import load_settings
    settings = load_settings(squad_repo.root, overrides={
        "workspace": {"isolation": "shared"}, "agents": {"fenster": {"isolation": "worktree"}}})
    spaces = Workspaces(squad_repo, settings, events)
    worktree_charter = {"workspace": "isolation: worktree"}
    assert spaces.isolation_for("lead", None, None) == "shared"
    assert spaces.isolation_for("lead", worktree_charter, None) == "worktree"
    assert spaces.isolation_for("fenster", {"workspace": "shared"}, None) == "worktree"
    assert spaces.isolation_for("fenster", None, "shared") == "shared"
    assert charter_isolation({"workspace": "Isolation: shared"}) == "shared"


async def test_prune_removes_landed_and_stale_worktrees_and_keeps_unlanded_branches(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    import datetime as dt
    fresh = await spaces.open("20260101-000000-00000020", "lead")
    stale = await spaces.open("20260101-000000-00000021", "lead")
    assert fresh is not None and stale is not None
    (Path(stale.path) / "kept.txt").write_text("kept\n")
    await spaces.close(stale, title="unlanded work")
    assert await spaces.prune() == []  # nothing landed, nothing older than keep_days
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
    done = await spaces.prune(now=later)
    assert len(done) == 2 and any("branch kept" in line for line in done)
    assert stale.branch in git(squad_repo.repo, "branch", "--list", "squad/*")
    assert fresh.branch not in git(squad_repo.repo, "branch", "--list", "squad/*")
    assert [r.state for r in await spaces.listing()] == ["removed"]


async def test_a_record_with_a_time_edited_by_hand_does_not_stop_the_prune(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    import datetime as dt

    odd = await spaces.open("20260101-000000-00000022", "lead")
    landed = await spaces.open("20260101-000000-00000023", "lead")
    assert odd is not None and landed is not None
    for record, changes in ((odd, {"updated": "last tuesday"}),
                            (landed, {"state": "landed", "updated": "2026-01-01T00:00:00"})):
        path = squad_repo.workspace_record(record.session_id)
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    done = await spaces.prune(now=later)  # the naive time is read as UTC, the odd one kept
    assert [line.split()[0] for line in done] == [landed.session_id]
    assert {r.session_id: r.state for r in await spaces.listing()}[odd.session_id] == "active"


async def test_a_stray_file_among_the_records_is_skipped_not_fatal(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await spaces.open("20260101-000000-00000040", "lead")
    assert record is not None
    folder = squad_repo.workspaces_dir
    (folder / "notes (copy).json").write_text("{}")  # not a session id: not a record
    (folder / "20260101-000000-00000041.json").write_text(  # a record under another's name
        (folder / f"{record.session_id}.json").read_text())
    assert [r.session_id for r in await spaces.listing()] == [record.session_id]
    assert not any("00000041" in note for note in await spaces.reconcile())


async def test_worktree_changes_wait_for_another_process_holding_the_worktrees_lock(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import anyio

    from squadd.errors import WorkspaceError
    from squadd.fsio import try_lock
    from squadd.workspaces import turns
    record = await spaces.open("20260101-000000-00000050", "lead")
    assert record is not None
    refused = anyio.Event()

    def watched_try_lock(path: Path) -> int | None:
        fd = try_lock(path)
        if fd is None and path == squad_repo.worktrees_lock:
            refused.set()
        return fd

    monkeypatch.setattr(turns, "try_lock", watched_try_lock)
    held = try_lock(squad_repo.worktrees_lock)  # as `squadd workspaces --prune` holds it
    assert held is not None
    try:
        with pytest.raises(WorkspaceError, match="worktrees are busy"):
            async with spaces.admin(timeout_s=0.2):
                pass
        refused = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(spaces.remove, record.session_id)
            with anyio.fail_after(30):
                await refused.wait()  # remove() found the lock taken and waits for it
            assert Path(record.path).is_dir()
            os.close(held)
            held = None
    finally:
        if held is not None:
            os.close(held)
    assert not Path(record.path).exists()


async def test_new_files_are_committed_when_the_users_git_hides_untracked_files(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """`status.showUntrackedFiles = no` (common in large repositories) must not make a
    session's new files look like no change: they would never be committed, then pruned."""
    git(squad_repo.repo, "config", "status.showUntrackedFiles", "no")
    record = await spaces.open("20260101-000000-0000f11e", "lead")
    assert record is not None
    (Path(record.path) / "only-new.txt").write_text("new\n")
    await spaces.close(record, title="a new file only")
    assert record.state == "committed"
    files = git(squad_repo.repo, "show", "--name-only", "--format=", record.branch).split()
    assert files == ["only-new.txt"]


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
async def test_start_up_never_deletes_user_files_named_by_a_hand_edited_record(
        squad_repo: SquadLayout, spaces: Workspaces, how: str) -> None:
    """Undoing a cut-short worktree deletes only the folder squadd itself would have made for
    that session: not a path that merely reads as under worktrees/, nor a symlink there."""
    from squadd.workspaces import records
    user = squad_repo.repo / "src"
    user.mkdir()
    (user / "keep.txt").write_text("the user's work\n")
    sid = "20260101-000000-0000bad1"
    squad_repo.worktrees_dir.mkdir(parents=True, exist_ok=True)
    if how == "dotdot":
        path = squad_repo.worktrees_dir / ".." / ".." / "src"
    else:
        path = squad_repo.worktree(sid)
        path.symlink_to(user, target_is_directory=True)
    records.save(squad_repo, WorkspaceView(
        session_id=sid, agent="lead", branch="squad/lead/0000bad1", target="main",
        base_commit=git(squad_repo.repo, "rev-parse", "main"), path=str(path),
        state="creating"))
    await spaces.reconcile()
    assert (user / "keep.txt").read_text() == "the user's work\n"
    assert await spaces.listing() == []


async def _landed(layout: SquadLayout, spaces: Workspaces, session: str) -> Path:
    record = await spaces.open(session, "lead")
    assert record is not None
    (Path(record.path) / f"{session}.txt").write_text("landed work\n")
    await spaces.close(record, title="work to land")
    assert (await spaces.land(session)).ok
    return Path(record.path)


async def test_prune_leaves_a_worktree_that_a_session_continued_after_the_listing(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    """`squadd workspaces --prune` beside the daemon: a landed worktree that the daemon
    reopens for a continued session between the prune's listing and its removal is kept."""
    from squadd.contracts.events import NullSink
    session = "20260101-000000-00000060"
    tree = await _landed(squad_repo, spaces, session)
    daemon = Workspaces(squad_repo, settings_with(squad_repo), NullSink())
    listing = spaces.listing

    async def listed_then_continued() -> list[WorkspaceView]:
        seen = await listing()
        assert await daemon.open(session, "lead") is not None  # the session works in it again
        (tree / "uncommitted.txt").write_text("the continued session's work\n")
        return seen

    monkeypatch.setattr(spaces, "listing", listed_then_continued)
    assert await spaces.prune() == []
    assert (tree / "uncommitted.txt").read_text() == "the continued session's work\n"
    assert {r.session_id: r.state for r in await listing()} == {session: "active"}


async def test_a_continued_session_waits_for_a_prune_holding_the_worktrees_lock(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    """Making a landed worktree active again happens under the worktrees lock, so a prune in
    another process never removes it between its reading and its use."""
    import os

    import anyio

    from squadd.fsio import try_lock
    from squadd.workspaces import turns
    session = "20260101-000000-00000061"
    await _landed(squad_repo, spaces, session)
    stepped, refused = anyio.Event(), anyio.Event()

    def watched_try_lock(path: Path) -> int | None:
        fd = try_lock(path)
        if fd is None and path == squad_repo.worktrees_lock:
            refused.set()
            stepped.set()
        return fd

    async def reopen() -> None:
        await spaces.open(session, "lead")
        stepped.set()

    monkeypatch.setattr(turns, "try_lock", watched_try_lock)
    held = try_lock(squad_repo.worktrees_lock)  # as `squadd workspaces --prune` holds it
    assert held is not None
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reopen)
            with anyio.fail_after(30):
                await stepped.wait()
            assert refused.is_set()  # open() waits for the lock before it reactivates
            assert (await spaces.view(session) or pytest.fail("no record")).state == "landed"
            os.close(held)
            held = None
    finally:
        if held is not None:
            os.close(held)
    assert (await spaces.view(session) or pytest.fail("no record")).state == "active"


@pytest.mark.parametrize("spares", [0, 1])
async def test_an_agent_named_like_a_git_lock_file_still_gets_a_worktree(
        squad_repo: SquadLayout, spares: int) -> None:
    """`build.lock` is a valid agent name but not a valid ref component: the branch name is
    made valid, the worktree is made, and its work commits on that branch."""
    from squadd.contracts.events import NullSink
    spaces = Workspaces(squad_repo, settings_with(squad_repo, spares=spares), NullSink())
    assert await spaces.refill_spares() == spares
    record = await spaces.open("20260101-000000-00000070", "build.lock")
    assert record is not None and record.state == "active"
    assert record.branch == "squad/build-lock/00000070"
    (Path(record.path) / "built.txt").write_text("built\n")
    await spaces.close(record, title="build")
    assert git(squad_repo.repo, "show", "--name-only", "--format=", record.branch) == "built.txt"


async def test_a_failed_worktree_add_leaves_no_worktree_branch_or_record(
        squad_repo: SquadLayout) -> None:
    """A checkout that fails (here: a damaged object) makes `git worktree add` fail after it
    made the worktree: the session's open fails, and nothing of it is left to count or to
    clean up. (A failing post-checkout hook used to be the way in; squadd runs no hooks.)"""
    from squadd.contracts.events import NullSink
    from squadd.errors import WorkspaceError
    spaces = Workspaces(squad_repo, settings_with(squad_repo, spares=0), NullSink())
    blob = git(squad_repo.repo, "rev-parse", "HEAD:app.txt")
    loose = squad_repo.repo / ".git" / "objects" / blob[:2] / blob[2:]
    kept = loose.read_bytes()
    loose.chmod(0o644)
    loose.write_bytes(b"damaged")
    with pytest.raises(WorkspaceError, match="cannot make the worktree"):
        await spaces.open("20260101-000000-00000080", "lead")
    assert await spaces.listing() == []
    assert str(squad_repo.worktrees_dir) not in git(squad_repo.repo, "worktree", "list")
    assert git(squad_repo.repo, "branch", "--list", "squad/*") == ""
    loose.write_bytes(kept)
    assert await spaces.open("20260101-000000-00000080", "lead") is not None


async def test_a_folder_already_at_a_new_worktrees_place_is_never_deleted(
        squad_repo: SquadLayout) -> None:
    """git refuses to add a worktree over a folder that is there already; neither that
    failure nor start-up deletes the folder, which squadd did not make."""
    from squadd.contracts.events import NullSink
    from squadd.errors import WorkspaceError
    spaces = Workspaces(squad_repo, settings_with(squad_repo, spares=0), NullSink())
    sid = "20260101-000000-00000081"
    there = squad_repo.worktree(sid)
    there.mkdir(parents=True)
    (there / "notes.txt").write_text("someone's notes\n")
    with pytest.raises(WorkspaceError, match="cannot make the worktree"):
        await spaces.open(sid, "lead")
    await spaces.reconcile()
    assert (there / "notes.txt").read_text() == "someone's notes\n"
    assert await spaces.listing() == []


async def test_a_record_start_up_cannot_bring_back_is_left_and_does_not_stop_the_start(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """A landing intent whose tips were edited by hand: git cannot put the branch back there.
    Start-up says so, leaves that record and its branch as they are, and reconciles the
    others."""
    bad, other = "20260101-000000-00000090", "20260101-000000-00000091"
    for session in (bad, other):
        record = await spaces.open(session, "lead")
        assert record is not None
        (Path(record.path) / f"{session}.txt").write_text("work\n")
        await spaces.close(record, title="work")
    tip = git(squad_repo.repo, "rev-parse", f"squad/lead/{bad[-8:]}")
    for session, changes in ((bad, {"state": "landing", "landing": {
            "phase": "rebase", "old_tip": "0" * 40, "branch_tip": "0" * 40}}),
                             (other, {"state": "committing"})):
        path = squad_repo.workspace_record(session)
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    notes = await spaces.reconcile()
    assert any(note.startswith(f"{bad}: not reconciled, left landing") for note in notes)
    assert f"{other}: commit checked: committed" in notes
    assert not any("orphan" in note for note in notes)
    assert git(squad_repo.repo, "rev-parse", f"squad/lead/{bad[-8:]}") == tip
    assert {r.session_id: r.state for r in await spaces.listing()} == {
        bad: "landing", other: "committed"}


async def test_a_session_continued_after_keep_days_is_not_pruned_while_it_works(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """An active worktree idle past keep_days, then continued: its reopening marks it in use,
    so a prune right after leaves it."""
    import datetime as dt
    session = "20260101-000000-00000062"
    record = await spaces.open(session, "lead")
    assert record is not None
    path = squad_repo.workspace_record(session)
    path.write_text(json.dumps({**json.loads(path.read_text()),
                                "created": "2025-01-01T00:00:00+00:00",
                                "updated": "2025-01-01T00:00:00+00:00"}))
    assert await spaces.open(session, "lead") is not None  # continued after a long idle
    (Path(record.path) / "draft.txt").write_text("work in progress\n")
    assert await spaces.prune(now=dt.datetime.now(dt.UTC)) == []
    assert (Path(record.path) / "draft.txt").read_text() == "work in progress\n"
