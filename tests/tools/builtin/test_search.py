"""`find` and `grep`: .gitignore respected, bounded results, and rg and Python agreeing."""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from squadd.tools.builtin.confine import Workspace
from squadd.tools.builtin.listing import glob_matches
from squadd.tools.builtin.search import GrepArgs, Search, _rg_search, confirmed
from tests.tools.builtin.conftest import Calls, git

HAS_RG = shutil.which("rg") is not None
ENGINES = ["python", pytest.param("rg", marks=pytest.mark.skipif(not HAS_RG,
                                                                  reason="rg is not on PATH"))]


def _tree(repo: Path) -> None:
    files = {
        ".gitignore": "build/\n*.log\n",
        "a.txt": "needle in a.txt\n",
        "a/b.txt": "first line\nNeedle upper\nneedle lower\n",
        "build/out.txt": "needle in an ignored folder\n",
        "debug.log": "needle in an ignored file\n",
        ".hidden/conf.txt": "needle hidden but not ignored\n",
        "win.txt": "needle with crlf\r\nplain\r\n",
        "src/main.py": "# needle in python\nprint('needle')\n",
        "src/deep/util.py": "NEEDLE = 1\n",
    }
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (repo / "blob.bin").write_bytes(b"needle\0binary")
    (repo / "latin.txt").write_bytes(b"needle caf\xe9\n")


def _calls(repo: Path, engine: str, **limits: object) -> Calls:
    settings = Settings.model_validate({"workspace_tools": {"grep": engine, **limits}})
    return Calls(SquadLayout.at(repo / ".squad"), settings)


@pytest.mark.parametrize("pattern,path,expected", [
    ("*.py", "a.py", True), ("*.py", "src/deep/a.py", True), ("*.py", "a.pyc", False),
    ("src/*.py", "src/a.py", True), ("src/*.py", "src/deep/a.py", False),
    ("src/**/*.py", "src/a.py", True), ("src/**/*.py", "src/deep/a.py", True),
    ("**/test_*.py", "tests/test_x.py", True), ("*.{md,txt}", "docs/a.txt", True),
    ("file?.[ch]", "file1.c", True), ("file?.[!ch]", "file1.c", False),
])
def test_glob_matching(pattern: str, path: str, expected: bool) -> None:
    assert glob_matches(pattern, path) is expected


async def test_find_respects_gitignore_in_a_git_repo(repo: Path) -> None:
    _tree(repo)
    git(repo, "init", "-q")
    calls = _calls(repo, "python")
    found = await calls("find", pattern="*.txt")
    assert found.text.splitlines() == [
        ".hidden/conf.txt", "a/b.txt", "a.txt", "latin.txt", "win.txt"]
    under = await calls("find", pattern="**/*.py", path="src")
    assert under.text.splitlines() == ["src/deep/util.py", "src/main.py"]
    none = await calls("find", pattern="*.rs")
    assert none.ok and none.text == "no files match *.rs in ."


async def test_find_outside_git_walks_everything_but_git(repo: Path) -> None:
    _tree(repo)
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD.txt").write_text("x", encoding="utf-8")
    calls = _calls(repo, "python")
    found = await calls("find", pattern="*.txt")
    assert "build/out.txt" in found.text.splitlines()
    assert ".git/HEAD.txt" not in found.text


async def test_find_is_bounded_by_max_matches(repo: Path) -> None:
    for n in range(7):
        (repo / f"f{n}.txt").write_text("x", encoding="utf-8")
    calls = _calls(repo, "python", max_matches=3)
    found = await calls("find", pattern="f*.txt")
    assert found.text.splitlines() == [
        "f0.txt", "f1.txt", "f2.txt",
        "[4 more files match: showing the first 3 (workspace_tools.max_matches); narrow the "
        "pattern or path]"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_finds_lines_respecting_gitignore(repo: Path, engine: str) -> None:
    _tree(repo)
    git(repo, "init", "-q")
    result = await _calls(repo, engine)("grep", pattern="needle")
    assert result.ok and result.details["engine"] == engine
    assert result.text.splitlines() == [
        ".hidden/conf.txt:1:needle hidden but not ignored",
        "a/b.txt:3:needle lower",
        "a.txt:1:needle in a.txt",
        "latin.txt:1:needle caf\ufffd",
        "src/main.py:1:# needle in python",
        "src/main.py:2:print('needle')",
        "win.txt:1:needle with crlf",
    ]


@pytest.mark.skipif(not HAS_RG, reason="rg is not on PATH")
@pytest.mark.parametrize("arguments", [
    {"pattern": "needle"},
    {"pattern": "needle", "ignore_case": True},
    {"pattern": "NEEDLE|Needle", "glob": "*.py"},
    {"pattern": r"^\w+ (in|with)", "path": "src"},
    {"pattern": "crlf$"},
    {"pattern": "e.d", "path": "a/b.txt"},
    {"pattern": "l", "ignore_case": True},
    {"pattern": "nothing matches this"},
])
async def test_rg_and_python_give_the_same_results(repo: Path,
                                                   arguments: dict[str, object]) -> None:
    _tree(repo)
    git(repo, "init", "-q")
    by_rg = await _calls(repo, "rg", max_matches=4)("grep", **arguments)
    by_python = await _calls(repo, "python", max_matches=4)("grep", **arguments)
    assert by_rg.ok and by_python.ok
    assert by_rg.text == by_python.text
    assert by_rg.details["matches"] == by_python.details["matches"]


@pytest.mark.parametrize("engine", ENGINES)
async def test_grep_is_bounded_by_max_matches(repo: Path, engine: str) -> None:
    (repo / "many.txt").write_text("hit\n" * 50, encoding="utf-8")
    result = await _calls(repo, engine, max_matches=5)("grep", pattern="hit")
    lines = result.text.splitlines()
    assert lines[:5] == [f"many.txt:{n}:hit" for n in range(1, 6)]
    assert lines[5].startswith("[more than 5 matches: showing the first 5")
    assert result.details["truncated"] is True


async def test_grep_with_a_bad_regex_says_so(calls: Calls) -> None:
    result = await calls("grep", pattern="(unclosed")
    assert not result.ok and "is not a valid regular expression" in result.text


def test_a_line_rg_reports_is_shown_only_if_the_confined_file_holds_it(
        repo: Path, tmp_path: Path) -> None:
    """rg opens files by name: one swapped for a symlink after the listing could lead it out.
    What it reports is read back through the confined walk, so such a line is dropped."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle outside\n", encoding="utf-8")
    (repo / "kept.txt").write_text("needle inside\n", encoding="utf-8")
    (repo / "swapped.txt").symlink_to(outside / "secret.txt")  # as if swapped during rg
    workspace = Workspace(repo)
    batch = [("kept.txt",), ("swapped.txt",)]
    reported = [(0, 1, "needle inside"), (1, 1, "needle outside"), (0, 1, "forged")]
    assert confirmed(workspace, batch, reported, 1 << 20) == [(0, 1, "needle inside")]


@pytest.mark.skipif(not HAS_RG, reason="rg is not on PATH")
async def test_rg_complaining_about_many_vanished_files_does_not_stall_the_search(
        repo: Path) -> None:
    """Files listed but gone by the time rg opens them each cost a line on rg's stderr: more
    than a pipe holds must not leave rg blocked on stderr while grep waits on its stdout."""
    (repo / "kept.txt").write_text("needle\n", encoding="utf-8")
    gone = [(f"vanished-{'x' * 200}-{n}.txt",) for n in range(999)]
    search = Search(re.compile("needle"), 10, 500)
    args = GrepArgs(pattern="needle")
    with anyio.fail_after(120):  # a stall is forever; this only turns it into a failure
        assert await _rg_search(Workspace(repo), [*gone, ("kept.txt",)], args, search, 1 << 20)
    assert search.matches == [(("kept.txt",), 1, "needle")]


async def test_a_pattern_that_backtracks_for_ever_in_python_is_matched_in_linear_time(
        repo: Path) -> None:
    (repo / "a.txt").write_text("a" * 64 + "!\nfound: aaab\n", encoding="utf-8")
    calls = _calls(repo, "python")
    with anyio.fail_after(60):  # Python's own engine would take 2**64 steps on line 1
        result = await calls("grep", pattern="(a+)+b")
    assert result.ok and result.text == "a.txt:2:found: aaab"


async def test_a_python_search_stuck_on_a_line_ends_at_the_timeout_and_then_stops(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.tools.builtin import search

    (repo / "a.txt").write_text("x\n" * 1000, encoding="utf-8")
    entered, release = threading.Event(), threading.Event()
    lines_tried: list[str] = []

    class Stuck:  # as a look-around pattern stuck backtracking in Python's engine
        def search(self, text: str) -> object:
            lines_tried.append(text)
            entered.set()
            release.wait(120)  # bounded only so that a failing run ends
            return None

    finished = threading.Event()
    searching = search._python_search

    def watched(*args: Any) -> None:
        try:
            searching(*args)
        finally:
            finished.set()

    monkeypatch.setattr(search, "linear_pattern", lambda pattern: Stuck())
    monkeypatch.setattr(search, "_python_search", watched)
    settings = Settings.model_validate({"workspace_tools": {"grep": "python"},
                                        "tools": {"timeout_s": 1}})
    calls = Calls(SquadLayout.at(repo / ".squad"), settings)
    try:
        with anyio.fail_after(60):
            result = await calls("grep", pattern="x")
        still_stuck = not release.is_set()
    finally:
        release.set()
    assert entered.is_set() and still_stuck
    assert not result.ok and "grep timed out after 1s" in result.text
    # The abandoned thread sees that the call ended before its next line.
    assert await anyio.to_thread.run_sync(finished.wait, 60)
    assert len(lines_tried) == 1
