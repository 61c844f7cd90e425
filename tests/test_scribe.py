"""The Scribe's merge: order, splitting, duplicates, rejects, team updates, dry runs."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest
import structlog
import structlog.testing

from squadd.config import Settings
from squadd.contracts.events import BaseEvent, ScribeMerged, ScribeRejected
from squadd.scribe import merge_inbox
from squadd.state.decisions import format_entry, parse_decisions, write_inbox_entry
from squadd.state.history import HistoryNote, append_history_lines
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from tests._helpers import snapshot

OLD = time.time() - 3600


class ListSink:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)


def put(layout: SquadLayout, name: str, content: str | bytes, *, mtime: float = OLD) -> Path:
    path = layout.inbox_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    os.utime(path, (mtime, mtime))
    return path


def entry(title: str, body: str = "Because.", *, agent: str = "lead",
          day: dt.date = dt.date(2025, 3, 1)) -> str:
    return format_entry(title=title, body=body, agent=agent, category="general", date=day)


def titles(layout: SquadLayout) -> list[str]:
    return [e.title for e in parse_decisions(layout.decisions_md).entries]


def inbox_names(layout: SquadLayout) -> list[str]:
    return sorted(p.name for p in layout.inbox_dir.iterdir() if not p.name.startswith("."))


def test_files_merge_in_mtime_order_then_by_name(squad: SquadLayout) -> None:
    put(squad, "b-late.md", entry("Late"), mtime=OLD + 20)
    put(squad, "z-early.md", entry("Early"), mtime=OLD)
    put(squad, "b-tie.md", entry("Tie B"), mtime=OLD + 10)
    put(squad, "a-tie.md", entry("Tie A"), mtime=OLD + 10)

    report = merge_inbox(squad, Settings())

    assert titles(squad) == ["Early", "Tie A", "Tie B", "Late"]
    assert report.merged == 4 and report.merged_files == [
        "z-early.md", "a-tie.md", "b-tie.md", "b-late.md"]
    assert inbox_names(squad) == []


def test_a_file_splits_into_entries_at_its_headings(squad: SquadLayout) -> None:
    put(squad, "lead-three.md", entry("One") + "\n" + entry("Two") + "\n" + entry("Three"))

    report = merge_inbox(squad, Settings())

    assert report.merged == 3
    assert titles(squad)[-3:] == ["One", "Two", "Three"]


def test_a_hundred_files_holding_ten_decisions_give_ten_and_a_rerun_changes_no_byte(
    squad: SquadLayout,
) -> None:
    for i in range(100):
        n = i % 10
        # The same decision with different whitespace and line endings each time.
        text = entry(f"Decision {n}", f"Body of {n}.\n\nMore   text.")
        if i % 3 == 1:
            text = text.replace("\n", "\r\n")
        if i % 3 == 2:
            text = text.replace("More   text.", "More\ttext.  \n\n")
        put(squad, f"lead-d{i:03}.md", text, mtime=OLD + i)

    first = merge_inbox(squad, Settings())
    before = snapshot(squad.root)
    second = merge_inbox(squad, Settings())

    assert first.merged == 10 and first.skipped == 90
    assert [t for t in titles(squad) if t.startswith("Decision")] == [
        f"Decision {n}" for n in range(10)]
    assert inbox_names(squad) == []
    assert second.merged == 0 and second.merged_files == []
    assert snapshot(squad.root) == before


def test_an_entry_already_in_decisions_md_is_skipped_even_without_an_index(
    squad: SquadLayout,
) -> None:
    existing = entry("Already there", "Settled long ago.")
    with squad.decisions_md.open("a", encoding="utf-8") as handle:
        handle.write("\n" + existing)
    put(squad, "lead-again.md", existing.replace("long ago.", "long\n   ago."))

    report = merge_inbox(squad, Settings())

    assert report.skipped == 1 and report.merged == 0
    assert titles(squad).count("Already there") == 1
    assert inbox_names(squad) == []


def test_two_bodies_under_one_heading_are_both_kept(squad: SquadLayout) -> None:
    put(squad, "lead-a.md", entry("Same title", "First body."), mtime=OLD)
    put(squad, "tester-b.md", entry("Same title", "Second body."), mtime=OLD + 1)

    report = merge_inbox(squad, Settings())

    assert report.merged == 2
    bodies = [e.body for e in parse_decisions(squad.decisions_md).entries
              if e.title == "Same title"]
    assert len(bodies) == 2 and "First body." in bodies[0] and "Second body." in bodies[1]


def test_malformed_files_give_four_rejects_with_reasons_and_one_wrapped_entry(
    squad: SquadLayout, caplog: pytest.LogCaptureFixture,
) -> None:
    put(squad, "lead-empty.md", b"")
    put(squad, "lead-binary.md", b"### 2025-01-01: Bin\n\x00\x01\x02")
    put(squad, "lead-latin.md", "### 2025-01-01: Café décidé\n".encode("latin-1"))
    put(squad, "lead-huge.md", b"### 2025-01-01: Huge\n" + b"x" * (5 * 1024 * 1024))
    put(squad, "ripley-use-sqlite-for-tests.md", "We use SQLite in tests.\nIt is fast.\n",
        mtime=time.mktime((2025, 2, 3, 12, 0, 0, 0, 0, -1)))
    sink = ListSink()

    with structlog.testing.capture_logs() as logged:
        report = merge_inbox(squad, Settings(), sink)

    reasons = {r.file: r.reason for r in report.rejected}
    assert set(reasons) == {"lead-empty.md", "lead-binary.md", "lead-latin.md", "lead-huge.md"}
    assert reasons["lead-empty.md"].startswith("empty")
    assert reasons["lead-binary.md"].startswith("binary: NUL byte at offset 20")
    assert reasons["lead-latin.md"].startswith("not UTF-8: byte 0xe9")
    assert reasons["lead-huge.md"].startswith("oversized: 5242901 bytes")
    for name in reasons:
        moved = squad.rejected_dir / name
        assert moved.exists(), f"{name} was not kept in .rejected/"
        assert (squad.rejected_dir / f"{name}.reason").read_text().startswith(
            f"{name}: {reasons[name]}")
    assert (squad.rejected_dir / "lead-huge.md").stat().st_size == 5 * 1024 * 1024 + 21
    assert sorted(e.file for e in sink.events if isinstance(e, ScribeRejected)) == sorted(reasons)
    assert {"event": "scribe.rejected", "file": "lead-binary.md", "reason": reasons[
        "lead-binary.md"], "log_level": "warning"} in logged

    assert report.merged == 1
    wrapped = parse_decisions(squad.decisions_md).entries[-1]
    assert wrapped.heading == "### 2025-02-03: use sqlite for tests"
    assert wrapped.by == "ripley"
    assert "We use SQLite in tests.\nIt is fast." in wrapped.body
    assert inbox_names(squad) == []


def test_an_empty_file_just_created_waits_for_its_writer(squad: SquadLayout) -> None:
    put(squad, "lead-new.md", b"", mtime=time.time())

    report = merge_inbox(squad, Settings())

    assert report.deferred == ["lead-new.md"] and report.rejected == []
    assert inbox_names(squad) == ["lead-new.md"]


def test_a_symlink_in_the_inbox_is_rejected_without_reading_its_target(
    squad: SquadLayout, tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("### 2025-01-01: Secret\n\nDo not leak.\n")
    squad.inbox_dir.mkdir(parents=True, exist_ok=True)
    (squad.inbox_dir / "lead-link.md").symlink_to(secret)

    report = merge_inbox(squad, Settings())

    assert [r.file for r in report.rejected] == ["lead-link.md"]
    assert "Do not leak" not in squad.decisions_md.read_text()
    assert (squad.rejected_dir / "lead-link.md").is_symlink()


def test_a_second_reject_of_the_same_name_keeps_both(squad: SquadLayout) -> None:
    put(squad, "lead-x.md", b"\x00")
    merge_inbox(squad, Settings())
    put(squad, "lead-x.md", b"\xff")
    merge_inbox(squad, Settings())

    assert (squad.rejected_dir / "lead-x.md").read_bytes() == b"\x00"
    assert (squad.rejected_dir / "lead-x-2.md").read_bytes() == b"\xff"
    assert "not UTF-8" in (squad.rejected_dir / "lead-x-2.md.reason").read_text()


def test_an_unclosed_code_fence_cannot_swallow_the_entries_after_it(squad: SquadLayout) -> None:
    put(squad, "lead-fence.md", entry("Fenced", "```python\nprint('hi')\n"), mtime=OLD)
    put(squad, "lead-after.md", entry("After"), mtime=OLD + 1)

    merge_inbox(squad, Settings())

    assert titles(squad)[-2:] == ["Fenced", "After"]


def test_a_decision_naming_agents_updates_their_histories_but_not_the_authors(
    squad: SquadLayout,
) -> None:
    for name in ("ripley", "dallas", "kane"):
        add_agent(squad, name, "Engineer", templates=templates_dir())
    put(squad, "ripley-db.md", entry("Use Postgres", "@dallas migrates; Kane reviews. Ripley "
                                     "owns it. Kanegawa is no agent.", agent="ripley",
                                     day=dt.date(2025, 4, 1)))

    report = merge_inbox(squad, Settings())

    # The new agents' histories hold no learning yet: Squad's dated style.
    line = ("### 2025-04-01: Team update: Use Postgres\n\n"
            "📌 Team update (2025-04-01): Use Postgres — decided by ripley\n")
    assert report.team_updates == 2
    assert line in squad.history("dallas").read_text()
    assert line in squad.history("kane").read_text()
    assert "Team update" not in squad.history("ripley").read_text()
    assert "Team update" not in squad.history("scribe").read_text()


def test_team_updates_are_added_once_however_often_they_are_sent(squad: SquadLayout) -> None:
    add_agent(squad, "dallas", "Engineer", templates=templates_dir())
    lines = [HistoryNote("Team update: A", "📌 Team update (2025-04-01): A — decided by ripley",
                         dt.date(2025, 4, 1))]

    assert len(append_history_lines(squad, "dallas", lines)) == 1
    assert append_history_lines(squad, "dallas", lines + lines) == []
    assert squad.history("dallas").read_text().count("📌 Team update") == 1


def test_a_dry_run_reports_and_changes_nothing(squad: SquadLayout) -> None:
    put(squad, "lead-a.md", entry("A"))
    put(squad, "lead-a-copy.md", entry("A"), mtime=OLD + 1)
    put(squad, "lead-bad.md", b"\x00")
    before = snapshot(squad.root)

    report = merge_inbox(squad, Settings(), dry_run=True)

    assert report.dry_run and report.merged == 1 and report.skipped == 1
    assert [r.file for r in report.rejected] == ["lead-bad.md"]
    assert {k: v for k, v in snapshot(squad.root).items() if not k.startswith("run")} == {
        k: v for k, v in before.items() if not k.startswith("run")}
    assert not squad.decisions_index.exists()


def test_a_merge_publishes_one_event_with_its_counts(squad: SquadLayout) -> None:
    write_inbox_entry(squad, agent="lead", title="One", body="1")
    write_inbox_entry(squad, agent="lead", title="Two", body="2")
    for path in squad.inbox_dir.iterdir():
        os.utime(path, (OLD, OLD))
    sink = ListSink()

    merge_inbox(squad, Settings(), sink)

    merged = [e for e in sink.events if isinstance(e, ScribeMerged)]
    assert len(merged) == 1
    assert merged[0].merged == 2 and sorted(merged[0].files) == ["lead-one.md", "lead-two.md"]


def test_small_batches_merge_the_same_as_one(squad: SquadLayout) -> None:
    for i in range(25):
        repeat = entry(f"N{i - 1}") if i and not i % 5 else ""
        put(squad, f"lead-{i:02}.md", entry(f"N{i}") + repeat, mtime=OLD + i)

    report = merge_inbox(squad, Settings(), batch_files=3)

    assert report.merged == 25 and report.skipped == 4
    assert titles(squad)[-25:] == [f"N{i}" for i in range(25)]
