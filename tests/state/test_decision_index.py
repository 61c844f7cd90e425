"""The decisions index: entry hashes of decisions.md, caught up on appends, rebuilt when stale."""

from __future__ import annotations

import os

import pytest

from squadd.fsio import append_fsync, atomic_write
from squadd.state import decision_index
from squadd.state.decision_index import DecisionIndex, entry_digest, normalize_entry
from squadd.state.decisions import format_entry, parse_decisions
from squadd.state.layout import SquadLayout


def entry(title: str, body: str = "Because.") -> str:
    return format_entry(title=title, body=body, agent="lead", category="general")


def append(layout: SquadLayout, text: str) -> None:
    append_fsync(layout.decisions_md, "\n" + text)


def test_normalizing_ignores_whitespace_and_line_endings_but_not_words() -> None:
    assert normalize_entry("### A\r\n\r\n  body  text\n") == normalize_entry("### A\n\nbody text")
    assert entry_digest("### A\n\nbody text") != entry_digest("### A\n\nbodytext")


def test_a_missing_index_is_built_from_decisions_md(squad: SquadLayout) -> None:
    append(squad, entry("One"))

    with DecisionIndex.open(squad) as index:
        assert index.rebuilt
        assert entry_digest(entry("One")) in index
        assert entry_digest(entry("Two")) not in index
    assert squad.decisions_index.exists()


def test_appends_are_caught_up_without_reparsing_the_whole_file(squad: SquadLayout) -> None:
    with DecisionIndex.open(squad) as index:
        assert index.rebuilt
    append(squad, entry("Appended by hand"))

    with DecisionIndex.open(squad) as index:
        assert not index.rebuilt
        assert entry_digest(entry("Appended by hand")) in index
    with DecisionIndex.open(squad) as index:
        assert not index.rebuilt and entry_digest(entry("Appended by hand")) in index


def test_an_index_is_rebuilt_when_decisions_md_is_replaced(squad: SquadLayout) -> None:
    append(squad, entry("Gone soon"))
    DecisionIndex.open(squad).close()
    atomic_write(squad.decisions_md, "# Decisions\n\n" + entry("Fresh"))

    with DecisionIndex.open(squad) as index:
        assert index.rebuilt
        assert entry_digest(entry("Gone soon")) not in index
        assert entry_digest(entry("Fresh")) in index


def test_an_edit_in_place_that_keeps_the_size_is_noticed(squad: SquadLayout) -> None:
    append(squad, entry("Alpha"))
    DecisionIndex.open(squad).close()
    text = squad.decisions_md.read_text()
    with squad.decisions_md.open("r+", encoding="utf-8") as handle:
        handle.write(text.replace("Alpha", "Omega"))
    os.utime(squad.decisions_md, ns=(0, squad.decisions_md.stat().st_mtime_ns + 1_000_000))

    with DecisionIndex.open(squad) as index:
        assert index.rebuilt
        assert entry_digest(entry("Omega")) in index
        assert entry_digest(entry("Alpha")) not in index


def test_an_appended_tail_that_extends_the_last_entry_forces_a_rebuild(
    squad: SquadLayout,
) -> None:
    append(squad, entry("Growing"))
    DecisionIndex.open(squad).close()
    append_fsync(squad.decisions_md, "One more line of the same entry.\n")

    with DecisionIndex.open(squad) as index:
        assert index.rebuilt
        grown = parse_decisions(squad.decisions_md).entries[-1].text
        assert entry_digest(grown) in index
        assert entry_digest(entry("Growing")) not in index


def test_a_damaged_index_is_rebuilt(squad: SquadLayout) -> None:
    append(squad, entry("Kept"))
    DecisionIndex.open(squad).close()
    squad.decisions_index.write_bytes(b"garbage" * 20)

    with DecisionIndex.open(squad) as index:
        assert index.rebuilt and entry_digest(entry("Kept")) in index


def test_many_recorded_appends_are_sorted_and_all_still_found(
    squad: SquadLayout, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decision_index, "MAX_UNSORTED", 8)
    texts = [entry(f"E{i}") for i in range(30)]
    with DecisionIndex.open(squad) as index:
        for i in range(0, 30, 3):
            chunk = "\n" + "\n".join(texts[i:i + 3])
            append_fsync(squad.decisions_md, chunk)
            index.record_append([entry_digest(t) for t in texts[i:i + 3]], chunk)
        assert all(entry_digest(t) in index for t in texts)
    with DecisionIndex.open(squad) as index:
        assert not index.rebuilt
        assert all(entry_digest(t) in index for t in texts)
        assert entry_digest(entry("E30")) not in index
        assert len(index) >= 30


def test_a_read_only_index_never_writes(squad: SquadLayout) -> None:
    append(squad, entry("Seen"))

    with DecisionIndex.open(squad, writable=False) as index:
        assert entry_digest(entry("Seen")) in index
    assert not squad.decisions_index.exists()
