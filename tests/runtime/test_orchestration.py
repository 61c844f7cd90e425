"""The orchestration log writer: file names, content, group commits, the bounded backlog."""

from __future__ import annotations

import os
import re
from pathlib import Path

import anyio
import pytest

from squadd.contracts.routes import RouteRequest
from squadd.fsio import HAS_SYNCFS
from squadd.runtime.orchestration import OrchestrationEntry, OrchestrationLog, render
from squadd.runtime.runtime import SquadRuntime
from squadd.state.journal import GroupCommit
from squadd.state.journal import files as journal_files
from squadd.state.journal import writer as journal_writer
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import SpareFiles
from tests.runtime.scripted import script, settings, text
from tests.support.held import hold

NAME = re.compile(r"^\d{8}T\d{6}\.\d{6}Z-fenster\.md$")


def _entry(log: OrchestrationLog, task: str = "fix the parser") -> OrchestrationEntry:
    return log.new_entry(agent="fenster", session_id="20260101-000000-abcdef12", task=task,
                         requested_by="lead", priority="normal", model="m1")


def test_stamps_are_unique_and_grow_so_names_never_collide(layout: SquadLayout) -> None:
    log = OrchestrationLog(layout)
    paths = [log.path_of(log.new_entry(agent="fenster", session_id=f"s{i}", task="t",
                                       requested_by="x", priority="normal", model=""))
             for i in range(200)]
    assert len(set(paths)) == 200 and paths == sorted(paths)
    assert all(NAME.match(p.name) for p in paths)
    assert all(p.parent == layout.orchestration_dir for p in paths)


def test_render_follows_squads_table_template_with_the_whole_task() -> None:
    log = OrchestrationLog(SquadLayout.at(Path("/tmp/squad-render-test/.squad")))
    entry = log.new_entry(agent="fenster", session_id="s1", task="line one | two\nline three",
                          requested_by="lead", priority="urgent", model="", role="Core Dev",
                          routed_by="rules", mode="background")
    text = render(entry.ended("error", error="provider said no", duration_s=90.0,
                              input_tokens=7, output_tokens=3))
    stamp = entry.started_at.isoformat(timespec="milliseconds")
    assert text.startswith(f"### {stamp} — line one \\| two line three\n\n"
                           "| Field | Value |\n|-------|-------|\n")
    for row in ("| **Agent routed** | fenster (Core Dev) |",
                "| **Why chosen** | matched a row of routing.md |",
                "| **Mode** | `background` |", "| **Requested by** | lead |",
                "| **Priority** | urgent |", "| **Model** | provider default |",
                "| **Session** | s1 |", "| **Task** | line one \\| two<br>line three |",
                "| **Duration (min)** | 1.5 |", "| **Duration (s)** | 90.000 |",
                "| **Tokens** | 7 in, 3 out |", "| **Outcome** | Failed: provider said no |"):
        assert f"\n{row}\n" in text, row
    rows = text.split("\n\n", 1)[1].splitlines()
    assert all(line.startswith("|") and line.endswith("|") for line in rows)  # one table
    assert "**Outcome**" not in render(entry)  # still running: no outcome yet


async def test_pending_spawn_and_end_are_written_once_in_final_form(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    log = OrchestrationLog(layout, linger_s=0.2)
    writes: list[int] = []
    real_replace = os.replace

    def counting_replace(src: str | Path, dst: str | Path) -> None:
        writes.append(1)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", counting_replace)
    async with anyio.create_task_group() as tg:
        await tg.start(log.run)
        entry = _entry(log)
        await log.submit(entry)
        await log.submit(entry.ended("completed", error=None, duration_s=0.1, input_tokens=1,
                                     output_tokens=2))
        await log.flush()
        log.close()
    assert writes == [1]
    text = log.path_of(entry).read_text(encoding="utf-8")
    assert "| **Outcome** | Completed |" in text and "| **Tokens** | 1 in, 2 out |" in text
    assert not list(layout.orchestration_dir.glob(".*.tmp"))


async def test_an_outcome_is_appended_to_the_file_written_at_spawn(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    log = OrchestrationLog(layout, linger_s=0.0)
    renames: list[int] = []
    real_replace = os.replace

    def counting_replace(src: str | Path, dst: str | Path) -> None:
        renames.append(1)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", counting_replace)
    async with anyio.create_task_group() as tg:
        await tg.start(log.run)
        entry = _entry(log)
        await log.submit(entry)
        await log.flush()
        at_spawn = log.path_of(entry).read_text(encoding="utf-8")
        await log.submit(entry.ended("error", error="boom", duration_s=2.0, input_tokens=3,
                                     output_tokens=4))
        await log.flush()
        log.close()
    final = log.path_of(entry).read_text(encoding="utf-8")
    assert renames == [1]  # one atomic write at spawn; the outcome was appended
    assert final.startswith(at_spawn) and "**Outcome**" not in at_spawn
    assert final.endswith("| **Duration (s)** | 2.000 |\n| **Tokens** | 3 in, 4 out |\n"
                          "| **Outcome** | Failed: boom |\n")


async def test_without_the_writer_or_past_the_backlog_entries_are_written_inline(
        layout: SquadLayout) -> None:
    log = OrchestrationLog(layout, backlog=1, linger_s=10)
    first = _entry(log, "not running yet")
    await log.submit(first)
    assert log.path_of(first).exists()
    async with anyio.create_task_group() as tg:
        await tg.start(log.run)
        queued, overflow = _entry(log, "queued"), _entry(log, "over the backlog")
        await log.submit(queued)
        await log.submit(overflow)
        assert log.path_of(overflow).exists() and not log.path_of(queued).exists()
        log.close()  # close writes what is pending at once, without lingering
    assert log.path_of(queued).exists()


async def test_a_write_that_fails_is_logged_and_never_raised(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    log = OrchestrationLog(layout)
    entry = _entry(log)
    monkeypatch.setattr(os, "fsync", no_space)
    async with anyio.create_task_group() as tg:
        await tg.start(log.run)
        await log.submit(entry)
        log.close()
    assert not log.path_of(entry).exists()
    assert not list(layout.orchestration_dir.glob(".*.tmp"))


async def test_a_broken_log_folder_never_fails_a_route(layout: SquadLayout) -> None:
    layout.orchestration_dir.write_text("a file where the folder should be", encoding="utf-8")
    async with SquadRuntime(layout, settings(), script([text("still fine")])) as runtime:
        result = await runtime.route(RouteRequest(target_agent="fenster", task="t"))
    assert result.ok and result.answer == "still fine"
    assert layout.orchestration_dir.is_file()


async def test_with_the_group_commit_entries_are_written_in_place_and_share_its_sync(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = GroupCommit(layout)
    log = OrchestrationLog(layout, commits=commits, linger_s=0.0)
    synced: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    renames: list[str] = []

    def recording_fsync(fd: int) -> None:
        synced.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
        real_fsync(fd)

    def recording_replace(src: str | Path, dst: str | Path) -> None:
        renames.append(str(dst))
        real_replace(src, dst)

    systems: list[int] = []  # the file systems synced whole (a device each)
    real_system = journal_files.sync_file_system

    def recording_system(fd: int) -> bool:
        done = real_system(fd)
        if done:
            systems.append(os.fstat(fd).st_dev)
        return done

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    monkeypatch.setattr(journal_files, "sync_file_system", recording_system)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await tg.start(log.run)
        entry = _entry(log)
        await log.submit(entry)
        await log.flush()
        assert commits.path is not None
        journaled = commits.path.read_text(encoding="utf-8")
        at_spawn = log.path_of(entry).read_text(encoding="utf-8")
        await log.submit(entry.ended("completed", error=None, duration_s=1.0, input_tokens=1,
                                     output_tokens=2))
        await log.flush()
        batches, synced_while_running = commits.batches, list(synced)
        assert systems == []
        log.close()
        commits.close()
    where = f"orchestration-log/{log.path_of(entry).name}"
    assert f'"t":"{where}"' in journaled  # the journal holds the entry's bytes
    assert batches == 2 and renames == []  # one journal sync each; written in place
    assert not [path for path in synced_while_running if "orchestration-log" in path]
    # the close's checkpoint syncs it: with its whole file system (one syncfs), or by itself
    if HAS_SYNCFS:
        assert systems == [log.path_of(entry).stat().st_dev]
    else:
        assert log.path_of(entry).as_posix() in synced
    final = log.path_of(entry).read_text(encoding="utf-8")
    assert final.startswith(at_spawn) and "**Outcome**" not in at_spawn
    assert final.endswith("| **Outcome** | Completed |\n")
    assert not list(layout.orchestration_dir.glob(".*.tmp"))


def _with_spares(layout: SquadLayout) -> tuple[SpareFiles, GroupCommit, OrchestrationLog]:
    """Three spare files, a group commit and a log writing through it, in a squad that has
    its orchestration-log folder (a missing one is made: no spare)."""
    layout.orchestration_dir.mkdir(parents=True)
    spares = SpareFiles(layout.sessions_dir)
    spares.refill(3)
    commits = GroupCommit(layout)
    return spares, commits, OrchestrationLog(layout, commits=commits, spares=spares,
                                             linger_s=0.0)


async def test_with_the_group_commit_a_new_entry_is_a_spare_file_moved_into_place(
        layout: SquadLayout) -> None:
    spares, commits, log = _with_spares(layout)
    made = {p.stat().st_ino for p in spares.folder.iterdir()}
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await tg.start(log.run)
        first, second = _entry(log, "first"), _entry(log, "second")
        await log.submit(first)
        await log.submit(second)
        await log.flush()
        log.close()
        commits.close()
    # No file was created on the route's path: both entries are spares made before.
    entries = {log.path_of(first).stat().st_ino, log.path_of(second).stat().st_ino}
    assert entries < made and len(spares) == 1
    assert {p.stat().st_ino for p in spares.folder.iterdir()} == made - entries
    assert "| **Task** | first |" in log.path_of(first).read_text(encoding="utf-8")
    assert "| **Task** | second |" in log.path_of(second).read_text(encoding="utf-8")


def test_an_entrys_appends_name_their_end_as_the_file_has_it(layout: SquadLayout) -> None:
    from squadd.runtime.orchestration import _EntryFile

    spares, _commits, log = _with_spares(layout)
    entry = _entry(log)
    spawn = _EntryFile(layout, entry, whole=True, spares=spares).append_unsynced()
    path = log.path_of(entry)
    assert spawn is not None and spawn.created and spawn.end == path.stat().st_size
    ended = entry.ended("completed", error=None, duration_s=1.0, input_tokens=1,
                        output_tokens=2)
    outcome = _EntryFile(layout, ended, whole=False, spares=spares).append_unsynced()
    assert outcome is not None and not outcome.created
    assert outcome.end == path.stat().st_size > spawn.end  # what a replay puts back ends there


async def test_with_the_group_commit_a_write_that_fails_is_logged_and_the_rest_written(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    log = OrchestrationLog(layout, commits=commits, linger_s=10)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await tg.start(log.run)
        taken, fine = _entry(log, "taken"), _entry(log, "fine")
        layout.orchestration_dir.mkdir(parents=True, exist_ok=True)
        log.path_of(taken).mkdir()  # a folder where its file would go
        await log.submit(taken)
        await log.submit(fine)
        log.close()
        await log.flush()
        commits.close()
    assert log.path_of(taken).is_dir()
    assert "| **Task** | fine |" in log.path_of(fine).read_text(encoding="utf-8")


@pytest.mark.parametrize("which", ["spawn", "outcome"])
async def test_with_the_group_commit_a_link_at_an_entrys_name_is_never_written_through(
        layout: SquadLayout, tmp_path: Path, which: str) -> None:
    _, commits, log = _with_spares(layout)
    outside = tmp_path / "outside.md"
    outside.write_text("theirs\n", encoding="utf-8")
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await tg.start(log.run)
        linked, fine = _entry(log, "linked"), _entry(log, "fine")
        path = log.path_of(linked)
        if which == "spawn":
            path.symlink_to(outside)
        else:  # the spawn is written, then its file is swapped for a link
            await log.submit(linked)
            await log.flush()
            path.unlink()
            path.symlink_to(outside)
            linked = linked.ended("completed", error=None, duration_s=1.0, input_tokens=1,
                                  output_tokens=1)
        await log.submit(linked)
        await log.submit(fine)
        await log.flush()
        log.close()
        commits.close()
    assert outside.read_text(encoding="utf-8") == "theirs\n" and path.is_symlink()
    assert "| **Task** | fine |" in log.path_of(fine).read_text(encoding="utf-8")


async def test_an_end_submitted_past_the_backlog_waits_for_its_spawn_being_written(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, journal_writer, "_datasync")
    commits = GroupCommit(layout)
    log = OrchestrationLog(layout, commits=commits, backlog=1, linger_s=0.0)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await tg.start(log.run)
        spawned, other = _entry(log, "spawned"), _entry(log, "other")
        await log.submit(spawned)
        await held.wait_entered()  # its spawn is being written, held
        await log.submit(other)  # the backlog is full now
        tg.start_soon(log.submit, spawned.ended("completed", error=None, duration_s=1.0,
                                                input_tokens=1, output_tokens=2))
        await anyio.wait_all_tasks_blocked()
        held.release.set()
        await log.flush()
        log.close()
        commits.close()
    text = log.path_of(spawned).read_text(encoding="utf-8")
    assert text.count("| **Task** | spawned |") == 1
    assert text.endswith("| **Outcome** | Completed |\n")
    assert log.path_of(other).exists()
