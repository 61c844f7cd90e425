"""Decisions in the shapes real teams write: whole, with their sub-sections, their metadata from
the body, merged and archived without a split, a lost sub-section or a wrong author."""

from __future__ import annotations

import datetime as dt
import os
import time

from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.archive import archive_decisions
from squadd.state.decisions import parse_decisions, parse_entries
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from tests.state.memory_fixtures import DECISION_FILE, DECISIONS_H2, DECISIONS_H3

OLD = time.time() - 3600


def put(layout: SquadLayout, name: str, text: str) -> None:
    path = layout.inbox_dir / name
    path.write_text(text, encoding="utf-8")
    os.utime(path, (OLD, OLD))


def kestrel(layout: SquadLayout) -> None:
    for name, role in (("osprey", "Lead"), ("wren", "Firmware"), ("tern", "Tester")):
        add_agent(layout, name, role, templates=templates_dir())


def test_a_decision_keeps_its_sub_sections_whatever_level_they_use() -> None:
    parsed = parse_entries(DECISIONS_H3)
    assert parsed.preamble.endswith("## Active\n")
    assert [(e.kind, e.title, e.by) for e in parsed.entries] == [
        ("decision", "Use a single radio queue", "Osprey"),
        ("decision", "Pin the toolchain to 13.2", "Wren"),
        ("section", "Superseded", None),
        ("decision", "Poll sensors every second", "Osprey"),
    ]
    radio, toolchain = parsed.entries[0].text, parsed.entries[1].text
    assert radio.rstrip().endswith("#### Files Updated\n\n- src/radio/queue.c")
    assert "### Files Updated\n\n- toolchain.cmake" in toolchain
    assert toolchain.rstrip().endswith("### Cross-References\n\n- The radio queue decision.")

    h2 = parse_entries(DECISIONS_H2).entries
    assert [(e.title, e.date) for e in h2] == [
        ("Log in CBOR, not JSON", dt.date(2026, 1, 5)),
        ("Retry uploads three times", dt.date(2026, 1, 12))]
    assert all(e.text.count("### ") == 2 for e in h2)


def test_body_metadata_wins_over_the_file_name_and_the_mtime(squad: SquadLayout) -> None:
    kestrel(squad)
    put(squad, "wren-notes-on-wind.md", DECISION_FILE)

    report = merge_inbox(squad, Settings())

    assert report.merged == 1
    [merged] = [e for e in parse_decisions(squad.decisions_md).entries]
    assert (merged.title, merged.date, merged.by) == (
        "Sample wind speed at 4 Hz", dt.date(2026, 2, 1), "Osprey")
    # One Squad entry: dated `###` heading, the body's headings moved below it (`####`).
    assert merged.text == (
        "### 2026-02-01: Sample wind speed at 4 Hz\n\n**By:** Osprey\n**Date:** 2026-02-01\n\n"
        "#### Context\n\nGusts shorter than half a second were lost at 1 Hz.\n\n"
        "#### Consequences\n\n- Tern updates the expected rates of the bench rig.\n")
    tern = squad.history("tern").read_text()
    assert ("📌 Team update (2026-02-01): Sample wind speed at 4 Hz — decided by Osprey"
            in tern)
    assert "decided by unknown" not in tern and "decided by wren" not in tern


def test_identical_sub_sections_of_two_decisions_are_not_duplicates(squad: SquadLayout) -> None:
    put(squad, "tern-log-and-retry.md", DECISIONS_H2.split("\n", 2)[2])

    report = merge_inbox(squad, Settings())

    assert (report.merged, report.skipped) == (2, 0)
    text = squad.decisions_md.read_text()
    assert text.count("\n#### Cross-References\n\n- The flash budget note in the README.") == 2
    assert text.count("\n### ") == 2  # each decision one Squad entry, sub-sections below it
    assert [e.title for e in parse_decisions(squad.decisions_md).entries] == [
        "Log in CBOR, not JSON", "Retry uploads three times"]


def test_loose_text_and_bare_entries_become_entries_that_keep_their_sub_sections(
    squad: SquadLayout,
) -> None:
    squad.decisions_md.write_text("# Decisions\n\n" + DECISIONS_H3.split("## Active\n\n")[1])
    put(squad, "wren-tabs.md", "### Indent with tabs\n\nThe old code uses tabs.\n")
    put(squad, "wren-flash-budget.md", "We keep 64 KB of flash free.\n\n**Date:** 2026-01-30\n\n"
                                       "## Why\n\nThe bootloader grew.\n")
    put(squad, "wren-ram.md", "## RAM budget\n\n**Date:** 2026-01-31\n\n### Why\n\nStacks.\n")

    merge_inbox(squad, Settings())

    entries = {e.title: e for e in parse_decisions(squad.decisions_md).entries}
    tabs, budget, ram = entries["Indent with tabs"], entries["flash budget"], entries["RAM budget"]
    assert (tabs.kind, tabs.by) == ("decision", "wren")
    assert (budget.date, budget.by) == (dt.date(2026, 1, 30), "wren")
    assert "#### Why\n\nThe bootloader grew." in budget.text  # moved below the entry's level
    assert (ram.date, ram.text) == (
        dt.date(2026, 1, 31),
        "### 2026-01-31: RAM budget\n\n**By:** wren\n\n**Date:** 2026-01-31\n\n"
        "#### Why\n\nStacks.\n")
    assert "Poll sensors every second" in entries  # the earlier decisions are whole still
    assert "The old code uses tabs." not in entries["Poll sensors every second"].text


def test_archiving_moves_decisions_whole_and_leaves_no_orphaned_sub_section(
    squad: SquadLayout,
) -> None:
    filler = "".join(
        f"### 2026-05-{d:02}: Recent choice {d}\n\n**By:** Tern\n\n{'Recent reasons. ' * 60}\n\n"
        for d in range(1, 20))
    squad.decisions_md.write_text(DECISIONS_H3 + "\n" + filler)
    settings = ScribeSettings(archive_soft_bytes=4096, archive_hard_bytes=10**9)

    outcome = archive_decisions(squad, settings, today=dt.date(2026, 6, 15))

    live = squad.decisions_md.read_text()
    archive = squad.decisions_archive.read_text()
    assert {"Use a single radio queue", "Pin the toolchain to 13.2",
            "Poll sensors every second"} <= set(outcome.titles)
    for whole in parse_entries(DECISIONS_H3).entries:
        if whole.kind == "decision":
            assert archive.count(whole.text) == 1 and whole.text not in live
    assert "Files Updated" not in live and "Cross-References" not in live
    assert "## Superseded" in live  # a group heading is not a decision: it stays
    live_entries = parse_decisions(squad.decisions_md).entries
    assert live_entries[-1].title == "Recent choice 19"  # the newest always stays
    assert all(e.kind != "decision" or e.text.startswith("### 2026-05-") for e in live_entries)


def test_long_runs_of_spaces_parse_in_linear_time() -> None:
    # A lazy group before optional spaces would take about 10^10 steps on each of these.
    spaces = " " * 200_000
    text = (f"###{spaces}2026-01-01: Wide{spaces}\n\n**By:**{spaces}osprey{spaces}\n"
            f"**Category:**{spaces}x{spaces}\n\n#{spaces}\n")
    entry, heading_only = parse_entries(text).entries
    assert (entry.title, entry.by, entry.category) == ("Wide", "osprey", "x")
    assert (heading_only.kind, heading_only.title) == ("section", "")
    history = f"## Learnings\n\n###{spaces}Wide (2026-01-01){spaces}\n\n- x{spaces}\n"
    from squadd.state.learnings import learnings

    assert len(learnings(history)) == 1


def test_headings_and_open_fences_in_a_body_stay_inside_their_entry(squad: SquadLayout) -> None:
    from squadd.state.decisions import write_inbox_entry
    from squadd.state.history import append_learning
    from squadd.state.learnings import learnings

    body = "## Context\n\nWhy.\n\n### 2026-01-01: Not a decision\n\n```sh\n## in a fence"
    path = write_inbox_entry(squad, agent="wren", title="Nested", body=body)
    text = path.read_text()
    assert "#### Context" in text and "##### 2026-01-01: Not a decision" in text
    assert "## in a fence" in text and text.rstrip().endswith("```")
    [entry] = parse_entries(text).entries
    assert entry.text == text

    squad.history("wren").parent.mkdir(parents=True, exist_ok=True)
    squad.history("wren").write_text("## Learnings\n\n### Old (2025-01-01)\n\nold\n")
    append_learning(squad, "wren", "Pins matter.\n## Why\nThey do.\n```\nopen")
    blocks = learnings(squad.history("wren").read_text())
    assert len(blocks) == 2 and "#### Why" in blocks[1] and blocks[1].endswith("```")
