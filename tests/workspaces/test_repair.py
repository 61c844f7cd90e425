"""Repair turns' worktrees, and what start-up does with a session or repair a crash cut short:
squadd rebases and leaves the conflict markers for the agent, continues with its resolution or
undoes its rebase; a session stopped mid-task becomes `interrupted`, its work kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.config import load_settings
from squadd.errors import ConfigError
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces, records
from squadd.workspaces.repair import rebasing
from tests.workspaces.conftest import Events, git, settings_with

FIRST, SECOND = "20260101-000000-0000000a", "20260101-000000-0000000b"


async def _conflicting(spaces: Workspaces) -> tuple[Path, str]:
    """Two sessions edit app.txt's first line; the first lands. The second's worktree and its
    branch's tip."""
    paths = {}
    for sid, line in ((FIRST, "ONE"), (SECOND, "uno")):
        record = await spaces.open(sid, "lead")
        assert record is not None
        (Path(record.path) / "app.txt").write_text(f"{line}\ntwo\nthree\n")
        await spaces.close(record, title=f"say {line}", answer=f"Said {line}.")
        paths[sid] = Path(record.path)
    assert (await spaces.land(FIRST)).ok
    return paths[SECOND], git(spaces.layout.repo, "rev-parse", "refs/heads/squad/lead/0000000b")


async def test_a_conflict_is_left_as_markers_and_the_agents_resolution_is_landed(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    tree, _ = await _conflicting(spaces)
    failed = await spaces.land(SECOND)
    assert failed.reason == "conflict"
    prompt = await spaces.start_repair(SECOND, failed)
    assert prompt is not None and "app.txt" in prompt and "repair turn 1 of 2" in prompt
    assert "<<<<<<<" in (tree / "app.txt").read_text()
    assert await rebasing(spaces.git, tree)
    record = records.load(squad_repo, SECOND)
    assert record is not None and record.state == "conflict" and record.repairs == 1
    assert records.next_step(record) is None  # its agent is at work on it

    (tree / "app.txt").write_text("ONE uno\ntwo\nthree\n")  # what the agent's edit does
    assert await spaces.finish_repair(SECOND, answer="Kept both.") == ""
    assert not await rebasing(spaces.git, tree)
    landed = await spaces.land(SECOND)
    assert landed.ok, landed.message
    assert git(squad_repo.repo, "show", "main:app.txt") == "ONE uno\ntwo\nthree"
    assert git(squad_repo.repo, "log", "-1", "--format=%s", "main") == "Said uno."


async def test_markers_left_in_a_file_undo_the_rebase_and_keep_the_work(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    tree, tip = await _conflicting(spaces)
    failed = await spaces.land(SECOND)
    assert await spaces.start_repair(SECOND, failed) is not None
    why = await spaces.finish_repair(SECOND, answer="Done.")  # it touched nothing
    assert why == "conflict markers are still in app.txt"
    assert not await rebasing(spaces.git, tree)
    # The branch holds its work as before (squashed: one commit of the same tree).
    assert git(squad_repo.repo, "rev-parse", "refs/heads/squad/lead/0000000b^{tree}") == \
        git(squad_repo.repo, "rev-parse", f"{tip}^{{tree}}")
    assert (tree / "app.txt").read_text() == "uno\ntwo\nthree\n"
    record = records.load(squad_repo, SECOND)
    assert record is not None and record.state == "committed" and "markers" in record.message


async def test_past_the_attempts_the_session_waits_for_a_person_with_the_command(
        squad_repo: SquadLayout, events: Events) -> None:
    spaces = Workspaces(squad_repo, settings_with(squad_repo, repair_attempts=0), events)
    await _conflicting(spaces)
    failed = await spaces.land(SECOND)
    assert await spaces.start_repair(SECOND, failed) is None
    held = await spaces.hold_for_person(SECOND, failed)
    assert held is not None and held.state == "needs_attention"
    assert held.outcome is not None and held.outcome.state == "conflict"
    assert held.outcome.next is not None and held.outcome.next.endswith(f"`squadd land {SECOND}`")
    assert "git rebase main" in held.outcome.next
    assert records.next_step(held) == held.outcome.next


async def test_a_repair_cut_short_is_undone_at_start_and_landed_again(
        squad_repo: SquadLayout, events: Events) -> None:
    spaces = Workspaces(squad_repo, settings_with(squad_repo), events)
    tree, tip = await _conflicting(spaces)
    assert await spaces.start_repair(SECOND, await spaces.land(SECOND)) is not None
    # The daemon dies here, mid-repair: a new one starts.
    again = Workspaces(squad_repo, settings_with(squad_repo, land="auto"), events)
    notes = await again.reconcile()
    assert any("repair turn was interrupted" in n for n in notes)
    assert not await rebasing(again.git, tree)
    # The branch holds its work as before (squashed: one commit of the same tree).
    assert git(squad_repo.repo, "rev-parse", "refs/heads/squad/lead/0000000b^{tree}") == \
        git(squad_repo.repo, "rev-parse", f"{tip}^{{tree}}")
    await again.retry_landings()  # lands it again: the conflict now waits for a person
    record = records.load(squad_repo, SECOND)
    assert record is not None and record.state == "needs_attention"


async def test_a_session_stopped_mid_task_is_interrupted_with_its_work_kept(
        squad_repo: SquadLayout, spaces: Workspaces) -> None:
    record = await spaces.open(FIRST, "lead")
    assert record is not None
    (Path(record.path) / "half.txt").write_text("half done\n")
    notes = await Workspaces(squad_repo, settings_with(squad_repo), Events()).reconcile()
    assert any("interrupted" in n for n in notes)
    stopped = records.load(squad_repo, FIRST)
    assert stopped is not None and stopped.state == "interrupted"
    assert (Path(stopped.path) / "half.txt").read_text() == "half done\n"
    assert records.next_step(stopped) == f"squadd sessions resume {FIRST}"
    # A person may land it as it is: its work is committed first.
    landed = await spaces.land(FIRST)
    assert landed.ok and landed.reason == "landed", landed.message
    assert git(squad_repo.repo, "show", "main:half.txt") == "half done"


def test_landing_settings_are_checked_with_a_fix_hint(squad_repo: SquadLayout) -> None:
    with pytest.raises(ConfigError, match="land_check_report"):
        load_settings(squad_repo.root, overrides={"workspace": {
            "land_policy": "no-new-failures"}})
    with pytest.raises(ConfigError, match="Name <email>"):
        load_settings(squad_repo.root, overrides={"workspace": {"committer": "just a name"}})
    assert load_settings(squad_repo.root, overrides={"workspace": {
        "land_check_report": "{report}"}}).workspace.policy == "no-new-failures"
    assert load_settings(squad_repo.root).workspace.policy == "green"
