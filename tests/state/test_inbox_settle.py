"""The Scribe merges only complete inbox files: sealed ones (squad tools write them whole and
read-only) at once, any other once quiet for `scribe.settle_ms`, judged by an injected clock."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from squadd.config import ScribeSettings, Settings
from squadd.fsio import publish_exclusive
from squadd.scribe import ScribeMemory, merge_inbox
from squadd.state.decisions import format_entry, parse_decisions, write_inbox_entry
from squadd.state.inbox import read_inbox_file, scan_inbox
from squadd.state.layout import SquadLayout

T = 1_900_000_000.0
"""The injected wall clock's epoch for these tests (its files get mtimes around it)."""
SETTINGS = Settings(scribe=ScribeSettings(settle_ms=1000))
PART_ONE = format_entry(title="Calibrate the vane", body="Point it north first.",
                        agent="wren", category="process", date=None)
PART_TWO = "\nThen log the offset in the rig notebook.\n"


def hand_write(path: Path, text: str, mtime: float) -> None:
    path.write_text(text, encoding="utf-8")
    os.utime(path, (mtime, mtime))


def listing(layout: SquadLayout) -> list[str]:
    return sorted(p.name for p in layout.inbox_dir.iterdir())


def titles(layout: SquadLayout) -> list[str]:
    return [e.title for e in parse_decisions(layout.decisions_md).entries]


def test_squad_tool_files_are_whole_read_only_and_merged_at_once(squad: SquadLayout) -> None:
    path = write_inbox_entry(squad, agent="wren", title="Use SWD", body="JTAG pins are gone.")
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert listing(squad) == [".gitkeep", path.name]  # no temp file left
    just_written = path.stat().st_mtime

    report = merge_inbox(squad, SETTINGS, clock=lambda: just_written)

    assert report.merged == 1 and report.deferred == []
    assert titles(squad) == ["Use SWD"]


def test_a_taken_name_is_never_overwritten_and_the_next_one_is_used(squad: SquadLayout) -> None:
    first = write_inbox_entry(squad, agent="wren", title="Same", body="one")
    second = write_inbox_entry(squad, agent="wren", title="Same", body="two")
    assert (first.name, second.name) == ("wren-same.md", "wren-same-2.md")
    assert "one" in first.read_text() and "two" in second.read_text()
    assert publish_exclusive(first, "three") is False
    assert "one" in first.read_text()
    assert listing(squad) == [".gitkeep", "wren-same-2.md", "wren-same.md"]


def test_a_slow_hand_writer_loses_nothing(squad: SquadLayout) -> None:
    path = squad.inbox_dir / "wren-vane.md"
    hand_write(path, PART_ONE, T)

    early = merge_inbox(squad, SETTINGS, clock=lambda: T + 0.4)  # the writer is mid-file
    assert early.deferred == ["wren-vane.md"] and early.merged == 0 and path.exists()
    assert titles(squad) == []

    hand_write(path, PART_ONE + PART_TWO, T + 0.9)  # the rest arrives
    assert merge_inbox(squad, SETTINGS, clock=lambda: T + 1.5).deferred == ["wren-vane.md"]

    done = merge_inbox(squad, SETTINGS, clock=lambda: T + 1.9)
    assert done.merged == 1 and not path.exists()
    [entry] = parse_decisions(squad.decisions_md).entries
    assert entry.text.rstrip().endswith("Then log the offset in the rig notebook.")


@pytest.mark.parametrize("change", ["append", "rewrite"])
def test_a_file_that_changes_between_the_two_looks_waits(squad: SquadLayout, change: str) -> None:
    path = squad.inbox_dir / "wren-vane.md"
    hand_write(path, PART_ONE, T)
    [listed] = scan_inbox(squad)  # first look
    if change == "append":
        with path.open("a", encoding="utf-8") as handle:
            handle.write(PART_TWO)
        os.utime(path, (T, T))  # even with its mtime put back, the size gives it away
    else:
        path.unlink()
        hand_write(path, PART_ONE + PART_TWO, T)

    outcome = read_inbox_file(listed, max_bytes=10**6, now=T + 5, settle_s=1.0)

    assert "changed between two looks" in getattr(outcome, "reason", "")


def test_a_file_from_the_future_settles_by_the_scribes_own_looks(squad: SquadLayout) -> None:
    path = squad.inbox_dir / "wren-vane.md"
    hand_write(path, PART_ONE, T + 3600)  # a skewed clock wrote it
    memory = ScribeMemory()

    assert merge_inbox(squad, SETTINGS, clock=lambda: T, memory=memory).deferred
    assert merge_inbox(squad, SETTINGS, clock=lambda: T + 0.5, memory=memory).deferred
    assert merge_inbox(squad, SETTINGS, clock=lambda: T + 1.2).deferred  # no memory: no looks
    assert merge_inbox(squad, SETTINGS, clock=lambda: T + 1.2, memory=memory).merged == 1


def test_a_bad_file_also_waits_for_quiet_before_it_is_rejected(squad: SquadLayout) -> None:
    path = squad.inbox_dir / "wren-half.md"
    path.write_bytes("### 2026-01-01: Café".encode()[:-1])  # cut inside a character
    os.utime(path, (T, T))

    report = merge_inbox(squad, SETTINGS, clock=lambda: T + 0.1)

    assert report.rejected == [] and report.deferred == ["wren-half.md"]


def test_a_dead_writers_temp_file_is_swept_and_a_live_writers_is_not(squad: SquadLayout) -> None:
    dead = squad.inbox_dir / ".wren-vane.md.abc123.tmp"
    live = squad.inbox_dir / ".wren-gust.md.def456.tmp"
    for path, age in ((dead, 7200), (live, 5)):
        path.write_text(PART_ONE, encoding="utf-8")
        os.utime(path, (T - age, T - age))

    report = merge_inbox(squad, SETTINGS, clock=lambda: T)

    assert report.merged == 0 and not dead.exists() and live.exists()
