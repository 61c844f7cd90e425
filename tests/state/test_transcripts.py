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
