"""`squadd land` and `squadd workspaces` on a real repository, without a daemon."""

from __future__ import annotations

from pathlib import Path

import anyio
from click.testing import CliRunner

from squadd.cli.app import main
from squadd.config import load_settings
from squadd.contracts.events import NullSink
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces
from tests.workspaces.conftest import git, make_repo


def _committed_session(layout: SquadLayout, session: str, files: dict[str, str]) -> None:
    async def work() -> None:
        spaces = Workspaces(layout, load_settings(layout.root), NullSink())
        record = await spaces.open(session, "lead")
        assert record is not None
        for name, body in files.items():
            (Path(record.path) / name).write_text(body)
        await spaces.close(record, title=f"work of {session}")
    anyio.run(work)


def test_land_lands_and_workspaces_lists_then_prunes(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    session = "20260101-000000-0000aaaa"
    _committed_session(layout, session, {"new.txt": "new\n"})
    runner = CliRunner()
    listed = runner.invoke(main, ["workspaces", "--dir", str(layout.repo)])
    assert listed.exit_code == 0
    assert "squad/lead/0000aaaa" in listed.output and "committed" in listed.output

    landed = runner.invoke(main, ["land", session, "--dir", str(layout.repo)])
    assert landed.exit_code == 0, landed.output
    assert "landed on main" in landed.output
    assert git(layout.repo, "log", "-1", "--format=%s", "main") == f"work of {session}"

    pruned = runner.invoke(main, ["workspaces", "--prune", "--dir", str(layout.repo)])
    assert pruned.exit_code == 0 and f"{session} squad/lead/0000aaaa: removed" in pruned.output
    assert "squad/lead/0000aaaa" not in git(layout.repo, "branch")


def test_land_of_a_conflict_exits_3_names_the_path_and_what_to_do_next(
        tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    _committed_session(layout, "20260101-000000-0000bbbb", {"app.txt": "mine\n"})
    (layout.repo / "app.txt").write_text("theirs\n")
    git(layout.repo, "commit", "--quiet", "-am", "user edit")
    before = git(layout.repo, "rev-parse", "main")
    result = CliRunner().invoke(main, ["land", "20260101-000000-0000bbbb", "--dir",
                                       str(layout.repo)])
    assert result.exit_code == 3
    assert "conflicts in app.txt" in result.output
    assert "landing: conflict" in result.output
    worktree = layout.worktree("20260101-000000-0000bbbb")
    assert f"next: resolve app.txt in the session's worktree (cd {worktree} && git rebase " \
        "main, fix the files, git add them, git rebase --continue), then `squadd land " \
        "20260101-000000-0000bbbb`" in result.output
    assert git(layout.repo, "rev-parse", "main") == before


def test_land_of_an_unknown_session_is_a_clear_error(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    result = CliRunner().invoke(main, ["land", "20260101-000000-00000000", "--dir",
                                       str(layout.repo)])
    assert result.exit_code == 1 and "has no worktree to land" in result.output


def test_workspaces_lists_a_spare_as_spare_and_prune_removes_it(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")

    async def make_spare() -> str:
        spaces = Workspaces(layout, load_settings(layout.root), NullSink())
        assert await spaces.refill_spares() == 1
        [spare] = await spaces.listing()
        return spare.session_id

    spare = anyio.run(make_spare)
    runner = CliRunner()
    listed = runner.invoke(main, ["workspaces", "--dir", str(layout.repo)])
    assert listed.exit_code == 0
    [row] = [line for line in listed.output.splitlines() if spare in line]
    assert row.split()[:3] == ["(spare)", spare, "spare"]
    pruned = runner.invoke(main, ["workspaces", "--prune", "--dir", str(layout.repo)])
    assert pruned.exit_code == 0 and f"{spare} (spare): removed" in pruned.output
    assert "spare-" not in git(layout.repo, "worktree", "list")


def test_workspaces_lists_records_edited_by_hand_without_failing_or_walking_their_path(
        tmp_path: Path) -> None:
    """A time without a zone is read as UTC, an unreadable one shows `?`; a path that is not
    the session's own worktree (here `/`) is not walked for its disk use."""
    import json

    layout = make_repo(tmp_path / "repo")
    sessions = ["20260101-000000-0000cc01", "20260101-000000-0000cc02"]
    for session in sessions:
        _committed_session(layout, session, {f"{session}.txt": "x\n"})
    for session, changes in zip(sessions, ({"created": "2026-01-01T00:00:00"},
                                           {"created": "last tuesday", "path": "/"}),
                                strict=True):
        path = layout.workspace_record(session)
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    listed = CliRunner().invoke(main, ["workspaces", "--dir", str(layout.repo)])
    assert listed.exit_code == 0, listed.output
    rows = {line.split()[1]: line.split() for line in listed.output.splitlines()
            if line.startswith("squad/")}
    assert rows[sessions[0]][3].endswith("d") and rows[sessions[0]][4].endswith("M")
    assert rows[sessions[1]][3:] == ["?", "-"]
