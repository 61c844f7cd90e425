"""Decision entries: inbox files created with O_EXCL, the entry format, and parsing."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from squadd.errors import InvalidNameError, LimitExceededError, StateError
from squadd.state.decisions import (
    format_entry,
    parse_decisions,
    parse_entries,
    slugify,
    write_inbox_entry,
)
from squadd.state.layout import SquadLayout
from tests._helpers import run_together, snapshot

WRITERS = 50


@pytest.mark.slow
def test_fifty_processes_with_the_same_title_get_fifty_distinct_inbox_files(
    squad: SquadLayout, tmp_path: Path
) -> None:
    results = run_together(
        f"""
        from pathlib import Path
        from squadd.state.decisions import write_inbox_entry
        from squadd.state.layout import SquadLayout
        layout = SquadLayout.at(Path({str(squad.root)!r}))
        path = write_inbox_entry(layout, agent="lead", title="Use Postgres",
                                 body=f"written by writer {{INDEX}}", category="architecture")
        print(path.name)
        """,
        WRITERS, tmp_path / "barrier",
    )
    assert [r.stderr for r in results if r.returncode != 0] == []
    reported = {r.stdout.strip() for r in results}
    files = sorted(p.name for p in squad.inbox_dir.glob("*.md"))
    expected = {"lead-use-postgres.md"} | {f"lead-use-postgres-{n}.md" for n in range(2, 51)}
    assert set(files) == expected == reported
    writers = []
    for name in files:
        entries = parse_entries((squad.inbox_dir / name).read_text()).entries
        assert len(entries) == 1
        entry = entries[0]
        assert (entry.title, entry.by, entry.category) == ("Use Postgres", "lead", "architecture")
        writers.append(int(re.search(r"writer (\d+)", entry.body).group(1)))  # type: ignore[union-attr]
    assert sorted(writers) == list(range(WRITERS)), "an inbox file was overwritten"


def test_entry_format_matches_the_squad_format() -> None:
    text = format_entry(title="  Use   Postgres ", body="\nBecause.\n\n", agent="lead",
                        category="architecture", date=dt.date(2025, 1, 31))
    assert text == (
        "### 2025-01-31: Use Postgres\n\n**By:** lead\n**Category:** architecture\n\n"
        "Because.\n"
    )


def test_inbox_file_is_named_after_agent_and_slug(squad: SquadLayout) -> None:
    path = write_inbox_entry(squad, agent="Lead", title="Use Postgres, not MySQL!",
                             body="Because.", date=dt.date(2025, 1, 31))
    assert path == squad.inbox_dir / "lead-use-postgres-not-mysql.md"
    assert path.read_text().startswith("### 2025-01-31: Use Postgres, not MySQL!\n\n**By:** lead\n")


def test_slugify_is_bounded_and_never_empty() -> None:
    assert slugify("Hello, World!") == "hello-world"
    assert slugify("!!!") == "decision"
    assert len(slugify("word " * 100)) <= 60
    assert not slugify("a" * 59 + " b").endswith("-")


def test_parse_decisions_splits_preamble_and_entries_and_skips_fenced_examples(
    tmp_path: Path,
) -> None:
    path = tmp_path / "decisions.md"
    path.write_text(
        "# Decisions\n\nIntro.\n\n```markdown\n### 2020-01-01: Example only\n```\n\n"
        "### 2025-01-31: First\n\n**By:** lead\n**Category:** process\n\nBody one.\n\n"
        "### Undated heading\n\n**By:** tester\n\nBody two.\n"
    )
    parsed = parse_decisions(path)
    assert "Example only" in parsed.preamble
    assert [e.title for e in parsed.entries] == ["First", "Undated heading"]
    first, second = parsed.entries
    assert (first.date, first.by, first.category) == (dt.date(2025, 1, 31), "lead", "process")
    assert first.body.strip().endswith("Body one.")
    assert (second.date, second.by, second.category) == (None, "tester", None)


def test_parse_decisions_of_a_missing_file_has_no_entries(tmp_path: Path) -> None:
    parsed = parse_decisions(tmp_path / "absent.md")
    assert parsed.entries == [] and parsed.preamble == ""


def test_the_scaffold_decisions_file_has_no_entries(squad: SquadLayout) -> None:
    assert parse_decisions(squad.decisions_md).entries == []


def test_decision_over_the_limit_is_refused_with_the_limit_and_nothing_written(
    squad: SquadLayout,
) -> None:
    before = snapshot(squad.root)
    with pytest.raises(LimitExceededError) as caught:
        write_inbox_entry(squad, agent="lead", title="Big", body="x" * (65536 + 1))
    assert "65536" in str(caught.value)
    with pytest.raises(LimitExceededError, match="limit of 10 bytes"):
        write_inbox_entry(squad, agent="lead", title="Big", body="x" * 11, max_bytes=10)
    assert snapshot(squad.root) == before


@pytest.mark.parametrize("name", ["../x", "a/b", "", "a\x00b", "n" * 200])
def test_decision_by_a_bad_agent_name_writes_nothing(squad: SquadLayout, name: str) -> None:
    before = snapshot(squad.root)
    with pytest.raises(InvalidNameError, match=re.escape("^[a-z0-9][a-z0-9._-]{0,63}$")):
        write_inbox_entry(squad, agent=name, title="t", body="b")
    assert snapshot(squad.root) == before


def test_bad_category_empty_title_and_nul_are_refused(squad: SquadLayout) -> None:
    with pytest.raises(StateError, match="unknown category"):
        write_inbox_entry(squad, agent="lead", title="t", body="b", category="vibes")
    with pytest.raises(StateError, match="non-empty title"):
        write_inbox_entry(squad, agent="lead", title="  ", body="b")
    with pytest.raises(StateError, match="NUL"):
        write_inbox_entry(squad, agent="lead", title="t", body="a\x00b")
    assert list(squad.inbox_dir.glob("*.md")) == []
