"""The archive gate: old decisions move to decisions-archive.md; undated ones stay; no loss."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import structlog
import structlog.testing

from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.archive import archive_decisions, render_decisions, separator_before_append
from squadd.state.decision_index import DecisionIndex, entry_digest
from squadd.state.decisions import format_entry, parse_decisions
from squadd.state.intent import append_with_intent, intent_file
from squadd.state.layout import SquadLayout
from tests._helpers import snapshot

TODAY = dt.date(2025, 6, 30)
FILLER = "Reasons that take some room. " * 30  # about 900 bytes per entry


def dated(title: str, day: dt.date | None) -> str:
    if day is None:
        return f"### {title}\n\n**By:** lead\n\n{FILLER}\n"
    return format_entry(title=title, body=FILLER, agent="lead", category="general", date=day)


def write(layout: SquadLayout, entries: list[str]) -> None:
    layout.decisions_md.write_text(render_decisions("# Decisions\n", entries), encoding="utf-8")


def titles(layout: SquadLayout, path: str = "decisions.md") -> list[str]:
    return [e.title for e in parse_decisions(layout.root / path).entries]


def test_only_undated_entries_over_the_threshold_stay_unchanged_with_a_logged_reason(
    squad: SquadLayout, caplog: pytest.LogCaptureFixture,
) -> None:
    write(squad, [dated(f"Undated {i}", None) for i in range(30)])
    assert squad.decisions_md.stat().st_size > 20 * 1024
    before = squad.decisions_md.read_bytes()

    with structlog.testing.capture_logs() as logged:
        report = merge_inbox(squad, Settings(), today=TODAY)

    assert squad.decisions_md.read_bytes() == before
    assert not squad.decisions_archive.exists()
    assert report.archived == 0
    assert "30 remaining entries are undated" in report.archive_note
    assert any(entry["event"] == "archive.note" and "undated entries are never archived"
               in entry["note"] and entry["log_level"] == "warning" for entry in logged)


def test_a_mixed_file_moves_its_oldest_dated_entries_first(squad: SquadLayout) -> None:
    # Every dated entry is recent (under 30 days), so only the count fallback moves any.
    days = [TODAY - dt.timedelta(days=d) for d in (3, 9, 1, 12, 5, 7, 2, 11, 4, 6, 10, 8)]
    entries = []
    for i, day in enumerate(days):
        entries.append(dated(f"Dated {i}", day))
        entries.append(dated(f"Undated {i}", None))
    write(squad, entries)

    report = merge_inbox(squad, Settings(), today=TODAY)

    oldest_first = [f"Dated {i}" for i in sorted(range(12), key=lambda i: days[i])]
    moved = titles(squad, "decisions-archive.md")
    assert 0 < len(moved) < 12 and report.archived == len(moved)
    assert set(moved) == set(oldest_first[:len(moved)])
    assert moved == sorted(moved, key=lambda t: int(t.split()[1]))  # in their file order
    assert squad.decisions_md.stat().st_size < 20 * 1024
    kept = titles(squad)
    assert all(f"Undated {i}" in kept for i in range(12))
    assert sorted(kept + moved) == sorted([f"Dated {i}" for i in range(12)]
                                          + [f"Undated {i}" for i in range(12)])


def test_past_the_soft_size_entries_older_than_thirty_days_move(squad: SquadLayout) -> None:
    old = [dated(f"Old {i}", TODAY - dt.timedelta(days=31 + i)) for i in range(12)]
    recent = [dated(f"Recent {i}", TODAY - dt.timedelta(days=30 - i)) for i in range(12)]
    write(squad, old + recent)
    assert 20 * 1024 <= squad.decisions_md.stat().st_size < 50 * 1024

    archive_decisions(squad, ScribeSettings(), today=TODAY)

    assert titles(squad) == [f"Recent {i}" for i in range(12)]
    assert titles(squad, "decisions-archive.md") == [f"Old {i}" for i in range(12)]


def test_past_the_hard_size_entries_older_than_seven_days_move(squad: SquadLayout) -> None:
    entries = [dated(f"E{i}", TODAY - dt.timedelta(days=i)) for i in range(60)]
    write(squad, entries)
    assert squad.decisions_md.stat().st_size >= 50 * 1024

    outcome = archive_decisions(squad, ScribeSettings(), today=TODAY)

    assert titles(squad) == [f"E{i}" for i in range(8)]
    assert outcome.moved == 52


def test_a_small_file_is_left_alone(squad: SquadLayout) -> None:
    write(squad, [dated("Ancient", dt.date(2000, 1, 1))])
    before = snapshot(squad.root)

    outcome = archive_decisions(squad, ScribeSettings(), today=TODAY)

    assert outcome.moved == 0 and snapshot(squad.root) == before


def test_the_index_follows_the_rewrite(squad: SquadLayout) -> None:
    old = [dated(f"Old {i}", dt.date(2024, 1, 1)) for i in range(30)]
    write(squad, [*old, dated("New", TODAY)])

    archive_decisions(squad, ScribeSettings(), today=TODAY)

    with DecisionIndex.open(squad) as index:
        assert not index.rebuilt
        assert entry_digest(dated("New", TODAY)) in index
        assert entry_digest(old[0]) not in index


def _interrupted_archive(layout: SquadLayout, tear_at: int | None) -> list[str]:
    """Leave the state a kill between the archive append and the rewrite leaves behind."""
    old = [dated(f"Old {i}", dt.date(2024, 1, 1)) for i in range(30)]
    write(layout, [*old, dated("New", TODAY)])
    chunk = "# Decisions Archive\n\n" + "\n".join(old)
    intent = append_with_intent(layout, layout.decisions_archive, chunk.encode(),
                                {"remove": [entry_digest(t).hex() for t in old]})
    if tear_at is not None:
        with layout.decisions_archive.open("r+b") as handle:
            handle.truncate(intent.start + tear_at)
    return [f"Old {i}" for i in range(30)]


@pytest.mark.parametrize("tear_at", [None, 0, 1, 5000])
def test_a_kill_between_archive_append_and_rewrite_never_duplicates(
    squad: SquadLayout, tear_at: int | None,
) -> None:
    moved = _interrupted_archive(squad, tear_at)

    report = merge_inbox(squad, Settings(), today=TODAY)
    merge_inbox(squad, Settings(), today=TODAY)

    assert report.recovered and "interrupted archive step" in report.recovered[0]
    assert titles(squad) == ["New"]
    assert titles(squad, "decisions-archive.md") == moved
    assert not intent_file(squad, squad.decisions_archive).exists()


@pytest.mark.parametrize(("content", "expected"), [
    (None, "# H\n\n"), (b"", "# H\n\n"), (b"x\n\n", ""), (b"x\n", "\n"), (b"x", "\n\n"),
])
def test_appends_start_with_the_heading_or_exactly_one_blank_line(
        tmp_path: Path, content: bytes | None, expected: str) -> None:
    target = tmp_path / "decisions.md"
    if content is not None:
        target.write_bytes(content)
    assert separator_before_append(target, "# H\n\n") == expected
