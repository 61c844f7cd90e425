"""`squadd route backend "make the failing test pass"` against a real daemon and a scripted
OpenAI-compatible server: the agent edits the file with the workspace tools, runs the tests with
`bash` and reports, and the person sees each tool call as it happens."""

from __future__ import annotations

import pytest

from squadd.state.decisions import parse_decisions
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.fixing_agent import ANSWER, CALC, DECISION_TITLE, fixer, write_fixture

CONFIG = FAST_CONFIG + '\n[tools]\napprovals = { "bash" = "allow" }\n'


pytestmark = [pytest.mark.slow, pytest.mark.daemon(
    config=CONFIG, agents=("lead", "backend"), responder=fixer("backend"),
    prepare=lambda layout: write_fixture(layout.repo))]


def test_route_makes_the_failing_test_pass(daemon: DaemonProcess) -> None:
    routed = daemon.squadd("route", "backend", "make the failing test pass", timeout=120)
    assert routed.returncode == 0, routed.stderr
    assert routed.stdout == ANSWER + "\n"
    for tool in ("read", "edit", "bash", "squad_decide"):
        assert f"→ backend: {tool}(" in routed.stderr and f"✓ {tool}" in routed.stderr, tool
    repo = daemon.layout.repo
    assert (repo / "calc.py").read_text(encoding="utf-8") == CALC.replace("a - b", "a + b")
    decided = [e.title for p in [daemon.layout.decisions_md, *daemon.layout.inbox_dir.glob(
        "*.md")] for e in parse_decisions(p).entries]
    assert DECISION_TITLE in decided
