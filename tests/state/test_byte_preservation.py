"""Every writer of the team's memory keeps a file's bytes: its dominant line ending, stray `\\r`,
trailing whitespace, BOM and final newline stay as they were, and only the lines it means to
change differ (decisions, archive, histories, team.md, routing, casting)."""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import time

from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.archive import archive_decisions
from squadd.state.casting import register_agent
from squadd.state.history import (
    HistoryNote,
    append_history_lines,
    append_learning,
    compact_history,
)
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from squadd.state.textstyle import restyle

BOM = "\ufeff".encode()


def lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True) if b"\r" not in data else _crlf_lines(data)


def _crlf_lines(data: bytes) -> list[bytes]:
    """Lines ended by `\\n` only (a stray `\\r` stays inside its line)."""
    out, start = [], 0
    while (end := data.find(b"\n", start)) >= 0:
        out.append(data[start:end + 1])
        start = end + 1
    return out + ([data[start:]] if start < len(data) else [])


def changes(before: bytes, after: bytes) -> tuple[list[bytes], list[bytes]]:
    """(removed, added) lines, compared byte for byte."""
    removed: list[bytes] = []
    added: list[bytes] = []
    old, new = lines(before.removeprefix(BOM)), lines(after.removeprefix(BOM))
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            removed += old[i1:i2]
            added += new[j1:j2]
    return removed, added


HISTORY = (
    "\ufeff# Project Context\r\n\r\n- **Project:** kestrel  \r\n\r\n## Learnings\r\n\r\n"
    "### 2026-01-05: Flash wear\r\n\r\nThe log \rrotates daily. \r\n\r\n"
    "### 2026-02-10: Radio queue 📡\r\n\r\nOne queue per radio.\r\n"
)


def test_a_learning_and_a_team_update_add_only_their_lines(squad: SquadLayout) -> None:
    path = squad.history("wren")
    path.parent.mkdir(parents=True)
    path.write_bytes(HISTORY.encode())
    before = path.read_bytes()

    append_learning(squad, "wren", "Cold starts need two power cycles.", today=dt.date(2026, 3, 1))
    after = path.read_bytes()
    assert after.startswith(BOM) and b"\rrotates daily. \r\n" in after
    removed, added = changes(before, after)
    assert removed == [b"One queue per radio.\r\n"] or removed == []
    assert all(line.endswith(b"\r\n") for line in added)
    assert b"### 2026-03-01: Cold starts need two power cycles\r\n" in added

    append_history_lines(squad, "wren", [HistoryNote("Team update: CBOR", "📌 use CBOR",
                                                     dt.date(2026, 3, 2))])
    removed, added = changes(after, path.read_bytes())
    assert removed == []
    assert added == [b"\r\n", b"### 2026-03-02: Team update: CBOR\r\n", b"\r\n",
                     b"\xf0\x9f\x93\x8c use CBOR\r\n"]


def test_compaction_removes_only_the_archived_learnings(squad: SquadLayout) -> None:
    path = squad.history("wren")
    path.parent.mkdir(parents=True)
    blocks = "".join(f"### 2026-01-{d:02}: Finding {d}\r\n\r\n{'Detail. ' * 40}\r\n\r\n"
                     for d in range(1, 29))
    text = "\ufeff# Project Context\r\n\r\n## Learnings\r\n\r\n" + blocks + "Tail \r stays.  "
    path.write_bytes(text.encode())
    before = path.read_bytes()

    moved = compact_history(squad, "wren", max_bytes=6000, today=dt.date(2026, 2, 1))

    after = path.read_bytes()
    removed, added = changes(before, after)
    assert moved > 0 and added == []
    assert after.startswith(BOM) and after.endswith(b"Tail \r stays.  ")  # no newline added
    assert all(line.endswith(b"\r\n") or line == b"Finding 1" for line in removed)
    archive = squad.history_archive("wren").read_bytes()
    assert b"### 2026-01-01: Finding 1\r\n" in archive and b"\n\n" not in archive


def test_merging_and_archiving_decisions_keep_every_other_line(squad: SquadLayout) -> None:
    old = "".join(f"### 2025-0{m}-01: Old choice {m}\r\n\r\n**By:** Osprey\r\n\r\n"
                  f"{'Reasons here. ' * 30}\r\n\r\n" for m in range(1, 8))
    text = ("\ufeff# Decisions\r\n\r\nThe team's choices.  \r\n\r\n" + old
            + "### 2026-01-02: Keep \r this\r\n\r\n**By:** Wren\r\n\r\nStays.\r\n")
    squad.decisions_md.write_bytes(text.encode())
    inbox = squad.inbox_dir / "tern-use-cbor.md"
    inbox.write_text("# Decision: Use CBOR\n\n**By:** Tern\n\n## Why\n\nSmaller.\n")
    past = time.time() - 3600
    os.utime(inbox, (past, past))
    before = squad.decisions_md.read_bytes()

    merge_inbox(squad, Settings(scribe=ScribeSettings(archive_soft_bytes=10**9)))
    merged = squad.decisions_md.read_bytes()
    removed, added = changes(before, merged)
    assert removed == []
    assert all(line.endswith(b"\r\n") for line in added)
    assert b"### " in b"".join(added) and b"#### Why\r\n" in added

    outcome = archive_decisions(squad, ScribeSettings(archive_soft_bytes=2000,
                                                      archive_soft_days=30,
                                                      archive_hard_bytes=10**9),
                                today=dt.date(2026, 1, 10))
    after = squad.decisions_md.read_bytes()
    removed, added = changes(merged, after)
    assert outcome.moved == 7 and added == []
    assert after.startswith(BOM) and b"The team's choices.  \r\n" in after
    assert b"### 2026-01-02: Keep \r this\r\n" in after
    assert all(b"Old choice" not in line or line.endswith(b"\r\n") for line in removed)
    archived = squad.decisions_archive.read_bytes()
    assert b"Old choice 1\r\n" in archived


def test_team_md_gains_only_the_new_row(squad: SquadLayout) -> None:
    team = squad.team_md.read_bytes().decode()
    text = "\ufeff" + team.replace("\n", "\r\n").replace("# ", "# \r", 1) + "Trailing  "
    squad.team_md.write_bytes(text.encode())
    before = squad.team_md.read_bytes()

    add_agent(squad, "tern", "Tester", templates=templates_dir())

    removed, added = changes(before, squad.team_md.read_bytes())
    assert removed == []
    assert len(added) == 1 and added[0].startswith(b"| Tern | Tester |")  # the table's case
    assert added[0].endswith(b"\r\n")


def test_routing_md_is_never_rewritten(squad: SquadLayout) -> None:
    text = "\ufeff# Routing\r\n\r\n## Routing Table\r\n\r\n| Work Type | Route To |\r\n" \
           "|---|---|\r\n| tests \r| scribe |  "
    squad.routing_md.write_bytes(text.encode())
    add_agent(squad, "tern", "Tester", templates=templates_dir())
    merge_inbox(squad, Settings())
    assert squad.routing_md.read_bytes() == text.encode()


def test_casting_files_gain_only_the_new_agent(squad: SquadLayout) -> None:
    registry = {"agents": {"lead": {"created_at": "2026-01-01T00:00:00.000Z",
                                    "persistent_name": "Lead", "universe": "preset:default",
                                    "status": "active"}}}
    history = {"assignment_cast_snapshots": {}, "universe_usage_history": []}
    squad.casting_registry.parent.mkdir()
    squad.casting_registry.write_bytes(
        json.dumps(registry, indent=2).replace("\n", "\r\n").encode() + b"\r\n")
    squad.casting_history.write_bytes(json.dumps(history, indent=2).encode())  # no newline
    before = squad.casting_registry.read_bytes()

    changed = register_agent(squad, "tern", "Tern 🧪",
                             now=dt.datetime(2026, 3, 1, 9, 30, tzinfo=dt.UTC))

    assert changed == [squad.casting_registry, squad.casting_history]
    after = squad.casting_registry.read_bytes()
    removed, added = changes(before, after)
    assert removed in ([], [b"    }\r\n"]) and b"    },\r\n" in added  # the comma JSON needs
    assert len(added) <= 7 and all(line.endswith(b"\r\n") for line in added)
    data = json.loads(after)
    assert data["agents"]["tern"] == {"created_at": "2026-03-01T09:30:00.000Z",
                                      "persistent_name": "Tern 🧪", "universe": "squadd",
                                      "status": "active"}
    cast = json.loads(squad.casting_history.read_bytes())
    assert cast["assignment_cast_snapshots"]["squadd-agent-add-2026-03-01T09:30:00.000Z"][
        "agents"] == ["tern"]
    assert register_agent(squad, "tern", "Tern") == []  # already cast: nothing changes


def test_restyle_keeps_kept_lines_and_gives_new_ones_the_dominant_ending() -> None:
    original = "a\r\nb \r\nmixed\nc\r\nlast"
    assert restyle(original, "a\nb \nmixed\nNEW\nc\nlast") == "a\r\nb \r\nmixed\nNEW\r\nc\r\nlast"
    assert restyle(original, "a\nb \nmixed\nc\nlast\nmore\n") == (
        "a\r\nb \r\nmixed\nc\r\nlast\r\nmore\r\n")
    assert restyle("\ufeffx\n", "x\ny\n") == "\ufeffx\ny\n"
