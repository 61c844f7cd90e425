"""`edit`: exact replacement of a unique match, candidates when absent or ambiguous, a diff."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio

from squadd.config import Settings
from squadd.tools.builtin import workspace_tools
from squadd.tools.builtin.common import WorkspaceTool
from squadd.tools.builtin.confine import Parts
from tests.tools.builtin.conftest import Calls

SOURCE = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"


async def test_unique_match_is_replaced_and_the_diff_returned(calls: Calls, repo: Path) -> None:
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n", encoding="utf-8")
    result = await calls("edit", path="calc.py", old="return a - b", new="return a + b")
    assert result.ok, result.text
    assert result.text == (
        "edited calc.py: replaced 1 occurrence (line 2)\n"
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
        "-    return a - b\n+    return a + b\n")
    assert (repo / "calc.py").read_text(encoding="utf-8") == \
        "def add(a, b):\n    return a + b\n"


async def test_ambiguous_match_fails_with_the_line_numbers(calls: Calls, repo: Path) -> None:
    (repo / "calc.py").write_text(SOURCE, encoding="utf-8")
    result = await calls("edit", path="calc.py", old="return a - b", new="return a + b")
    assert not result.ok
    assert "old matches 2 times in calc.py (at lines 2, 6)" in result.text
    assert "replace_all=true" in result.text
    assert (repo / "calc.py").read_text(encoding="utf-8") == SOURCE


async def test_replace_all_replaces_every_match(calls: Calls, repo: Path) -> None:
    (repo / "calc.py").write_text(SOURCE, encoding="utf-8")
    result = await calls("edit", path="calc.py", old="a - b", new="b - a", replace_all=True)
    assert result.ok and "replaced 2 occurrences (lines 2, 6)" in result.text
    assert (repo / "calc.py").read_text(encoding="utf-8") == SOURCE.replace("a - b", "b - a")


async def test_absent_match_names_lines_that_differ_only_in_spaces(calls: Calls,
                                                                   repo: Path) -> None:
    (repo / "calc.py").write_text(SOURCE, encoding="utf-8")
    result = await calls("edit", path="calc.py", old="return  a - b\n", new="x")
    assert not result.ok
    assert "old was not found in calc.py" in result.text
    assert "when spaces are ignored: 2, 6" in result.text
    nothing = await calls("edit", path="calc.py", old="def mul(a, b):", new="x")
    assert not nothing.ok and "no line contains its first line" in nothing.text


async def test_crlf_file_is_matched_with_plain_newlines(calls: Calls, repo: Path) -> None:
    (repo / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = await calls("edit", path="win.txt", old="one\ntwo", new="uno\ndos")
    assert result.ok, result.text
    assert (repo / "win.txt").read_bytes() == b"uno\r\ndos\r\nthree\r\n"


async def test_no_op_and_empty_old_are_refused(calls: Calls, repo: Path) -> None:
    (repo / "a.txt").write_text("a\n", encoding="utf-8")
    same = await calls("edit", path="a.txt", old="a", new="a")
    assert not same.ok and "old and new are the same" in same.text
    empty = await calls("edit", path="a.txt", old="", new="b")
    assert not empty.ok and "old" in empty.text


async def test_edits_to_one_file_are_serialized(calls: Calls, repo: Path) -> None:
    """Two edits race on one file: the second may not read it before the first has written,
    so neither change is lost. The first edit's read waits (boundedly) for the second to
    reach its own read; with the per-file lock it never does."""
    (repo / "shared.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    entered: list[str] = []
    second_reading = threading.Event()

    def hook(parts: Parts) -> None:
        entered.append("read" if len(entered) % 2 == 0 else "write")
        if len(entered) == 1:
            # Inside the first edit: would the second get in now? (It must not.)
            second_reading.wait(timeout=0.5)
        elif len(entered) == 3:
            second_reading.set()

    calls.tools.get("edit").on_checked = hook  # type: ignore[union-attr]
    results = []
    async with anyio.create_task_group() as group:
        async def edit(old: str, new: str) -> None:
            results.append(await calls("edit", path="shared.txt", old=old, new=new))
        group.start_soon(edit, "alpha", "ALPHA")
        group.start_soon(edit, "beta", "BETA")
    assert all(r.ok for r in results), [r.text for r in results]
    assert (repo / "shared.txt").read_text(encoding="utf-8") == "ALPHA\nBETA\n"
    assert entered == ["read", "write", "read", "write"]


def test_write_and_edit_of_one_tool_set_share_their_file_locks_and_two_sets_share_none() -> None:
    first = {tool.name: tool for tool in workspace_tools(Settings())}
    second = {tool.name: tool for tool in workspace_tools(Settings())}
    assert isinstance(first["write"], WorkspaceTool) and isinstance(first["edit"], WorkspaceTool)
    assert isinstance(second["write"], WorkspaceTool)
    assert first["write"].locks is first["edit"].locks
    assert first["write"].locks is not second["write"].locks


async def test_many_matches_in_a_big_file_are_numbered_in_one_pass(repo: Path) -> None:
    """Each match's line number was counted from the top of the file: a million matches of a
    2 MB file took hours, in a thread no timeout can stop. They are counted in one pass."""
    from squadd.tools.builtin.confine import Workspace
    from squadd.tools.builtin.edit import Edit, EditArgs

    (repo / "big.txt").write_text("x\n" * 1_000_000, encoding="utf-8")
    edit = Edit(Settings())
    workspace = Workspace(repo)
    ambiguous = EditArgs(path="big.txt", old="x", new="y")
    every = EditArgs(path="big.txt", old="x", new="y", replace_all=True)
    with anyio.fail_after(120):  # a stall is hours; this only turns it into a failure
        refused = await anyio.to_thread.run_sync(edit._edit, workspace, ("big.txt",),
                                                 ambiguous, abandon_on_cancel=True)
        done = await anyio.to_thread.run_sync(edit._edit, workspace, ("big.txt",), every,
                                              abandon_on_cancel=True)
    assert not refused.ok
    assert "old matches 1000000 times in big.txt (at lines 1, 2, 3," in refused.text
    assert done.ok and done.details["replaced"] == 1_000_000
    assert "(lines 1, 2, 3," in done.text and "more)" in done.text
    assert (repo / "big.txt").read_text(encoding="utf-8") == "y\n" * 1_000_000
