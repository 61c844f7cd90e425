"""Parsing text from the squad and from models takes time linear in its size: charters,
decision entries, routing.md and tool-file patterns built to make a backtracking regex take
minutes are parsed at once. Each runs in a child process with a generous limit, so a
regression fails instead of hanging the suite; nothing here measures speed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

N = 200_000  # quadratic parsing of this much takes many minutes: past the limit below
CASES = {
    "charter: blank lines in ## Model": f"""
        from squadd.state.charters import parse_charter
        parse_charter("a", "# A\\n\\n## Model\\n" + "\\n" * {N} + "x")
        parse_charter("a", "# A\\n\\n## Model\\n" + " " * {N} + "Preferred:" + " " * {N})
        parse_charter("a", "# A\\n\\n## Identity\\n**Role:**" + " \\t" * {N} + "x")
        parse_charter("a", "# A\\n\\n## Model\\n" + "*" * {N} + "x")
    """,
    "decision: spaces in the heading and fields": f"""
        from squadd.state.decisions import parse_entries
        parse_entries("### " + " " * {N} + "x" + " " * {N} + "y\\n**By:**" + " " * {N} + "z"
                      + " " * {N} + "w\\n**Category:**" + " " * {N} + "\\n")
    """,
    "routing.md: unclosed comments": f"""
        from squadd.runtime.router import parse_routing
        parse_routing("<!--" * {N} + "| Work Type | Route To |\\n|---|---|\\n| a | b |\\n")
    """,
    "routing.md: unclosed parentheses in a cell": f"""
        from squadd.runtime.router import parse_routing
        parse_routing("| Work Type | Route To |\\n|---|---|\\n| a | " + "(" * {N} + " b |\\n")
    """,
    "tool pattern: nested quantifiers": f"""
        from squadd.untrusted import linear_pattern
        assert not linear_pattern(r"^([a-z0-9]+-?)+$").search("a" * {N} + "!")
        assert not linear_pattern(r"^(\\w+\\s?)*$").search("a " * {N} + "!")
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_text_is_parsed_in_linear_time(case: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CASES[case])],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
