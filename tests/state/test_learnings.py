"""A history's learnings read as whole entries of either shape, in the file's own order; new ones
go where that file puts them, in its shape."""

from __future__ import annotations

import datetime as dt

import pytest

from squadd.state.learnings import (
    format_block,
    format_learning,
    insert_learning,
    keep_newest,
    learning_title,
    learnings,
    parse_history,
)
from tests.state.memory_fixtures import (
    BLOCKS_NEWEST,
    BLOCKS_OLDEST,
    BULLETS_NEWEST,
    BULLETS_OLDEST,
)

DAY = dt.date(2026, 2, 2)


@pytest.mark.parametrize(("text", "style", "order", "firsts"), [
    (BULLETS_OLDEST, "bullet", "oldest-first",
     ["- **[technical]** 2025-11-03", "- **[process]** 2025-11-10",
      "- **[architecture]** 2025-12-01"]),
    (BULLETS_NEWEST, "bullet", "newest-first",
     ["- **[team]** Osprey", "- **[technical]** The anemometer", "- **[general]** The rig"]),
    (BLOCKS_NEWEST, "block", "newest-first",
     ["### Brown-out resets", "### The bench rig's clock", "### First flash"]),
    (BLOCKS_OLDEST, "block", "oldest-first",
     ["### Planning in two-week", "### Field tests need", "### Weekly demo"]),
])
def test_each_shape_reads_as_whole_entries_in_its_own_order(
    text: str, style: str, order: str, firsts: list[str]
) -> None:
    shape = parse_history(text)
    assert "".join(shape.text(s) for s in shape.segments) == text
    assert shape.style == style and shape.order == order
    entries = learnings(text)
    assert [e for e in entries if not any(e.startswith(f) for f in firsts)] == []
    assert len(entries) == len(firsts)


def test_a_block_keeps_its_sub_headings_and_bullets_and_a_bullet_its_nested_bullet() -> None:
    brown_out = learnings(BLOCKS_NEWEST)[0]
    assert "#### What to check" in brown_out and "- The reset-cause register" in brown_out
    assert learnings(BLOCKS_NEWEST)[2].endswith("- Hold reset while attaching")
    assert learnings(BULLETS_OLDEST)[1].endswith("  - The CI job now runs `make clean` first.")


def test_headings_and_bullets_inside_a_code_fence_are_not_entries() -> None:
    text = ("# Project Context\n\n## Learnings\n\n### Shell habits (2025-05-01)\n\n```sh\n"
            "### not a heading\n- not a bullet\n```\n\n- **[general]** a real bullet\n")
    assert [e.split("\n")[0] for e in learnings(text)] == ["### Shell habits (2025-05-01)"]


def test_new_learnings_go_to_the_top_of_newest_first_files_in_their_shape() -> None:
    blocks = insert_learning(BLOCKS_NEWEST, format_block("Sensor warm-up", "Wait 15 ms.", DAY))
    assert learnings(blocks)[0] == "### Sensor warm-up (2026-02-02)\n\nWait 15 ms."
    assert learnings(blocks)[1:] == learnings(BLOCKS_NEWEST)
    bullets = insert_learning(BULLETS_NEWEST, format_learning("Charge the rig", "general"))
    assert learnings(bullets)[0] == "- **[general]** Charge the rig"
    assert "Most recent first.\n\n- **[general]** Charge the rig\n- **[team]**" in bullets


def test_new_learnings_go_to_the_end_of_oldest_first_files_in_their_shape() -> None:
    blocks = insert_learning(BLOCKS_OLDEST, format_block("Retro notes", "Keep them short.", DAY))
    assert learnings(blocks)[-1] == "### Retro notes (2026-02-02)\n\nKeep them short."
    assert learnings(blocks)[:-1] == learnings(BLOCKS_OLDEST)
    assert blocks.startswith(BLOCKS_OLDEST)
    bullets = insert_learning(BULLETS_OLDEST, format_learning("Label the cables", "process"))
    assert bullets == BULLETS_OLDEST + "- **[process]** Label the cables\n"


def test_dates_outvote_the_lead_in_and_ties_fall_back_to_oldest_first() -> None:
    says_newest = BLOCKS_OLDEST.replace("## Learnings\n\n", "## Learnings\n\nNewest first.\n\n")
    assert parse_history(says_newest).order == "oldest-first"  # the dates disagree with it
    undated = "## Learnings\n\n- **[general]** one\n- **[general]** two\n"
    assert parse_history(undated).order == "oldest-first"
    mixed = ("## Learnings\n\n### A (2025-01-01)\n\nx\n\n### B (2025-03-01)\n\nx\n\n"
             "### C (2025-02-01)\n\nx\n")
    assert parse_history(mixed).order == "oldest-first"  # one vote each way: the default


def test_a_learning_title_is_the_first_sentence_cut_at_a_word() -> None:
    assert learning_title("Wait for the sensor. It needs 15 ms.") == "Wait for the sensor"
    long = "word " * 30
    title = learning_title(long)
    assert title.endswith("...") and len(title) <= 63 and "  " not in title


def test_the_prompt_keeps_the_newest_learnings_whole_wherever_the_file_keeps_them() -> None:
    for text in (BLOCKS_NEWEST, BLOCKS_OLDEST, BULLETS_OLDEST):
        shape = parse_history(text)
        newest = learnings(text)[0 if shape.order == "newest-first" else -1]
        oldest = learnings(text)[-1 if shape.order == "newest-first" else 0]
        budget = len(text.encode()) - len(oldest.encode()) + 60
        kept = keep_newest(text, budget)
        assert kept is not None and len(kept.encode()) <= budget
        assert newest in kept and oldest not in kept
        assert kept.startswith("[1 of 3 older learnings cut to fit the prompt budget]")
    assert keep_newest("no learnings here\n" * 100, 50) is None
