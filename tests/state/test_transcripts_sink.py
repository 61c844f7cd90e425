"""The file sink (`FileSink`): one transcript's records from its acceptance to its end, made
durable through a committer (the runtime's group commit; one not running syncs by itself)."""

from __future__ import annotations

from pathlib import Path

from squadd.state.journal import GroupCommit
from squadd.state.layout import SquadLayout
from squadd.state.spare_files import SpareFiles
from squadd.state.transcripts import (
    FileSink,
    FileSinks,
    PromptFiles,
    TranscriptWriter,
    prompt_digest,
    read_transcript,
)


def _sinks(layout: SquadLayout) -> FileSinks:
    return FileSinks(layout, GroupCommit(layout), SpareFiles(layout.sessions_dir),
                     PromptFiles(layout.transcript_prompts_dir))


async def test_one_sink_writes_a_transcript_from_its_acceptance_to_its_end(
        squad: SquadLayout) -> None:
    sink = _sinks(squad).new("s-1")
    sink.add("meta", session_id="s-1", agent="lead")
    sink.add("state", state="queued")
    assert (sink.pending, sink.written) == (2, 0)
    await sink.commit()  # the acceptance: durable before the caller hears of the route
    assert (sink.pending, sink.written) == (0, 2)
    sink.add("message", **sink.system_fields("You are lead."))
    riding = await sink.send_ahead(on_error=lambda: None)
    sink.add("state", state="completed")  # added while the first records are on their way
    await riding.finished()
    await sink.commit()
    transcript = read_transcript(squad.transcript("s-1"))
    assert [r["kind"] for r in transcript.records] == ["meta", "state", "message", "state"]
    assert transcript.messages == [{"role": "system", "content": "You are lead."}]
    assert transcript.last_state == "completed" and sink.written == 4
    # the prompt is kept once, by digest, beside the transcripts
    assert (squad.transcript_prompts_dir / f"{prompt_digest('You are lead.')}.txt").exists()


async def test_a_continued_sessions_sink_appends_after_a_torn_line(squad: SquadLayout) -> None:
    path = squad.transcript("s-2")
    writer = TranscriptWriter(path)
    writer.add("meta", session_id="s-2", agent="lead")
    writer.flush()
    with path.open("ab") as handle:
        handle.write(b'{"kind":"mess')  # a crash cut the last line
    sink = _sinks(squad).existing("s-2")
    assert isinstance(sink, FileSink) and sink.path == path
    sink.add("state", state="queued", task="next")
    await sink.commit()
    transcript = read_transcript(path)
    assert transcript.torn_lines == 1 and transcript.states[-1]["task"] == "next"


def test_a_sink_flushes_from_a_worker_thread_by_itself(squad: SquadLayout,
                                                       tmp_path: Path) -> None:
    sink = FileSink(TranscriptWriter(tmp_path / "s-3.jsonl"), GroupCommit(squad))
    sink.add("state", state="active")
    sink.flush()
    assert sink.pending == 0 and read_transcript(tmp_path / "s-3.jsonl").last_state == "active"
