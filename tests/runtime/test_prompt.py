"""Prompt assembly: the parts, their order, and budgets that keep the newest content."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.config import PromptSettings
from squadd.runtime.prompt import (
    SHARED_NOTE,
    WORKTREE_NOTE,
    PromptParts,
    build_system_prompt,
    file_cache,
    gather,
    gather_known,
    keep_tail,
    workspace_note,
)
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache
from tests.tools.conftest import make_squad


def test_parts_appear_in_design_order(tmp_path: Path) -> None:
    layout: SquadLayout = make_squad(tmp_path / "repo")
    layout.decisions_md.write_text("# Decisions\n\n### 2026-01-01: Use uv\n", encoding="utf-8")
    parts = gather(layout, "fenster", "the parser is in src/")
    prompt = build_system_prompt("fenster", parts, PromptSettings())
    assert prompt.startswith("You are fenster, a Squad agent.")
    order = [prompt.index(h) for h in ("## Charter", "## Project Knowledge", "## Team Decisions",
                                       "## Additional Context")]
    assert order == sorted(order)
    assert "Use uv" in prompt and "the parser is in src/" in prompt


def test_a_session_is_told_where_it_works_and_how_its_work_reaches_git() -> None:
    """The `## Workspace` part: after the context, before the skills; in a worktree, that
    squadd commits and lands (whatever the sandbox); in the working tree under the sandbox,
    that the work stays uncommitted and git and `.squad/` are read-only; nothing in the
    working tree with the sandbox off. The same words for every session alike."""
    assert workspace_note(worktree=True, sandbox="auto") == WORKTREE_NOTE
    assert workspace_note(worktree=True, sandbox="off") == WORKTREE_NOTE
    assert workspace_note(worktree=False, sandbox="bwrap") == SHARED_NOTE
    assert workspace_note(worktree=False, sandbox="off") == ""
    assert "commit_message:" in WORKTREE_NOTE and "git commit" in WORKTREE_NOTE
    assert "uncommitted" in SHARED_NOTE and ".squad/" in SHARED_NOTE
    parts = PromptParts(charter="c", history="", decisions="", context="ctx", skills="- s")
    prompt = build_system_prompt("fenster", parts, PromptSettings(), workspace=WORKTREE_NOTE)
    assert f"## Workspace\n{WORKTREE_NOTE}" in prompt
    assert prompt.index("## Additional Context") < prompt.index("## Workspace") \
        < prompt.index("## Skills")
    other = build_system_prompt("hockney", parts, PromptSettings(), workspace=WORKTREE_NOTE)
    assert other.split("## Workspace", 1)[1] == prompt.split("## Workspace", 1)[1]
    assert "## Workspace" not in build_system_prompt("fenster", parts, PromptSettings())
    bare = PromptParts(charter="c", history="", decisions="", context="", skills="")
    assert build_system_prompt("fenster", bare, PromptSettings(), workspace=SHARED_NOTE
                               ).endswith(f"## Workspace\n{SHARED_NOTE}")


def test_over_budget_history_keeps_newest_and_says_what_it_cut() -> None:
    history = "".join(f"- learning {i}\n" for i in range(2000))
    parts = PromptParts(charter="c", history=history, decisions="", context="", skills="")
    prompt = build_system_prompt("a", parts, PromptSettings(history_bytes=1024))
    assert "learning 1999" in prompt and "learning 0\n" not in prompt
    assert "older bytes of history cut" in prompt


def test_keep_tail_cuts_at_a_line_start() -> None:
    kept = keep_tail("aaaa\nbbbb\ncccc\n", 7, "x")
    assert kept.endswith("cccc\n") and "bbb" not in kept.split("\n", 1)[1]


def test_changed_file_is_reread(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    first = gather(layout, "fenster", None).history
    layout.history("fenster").write_text("# Project Context\n\n## Learnings\n- new one\n",
                                         encoding="utf-8")
    assert gather(layout, "fenster", None).history != first


def test_a_charter_the_route_read_is_used_as_it_is_without_looking_at_the_file(
        tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    files, summaries = file_cache(layout), summary_cache()
    charter = gather(layout, "fenster", None, files, summaries).charter
    layout.charter("fenster").write_text("# Fenster\n\nchanged since\n", encoding="utf-8")
    with pytest.raises(NotCached):  # the file changed: it would have to be read again
        gather_known(layout, "fenster", None, files, summaries)
    parts = gather_known(layout, "fenster", None, files, summaries, charter=charter)
    assert parts.charter == charter and "changed since" not in parts.charter
    # A route whose prompt files must be read (in a worker thread) follows the same rule.
    read = gather(layout, "fenster", None, files, summaries, charter=charter)
    assert read.charter == charter and read.history == parts.history
    assert "changed since" in gather(layout, "fenster", None, files, summaries).charter
