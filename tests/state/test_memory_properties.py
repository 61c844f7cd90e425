"""Properties of compaction and archiving over random histories and decisions in every shape:
every original entry ends up exactly once, byte for byte, in the live file or its archive, and
the newest entry is always in the live file."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.decision_index import DecisionIndex, entry_digest
from squadd.state.decisions import parse_decisions
from squadd.state.history import HistoryNote, append_history_lines, append_learning, compact_history
from squadd.state.inbox import file_entries
from squadd.state.layout import SquadLayout
from squadd.state.learnings import learnings
from squadd.state.scaffold import init_squad

START = dt.date(2025, 1, 1)
WORDS = st.lists(st.sampled_from(["gust", "vane", "rig", "flash", "radio", "solar", "log"]),
                 min_size=1, max_size=40).map(" ".join)

LEARNING = st.tuples(st.sampled_from(["bullet", "block", "block-bullets", "block-sub"]),
                     st.integers(0, 400), WORDS)
"""(shape, day offset, words) of one learning."""


def render_learning(n: int, shape: str, day: int, words: str) -> str:
    date = (START + dt.timedelta(days=day)).isoformat()
    if shape == "bullet":
        return f"- **[technical]** L{n:04} {date}: {words}\n"
    body = f"### L{n:04} on the rig ({date})\n\nL{n:04} {words}.\n"
    if shape == "block-bullets":
        body += "\n- same check\n- same log\n"
    if shape == "block-sub":
        body += "\n#### Steps\n\n- same check\n"
    return body


def fresh_squad(tmp: str) -> SquadLayout:
    repo = Path(tmp) / "repo"
    repo.mkdir()
    return SquadLayout.at(init_squad(repo).squad_dir)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(LEARNING, min_size=1, max_size=45),
    newest_first=st.booleans(),
    rounds=st.integers(1, 3),
    max_bytes=st.integers(600, 6000),
    notes=st.integers(0, 3),
)
def test_history_compaction_keeps_every_entry_once_and_the_newest_live(
    items: list[tuple[str, int, str]], newest_first: bool, rounds: int, max_bytes: int,
    notes: int,
) -> None:
    blocks = any(shape != "bullet" for shape, _, _ in items)
    # One file holds one shape: bullets, or blocks (of any inner make-up).
    items = [(s if blocks and s != "bullet" else ("block" if blocks else "bullet"), d, w)
             for s, d, w in items]
    ordered = sorted(range(len(items)), key=lambda i: (items[i][1], i))  # oldest first
    entries = [render_learning(i, *items[i]) for i in ordered]
    with tempfile.TemporaryDirectory() as tmp:
        layout = fresh_squad(tmp)
        path = layout.history("wren")
        shown = entries[::-1] if newest_first else entries
        joiner = "\n" if blocks else ""
        path.parent.mkdir(parents=True)
        path.write_text("# Project Context\n\nWren's notes.\n\n## Learnings\n\n"
                        + joiner.join(shown), encoding="utf-8")
        everything = [e.rstrip("\n") for e in entries]
        days = sorted(d for _, d, _ in items)
        # The newest is well defined when one learning is strictly the latest.
        newest = everything[-1] if len(days) == 1 or days[-1] > days[-2] else None
        for r in range(rounds):
            added = append_history_lines(layout, "wren", [
                HistoryNote(f"Team update {r}-{k}", f"N{r}{k} team update text", START)
                for k in range(notes)])
            compact_history(layout, "wren", max_bytes=max_bytes, keep_bytes=max_bytes // 2,
                            protect=added)
            live = path.read_text(encoding="utf-8")
            for note in added:
                assert note in live  # written in this pass: never archived in it
            if r == 0 and not notes and newest is not None:
                assert newest in live
            append_learning(layout, "wren", f"R{r} learned {r}", today=dt.date(2026, 1, 1 + r))
        live = path.read_text(encoding="utf-8")
        archive_path = layout.history_archive("wren")
        archived = archive_path.read_text(encoding="utf-8") if archive_path.exists() else ""
        for entry in everything:
            assert (live + "\n" + archived).count(entry) == 1, entry
        assert any(f"R{rounds - 1} learned {rounds - 1}" in e for e in learnings(live))


DECISION = st.tuples(st.sampled_from(["h3", "h3-sub", "h3-same-level", "h2", "decision-file"]),
                     st.integers(0, 360), WORDS)


def render_decision(n: int, shape: str, day: int, words: str) -> str:
    date = (START + dt.timedelta(days=day)).isoformat()
    same = "### Cross-References\n\n- The flash budget note.\n"
    if shape == "decision-file":
        return (f"# Decision: D{n:04} {words[:30]}\n\n**By:** Osprey\n**Date:** {date}\n\n"
                f"## Context\n\n{words}.\n\n## Consequences\n\n- none yet\n")
    if shape == "h2":
        return f"## {date}: D{n:04}\n\n**By:** Tern\n\n{words}.\n\n{same}"
    text = f"### {date}: D{n:04}\n\n**By:** Wren\n\n{words}.\n"
    if shape == "h3-sub":
        text += "\n#### Files Updated\n\n- src/radio/queue.c\n"
    if shape == "h3-same-level":
        text += f"\n### Files Updated\n\n- toolchain.cmake\n\n{same}"
    return text


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(DECISION, min_size=1, max_size=30),
    soft=st.integers(500, 8000),
    days=st.integers(0, 200),
    passes=st.integers(1, 3),
)
def test_archiving_keeps_every_decision_once_whole_and_the_newest_live(
    items: list[tuple[str, int, str]], soft: int, days: int, passes: int,
) -> None:
    texts = [render_decision(i, *item) for i, item in enumerate(items)]
    # Each file as the one Squad entry the Scribe makes of it (every shape here is dated).
    merged = ["".join(file_entries(t, f"osprey-d{i:04}.md", dt.date(2000, 1, 1)))
              for i, t in enumerate(texts)]
    assert all(m.startswith("### ") and m.count("\n### ") == 0 for m in merged)
    scribe = Settings(scribe=ScribeSettings(archive_soft_bytes=soft, archive_soft_days=days,
                                            archive_hard_bytes=10**9))
    old = time.time() - 3600
    with tempfile.TemporaryDirectory() as tmp:
        layout = fresh_squad(tmp)
        chunks = [range(k, len(texts), passes) for k in range(passes)]
        for chunk in chunks:
            for i in chunk:
                path = layout.inbox_dir / f"osprey-d{i:04}.md"
                path.write_text(texts[i], encoding="utf-8")
                os.utime(path, (old + i, old + i))
            merge_inbox(layout, scribe, today=dt.date(2026, 1, 1))
        live = layout.decisions_md.read_text(encoding="utf-8")
        archive = (layout.decisions_archive.read_text(encoding="utf-8")
                   if layout.decisions_archive.exists() else "")
        for text in merged:
            assert (live + "\n" + archive).count(text.rstrip("\n")) == 1, text
        # The index, caught up pass by pass, knows exactly the entries a full parse finds.
        whole = {entry_digest(e.text) for e in parse_decisions(layout.decisions_md).entries}
        with DecisionIndex.open(layout, writable=False) as index:
            assert len(index) == len(whole) and all(d in index for d in whole)
        merged_order = [i for chunk in chunks for i in chunk]
        newest = max(merged_order, key=lambda i: (items[i][1], merged_order.index(i)))
        assert merged[newest].rstrip("\n") in live
