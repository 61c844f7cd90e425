"""History compaction: a large history.md keeps its context and newest learnings; none is lost."""

from __future__ import annotations

import datetime as dt

from squadd.config import Settings
from squadd.scribe import merge_inbox
from squadd.state.history import _digest, compact_history, learnings
from squadd.state.intent import append_with_intent, intent_file
from squadd.state.layout import SquadLayout

CONTEXT = "# Project Context\n\n- **Owner:** scribe (Scribe)\n\n"
CORE = "## Core Context\n\nWe ship on Fridays. Never on Mondays.\n\n"


def history_text(count: int, *, extra: str = "") -> str:
    items = "".join(f"- **[technical]** Learning number {i}: {'detail ' * 20}\n"
                    for i in range(count))
    return f"{CONTEXT}{CORE}{extra}## Learnings\n\n{items}"


def test_a_large_history_keeps_its_context_and_newest_learnings(squad: SquadLayout) -> None:
    path = squad.history("scribe")
    path.write_text(history_text(120, extra="## Old Notes\n\nSomething from long ago.\n\n"))
    assert path.stat().st_size >= 15360

    moved = compact_history(squad, "scribe", max_bytes=15360, today=dt.date(2025, 6, 1))

    kept_text = path.read_text()
    archive = squad.history_archive("scribe").read_text()
    assert kept_text.startswith(CONTEXT + CORE)
    assert len(kept_text.encode()) <= 15360 // 2
    kept = learnings(kept_text)
    assert kept and kept[-1].startswith("- **[technical]** Learning number 119:")
    numbers = [int(line.split("number ")[1].split(":")[0]) for line in kept]
    assert numbers == list(range(120 - len(numbers), 120))  # the newest, in order
    assert "## Archived 2025-06-01" in archive and "Something from long ago." in archive
    assert "Old Notes" not in kept_text
    archived = [i for i in range(120) if f"Learning number {i}:" in archive]
    assert archived == list(range(0, 120 - len(numbers)))
    assert moved == len(archived) + 1


def test_a_history_under_the_threshold_is_left_alone(squad: SquadLayout) -> None:
    path = squad.history("scribe")
    path.write_text(history_text(10))
    before = path.read_bytes()

    assert compact_history(squad, "scribe", max_bytes=15360) == 0
    assert path.read_bytes() == before
    assert not squad.history_archive("scribe").exists()


def test_a_kill_after_the_archive_append_is_finished_on_the_next_pass(
    squad: SquadLayout,
) -> None:
    path = squad.history("scribe")
    path.write_text(history_text(120))
    # What a kill right after the archive append leaves: the intent and the appended archive.
    compact_history(squad, "scribe", max_bytes=15360, dry_run=True)
    original = path.read_text()
    moved_items = [line + "\n" for line in learnings(original)[:20]]

    append_with_intent(squad, squad.history_archive("scribe"),
                       ("## Archived 2025-06-01\n\n" + "".join(moved_items)).encode(),
                       {"remove": [_digest(item) for item in moved_items]})

    report = merge_inbox(squad, Settings())

    kept_text = path.read_text()
    archive = squad.history_archive("scribe").read_text()
    assert not intent_file(squad, squad.history_archive("scribe")).exists()
    for i in range(120):
        needle = f"Learning number {i}:"
        assert (needle in kept_text) + (needle in archive) == 1, i
    assert report.compacted  # the rest was then compacted as usual
