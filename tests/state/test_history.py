"""history.md: learnings land at the end of ## Learnings, under a lock, from many processes."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from squadd.errors import InvalidNameError, LimitExceededError, StateError
from squadd.state.history import (
    HISTORY_SKELETON,
    append_learning,
    format_learning,
    insert_learning,
    learnings,
)
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent
from tests._helpers import run_together, snapshot

WRITERS = 50


@pytest.mark.slow
def test_fifty_processes_appending_at_once_all_land_and_the_file_parses(
    squad: SquadLayout, tmp_path: Path
) -> None:
    add_agent(squad, "lead", "Lead", templates=templates_dir())
    before = squad.history("lead").read_text()
    results = run_together(
        f"""
        from pathlib import Path
        from squadd.state.history import append_learning
        from squadd.state.layout import SquadLayout
        layout = SquadLayout.at(Path({str(squad.root)!r}))
        append_learning(layout, "lead", f"writer {{INDEX}} learned thing {{INDEX}}",
                        category="technical")
        """,
        WRITERS, tmp_path / "barrier",
    )
    assert [r.stderr for r in results if r.returncode != 0] == []
    content = squad.history("lead").read_text()
    items = learnings(content)
    assert len(items) == WRITERS
    numbers = sorted(int(re.search(r"writer (\d+)", item).group(1))  # type: ignore[union-attr]
                     for item in items)
    assert numbers == list(range(WRITERS))
    # A new agent's history has no learning yet: each takes Squad's dated style.
    assert all(re.fullmatch(r"### \d{4}-\d{2}-\d{2}: writer (\d+) learned thing \1\n\n"
                            r"writer \1 learned thing \1", item) for item in items)
    # The template's text before ## Learnings is intact, and there is one Learnings section.
    assert content.startswith(before.split("## Learnings")[0])
    assert content.count("## Learnings") == 1
    # Parsing again after one more append still finds every entry.
    append_learning(squad, "lead", "one more", category="process")
    assert len(learnings(squad.history("lead").read_text())) == WRITERS + 1


def test_learning_goes_at_the_end_of_learnings_before_the_next_section() -> None:
    content = (
        "# Project Context\n\nA repo.\n\n## Learnings\n\n- **[general]** first\n\n"
        "## Later Notes\n\nkeep me\n"
    )
    result = insert_learning(content, format_learning("second", "technical"))
    assert result == (
        "# Project Context\n\nA repo.\n\n## Learnings\n\n- **[general]** first\n"
        "- **[technical]** second\n\n## Later Notes\n\nkeep me\n"
    )


def test_learnings_section_is_created_when_missing() -> None:
    result = insert_learning("# Project Context\n\nA repo.\n", "- **[general]** x")
    assert result == "# Project Context\n\nA repo.\n\n## Learnings\n\n- **[general]** x\n"
    assert learnings(result) == ["- **[general]** x"]


def test_empty_history_gets_the_skeleton() -> None:
    result = insert_learning("", "- **[general]** x")
    assert result.startswith(HISTORY_SKELETON.split("\n")[0])
    assert learnings(result) == ["- **[general]** x"]


def test_a_multi_line_learning_becomes_one_list_item_in_a_bullet_file(
    squad: SquadLayout,
) -> None:
    squad.history("newbie").parent.mkdir(parents=True, exist_ok=True)
    squad.history("newbie").write_text("# Project Context\n\n## Learnings\n\n- **[team]** a\n")
    append_learning(squad, "newbie", "line one\nline two\n\n  line three", category="team")
    assert learnings(squad.history("newbie").read_text()) == [
        "- **[team]** a", "- **[team]** line one line two line three"
    ]


def test_a_learning_in_an_empty_history_takes_squads_dated_style(squad: SquadLayout) -> None:
    append_learning(squad, "newbie", "Use the lock. Always.", today=dt.date(2026, 5, 2))
    assert learnings(squad.history("newbie").read_text()) == [
        "### 2026-05-02: Use the lock\n\nUse the lock. Always."]


def test_learning_over_the_limit_is_refused_with_the_limit_and_nothing_written(
    squad: SquadLayout,
) -> None:
    before = snapshot(squad.root)
    with pytest.raises(LimitExceededError) as caught:
        append_learning(squad, "lead", "x" * (65536 + 1))
    assert "65536" in str(caught.value) and "65537" in str(caught.value)
    assert snapshot(squad.root) == before
    with pytest.raises(LimitExceededError, match="limit of 100 bytes"):
        append_learning(squad, "lead", "y" * 101, max_bytes=100)
    append_learning(squad, "lead", "z" * 65536)  # exactly at the limit is fine
    assert len(learnings(squad.history("lead").read_text())) == 1


@pytest.mark.parametrize("name", ["../x", "a/b", "", "a\x00b", "n" * 200])
def test_learning_for_a_bad_agent_name_writes_nothing(squad: SquadLayout, name: str) -> None:
    before = snapshot(squad.root)
    with pytest.raises(InvalidNameError, match=re.escape("^[a-z0-9][a-z0-9._-]{0,63}$")):
        append_learning(squad, name, "text")
    assert snapshot(squad.root) == before


def test_unknown_category_and_empty_learning_are_refused(squad: SquadLayout) -> None:
    with pytest.raises(StateError, match="unknown category 'gossip'"):
        append_learning(squad, "lead", "x", category="gossip")
    with pytest.raises(StateError, match="must not be empty"):
        append_learning(squad, "lead", "   ")
    assert not squad.history("lead").exists()
