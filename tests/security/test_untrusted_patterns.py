"""No pattern a model supplies runs in a backtracking engine: `grep` (both engines) refuses
look-around, backreferences, atomic groups, possessive quantifiers and conditionals, naming the
construct; `find` and grep's `glob` match globs in linear time; and the real daemon keeps
answering `status` while hostile patterns are tried. Nothing here measures speed: a pattern
that backtracked would hang, and the bounded waits turn a hang into a failure."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any

import pytest

from squadd.daemon.client import DaemonClient
from squadd.errors import UntrustedInputError
from squadd.state.layout import SquadLayout
from squadd.untrusted import linear_pattern, nonlinear_construct
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess

BACKTRACKING = [
    ("(?=(a+)+b)", "look-ahead"),
    ("x(?!(a|aa)+c)", "negative look-ahead"),
    ("(?<=a)b", "look-behind"),
    ("(?<!a)(b+)+c", "negative look-behind"),
    (r"(a+)+\1", "backreference"),
    ("(?P<x>a+)+(?P=x)", "named backreference"),
    ("(?>a+)+b", "atomic group"),
    ("(a)?(?(1)b|c)", "conditional"),
    (r"[]x](?=y)", "look-ahead"),
]
"""Patterns only a backtracking engine runs (some catastrophic there), and the construct the
refusal must name."""


@pytest.mark.parametrize(("pattern", "construct"), BACKTRACKING)
def test_each_backtracking_construct_is_named(pattern: str, construct: str) -> None:
    assert construct in (nonlinear_construct(pattern) or "")
    with pytest.raises(UntrustedInputError, match=construct.replace("(", r"\(")):
        linear_pattern(pattern + "(?:)")


@pytest.mark.parametrize("pattern", [r"\(?=x\)", "[(?=]x", r"[\](?!]", r"(a+)+b", r"\0",
                                     r"(?P<name>a)", "(?:a|b)*c"])
def test_escaped_or_classed_lookalikes_are_not_taken_for_constructs(pattern: str) -> None:
    assert nonlinear_construct(pattern) is None


def _isolated(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_catastrophic_globs_answer_in_a_child_that_would_hang_otherwise() -> None:
    """`*a*a*a...b` on a long name takes Python's engine for ever; the linear engine answers."""
    out = _isolated("""
        from squadd.tools.builtin.listing import glob_matches
        name = "a" * 250
        for glob in ["*a" * 30 + "b", "{*a,*aa}" * 12 + "b", "**/" + "*a" * 20 + "?b",
                     "[a-z]*" * 25 + "!"]:
            assert not glob_matches(glob, name), glob
        assert glob_matches("*a" * 30, name)
        print("done")
    """)
    assert out.strip() == "done"


def _long_file(layout: SquadLayout) -> None:
    (layout.repo / "long.txt").write_text("a" * 50_000 + "\nfound: aab\n", encoding="utf-8")


def _grep_with(engine: str) -> Any:
    """The test run against a daemon whose `grep` tool uses `engine`."""
    return pytest.param(engine, marks=pytest.mark.daemon(
        config=FAST_CONFIG + f'\n[workspace_tools]\ngrep = "{engine}"\n', prepare=_long_file))


@pytest.mark.slow
@pytest.mark.parametrize("engine", [_grep_with("python"), _grep_with("rg"), _grep_with("auto")])
def test_the_daemon_keeps_answering_status_while_hostile_patterns_are_tried(
        daemon: DaemonProcess, engine: str) -> None:
    results: dict[str, dict[str, Any]] = {}

    def attack(pattern: str) -> None:
        with DaemonClient(daemon.layout, timeout=120) as client:
            results[pattern] = client.call_tool("grep", {"pattern": pattern, "path": "long.txt"},
                                                agent="lead")

    attackers = [threading.Thread(target=attack, args=(p,), daemon=True)
                 for p, _ in BACKTRACKING] + [
        threading.Thread(target=attack, args=("(a+)+b",), daemon=True),
        threading.Thread(target=attack, args=("(a|aa)+$",), daemon=True)]
    for thread in attackers:
        thread.start()
    answered = 0
    while any(thread.is_alive() for thread in attackers) or answered < 3:
        report = daemon.client.status()
        assert "pool" in report
        answered += 1
    for thread in attackers:
        thread.join(60)
    for pattern, construct in BACKTRACKING:
        result = results[pattern]
        assert result["result_type"] == "failure", result
        assert construct in result["text"] and "refused" in result["text"]
    # Catastrophic for backtracking, linear here: a real answer, not a refusal.
    assert results["(a+)+b"]["text"] == "long.txt:2:found: aab"
    assert results["(a|aa)+$"]["result_type"] == "success"
    assert daemon.squadd("stop").returncode == 0
    assert daemon.wait(60) == 0
