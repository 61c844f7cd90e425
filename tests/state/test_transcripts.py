"""Transcripts: one fsynced JSON line per record, torn last lines survived."""

from __future__ import annotations

from pathlib import Path

from squadd.state.transcripts import TranscriptWriter, read_transcript


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


def test_a_new_transcript_takes_a_spare_file_made_ahead(tmp_path: Path) -> None:
    from squadd.state.transcripts import SPARES_DIRNAME, spares_for

    sessions = tmp_path / "sessions"
    spares = spares_for(sessions)
    assert spares.refill(3) == 3
    made = sorted(p.name for p in (sessions / SPARES_DIRNAME).iterdir())
    writer = TranscriptWriter(sessions / "s-1.jsonl")
    writer.add("meta", session_id="s-1")
    writer.flush()
    left = sorted(p.name for p in (sessions / SPARES_DIRNAME).iterdir())
    assert len(left) == 2 and set(left) < set(made) and len(spares) == 2
    assert read_transcript(sessions / "s-1.jsonl").meta["session_id"] == "s-1"


def test_without_spares_a_transcript_is_created_as_before(tmp_path: Path) -> None:
    from squadd.state.transcripts import spares_for

    sessions = tmp_path / "sessions"
    spares_for(sessions)  # registered, but never refilled
    writer = TranscriptWriter(sessions / "s-2.jsonl")
    writer.add("meta", session_id="s-2")
    writer.flush()
    assert read_transcript(sessions / "s-2.jsonl").meta["session_id"] == "s-2"


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
