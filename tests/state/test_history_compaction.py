"""History compaction: a large history.md keeps its context and newest learnings; none is lost."""

from __future__ import annotations

import datetime as dt

import pytest

from squadd.config import Settings
from squadd.scribe import merge_inbox
from squadd.state.history import _digest, append_learning, compact_history, learnings
from squadd.state.intent import append_with_intent, intent_file
from squadd.state.layout import SquadLayout
from tests.state.memory_fixtures import CONTEXT as KESTREL_CONTEXT
from tests.state.memory_fixtures import grown_history

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
    assert "## Archived 2025-06-01" in archive
    # A section other than Learnings is never archived whole: it stays where it was.
    assert "## Old Notes\n\nSomething from long ago.\n" in kept_text
    assert "Something from long ago." not in archive
    archived = [i for i in range(120) if f"Learning number {i}:" in archive]
    assert archived == list(range(0, 120 - len(numbers)))
    assert moved == len(archived)


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


SHAPES = [(blocks, newest) for blocks in (True, False) for newest in (True, False)]


def _entry_number(entry: str) -> int:
    return int(entry.split("Finding ", 1)[1][:3])


@pytest.mark.parametrize(("blocks", "newest_first"), SHAPES)
def test_compaction_moves_whole_oldest_entries_and_keeps_the_newest_in_every_shape(
    squad: SquadLayout, blocks: bool, newest_first: bool,
) -> None:
    path = squad.history("scribe")
    count = 80 if blocks else 160
    original = grown_history(count, blocks=blocks, newest_first=newest_first)
    path.write_text(original)

    moved = compact_history(squad, "scribe", max_bytes=15360, today=dt.date(2025, 6, 1))

    kept_text = path.read_text()
    archive = squad.history_archive("scribe").read_text()
    assert kept_text.startswith(KESTREL_CONTEXT)
    kept = [_entry_number(e) for e in learnings(kept_text)]
    archived = [_entry_number(e) for e in learnings("## Learnings\n\n" + archive.split(
        "## Archived 2025-06-01\n\n", 1)[1])]
    assert moved == len(archived) > 0
    assert sorted(kept + archived) == list(range(count))  # each exactly once
    assert min(kept) > max(archived) and count - 1 in kept  # the newest stay
    for entry in learnings(original):  # whole, byte for byte, in one file or the other
        assert (entry in kept_text) != (entry in archive)
    assert learnings(kept_text) == [e for e in learnings(original)
                                    if _entry_number(e) in kept]


def test_an_entry_written_in_the_same_pass_is_never_archived(squad: SquadLayout) -> None:
    path = squad.history("scribe")
    text = grown_history(80, blocks=True, newest_first=False)
    path.write_text(text)
    oldest = learnings(text)[0]  # stands for a note that landed in an odd place this pass

    compact_history(squad, "scribe", max_bytes=15360, protect=[oldest + "\n"])

    assert oldest in path.read_text()
    assert oldest not in squad.history_archive("scribe").read_text()


def test_the_newest_learning_stays_even_when_it_alone_is_over_the_budget(
    squad: SquadLayout,
) -> None:
    path = squad.history("scribe")
    huge = "### One huge finding (2025-06-01)\n\n" + "long text " * 2000 + "\n"
    path.write_text(grown_history(10, blocks=True, newest_first=True).replace(
        "## Learnings\n\n", "## Learnings\n\n" + huge + "\n"))

    compact_history(squad, "scribe", max_bytes=15360)

    assert learnings(path.read_text()) == [huge.rstrip()]


def test_a_new_learning_survives_the_next_compaction_in_a_newest_first_block_file(
    squad: SquadLayout,
) -> None:
    path = squad.history("scribe")
    path.write_text(grown_history(80, blocks=True, newest_first=True))

    append_learning(squad, "scribe", "The anemometer needs a pull-up. Without it reads float.",
                    category="technical", today=dt.date(2026, 3, 1))
    compact_history(squad, "scribe", max_bytes=15360)

    first = learnings(path.read_text())[0]
    assert first == ("### The anemometer needs a pull-up (2026-03-01)\n\n"
                     "The anemometer needs a pull-up. Without it reads float.")
    assert "anemometer" not in squad.history_archive("scribe").read_text()


def test_compaction_works_by_entry_across_every_learnings_section(squad: SquadLayout) -> None:
    def block(day: dt.date, n: int) -> str:
        return f"### {day.isoformat()}: Finding {n}\n\n{'Detail of the finding. ' * 20}\n\n"

    early = "".join(block(dt.date(2026, 3, 1) + dt.timedelta(days=i), i) for i in range(12))
    late = "".join(block(dt.date(2026, 6, 1) + dt.timedelta(days=i), 100 + i) for i in range(12))
    text = ("# Osprey — Project History\n\n## Learnings\n\n" + early
            + "# Osprey — Project History (v2)\n\n## Core Context\n\nThe v2 board.\n\n"
            "## Learnings\n\n" + late)
    path = squad.history("osprey")
    path.parent.mkdir(parents=True)
    path.write_text(text)

    moved = compact_history(squad, "osprey", max_bytes=len(text) - 1, keep_bytes=len(text) // 3)

    kept = path.read_text()
    archive = squad.history_archive("osprey").read_text()
    # The oldest went, from the first section; the newest (the second section) all stayed.
    assert moved >= 12 and all(f"Finding {i}\n" in archive for i in range(12))
    late_moved = moved - 12
    assert late_moved < 12 and f"Finding {111}\n" in kept
    assert all(f"Finding {100 + i}\n" in archive for i in range(late_moved))
    assert all(f"Finding {100 + i}\n" in kept for i in range(late_moved, 12))
    # No section moved whole: both headings and the context stay.
    assert kept.count("## Learnings\n") == 2 and "The v2 board." in kept
    assert "## Learnings" not in archive.split("## Archived", 1)[1]
