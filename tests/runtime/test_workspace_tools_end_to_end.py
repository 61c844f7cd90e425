"""End to end over real HTTP: an agent fixes a failing test with the workspace tools.

The model is the test suite's OpenAI-compatible server on 127.0.0.1, scripted turn by turn:
it reads the failing test, reads the source, edits it, runs the tests with `bash` (allowed by
the test's approval policy), sees them pass, records a decision and answers. The file changed,
the decision is in the inbox, and nothing outside the workspace was touched. With the session
in its own worktree and `land: true`, the fix arrives on the target branch as one commit.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.state.decisions import parse_decisions
from squadd.state.layout import SquadLayout
from tests.runtime.scripted import settings
from tests.support.fixing_agent import (
    ANSWER,
    CALC,
    DECISION_TITLE,
    fixer,
    tool_results,
    write_fixture,
)
from tests.support.model_servers import OpenAIServer
from tests.workspaces.conftest import git


def _files(folder: Path, *, skip: str | None = None) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not (skip and p.relative_to(folder).parts[0] == skip)}


def _openai_settings(url: str) -> Settings:
    config = settings(session_max_turns=20)
    return config.model_copy(update={
        "provider": config.provider.model_copy(update={
            "kind": "openai", "base_url": url, "model": "test-model"}),
        "tools": config.tools.model_copy(update={"approvals": {"bash": "allow"}}),
    })


async def test_agent_fixes_a_failing_test_with_the_workspace_tools(
        layout: SquadLayout, tmp_path: Path) -> None:
    repo = layout.repo
    write_fixture(repo)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "calc.py").write_text(CALC, encoding="utf-8")
    outside_before = _files(outside)
    repo_before = _files(repo, skip=".squad")

    with OpenAIServer(responder=fixer("fenster")) as server:
        async with SquadRuntime.from_settings(layout, _openai_settings(server.url)) as runtime:
            with anyio.fail_after(120):
                result = await runtime.route(RouteRequest(
                    target_agent="fenster", task="make the failing test pass",
                    requested_by="cli"))
        assert server.errors == []
        bodies = server.bodies

    assert result.ok, result.message
    assert result.answer == ANSWER
    # the model was offered the workspace tools, and called each step over the wire
    offered = {t["function"]["name"] for t in bodies[0]["tools"]}
    assert {"read", "write", "edit", "find", "grep", "bash"} <= offered
    calls = [json.loads(c["function"]["arguments"]) | {"tool": c["function"]["name"]}
             for m in bodies[-1]["messages"] if m["role"] == "assistant"
             for c in m.get("tool_calls") or []]
    assert [c["tool"] for c in calls] == ["read", "read", "edit", "bash", "squad_decide"]
    bash_result = tool_results(bodies[-1])[3]
    assert "Ran 1 test" in bash_result and bash_result.endswith("OK\n[exit code 0]")
    # the file changed, and only it; the decision landed in the inbox
    assert (repo / "calc.py").read_text(encoding="utf-8") == CALC.replace("a - b", "a + b")
    repo_after = _files(repo, skip=".squad")
    assert {k for k in repo_after if repo_after[k] != repo_before.get(k)} == {"calc.py"}
    [inbox] = layout.inbox_dir.glob("*.md")
    [entry] = parse_decisions(inbox).entries
    assert (entry.by, entry.title) == ("fenster", DECISION_TITLE)
    # nothing outside the workspace was touched
    assert _files(outside) == outside_before


async def test_in_its_own_worktree_the_fix_lands_as_one_commit(layout: SquadLayout) -> None:
    repo = layout.repo
    git(repo, "init", "--quiet", "-b", "main")
    write_fixture(repo)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "A calculator with a failing test")
    start = git(repo, "rev-parse", "main")

    with OpenAIServer(responder=fixer("fenster")) as server:
        async with SquadRuntime.from_settings(layout, _openai_settings(server.url)) as runtime:
            with anyio.fail_after(120):
                result = await runtime.route(RouteRequest(
                    target_agent="fenster", task="make the failing test pass",
                    requested_by="cli", isolation="worktree", land=True))
        assert server.errors == []
        bash_result = tool_results(server.bodies[-1])[3]

    assert result.ok, result.message
    assert result.answer == ANSWER
    space = result.workspace
    assert space is not None and space.state == "landed", space
    # the tests ran in the worktree, and passed there
    assert "Ran 1 test" in bash_result and bash_result.endswith("OK\n[exit code 0]")
    # main moved by exactly one commit: the agent's, changing calc.py and nothing else
    assert git(repo, "rev-list", "--count", f"{start}..main") == "1"
    assert git(repo, "log", "-1", "--format=%an|%s", "main") == f"Fenster|{ANSWER}"
    assert "Task: make the failing test pass" in git(repo, "log", "-1", "--format=%b", "main")
    assert git(repo, "show", "--name-only", "--format=", "main") == "calc.py"
    assert git(repo, "show", "main:calc.py") + "\n" == CALC.replace("a - b", "a + b")
    # the user's checkout of main followed the fast-forward, and is clean
    assert (repo / "calc.py").read_text(encoding="utf-8") == CALC.replace("a - b", "a + b")
    assert git(repo, "status", "--porcelain", "--", ":!.squad") == ""
    # the decision went to the team's inbox in the repository, not into the worktree's copy
    [inbox] = layout.inbox_dir.glob("*.md")
    assert [e.title for e in parse_decisions(inbox).entries] == [DECISION_TITLE]
