"""A scripted agent that fixes a failing test with the workspace tools, turn by turn.

`fixer(agent)` answers chat-completions requests for a small repository (`write_fixture`): it
reads the failing test, reads the source, edits it, runs the tests with `bash`, records a
decision once they pass, and answers `ANSWER`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.model_servers import OpenAIServer, Reply

CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = (
    "import unittest\n\nfrom calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_adds(self):\n        self.assertEqual(add(2, 3), 5)\n"
)
RUN_TESTS = f"PYTHONDONTWRITEBYTECODE=1 {shlex.quote(sys.executable)} -m unittest test_calc"
ANSWER = "Fixed calc.add: it returned a - b. The tests pass."
DECISION_TITLE = "add returns the sum"


def write_fixture(repo: Path) -> None:
    (repo / "calc.py").write_text(CALC, encoding="utf-8")
    (repo / "test_calc.py").write_text(TEST_CALC, encoding="utf-8")


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def fixer(agent: str) -> Callable[[dict[str, Any]], Reply]:
    def respond(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        turn = len(results)
        if turn == 0:
            return OpenAIServer.tool_call_turn(("read", {"path": "test_calc.py"}))
        if turn == 1:
            assert "self.assertEqual(add(2, 3), 5)" in results[-1], results[-1]
            return OpenAIServer.tool_call_turn(("read", {"path": "calc.py"}))
        if turn == 2:
            assert results[-1] == "1\tdef add(a, b):\n2\t    return a - b", results[-1]
            return OpenAIServer.tool_call_turn(("edit", {
                "path": "calc.py", "old": "return a - b", "new": "return a + b"}))
        if turn == 3:
            assert results[-1].startswith("edited calc.py"), results[-1]
            return OpenAIServer.tool_call_turn(("bash", {"command": RUN_TESTS, "timeout": 120}))
        if turn == 4:
            if not results[-1].endswith("[exit code 0]") or "OK" not in results[-1]:
                return OpenAIServer.text_turn(f"the tests still fail: {results[-1]}")
            return OpenAIServer.tool_call_turn(("squad_decide", {
                "title": DECISION_TITLE, "body": "add(a, b) returns a + b; tested.",
                "agentName": agent, "category": "feature"}))
        return OpenAIServer.text_turn(ANSWER)

    return respond
