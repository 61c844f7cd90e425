"""The group-commit writer: concurrent sessions' records share one journal sync, nobody is
woken before that sync, and a journal left by a killed process gives back what a power cut
took from the transcripts."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from squadd.fsio import HAS_SYNCFS
from squadd.state.journal import CommitState, GroupCommit, replay_journals
from squadd.state.journal import commit as commit_module
from squadd.state.journal import files as files_module
from squadd.state.journal import replay as replay_module
from squadd.state.journal import writer as writer_module
from squadd.state.journal.writer import JournalWriter
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Appended, TranscriptWriter, read_transcript
from tests._helpers import REPO_ROOT
from tests.support.held import Held, hold


@pytest.fixture
def layout(tmp_path: Path) -> SquadLayout:
    root = tmp_path / "repo" / ".squad"
    root.mkdir(parents=True)
    return SquadLayout.at(root)


def dead_journal(layout: SquadLayout, *lines: tuple[str, int, str]) -> Path:
    """A journal a killed runtime of an older version left: one JSON line per (file in the
    squad, offset its bytes end at, the bytes as text)."""
    folder = layout.transcript_journals_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "1-dead.log"
    path.write_text("".join(json.dumps({"t": where, "end": end, "data": data}) + "\n"
                            for where, end, data in lines), encoding="utf-8")
    return path


def never_lingering(monkeypatch: pytest.MonkeyPatch, layout: SquadLayout, *,
                    held: str) -> tuple[GroupCommit, Held]:
    """A writer whose linger never ends (begun records go only when something sends them),
    with the journal writer's function `held` held in the commit thread."""
    monkeypatch.setattr(commit_module, "LINGER_S", 3600.0)
    return GroupCommit(layout), hold(monkeypatch, writer_module, held)


def writer_for(layout: SquadLayout, session: str, text: str) -> TranscriptWriter:
    writer = TranscriptWriter(layout.transcripts_dir / f"{session}.jsonl")
    writer.add("message", message={"role": "user", "content": text})
    return writer


async def test_records_waiting_together_share_one_sync_and_nobody_wakes_before_it(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, writer_module, "_datasync")
    commits = GroupCommit(layout)
    woken: list[str] = []
    all_woken = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)

        async def session(name: str) -> None:
            await commits.commit(writer_for(layout, name, f"hello from {name}"))
            woken.append(name)
            if len(woken) == 9:
                all_woken.set()

        tg.start_soon(session, "first")
        await held.wait_entered()  # batch one is in its sync, held
        for n in range(8):  # these queue behind it: they form batch two
            tg.start_soon(session, f"s{n}")
        await anyio.wait_all_tasks_blocked()
        assert woken == []  # the first is not answered before its sync ended
        held.release.set()
        with anyio.fail_after(30):
            await all_woken.wait()
        commits.close()
    assert woken[0] == "first"
    assert len(held.calls) == 2 and commits.batches == 2  # nine sessions, two journal syncs
    for name in ["first", *(f"s{n}" for n in range(8))]:
        messages = read_transcript(layout.transcripts_dir / f"{name}.jsonl").messages
        assert messages == [{"role": "user", "content": f"hello from {name}"}]
    assert not list(layout.transcript_journals_dir.iterdir())  # a clean close removes it


async def test_the_commit_loop_moves_through_its_states_and_flushed_waits_for_each_record(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, writer_module, "_datasync")
    commits = GroupCommit(layout)
    assert commits.state is CommitState.STOPPED and not commits.running
    flushed = anyio.Event()

    async def wait_flushed() -> None:
        await commits.flushed(timeout_s=30)
        flushed.set()

    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        assert commits.state is CommitState.IDLE
        await commits.flushed()  # nothing submitted: nothing to wait for
        tg.start_soon(commits.commit, writer_for(layout, "first", "x"))
        await held.wait_entered()
        assert commits.state is CommitState.SYNCING
        begun = commits.begin(writer_for(layout, "begun", "y"))  # rides after the first
        with pytest.raises(TimeoutError, match="not all durable"):
            await commits.flushed(timeout_s=0.05)  # its sync is held
        tg.start_soon(wait_flushed)
        await anyio.wait_all_tasks_blocked()
        assert not flushed.is_set()
        held.release.set()
        await commits.reached(CommitState.LINGERING, timeout_s=30)  # the begun one waits
        with anyio.fail_after(30):
            await flushed.wait()  # once the linger sent it and its sync ended
        assert begun._job is not None and begun._job.done.is_set()
        assert commits.batches == 2
        commits.close()
    assert commits.state is CommitState.CLOSED and not commits.running
    for name, text in (("first", "x"), ("begun", "y")):
        messages = read_transcript(layout.transcripts_dir / f"{name}.jsonl").messages
        assert messages == [{"role": "user", "content": text}]


async def test_flushed_does_not_wait_for_records_submitted_after_it(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, writer_module, "_datasync")
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        tg.start_soon(commits.commit, writer_for(layout, "first", "x"))
        await held.wait_entered()
        flushed = anyio.Event()

        async def wait_flushed() -> None:
            await commits.flushed(timeout_s=30)
            flushed.set()

        tg.start_soon(wait_flushed)
        await anyio.wait_all_tasks_blocked()
        second = writer_for(layout, "second", "y")
        tg.start_soon(commits.commit, second)  # queued behind the held batch, after flushed
        await anyio.wait_all_tasks_blocked()
        held.entered.clear()
        real = held.release
        # Hold the second batch's sync: flushed must return with only the first durable.
        second_held = hold(monkeypatch, writer_module, "_datasync")
        real.set()
        with anyio.fail_after(30):
            await flushed.wait()
        await second_held.wait_entered()
        assert not second_held.release.is_set() and commits.state is CommitState.SYNCING
        second_held.release.set()
        commits.close()


async def test_commits_made_in_one_pass_of_the_loop_share_one_batch(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        async with anyio.create_task_group() as sessions:
            for n in range(5):  # all ready at once, with nothing in flight
                sessions.start_soon(commits.commit, writer_for(layout, f"s{n}", "x"))
        assert commits.batches == 1  # the first waited one pass for the others
        commits.close()


async def test_a_commit_thread_hit_by_a_base_exception_fails_that_batch_and_goes_on(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    real = TranscriptWriter.append_unsynced
    broken = {"once"}

    def stopping(self: TranscriptWriter) -> Appended | None:
        if broken:
            broken.clear()
            raise SystemExit("a writer that calls sys.exit")
        return real(self)

    monkeypatch.setattr(TranscriptWriter, "append_unsynced", stopping)
    commits = GroupCommit(layout)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(commits.run)
            with pytest.raises(Exception, match=r"sys\.exit"):
                await commits.commit(writer_for(layout, "first", "lost"))
            await commits.commit(writer_for(layout, "second", "kept"))  # the thread lives
            commits.close()
    messages = read_transcript(layout.transcripts_dir / "second.jsonl").messages
    assert messages == [{"role": "user", "content": "kept"}]


async def test_a_commit_the_disk_does_not_answer_fails_at_its_timeout_and_lands_later(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, writer_module, "_datasync")
    commits = GroupCommit(layout, timeout_s=0.2)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(commits.run)
            with pytest.raises(OSError) as raised:
                await commits.commit(writer_for(layout, "stuck", "x"))  # its sync is held
            assert raised.value.errno == errno.ETIMEDOUT and "not made durable" in str(
                raised.value)
            assert held.entered.is_set() and not held.release.is_set()  # still in its sync
            begun = commits.begin(writer_for(layout, "begun", "y"))
            with pytest.raises(OSError, match="not made durable"):
                await commits.finish(begun)  # behind the held batch: it times out too
            held.release.set()
            await commits.commit(writer_for(layout, "after", "z"))  # the writer goes on
            commits.close()
    for name, text in (("stuck", "x"), ("begun", "y"), ("after", "z")):  # all landed
        messages = read_transcript(layout.transcripts_dir / f"{name}.jsonl").messages
        assert messages == [{"role": "user", "content": text}]


async def test_background_appends_go_behind_every_sessions_records_and_share_a_sync(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    held = hold(monkeypatch, writer_module, "_datasync")
    commits = GroupCommit(layout)
    done: list[str] = []
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)

        async def commit(name: str, background: bool) -> None:
            [error] = await commits.commit_all([writer_for(layout, name, name)],
                                               background=background)
            assert error is None
            done.append(name)

        tg.start_soon(commit, "first", False)
        await held.wait_entered()  # batch one is in its sync, held
        for n in range(40):
            tg.start_soon(commit, f"log{n}", True)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(commit, "session", False)  # queued after all forty
        await anyio.wait_all_tasks_blocked()
        held.release.set()
        await commits.flushed(timeout_s=30)
        await anyio.wait_all_tasks_blocked()  # the waiters woken by the landings go on
        commits.close()
    # Batch two: the session's record and the first few background ones. The rest are
    # written a few a batch while the thread has nothing else to do, then synced at once.
    few = commit_module.BACKGROUND_PER_BATCH
    assert commits.batches == 3 and commits.unsynced_batches == -(-(40 - few) // few)
    assert done.index("session") < done.index(f"log{few}")
    assert sorted(done) == sorted(["first", "session", *(f"log{n}" for n in range(40))])


async def test_background_appends_ride_the_next_sessions_batch(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_module, "LINGER_S", 3600.0)  # the linger would never end
    commits = GroupCommit(layout)
    done: list[str] = []
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)

        async def log_entry() -> None:
            [error] = await commits.commit_all([writer_for(layout, "log", "entry")],
                                               background=True)
            assert error is None
            done.append("log")

        tg.start_soon(log_entry)
        # the thread writes it and lands it on the loop, where it waits for a ride
        await commits.reached(CommitState.LINGERING, timeout_s=30)
        await anyio.wait_all_tasks_blocked()
        assert commits.batches == 0 and done == []  # no sync of its own
        # Written while the thread had nothing else to do: in its file and framed in the
        # journal already, and not done before a sync.
        assert commits.unsynced_batches == 1
        assert (layout.transcripts_dir / "log.jsonl").read_bytes().endswith(b'"entry"}}\n')
        with anyio.fail_after(30):
            await commits.commit(writer_for(layout, "session", "a record"))
        await anyio.wait_all_tasks_blocked()  # its waiter woke in the same landing
        assert done == ["log"] and commits.batches == 1
        tg.cancel_scope.cancel()
    assert read_transcript(layout.transcripts_dir / "log.jsonl").messages == [
        {"role": "user", "content": "entry"}]


async def test_a_request_begun_while_background_appends_are_written_still_rides(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    commits, held = never_lingering(monkeypatch, layout, held="frame")
    logged: list[Exception | None] = []
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)

        async def log_entry() -> None:
            logged.extend(await commits.commit_all([writer_for(layout, "log", "entry")],
                                                   background=True))

        tg.start_soon(log_entry)
        await held.wait_entered()  # the entry is being written ahead of its sync, held
        request = writer_for(layout, "asked", "a request")
        pending = commits.begin(request)
        held.release.set()
        await commits.reached(CommitState.LINGERING, timeout_s=30)  # that batch landed
        # The request was not sent on its own when that batch landed: it waits for a ride.
        assert pending._job is not None and not pending._job.sent and commits.batches == 0
        request.add("message", message={"role": "assistant", "content": "the reply"})
        with anyio.fail_after(30):
            await commits.finish(pending)  # one sync: the request, its reply, the entry
        await anyio.wait_all_tasks_blocked()  # the entry's waiter woke in the same landing
        assert commits.batches == 1 and logged == [None]
        tg.cancel_scope.cancel()
    messages = read_transcript(layout.transcripts_dir / "asked.jsonl").messages
    assert [m["content"] for m in messages] == ["a request", "the reply"]


async def test_a_request_asked_for_while_background_appends_are_written_goes_on_their_landing(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    commits, held = never_lingering(monkeypatch, layout, held="frame")
    finished = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        tg.start_soon(functools.partial(commits.commit_all, [writer_for(layout, "log", "x")],
                                        background=True))
        await held.wait_entered()  # the entry is being written ahead of its sync, held
        pending = commits.begin(writer_for(layout, "asked", "a request"))

        async def finish() -> None:
            await commits.finish(pending)
            finished.set()

        tg.start_soon(finish)  # asked for while that batch is with the thread
        await anyio.wait_all_tasks_blocked()
        held.release.set()
        with anyio.fail_after(30):  # sent when that batch lands, not after a linger
            await finished.wait()
        assert commits.batches == 1
        tg.cancel_scope.cancel()


async def written_ahead(tg: TaskGroup, commits: GroupCommit, layout: SquadLayout,
                        logged: list[Exception | None]) -> None:
    """Have one background append written ahead of its sync (the thread was idle), and wait
    until that batch has landed; its waiter, in `tg`, adds its error to `logged` once done."""

    async def log_entry() -> None:
        logged.extend(await commits.commit_all([writer_for(layout, "log", "x")],
                                               background=True))

    tg.start_soon(log_entry)
    # the thread writes it and lands it on the loop, where it waits for a sync to ride
    await commits.reached(CommitState.LINGERING, timeout_s=30)


async def test_appends_written_ahead_are_synced_when_the_writer_stops_in_its_linger(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_module, "LINGER_S", 3600.0)  # the linger would never end
    commits = GroupCommit(layout)
    logged: list[Exception | None] = []
    async with anyio.create_task_group() as tg:
        writing = anyio.CancelScope()

        async def run_writer(*, task_status: TaskStatus[None]) -> None:
            with writing:
                await commits.run(task_status=task_status)

        await tg.start(run_writer)
        await written_ahead(tg, commits, layout, logged)
        assert logged == [] and commits.batches == 0  # written, and waiting for a sync
        writing.cancel()  # stopped while it lingers: what is written is still synced
    assert logged == [None] and commits.batches == 1
    assert _journals(layout) == []  # and the journal closed cleanly after it
    assert read_transcript(layout.transcripts_dir / "log.jsonl").messages == [
        {"role": "user", "content": "x"}]


async def test_appends_written_ahead_whose_journal_write_fails_are_synced_file_by_file(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = JournalWriter.write
    synced, _ = _synced_files(monkeypatch)

    def failing_unsynced(self: JournalWriter, data: bytes, *, sync: bool = True) -> None:
        if not sync:
            raise OSError(28, "No space left on device")
        real_write(self, data, sync=sync)

    monkeypatch.setattr(JournalWriter, "write", failing_unsynced)
    commits = GroupCommit(layout)
    logged: list[Exception | None] = []
    log_file = layout.transcripts_dir / "log.jsonl"
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await written_ahead(tg, commits, layout, logged)
        assert synced == [log_file]  # durable by itself once the journal could not hold it
        with anyio.fail_after(30):
            await commits.commit(writer_for(layout, "session", "a record"))
        await anyio.wait_all_tasks_blocked()  # its waiter woke in the same landing (or before)
        synced_before_close = list(synced)  # (the close's checkpoint syncs what it journaled)
        commits.close()
    assert logged == [None] and synced_before_close == [log_file]  # not synced again
    assert read_transcript(layout.transcripts_dir / "log.jsonl").messages == [
        {"role": "user", "content": "x"}]


async def test_background_appends_nobody_takes_along_go_by_themselves_after_the_linger(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        with anyio.fail_after(30):
            [error] = await commits.commit_all([writer_for(layout, "log", "alone")],
                                               background=True)
        assert error is None and commits.batches == 1
        commits.close()


async def test_a_writer_cancelled_in_its_linger_drains_background_appends_past_one_batch(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    commits, held = never_lingering(monkeypatch, layout, held="_datasync")
    errors: list[Exception | None] = []
    logs = commit_module.BACKGROUND_PER_BATCH + 4
    async with anyio.create_task_group() as tg:
        writing = anyio.CancelScope()

        async def run_writer(*, task_status: TaskStatus[None]) -> None:
            with writing:
                await commits.run(task_status=task_status)

        async def commit(name: str, background: bool) -> None:
            with anyio.CancelScope(shield=True):
                errors.extend(await commits.commit_all([writer_for(layout, name, name)],
                                                       background=background))

        await tg.start(run_writer)
        commits.begin(writer_for(layout, "asked", "a request"))  # the writer lingers for it
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(commit, "session", False)  # takes the request along; its sync is held
        await held.wait_entered()
        for n in range(logs):
            tg.start_soon(commit, f"log{n}", True)
        await anyio.wait_all_tasks_blocked()
        writing.cancel()  # cancelled in its linger: it drains what waits, lingering no more
        await anyio.wait_all_tasks_blocked()
        held.release.set()
        with anyio.move_on_after(30):
            await commits.flushed()
            await anyio.wait_all_tasks_blocked()  # the waiters woken by the landings go on
        drained = len(errors)
        commits.close()  # lets a stuck drain go (on the code before, it waited for a nudge)
    assert drained == 1 + logs and errors == [None] * (1 + logs)
    assert commits.batches == 3  # the request and the session, then the log entries 8 + 4


def _journals(layout: SquadLayout) -> list[str]:
    return sorted(p.name for p in layout.transcript_journals_dir.iterdir())


@pytest.fixture(params=["syncfs", "file by file"])
def sync_step(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The function of the journal's `files` module that makes a full journal's files
    durable, for a test to hold or fail: one `sync_file_system` of their file system, or
    (where the system has no syncfs) `sync_file`, once a file."""
    if request.param == "file by file":
        monkeypatch.setattr(files_module, "sync_file_system", lambda fd: False)
        return "sync_file"
    return "sync_file_system"


async def test_a_full_journal_is_retired_off_the_commit_path_while_commits_go_on(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, sync_step: str) -> None:
    held = hold(monkeypatch, files_module, sync_step)
    commits = GroupCommit(layout, checkpoint_bytes=1)  # every batch fills its journal
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        first = commits.path
        await commits.commit(writer_for(layout, "a", "one"))
        await held.wait_entered()  # retiring the first journal, held
        assert first is not None and first.exists()
        for name in ("b", "c"):  # committed while it is held: nobody waits for a retirement
            await commits.commit(writer_for(layout, name, name))
        assert commits.batches == 3 and not held.release.is_set()
        assert first.name in _journals(layout) and len(_journals(layout)) == 4
        held.release.set()
        await commits.retired(timeout_s=30)  # the full ones go once their files are synced
        assert commits.path is not None and _journals(layout) == [commits.path.name]
        commits.close()
    assert _journals(layout) == []
    for name, text in (("a", "one"), ("b", "b"), ("c", "c")):
        messages = read_transcript(layout.transcripts_dir / f"{name}.jsonl").messages
        assert messages == [{"role": "user", "content": text}]


async def test_full_journals_that_cannot_be_retired_are_left_for_the_next_start(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, sync_step: str) -> None:
    def failing_sync(*args: object, **kwargs: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(files_module, sync_step, failing_sync)
    commits = GroupCommit(layout, checkpoint_bytes=1)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        for name in ("a", "b"):
            await commits.commit(writer_for(layout, name, name))
        commits.close()
    assert len(_journals(layout)) == 2  # the two full ones stay (the last held nothing)
    monkeypatch.undo()
    (layout.transcripts_dir / "b.jsonl").unlink()  # as if a power cut took it
    replayed = replay_journals(layout)
    assert replayed.journals == 2 and replayed.restored == ["run/transcripts/b.jsonl"]
    assert _journals(layout) == []


async def test_a_failed_retirement_is_tried_again_when_the_next_journal_fills_not_each_batch(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, sync_step: str) -> None:
    attempts: list[object] = []

    def failing_sync(*args: object, **kwargs: object) -> None:
        attempts.append(args[0])  # the file, or the journal's fd its file system is synced by
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(files_module, sync_step, failing_sync)
    commits = GroupCommit(layout, checkpoint_bytes=1)  # the first batch fills its journal
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await commits.commit(writer_for(layout, "a", "a"))
        commits.checkpoint_bytes = 1 << 30  # the next journal never fills
        await commits.retired(timeout_s=30)  # tried (in a thread), and failed
        assert len(attempts) == 1
        for n in range(5):
            await commits.commit(writer_for(layout, f"b{n}", "b"))
        await anyio.wait_all_tasks_blocked()
        assert len(attempts) == 1 and commits.batches == 6
        commits.close()
    # At close: the full journal is tried once more (then left for the next start), and the
    # current one's checkpoint fails on its first file (or its one syncfs).
    if sync_step == "sync_file":
        assert [getattr(path, "name", None) for path in attempts[:2]] == ["a.jsonl", "a.jsonl"]
    else:
        assert attempts[0] == attempts[1] != attempts[2]  # the full journal's fd, twice
    assert len(attempts) == 3


def _synced_files(monkeypatch: pytest.MonkeyPatch) -> tuple[list[Path], list[int]]:
    """What the journal's `files` module fsyncs file by file, and the fds whose file system
    it syncs (each still done)."""
    files: list[Path] = []
    systems: list[int] = []
    real_file, real_system = files_module.sync_file, files_module.sync_file_system

    def sync_file(path: Path, created: bool) -> None:
        files.append(path)
        real_file(path, created)

    def sync_system(fd: int) -> bool:
        systems.append(fd)
        return real_system(fd)

    monkeypatch.setattr(files_module, "sync_file", sync_file)
    monkeypatch.setattr(files_module, "sync_file_system", sync_system)
    return files, systems


@pytest.mark.skipif(not HAS_SYNCFS, reason="no syncfs here")
async def test_a_checkpoint_makes_its_files_durable_with_one_sync_of_their_file_system(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    files, systems = _synced_files(monkeypatch)
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        for n in range(20):
            await commits.commit(writer_for(layout, f"s{n}", "x"))
        journal = commits.path
        commits.close()
    assert files == [] and len(systems) == 1  # one syncfs for twenty files, not twenty fsyncs
    assert journal is not None and not journal.exists()


@pytest.mark.skipif(not HAS_SYNCFS or not Path("/dev/shm").is_dir(),
                    reason="needs syncfs and a second file system")
def test_files_on_another_file_system_than_the_journal_are_synced_one_by_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    files, systems = _synced_files(monkeypatch)
    here = tmp_path / "here.jsonl"
    here.write_text("x\n", encoding="utf-8")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
            if Path(other).stat().st_dev == tmp_path.stat().st_dev:
                pytest.skip("/dev/shm is on the same file system here")
            there = Path(other) / "there.jsonl"
            there.write_text("y\n", encoding="utf-8")
            gone = Path(other) / "gone" / "gone.jsonl"  # its folder removed meanwhile
            files_module.sync_all({here, there, gone}, fd)
    finally:
        os.close(fd)
    assert systems == [fd]  # one syncfs for the file beside the journal
    assert sorted(files) == sorted([there, gone])  # (gone: skipped, not an error)


def test_without_syncfs_every_file_is_synced_by_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files, _ = _synced_files(monkeypatch)
    monkeypatch.setattr(files_module, "sync_file_system", lambda fd: False)
    paths = {tmp_path / f"{n}.jsonl" for n in range(3)}
    for path in paths:
        path.write_text("x\n", encoding="utf-8")
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        files_module.sync_all(paths, fd)
    finally:
        os.close(fd)
    assert sorted(files) == sorted(paths)


async def test_begun_records_go_with_the_next_commits_batch(layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        begun = commits.begin(writer_for(layout, "asked", "the request's messages"))
        await commits.commit(writer_for(layout, "answered", "an answer"))  # takes them along
        assert commits.batches == 1
        await commits.finish(begun)  # already durable: nothing more to sync
        assert commits.batches == 1
        commits.close()
    for name, text in (("asked", "the request's messages"), ("answered", "an answer")):
        messages = read_transcript(layout.transcripts_dir / f"{name}.jsonl").messages
        assert messages == [{"role": "user", "content": text}]


async def test_begun_records_nobody_takes_along_go_by_themselves_after_the_linger(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        begun = commits.begin(writer_for(layout, "asked", "alone"))
        await commits.flushed(timeout_s=30)  # the writer's own task sends them
        assert commits.batches == 1
        await commits.finish(begun)
        assert commits.batches == 1
        commits.close()


async def test_finish_sends_begun_records_at_once(layout: SquadLayout,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_module, "LINGER_S", 3600.0)  # the linger would never end
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        begun = commits.begin(writer_for(layout, "asked", "now"))
        with anyio.fail_after(30):
            await commits.finish(begun)
        assert commits.batches == 1
        tg.cancel_scope.cancel()  # the writer's task is in its linger
    messages = read_transcript(layout.transcripts_dir / "asked.jsonl").messages
    assert messages == [{"role": "user", "content": "now"}]


async def test_begun_records_still_in_their_linger_are_committed_when_the_writer_is_cancelled(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_module, "LINGER_S", 3600.0)
    commits = GroupCommit(layout)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(commits.run)
            begun = commits.begin(writer_for(layout, "asked", "kept"))
            await anyio.wait_all_tasks_blocked()  # the writer's task is in its linger
            tg.cancel_scope.cancel()
        await commits.finish(begun)
    assert commits.batches == 1 and not commits.running
    messages = read_transcript(layout.transcripts_dir / "asked.jsonl").messages
    assert messages == [{"role": "user", "content": "kept"}]
    assert _journals(layout) == []


async def test_a_begun_write_that_fails_is_told_at_once_and_raised_by_finish(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    (layout.transcripts_dir / "blocked.jsonl").mkdir(parents=True)  # a folder: cannot append
    told = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        begun = commits.begin(writer_for(layout, "blocked", "x"), on_error=told.set)
        with anyio.fail_after(30):
            await told.wait()  # before anyone asked for them
        with pytest.raises(OSError):
            await commits.finish(begun)
        commits.close()


async def test_a_write_that_fails_is_raised_to_its_session_only(layout: SquadLayout) -> None:
    commits = GroupCommit(layout)
    (layout.transcripts_dir / "blocked.jsonl").mkdir(parents=True)  # a folder: cannot append
    errors: dict[str, BaseException] = {}
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)

        async def session(name: str) -> None:
            try:
                await commits.commit(writer_for(layout, name, "x"))
            except OSError as exc:
                errors[name] = exc

        async with anyio.create_task_group() as sessions:
            sessions.start_soon(session, "blocked")
            sessions.start_soon(session, "fine")
        commits.close()
    assert list(errors) == ["blocked"]
    assert read_transcript(layout.transcripts_dir / "fine.jsonl").messages


# The child commits records through a group commit, says so, and waits to be killed: its
# journal stays behind, locked until the kill.
CHILD = """
import sys
from pathlib import Path
import anyio
from squadd.state.journal import GroupCommit
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import TranscriptWriter

layout = SquadLayout.at(Path(sys.argv[1]))

async def main():
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        for turn in range(3):
            for name in ("a", "b"):
                writer = TranscriptWriter(layout.transcripts_dir / f"{name}.jsonl")
                writer.add("message", message={"role": "user", "content": f"{name} {turn}"})
                await commits.commit(writer)
        print("committed", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)

anyio.run(main)
"""


def test_a_killed_writers_journal_restores_what_a_power_cut_took(layout: SquadLayout) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(layout.root)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "committed"
        assert replay_journals(layout).journals == 0  # its owner is alive: left alone
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    a, b = layout.transcripts_dir / "a.jsonl", layout.transcripts_dir / "b.jsonl"
    whole_a = a.read_bytes()
    # A power cut loses what was never synced: b.jsonl entirely, and a.jsonl's last record
    # and a half.
    lines = whole_a.split(b"\n")
    os.truncate(a, len(lines[0]) + 1 + len(lines[1]) // 2)
    b.unlink()

    replayed = replay_journals(layout)
    assert replayed.journals == 1
    assert sorted(replayed.restored) == ["run/transcripts/a.jsonl", "run/transcripts/b.jsonl"]
    assert a.read_bytes() == whole_a
    assert [m["content"] for m in read_transcript(b).messages] == ["b 0", "b 1", "b 2"]
    assert not list(layout.transcript_journals_dir.iterdir())
    assert replay_journals(layout).journals == 0  # replayed once, then gone


def test_a_journal_line_naming_anything_but_a_transcript_is_ignored(
        layout: SquadLayout) -> None:
    folder = layout.transcript_journals_dir
    folder.mkdir(parents=True)
    (folder / "1-dead.log").write_text(
        '{"t":"../../outside.jsonl","end":3,"data":"ab\\n"}\n'
        '{"t":"team.md","end":3,"data":"ab\\n"}\n'
        '{"t":"run/transcripts/ok.jsonl","end":3,"data":"ab\\n"}\n'
        '{"t":"run/transcripts/torn.jsonl","end":', encoding="utf-8")
    replayed = replay_journals(layout)
    assert replayed.restored == ["run/transcripts/ok.jsonl"]
    assert not (layout.root / "team.md").exists()
    assert not (layout.repo / "outside.jsonl").exists()
    assert not (layout.root.parent.parent / "outside.jsonl").exists()


def test_a_journaled_orchestration_entry_a_power_cut_took_is_put_back(
        layout: SquadLayout) -> None:
    name = "20261126T101010.000001Z-fenster.md"
    spawn, outcome = "### spawn\n| a | b |\n", "| **Outcome** | Completed |\n"
    dead_journal(
        layout,
        (f"orchestration-log/{name}", len(spawn), spawn),
        (f"orchestration-log/{name}", len(spawn + outcome), outcome),
        # names squadd never writes there are not written from a journal
        ("orchestration-log/../team.md", 3, "ab\n"),
        ("orchestration-log/notes.md", 3, "ab\n"),
        ("orchestration-log/20261126T101010.000001Z-../x.md", 3, "ab\n"),
        ("orchestration-log/sub/20261126T101010.000001Z-a.md", 3, "ab\n"),
    )
    layout.orchestration_dir.mkdir()
    entry = layout.orchestration_dir / name
    entry.write_text(spawn[:5], encoding="utf-8")  # the head of the spawn reached the disk

    replayed = replay_journals(layout)
    assert replayed.restored == [f"orchestration-log/{name}"]
    assert entry.read_text(encoding="utf-8") == spawn + outcome
    assert sorted(p.name for p in layout.orchestration_dir.iterdir()) == [name]
    assert not (layout.root / "team.md").exists()


async def test_a_journal_write_that_failed_part_way_does_not_hide_the_next_batch(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = GroupCommit(layout)
    real_write = os.pwrite
    failures: list[int] = []

    def half_then_full_disk(fd: int, data: bytes, offset: int) -> int:
        if fd == commits.journal.fd and any(data) and not failures:
            # the first journal write of frames: half, then ENOSPC
            failures.append(real_write(fd, data[: len(data) // 2], offset))
            raise OSError(28, "No space left on device")
        return real_write(fd, data, offset)

    monkeypatch.setattr(writer_module.os, "pwrite", half_then_full_disk)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await commits.commit(writer_for(layout, "a", "first"))  # synced file by file instead
        await commits.commit(writer_for(layout, "b", "second"))  # journaled
        assert commits.path is not None
        left = commits.path.read_bytes()  # what a kill would leave behind
        commits.close()
    assert failures and commits.batches == 1
    (layout.transcript_journals_dir / "1-dead.log").write_bytes(left)
    (layout.transcripts_dir / "b.jsonl").unlink()  # a power cut took its unsynced bytes

    assert replay_journals(layout).restored == ["run/transcripts/b.jsonl"]
    assert read_transcript(layout.transcripts_dir / "b.jsonl").messages == [
        {"role": "user", "content": "second"}]


async def test_batches_write_over_zeros_the_journal_holds_so_its_size_changes_once_a_stretch(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout, ahead_bytes=4096)
    sizes: list[int] = []
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        assert commits.path is not None
        for n in range(60):
            await commits.commit(writer_for(layout, f"s{n}", "x" * 100))
            sizes.append(commits.path.stat().st_size)
        left = commits.path.read_bytes()  # what a kill would leave behind
        commits.close()
    assert commits.batches == 60
    # A batch's sync finds the file's size unchanged, except when its frames pass the zeros
    # the journal held: then it grows by a stretch of them (about 200 bytes a frame here).
    grown = [n for n in range(1, 60) if sizes[n] != sizes[n - 1]]
    assert sizes[0] > 4096 and 1 <= len(grown) <= 4
    assert all(sizes[n] - sizes[n - 1] >= 4096 for n in grown)
    frames_end = len(left.rstrip(b"\0"))
    assert left[frames_end:] == bytes(len(left) - frames_end) and len(left) - frames_end > 0

    (layout.transcript_journals_dir / "1-dead.log").write_bytes(left)
    for n in range(60):  # a power cut took every transcript's unsynced bytes
        (layout.transcripts_dir / f"s{n}.jsonl").unlink()
    assert len(replay_journals(layout).restored) == 60
    for n in range(60):
        messages = read_transcript(layout.transcripts_dir / f"s{n}.jsonl").messages
        assert messages == [{"role": "user", "content": "x" * 100}]


async def test_a_checkpointed_journal_starts_over_and_replays_no_frame_from_before(
        layout: SquadLayout) -> None:
    commits = GroupCommit(layout, ahead_bytes=4096)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        assert commits.path is not None
        await commits.commit(writer_for(layout, "old", "before"))
        await anyio.to_thread.run_sync(commits.journal.checkpoint)  # what a full journal gets
        await commits.commit(writer_for(layout, "new", "after"))
        left = commits.path.read_bytes()
        commits.close()
    assert b"before" not in left and b"after" in left
    assert len(left) > 4096  # grown ahead again from its new start
    (layout.transcripts_dir / "old.jsonl").unlink()  # removed since: never written back
    (layout.transcripts_dir / "new.jsonl").unlink()
    (layout.transcript_journals_dir / "1-dead.log").write_bytes(left)
    assert replay_journals(layout).restored == ["run/transcripts/new.jsonl"]
    assert not (layout.transcripts_dir / "old.jsonl").exists()


def frame(layout: SquadLayout, where: str, end: int, data: bytes) -> bytes:
    """The journal's frame for `data` appended to `where` (a path in the squad)."""
    return writer_module.frame(str(layout.root) + os.sep,
                               Appended(layout.root / where, end, data, created=False))


def test_a_frame_holds_the_bytes_as_they_are_and_a_damaged_or_torn_one_is_skipped(
        layout: SquadLayout) -> None:
    tricky = b'{"kind":"message","text":"quote \\" and \xc3\xa9"}\n'
    good = frame(layout, "run/transcripts/a.jsonl", len(tricky), tricky)
    assert tricky in good  # not escaped a second time
    damaged = bytearray(frame(layout, "run/transcripts/b.jsonl", 3, b"ab\n"))
    damaged[-2] ^= 0x01  # one bit of its bytes flipped: the checksum fails
    torn = frame(layout, "run/transcripts/d.jsonl", 3, b"ab\n")
    folder = layout.transcript_journals_dir
    folder.mkdir(parents=True)
    # a frame after a damaged one (the writer fences a failed write with a newline) is read
    (folder / "1-dead.log").write_bytes(
        good + bytes(damaged) + b"\n" + frame(layout, "run/transcripts/c.jsonl", 3, b"cd\n")
        + torn[:-3])
    replayed = replay_journals(layout)
    assert sorted(replayed.restored) == ["run/transcripts/a.jsonl", "run/transcripts/c.jsonl"]
    assert (layout.transcripts_dir / "a.jsonl").read_bytes() == tricky
    assert (layout.transcripts_dir / "c.jsonl").read_bytes() == b"cd\n"
    assert not (layout.transcripts_dir / "b.jsonl").exists()
    assert not (layout.transcripts_dir / "d.jsonl").exists()


def test_bytes_that_look_like_a_frame_are_replayed_as_bytes_never_as_a_frame(
        layout: SquadLayout) -> None:
    inner = frame(layout, "run/transcripts/planted.jsonl", 3, b"xy\n")
    folder = layout.transcript_journals_dir
    folder.mkdir(parents=True)
    (folder / "1-dead.log").write_bytes(
        frame(layout, "run/transcripts/a.jsonl", len(inner), inner))
    assert replay_journals(layout).restored == ["run/transcripts/a.jsonl"]
    assert (layout.transcripts_dir / "a.jsonl").read_bytes() == inner
    assert not (layout.transcripts_dir / "planted.jsonl").exists()


def test_a_journal_an_older_version_left_is_replayed_with_its_text_lines(
        layout: SquadLayout) -> None:
    # Older versions journaled each append as one JSON line holding the bytes as text; such a
    # journal, even one a newer runtime went on writing frames into, is still replayed.
    path = dead_journal(layout, ("run/transcripts/s.jsonl", 3, "ab\n"))
    with path.open("ab") as handle:
        handle.write(frame(layout, "run/transcripts/s.jsonl", 6, b"cd\n"))
    assert replay_journals(layout).restored == ["run/transcripts/s.jsonl"]
    assert (layout.transcripts_dir / "s.jsonl").read_bytes() == b"ab\ncd\n"


def test_hostile_journals_and_lines_are_skipped_and_the_rest_replayed(
        layout: SquadLayout) -> None:
    folder = layout.transcript_journals_dir
    folder.mkdir(parents=True)
    (folder / "0-folder.log").mkdir()  # cannot be read
    (folder / "0-link.log").symlink_to(folder / "1-dead.log")  # never followed
    (folder / "1-dead.log").write_text(
        '{"t":"run/transcripts/inf.jsonl","end":Infinity,"data":"ab\\n"}\n'
        '{"t":"run/transcripts/neg.jsonl","end":2,"data":"abcd\\n"}\n'
        '{"t":"run/transcripts/link.jsonl","end":3,"data":"ab\\n"}\n'
        '{"t":"run/transcripts/ok.jsonl","end":3,"data":"ab\\n"}\n', encoding="utf-8")
    outside = layout.repo / "outside.jsonl"
    outside.write_bytes(b"")
    (layout.transcripts_dir / "link.jsonl").symlink_to(outside)  # written through: never
    replayed = replay_journals(layout)
    assert replayed.journals == 1
    assert replayed.restored == ["run/transcripts/ok.jsonl"]
    assert not (layout.transcripts_dir / "inf.jsonl").exists()
    assert not (layout.transcripts_dir / "neg.jsonl").exists()
    assert outside.read_bytes() == b""


async def test_a_batch_that_fails_unexpectedly_is_raised_to_its_sessions_and_the_writer_goes_on(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    real_line = writer_module.frame
    broken: list[str] = []

    def line_once_broken(root: str, done: Appended) -> bytes:
        if not broken:
            broken.append(done.path.name)
            raise RuntimeError("a bug in the batch")
        return real_line(root, done)

    monkeypatch.setattr(writer_module, "frame", line_once_broken)
    commits = GroupCommit(layout)
    with anyio.fail_after(30):  # never a hang
        async with anyio.create_task_group() as tg:
            await tg.start(commits.run)
            with pytest.raises(RuntimeError, match="a bug in the batch"):
                await commits.commit(writer_for(layout, "a", "first"))
            await commits.commit(writer_for(layout, "b", "second"))  # the writer still runs
            commits.close()
    assert broken == ["a.jsonl"] and commits.batches == 1
    assert read_transcript(layout.transcripts_dir / "b.jsonl").messages == [
        {"role": "user", "content": "second"}]


async def test_a_journal_a_replay_removes_before_it_is_locked_is_made_again(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another process's replay runs between this runtime's creating its journal and locking
    # it: the file looks like an ended runtime's (nobody holds it), so the replay removes it.
    real_flock = files_module.fcntl.flock
    replays: list[int] = []

    def replay_first(fd: int, operation: int) -> None:
        if not replays:
            replays.append(-1)  # the replay's own locking goes straight through
            replays[0] = replay_journals(layout).journals
        real_flock(fd, operation)

    monkeypatch.setattr(files_module.fcntl, "flock", replay_first)
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        await tg.start(commits.run)
        await commits.commit(writer_for(layout, "a", "kept"))
        assert commits.path is not None
        journaled = commits.path.read_bytes()  # what a power cut would replay from
        commits.close()
    assert replays == [1]  # the replay did take the first file
    assert b'"t":"run/transcripts/a.jsonl"' in journaled


def test_a_transcript_continued_by_a_second_runtime_is_replayed_from_both_journals_in_order(
        layout: SquadLayout) -> None:
    # One runtime wrote the first record, another continued the session; both were killed
    # and a power cut took the transcript's unsynced bytes. The later journal's name sorts
    # first, so its line is met before the one it follows.
    first = b'{"kind":"meta","agent":"a"}\n'
    second = b'{"kind":"state","state":"completed"}\n'
    folder = layout.transcript_journals_dir
    folder.mkdir(parents=True)
    (folder / "1-later.log").write_text(json.dumps(
        {"t": "run/transcripts/s.jsonl", "end": len(first) + len(second),
         "data": second.decode()}) + "\n", encoding="utf-8")
    (folder / "2-earlier.log").write_text(json.dumps(
        {"t": "run/transcripts/s.jsonl", "end": len(first), "data": first.decode()}) + "\n",
        encoding="utf-8")

    replayed = replay_journals(layout)
    assert replayed.journals == 2 and replayed.restored == ["run/transcripts/s.jsonl"]
    assert (layout.transcripts_dir / "s.jsonl").read_bytes() == first + second
    assert not list(folder.iterdir())


async def test_a_journal_that_cannot_be_locked_fails_the_start_and_is_not_left_open(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(37, "No locks available")

    monkeypatch.setattr(files_module.fcntl, "flock", no_locks)
    def open_files() -> set[str]:
        names = set()
        for fd in Path("/proc/self/fd").iterdir():
            with contextlib.suppress(FileNotFoundError):  # the listing's own, closed since
                names.add(f"{fd.name} {fd.readlink()}")
        return names

    open_before = open_files()
    commits = GroupCommit(layout)
    async with anyio.create_task_group() as tg:
        with pytest.raises(OSError, match="No locks available"):
            await tg.start(commits.run)
    assert not commits.running
    assert [name for name in open_files() - open_before if name.endswith(".log")] == []


def test_what_a_failed_replay_put_back_is_synced_and_the_journals_kept(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = dead_journal(layout, ("run/transcripts/a.jsonl", 3, "ab\n"),
                           ("run/transcripts/b.jsonl", 3, "cd\n"))
    real_restore, real_sync = replay_module._restore, files_module.sync_file
    synced: list[str] = []

    def full_disk_for_b(line: replay_module._Line) -> bool:
        if line.target.name == "b.jsonl":
            raise OSError(28, "No space left on device")
        return real_restore(line)

    def recorded_sync(path: Path, created: bool) -> None:
        synced.append(path.name)
        real_sync(path, created)

    monkeypatch.setattr(replay_module, "_restore", full_disk_for_b)
    monkeypatch.setattr(files_module, "sync_file", recorded_sync)
    assert replay_journals(layout).journals == 0
    # a.jsonl was put back: the next replay finds it whole and skips it, so only this one
    # can make it durable.
    assert (layout.transcripts_dir / "a.jsonl").read_bytes() == b"ab\n"
    assert synced == ["a.jsonl"]
    assert journal.exists()  # replayed again at the next start


def test_a_file_that_cannot_be_restored_does_not_keep_the_others_from_it(
        layout: SquadLayout) -> None:
    journal = dead_journal(
        layout, ("orchestration-log/20261126T101010.000001Z-fenster.md", 3, "ab\n"),
        ("run/transcripts/a.jsonl", 3, "cd\n"))
    layout.orchestration_dir.write_text("a file where the folder was", encoding="utf-8")
    # The orchestration entry sorts first and cannot be written; the transcript still is.
    assert replay_journals(layout).journals == 0
    assert (layout.transcripts_dir / "a.jsonl").read_bytes() == b"cd\n"
    assert journal.exists()  # kept for the entry, replayed at the next start


def test_a_transcript_written_where_its_lost_bytes_were_is_not_patched_with_their_rest(
        layout: SquadLayout) -> None:
    # A power cut took "ab\ncd\n"; the replay then failed, and recovery appended its own
    # record where those bytes were. Appending "cd\n" after it would put a torn half-line
    # and a message after the record that ended the session.
    dead_journal(layout, ("run/transcripts/s.jsonl", 6, "ab\ncd\n"))
    (layout.transcripts_dir / "s.jsonl").write_bytes(b"xy\n")
    assert replay_journals(layout).restored == []
    assert (layout.transcripts_dir / "s.jsonl").read_bytes() == b"xy\n"


def test_a_transcript_holding_the_head_of_its_lost_bytes_gets_the_rest(
        layout: SquadLayout) -> None:
    dead_journal(layout, ("run/transcripts/s.jsonl", 9, "ab\ncd\n"))
    (layout.transcripts_dir / "s.jsonl").write_bytes(b"00\nab\nc")
    assert replay_journals(layout).restored == ["run/transcripts/s.jsonl"]
    assert (layout.transcripts_dir / "s.jsonl").read_bytes() == b"00\nab\ncd\n"
