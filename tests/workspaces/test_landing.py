"""Landing: rebase onto the target's tip, check, fast-forward only; never a half-moved target."""

from __future__ import annotations

import itertools
from pathlib import Path

import anyio
import pytest

from squadd.contracts.events import WorkspaceLanded, WorkspaceLandFailed
from squadd.contracts.workspaces import LandResult, WorkspaceView
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces
from tests.workspaces.conftest import Events, git, make_repo, settings_with


async def _work(spaces: Workspaces, session: str, files: dict[str, str]) -> WorkspaceView:
    record = await spaces.open(session, "lead")
    assert record is not None
    for name, text in files.items():
        (Path(record.path) / name).write_text(text)
    await spaces.close(record, title=f"edit by {session}")
    return record


async def _refused_as_dirty(layout: SquadLayout, spaces: Workspaces,
                           record: WorkspaceView) -> LandResult:
    """Land `record`: refused as `dirty`, with the target left where it was."""
    before = git(layout.repo, "rev-parse", "main")
    result = await spaces.land(record.session_id)
    assert not result.ok and result.reason == "dirty", result.message
    assert git(layout.repo, "rev-parse", "main") == before
    return result


def _no_rebase_in_progress(layout: SquadLayout, record: WorkspaceView) -> None:
    gitdir = Path(git(Path(record.path), "rev-parse", "--absolute-git-dir"))
    assert not (gitdir / "rebase-merge").exists() and not (gitdir / "rebase-apply").exists()
    assert not (Path(git(layout.repo, "rev-parse", "--absolute-git-dir")) / "rebase-merge").exists()


async def test_two_sessions_edit_the_same_line_first_lands_second_reports_the_conflict(
        squad_repo: SquadLayout, spaces: Workspaces, events: Events) -> None:
    first = await _work(spaces, "20260101-000000-0000000a", {"app.txt": "ONE\ntwo\nthree\n"})
    second = await _work(spaces, "20260101-000000-0000000b", {"app.txt": "uno\ntwo\nthree\n"})
    second_tip = git(squad_repo.repo, "rev-parse", second.branch)

    landed = await spaces.land(first.session_id)
    assert landed.ok and landed.reason == "landed"
    tip = git(squad_repo.repo, "rev-parse", "main")
    assert tip == landed.new_tip
    assert (squad_repo.repo / "app.txt").read_text() == "ONE\ntwo\nthree\n"

    refused = await spaces.land(second.session_id)
    assert not refused.ok and refused.reason == "conflict"
    assert refused.conflict_paths == ["app.txt"] and "app.txt" in refused.message
    assert git(squad_repo.repo, "rev-parse", "main") == tip
    assert git(squad_repo.repo, "rev-parse", second.branch) == second_tip
    _no_rebase_in_progress(squad_repo, second)
    assert refused.workspace is not None and refused.workspace.state == "conflict"
    # The landed worktree is removed (workspace.keep_landed = false) after it is announced.
    assert events.types()[-3:] == ["workspace.landed", "workspace.removed",
                                   "workspace.land_failed"]
    landed_event, failed_event = events.seen[-3], events.seen[-1]
    assert isinstance(landed_event, WorkspaceLanded) and landed_event.outcome is not None
    assert landed_event.outcome.state == "landed" and landed_event.outcome.commit == tip
    assert isinstance(failed_event, WorkspaceLandFailed) and failed_event.outcome is not None
    assert failed_event.outcome.state == "conflict"
    assert f"squadd land {second.session_id}" in (failed_event.outcome.next or "")


async def test_a_conflict_in_a_file_whose_name_git_would_quote_names_it_as_it_is(
        tmp_path: Path, events: Events) -> None:
    layout = make_repo(tmp_path / "r", {"café.txt": "one\n"})
    spaces = Workspaces(layout, settings_with(layout), events)
    first = await _work(spaces, "20260101-000000-00000015", {"café.txt": "first\n"})
    second = await _work(spaces, "20260101-000000-00000016", {"café.txt": "second\n"})
    assert (await spaces.land(first.session_id)).ok
    refused = await spaces.land(second.session_id)
    assert not refused.ok and refused.reason == "conflict"
    assert refused.conflict_paths == ["café.txt"] and "café.txt" in refused.message


async def test_two_sessions_on_different_files_both_land_with_a_linear_history(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    start = git(squad_repo.repo, "rev-parse", "main")
    first = await _work(spaces, "20260101-000000-0000000c", {"a.txt": "a\n"})
    second = await _work(spaces, "20260101-000000-0000000d", {"b.txt": "b\n"})
    assert (await spaces.land(first.session_id)).ok
    result = await spaces.land(second.session_id)
    assert result.ok, result.message
    history = git(squad_repo.repo, "log", "--format=%s", f"{start}..main").splitlines()
    assert history == [f"edit by {second.session_id}", f"edit by {first.session_id}"]
    assert git(squad_repo.repo, "rev-list", "--merges", "main") == ""
    assert (squad_repo.repo / "a.txt").exists() and (squad_repo.repo / "b.txt").exists()


async def test_a_failing_land_check_keeps_the_target_unchanged(
        tmp_path: Path, events: Events) -> None:
    layout = make_repo(tmp_path / "r")
    spaces = Workspaces(layout, settings_with(
        layout, land_check="echo checking $(cat new.txt); exit 1"), events)
    record = await _work(spaces, "20260101-000000-0000000e", {"new.txt": "payload\n"})
    before = git(layout.repo, "rev-parse", "main")
    result = await spaces.land(record.session_id)
    assert not result.ok and result.reason == "check_failed"
    assert "checking payload" in result.check_tail
    assert git(layout.repo, "rev-parse", "main") == before
    assert not (layout.repo / "new.txt").exists()
    assert record.branch in git(layout.repo, "branch", "--list", "squad/*")


async def test_a_dirty_user_tree_in_the_landed_paths_is_refused(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await _work(spaces, "20260101-000000-0000000f", {"app.txt": "changed\n"})
    (squad_repo.repo / "app.txt").write_text("the user's own edit\n")
    result = await _refused_as_dirty(squad_repo, spaces, record)
    assert "app.txt" in result.message and "commit or stash" in result.message
    assert (squad_repo.repo / "app.txt").read_text() == "the user's own edit\n"


async def test_an_untracked_user_file_where_the_landing_adds_one_is_refused(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await _work(spaces, "20260101-000000-00000012", {"new [file].txt": "x\n"})
    (squad_repo.repo / "new [file].txt").write_text("the user's own\n")
    result = await _refused_as_dirty(squad_repo, spaces, record)
    assert result.conflict_paths == ["new [file].txt"]


async def test_a_dirty_user_file_with_a_name_git_would_quote_is_refused(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    """`git diff --name-only` quotes such names ("caf\\303\\251.txt"): read raw, they match
    the user's status, and the landing is refused as dirty, naming the file as it is."""
    names = ["café.txt", 'say "hi".txt', "tab\there.txt", " leading space.txt"]
    record = await _work(spaces, "20260101-000000-00000014", dict.fromkeys(names, "x\n"))
    for name in names:
        (squad_repo.repo / name).write_text("the user's own\n")
    result = await _refused_as_dirty(squad_repo, spaces, record)
    assert result.conflict_paths == sorted(names)


async def test_a_dirty_user_file_that_the_landing_renames_away_is_refused(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await spaces.open("20260101-000000-00000013", "lead")
    assert record is not None
    git(Path(record.path), "mv", "app.txt", "renamed.txt")
    await spaces.close(record, title="rename app.txt")
    (squad_repo.repo / "app.txt").write_text("the user's own edit\n")
    result = await _refused_as_dirty(squad_repo, spaces, record)
    assert result.conflict_paths == ["app.txt"]
    assert (squad_repo.repo / "app.txt").read_text() == "the user's own edit\n"


async def test_past_the_pathspec_budget_the_whole_status_still_finds_the_dirty_file(
        squad_repo: SquadLayout, spaces: Workspaces, monkeypatch: pytest.MonkeyPatch) -> None:
    """Landed paths too long for one command line: the user's whole status is read instead,
    and a dirty file among them is still refused."""
    from squadd.workspaces import landing
    files = {f"{'d' * 200}{n}.txt": f"{n}\n" for n in range(8)}
    record = await _work(spaces, "20260101-000000-00000017", files)
    monkeypatch.setattr(landing, "MAX_PATHSPEC_BYTES", 1000)  # 8 paths of 200+ bytes pass it
    [name, *_] = sorted(files)
    (squad_repo.repo / name).write_text("the user's own\n")
    result = await _refused_as_dirty(squad_repo, spaces, record)
    assert result.conflict_paths == [name]


async def test_a_dirty_tree_elsewhere_does_not_block_landing(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await _work(spaces, "20260101-000000-00000010", {"new.txt": "x\n"})
    (squad_repo.repo / "app.txt").write_text("the user's own edit\n")
    assert (await spaces.land(record.session_id)).ok
    assert (squad_repo.repo / "app.txt").read_text() == "the user's own edit\n"
    assert (squad_repo.repo / "new.txt").read_text() == "x\n"


async def test_a_target_not_checked_out_moves_by_compare_and_swap(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await _work(spaces, "20260101-000000-00000011", {"new.txt": "x\n"})
    git(squad_repo.repo, "checkout", "--quiet", "-b", "elsewhere")
    result = await spaces.land(record.session_id)
    assert result.ok
    assert git(squad_repo.repo, "rev-parse", "main") == result.new_tip
    assert git(squad_repo.repo, "rev-parse", "HEAD") == result.old_tip


async def test_sixteen_sessions_land_one_at_a_time_through_the_queue(
        squad_repo: SquadLayout, spaces: Workspaces, events: Events) -> None:
    start = git(squad_repo.repo, "rev-parse", "main")
    sessions = [f"20260101-000000-{n:08x}" for n in range(0x100, 0x110)]
    records = [await _work(spaces, s, {f"file{i}.txt": f"{i}\n"})
               for i, s in enumerate(sessions)]
    results = {}

    async def land(session: str) -> None:
        results[session] = await spaces.land(session)

    async with anyio.create_task_group() as group:
        for record in records:
            group.start_soon(land, record.session_id)
    assert all(r.ok for r in results.values()), [r.message for r in results.values()]
    # Serialized: each landing moved main from the tip the previous one left.
    chain = sorted(results.values(), key=lambda r: int(git(
        squad_repo.repo, "rev-list", "--count", r.new_tip or "")))
    assert chain[0].old_tip == start, [(r.reason, r.old_tip, r.new_tip) for r in chain]
    for earlier, later in itertools.pairwise(chain):
        assert later.old_tip == earlier.new_tip
    assert git(squad_repo.repo, "rev-list", "--count", f"{start}..main") == "16"
    assert git(squad_repo.repo, "rev-list", "--merges", "main") == ""
    assert events.types().count("workspace.landed") == 16


async def test_the_landing_queue_timeout_bounds_the_wait_behind_a_landing_in_this_process(
        spaces: Workspaces) -> None:
    holding, release = anyio.Event(), anyio.Event()

    async def hold() -> None:
        async with spaces.landing_queue():
            holding.set()
            await release.wait()

    timed_out = False
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await holding.wait()
        with anyio.move_on_after(30):  # a guard only: the queue's own timeout ends the wait
            try:
                async with spaces.landing_queue(timeout_s=0.2):
                    pass
            except TimeoutError:
                timed_out = True
        release.set()
    assert timed_out

