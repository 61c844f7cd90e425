"""Transcripts: one fsynced JSON line per record, torn last lines survived."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from squadd.state import transcripts as transcripts_module
from squadd.state.transcripts import (
    PROMPTS_DIRNAME,
    PromptFiles,
    SpareFiles,
    TranscriptWriter,
    prompt_digest,
    read_tail,
    read_transcript,
)


def test_records_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sessions" / "s-1.jsonl"
    writer = TranscriptWriter(path)
    writer.add("meta", session_id="s-1", agent="fenster", task="t")
    writer.add("message", message={"role": "user", "content": "hi"})
    writer.flush()
    writer.add("state", state="completed", answer="done")
    writer.flush()
    transcript = read_transcript(path)
    assert transcript.meta["agent"] == "fenster"
    assert transcript.messages == [{"role": "user", "content": "hi"}]
    assert transcript.last_state == "completed" and transcript.final_answer == "done"


def test_flush_with_nothing_pending_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    TranscriptWriter(path).flush()
    assert not path.exists()


def test_torn_last_line_is_skipped_and_fenced_off(tmp_path: Path) -> None:
    path = tmp_path / "s-2.jsonl"
    writer = TranscriptWriter(path)
    writer.add("message", message={"role": "user", "content": "one"})
    writer.flush()
    with path.open("ab") as handle:  # what a crash mid-write leaves behind
        handle.write(b'{"kind":"message","message":{"role":"assis')
    assert read_transcript(path).torn_lines == 1
    later = TranscriptWriter(path)
    later.add("message", message={"role": "user", "content": "two"})
    later.flush()
    transcript = read_transcript(path)
    assert [m["content"] for m in transcript.messages] == ["one", "two"]
    assert transcript.torn_lines == 1



def test_a_write_that_failed_part_way_is_fenced_off_from_the_next(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.jsonl"
    writer = TranscriptWriter(path)
    writer.add("state", state="active")
    writer.flush()
    real_write = os.write
    failed: list[int] = []

    def half_then_full_disk(fd: int, data: bytes) -> int:
        if not failed:
            failed.append(real_write(fd, data[: len(data) // 2]))
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(transcripts_module.os, "write", half_then_full_disk)
    writer.add("message", message={"role": "user", "content": "lost to the full disk"})
    with pytest.raises(OSError):
        writer.flush()
    writer.add("state", state="error", error="disk full")
    writer.flush()
    transcript = read_transcript(path)
    assert [s["state"] for s in transcript.states] == ["active", "error"]
    assert transcript.torn_lines == 1

def test_a_new_transcript_takes_a_spare_file_made_ahead(tmp_path: Path) -> None:
    from squadd.state.transcripts import SPARES_DIRNAME, SpareFiles

    sessions = tmp_path / "sessions"
    spares = SpareFiles(sessions)
    assert spares.refill(3) == 3
    made = sorted(p.name for p in (sessions / SPARES_DIRNAME).iterdir())
    writer = TranscriptWriter(sessions / "s-1.jsonl", spares)
    writer.add("meta", session_id="s-1")
    writer.flush()
    left = sorted(p.name for p in (sessions / SPARES_DIRNAME).iterdir())
    assert len(left) == 2 and set(left) < set(made) and len(spares) == 2
    assert read_transcript(sessions / "s-1.jsonl").meta["session_id"] == "s-1"


def test_without_spares_a_transcript_is_created_as_before(tmp_path: Path) -> None:
    from squadd.state.transcripts import SpareFiles

    sessions = tmp_path / "sessions"
    spares = SpareFiles(sessions)  # made, but never refilled
    writer = TranscriptWriter(sessions / "s-2.jsonl", spares)
    writer.add("meta", session_id="s-2")
    writer.flush()
    assert read_transcript(sessions / "s-2.jsonl").meta["session_id"] == "s-2"


def _refilled(tmp_path: Path, count: int = 2) -> tuple[Path, SpareFiles]:
    """A sessions folder (not made yet) and `count` spare files made for it."""
    sessions = tmp_path / "sessions"
    spares = SpareFiles(sessions)
    spares.refill(count)
    return sessions, spares


def test_a_writer_told_its_file_is_new_makes_it_without_trying_to_open_one_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sessions, spares = _refilled(tmp_path)
    opened: list[tuple[str, bool]] = []
    real_open = os.open

    def recording(path: Path, flags: int, *args: int) -> int:
        if path.suffix == ".jsonl":
            opened.append((path.name, path.exists()))
        return real_open(path, flags, *args)

    monkeypatch.setattr(transcripts_module.os, "open", recording)
    for name, new in (("old-way.jsonl", False), ("new-way.jsonl", True)):
        writer = TranscriptWriter(sessions / name, spares, new=new)
        writer.add("meta", session_id=name)
        writer.flush()
        writer.add("state", state="active")
        writer.flush()
        assert read_transcript(sessions / name).last_state == "active"
    # Without the hint, the first append tries the file before it takes a spare; with it, the
    # spare is moved in first. Either way the second append opens the file it made.
    assert opened == [("old-way.jsonl", False), ("old-way.jsonl", True),
                      ("old-way.jsonl", True), ("new-way.jsonl", True), ("new-way.jsonl", True)]


def test_a_writer_told_its_file_is_new_appends_to_one_found_there(tmp_path: Path) -> None:
    sessions, spares = _refilled(tmp_path)
    path = sessions / "s-4.jsonl"
    path.write_bytes(b'{"kind":"meta","session_id":"s-4","agent":"first"}\n')
    writer = TranscriptWriter(path, spares, new=True)
    writer.add("state", state="queued")
    writer.flush()
    transcript = read_transcript(path)
    assert transcript.meta["agent"] == "first" and transcript.last_state == "queued"
    assert len(spares) == 2  # no spare was spent on it


@pytest.mark.parametrize("new", [True, False])
def test_a_link_at_a_transcripts_name_is_refused_not_written_through(
        tmp_path: Path, new: bool) -> None:
    sessions, spares = _refilled(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("theirs\n")
    (sessions / "s-5.jsonl").symlink_to(outside)
    writer = TranscriptWriter(sessions / "s-5.jsonl", spares, new=new)
    writer.add("meta", session_id="s-5")
    with pytest.raises(OSError) as raised:
        writer.flush()
    assert raised.value.errno == errno.ELOOP
    assert outside.read_text() == "theirs\n" and len(spares) == 2


def test_two_processes_never_take_the_same_spare(tmp_path: Path) -> None:
    from squadd.state.transcripts import SpareFiles

    sessions = tmp_path / "sessions"
    first = SpareFiles(sessions)
    first.refill(4)
    second = SpareFiles(sessions)  # another process: adopts the spares it finds
    second.refill(4)
    assert len(second) == 4
    targets = [sessions / f"t{i}.jsonl" for i in range(10)]
    taken = [first.take_into(t) if i % 2 else second.take_into(t)
             for i, t in enumerate(targets)]
    assert sum(taken) == 4  # each spare went to exactly one transcript
    assert sum(t.exists() for t in targets) == 4


def test_a_spare_is_kept_when_its_target_folder_is_missing(tmp_path: Path) -> None:
    from squadd.state.transcripts import SpareFiles

    spares = SpareFiles(tmp_path / "sessions")
    spares.refill(2)
    assert spares.take_into(tmp_path / "orchestration-log" / "a.md") is False
    assert len(spares) == 2  # not taken for gone: the next file gets it
    assert spares.take_into(tmp_path / "sessions" / "s-1.jsonl") is True
    assert len(spares) == 1 and len(list(spares.folder.iterdir())) == 1


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs a second file system")
def test_a_spare_is_kept_when_its_target_is_on_another_file_system(tmp_path: Path) -> None:
    import tempfile

    from squadd.state.transcripts import SpareFiles

    spares = SpareFiles(tmp_path / "sessions")
    spares.refill(2)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        if Path(other).stat().st_dev == tmp_path.stat().st_dev:
            pytest.skip("/dev/shm is on the same file system here")
        assert spares.take_into(Path(other) / "a.md") is False
        assert not (Path(other) / "a.md").exists()
    assert len(spares) == 2 and spares.usable  # still there for the transcripts
    assert spares.take_into(tmp_path / "sessions" / "s-1.jsonl") is True


def test_a_spare_never_replaces_an_existing_transcript(tmp_path: Path) -> None:
    from squadd.state.transcripts import SpareFiles

    sessions = tmp_path / "sessions"
    spares = SpareFiles(sessions)
    spares.refill(2)
    existing = sessions / "s-1.jsonl"
    existing.write_bytes(b'{"kind":"meta","agent":"fenster"}\n')
    assert spares.take_into(existing) is False
    assert existing.read_bytes() == b'{"kind":"meta","agent":"fenster"}\n'
    assert spares.take_into(sessions / "s-2.jsonl") is True  # the other spare still works
    assert (sessions / "s-2.jsonl").stat().st_size == 0


def test_a_transcript_another_writer_made_meanwhile_is_appended_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.state.transcripts import SpareFiles

    sessions = tmp_path / "sessions"
    spares = SpareFiles(sessions)
    spares.refill(2)
    path = sessions / "s-3.jsonl"
    take_into = SpareFiles.take_into

    def racing(self: SpareFiles, target: Path) -> bool:  # the other writer gets there first
        target.write_bytes(b'{"kind":"meta","session_id":"s-3","agent":"first"}\n')
        return take_into(self, target)

    monkeypatch.setattr(SpareFiles, "take_into", racing)
    writer = TranscriptWriter(path, spares)
    writer.add("state", state="queued")
    appended = writer.append_unsynced()
    transcript = read_transcript(path)
    assert transcript.meta["agent"] == "first" and transcript.last_state == "queued"
    # the end a journal frame names is where the bytes end in the file, after theirs
    assert appended is not None and appended.created and appended.end == path.stat().st_size


@pytest.mark.parametrize("new", [True, False])
def test_a_new_transcripts_first_append_names_its_end_as_the_file_has_it(
        tmp_path: Path, new: bool) -> None:
    from squadd.state.transcripts import SpareFiles

    sessions = tmp_path / "sessions"
    spares = SpareFiles(sessions)
    spares.refill(1)
    writer = TranscriptWriter(sessions / "s-4.jsonl", spares, new=new)
    ends = []
    for text in ("first", "second"):
        writer.add("message", message={"role": "user", "content": text})
        appended = writer.append_unsynced()
        assert appended is not None
        ends.append((appended.end, (sessions / "s-4.jsonl").stat().st_size))
    assert [end for end, _size in ends] == [size for _end, size in ends]


def test_only_empty_unclaimed_files_are_adopted_as_spares(tmp_path: Path) -> None:
    import os

    from squadd.state.transcripts import SPARES_DIRNAME, SpareFiles

    sessions = tmp_path / "sessions"
    folder = sessions / SPARES_DIRNAME
    folder.mkdir(parents=True)
    (folder / "1-aa-0").touch()  # a spare an earlier process never used
    (folder / "1-aa-1").write_text("not empty")
    transcript = sessions / "old.jsonl"
    transcript.write_text('{"kind":"meta"}\n')
    os.link(transcript, folder / "1-aa-2.taken")  # a crash mid-take left this behind
    (folder / "1-aa-3").touch()
    os.link(folder / "1-aa-3", sessions / "other.jsonl")
    spares = SpareFiles(sessions)
    spares.refill(1)
    assert len(spares) == 1
    assert spares.take_into(sessions / "new.jsonl")
    assert (sessions / "new.jsonl").stat().st_size == 0
    assert transcript.read_text() == '{"kind":"meta"}\n'


def test_a_spare_moves_in_one_step_and_never_over_an_existing_file(tmp_path: Path) -> None:
    from squadd.state.spare_files import _rename_noreplace

    source, target = tmp_path / "spare", tmp_path / "s.jsonl"
    source.write_bytes(b"")
    target.write_bytes(b"kept\n")
    assert _rename_noreplace(source, target) == "exists"
    assert target.read_bytes() == b"kept\n" and source.exists()
    target.unlink()
    assert _rename_noreplace(source, target) is True
    assert target.exists() and not source.exists()
    assert _rename_noreplace(source, tmp_path / "other.jsonl") == "taken"


def test_the_tail_is_the_last_records_as_a_whole_read_gives_them(tmp_path: Path) -> None:
    path = tmp_path / "s-2.jsonl"
    writer = TranscriptWriter(path)
    for n in range(300):
        writer.add("message", message={"role": "user", "content": f"task {n}"})
    writer.flush()
    with path.open("ab") as handle:  # a line a crash tore mid-file, then more records
        handle.write(b'{"kind": "mess\n')
    writer.add("state", state="idle")
    writer.flush()
    whole = read_transcript(path)
    records, total = read_tail(path, 3)
    assert records == whole.records[-2:]  # the torn line is one of the last three
    assert total == len(whole.records) + whole.torn_lines == 302
    assert read_tail(path, 1000) == (whole.records, 302)
    assert read_tail(path, 0) == ([], 302)


def _prompted(folder: Path, session_id: str, prompt: str,
              prompts: PromptFiles | None) -> TranscriptWriter:
    writer = TranscriptWriter(folder / f"{session_id}.jsonl", prompts=prompts)
    writer.add("message", **writer.system_fields(prompt))
    writer.add("message", message={"role": "user", "content": "go"})
    writer.flush()
    return writer


def test_a_system_prompt_is_kept_once_and_read_back_into_each_transcript(
        tmp_path: Path) -> None:
    folder = tmp_path / "transcripts"
    prompts = PromptFiles(folder / PROMPTS_DIRNAME)
    long_prompt = "You are lead.\n" + "decision ü\n" * 2000
    for session_id in ("s-1", "s-2"):
        _prompted(folder, session_id, long_prompt, prompts)
    _prompted(folder, "s-3", "You are other.", prompts)
    kept = sorted(p.name for p in prompts.folder.iterdir())
    assert kept == sorted(f"{prompt_digest(t)}.txt" for t in (long_prompt, "You are other."))
    raw = (folder / "s-1.jsonl").read_text(encoding="utf-8")
    assert "decision" not in raw and len(raw) < 500  # the text is not in the transcript
    for session_id, text in (("s-1", long_prompt), ("s-2", long_prompt),
                             ("s-3", "You are other.")):
        path = folder / f"{session_id}.jsonl"
        assert read_transcript(path).messages == [{"role": "system", "content": text},
                                                  {"role": "user", "content": "go"}]
        records, _ = read_tail(path, 2)
        assert records[0]["message"]["content"] == text


def test_a_prompt_made_by_another_process_is_reused_and_a_new_one_is_not_cached(
        tmp_path: Path) -> None:
    folder = tmp_path / "transcripts"
    _prompted(folder, "s-1", "You are lead.", PromptFiles(folder / PROMPTS_DIRNAME))
    mine = PromptFiles(folder / PROMPTS_DIRNAME)  # a fresh process: nothing seen yet
    assert not mine.kept("You are lead.")  # the loop may not write it: a worker thread will
    kept = folder / PROMPTS_DIRNAME / f"{prompt_digest('You are lead.')}.txt"
    before = kept.stat()
    assert mine.keep("You are lead.") == prompt_digest("You are lead.")
    after = kept.stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert mine.kept("You are lead.")


def test_without_a_prompt_store_or_in_another_folder_the_prompt_is_inline(
        tmp_path: Path) -> None:
    prompts = PromptFiles(tmp_path / "transcripts" / PROMPTS_DIRNAME)
    for folder, store in ((tmp_path / "transcripts", None), (tmp_path / "sessions", prompts)):
        _prompted(folder, "s-1", "You are lead.", store)
        raw = (folder / "s-1.jsonl").read_text(encoding="utf-8")
        assert '"content":"You are lead."' in raw and '"prompt"' not in raw
    assert not prompts.folder.exists()


def test_a_missing_or_foreign_prompt_reads_as_a_note_and_never_leaves_its_folder(
        tmp_path: Path) -> None:
    folder = tmp_path / "transcripts"
    prompts = PromptFiles(folder / PROMPTS_DIRNAME)
    _prompted(folder, "s-1", "You are lead.", prompts)
    (prompts.folder / f"{prompt_digest('You are lead.')}.txt").unlink()
    (tmp_path / "secret.txt").write_text("secret", encoding="utf-8")
    path = folder / "s-2.jsonl"
    path.write_text('{"kind":"message","message":{"role":"system"},"prompt":"../../secret"}\n',
                    encoding="utf-8")
    missing = read_transcript(folder / "s-1.jsonl")
    assert missing.lost_prompt and missing.records[0]["prompt_lost"] is True
    assert "is missing" in missing.messages[0]["content"]
    assert prompt_digest("You are lead.") in missing.messages[0]["content"]
    foreign = read_transcript(path)
    assert foreign.lost_prompt and "is missing" in foreign.messages[0]["content"]
    assert "secret" not in foreign.messages[0]["content"].replace("../../secret", "")


def test_a_damaged_prompt_file_is_never_read_as_the_prompt_and_is_written_anew(
        tmp_path: Path) -> None:
    folder = tmp_path / "transcripts"
    _prompted(folder, "s-1", "You are lead.", PromptFiles(folder / PROMPTS_DIRNAME))
    kept = folder / PROMPTS_DIRNAME / f"{prompt_digest('You are lead.')}.txt"
    kept.write_text("You are someone else.", encoding="utf-8")  # damaged (or edited) on disk
    damaged = read_transcript(folder / "s-1.jsonl")
    assert damaged.lost_prompt and "damaged" in damaged.messages[0]["content"]
    # a new process keeping the same prompt finds the file wrong and writes it anew
    _prompted(folder, "s-2", "You are lead.", PromptFiles(folder / PROMPTS_DIRNAME))
    assert kept.read_text(encoding="utf-8") == "You are lead."
    for session_id in ("s-1", "s-2"):
        transcript = read_transcript(folder / f"{session_id}.jsonl")
        assert not transcript.lost_prompt
        assert transcript.messages[0] == {"role": "system", "content": "You are lead."}


def test_record_times_read_as_datetime_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt

    from squadd.state.transcripts import now_iso

    for now in (1_800_000_000.0, 1_800_000_000.9996, 1_800_000_001.25, 1_800_000_001.5):
        monkeypatch.setattr(transcripts_module.time, "time", lambda now=now: now)
        expected = dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="milliseconds")
        assert now_iso() == expected  # the second's text is made again when it changes
    assert dt.datetime.fromisoformat(now_iso()).tzinfo == dt.UTC
