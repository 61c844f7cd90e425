"""Sessions in worktrees, end to end through the runtime: where tools and agent CLIs run, what
is committed, nested routes, continuation and landing (real git, real shell tools)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.config import Settings, load_settings
from squadd.contracts.routes import RouteRequest
from squadd.providers.base import Provider
from squadd.providers.command import CommandProvider
from squadd.runtime.prompt import SHARED_NOTE, WORKTREE_NOTE
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.tools.discovery import discover_tools
from squadd.workspaces import records, spares
from tests.runtime.scripted import Gauge, call, make_squad, script, text
from tests.workspaces.conftest import git

WRITE_TOOL = """
description: Write a line of text to a file and say where it ran
parameters:
  FILE: {type: string, description: file}
  TEXT: {type: string, description: text}
bash: printf '%s\\n' {TEXT} > {FILE} && pwd
"""


def _squad(tmp_path: Path) -> SquadLayout:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    (repo / "README.md").write_text("project\n")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "start")
    git(repo, "config", "user.name", "Repo Owner")
    git(repo, "config", "user.email", "owner@example.com")
    layout = make_squad(repo)
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "jot.yaml").write_text(textwrap.dedent(WRITE_TOOL))
    return layout


def _settings(layout: SquadLayout, **workspace: Any) -> Settings:
    overrides: dict[str, Any] = {"tools": {"approvals": {"jot": "allow"}}}
    if workspace:
        overrides["workspace"] = workspace
    return load_settings(layout.root, overrides=overrides)


def _runtime(layout: SquadLayout, settings: Settings, provider: Provider) -> SquadRuntime:
    return SquadRuntime(layout, settings, provider,
                        extra_tools=lambda: discover_tools(layout, settings).tools)


async def test_a_worktree_sessions_shell_tool_runs_in_its_worktree_and_its_work_is_committed(
        tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    provider = script(lead=[call("jot", FILE="out.txt", TEXT="hello"), text("done")])
    async with _runtime(layout, _settings(layout), provider) as runtime:
        result = await runtime.route(RouteRequest(task="Write the greeting", targetAgent="lead",
                                                  isolation="worktree"))
    assert result.ok, result.message
    space = result.workspace
    assert space is not None and space.state == "committed"
    tree = layout.worktree(result.session_id or "")
    assert space.path == str(tree)
    transcript = layout.transcript(result.session_id or "").read_text()
    assert str(tree) in transcript  # the tool's `pwd`
    assert not (layout.repo / "out.txt").exists()
    assert git(layout.repo, "show", f"{space.branch}:out.txt") == "hello"
    # Subject from the agent's answer, the task in the body, the trailers; author the agent,
    # committer the repository's own user.
    assert git(layout.repo, "log", "-1", "--format=%an|%cn <%ce>|%s", space.branch) == \
        "Lead|Repo Owner <owner@example.com>|done"
    body = git(layout.repo, "log", "-1", "--format=%b", space.branch)
    assert "Task: Write the greeting" in body
    assert body.endswith(f"Squad-Session: {result.session_id}\nSquad-Agent: lead")
    # Landing was not asked for: the result says so, and what lands it.
    assert result.landing is not None and result.landing.state == "skipped"
    assert result.landing.next == f"squadd land {result.session_id}"
    assert git(layout.repo, "rev-list", "--count", "main") == "1"


async def test_the_shared_default_works_in_the_repository_root(tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    provider = script(lead=[call("jot", FILE="out.txt", TEXT="hi"), text("done")])
    async with _runtime(layout, _settings(layout), provider) as runtime:
        result = await runtime.route(RouteRequest(task="t", targetAgent="lead"))
    assert result.ok and result.workspace is None
    assert (layout.repo / "out.txt").read_text() == "hi\n"


async def test_an_agent_cli_runs_in_the_worktree(tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    provider = CommandProvider(["bash", "-c", "cat > /dev/null; pwd > where.txt; echo finished"],
                               cwd=layout.repo)
    settings = _settings(layout, isolation="worktree")
    async with _runtime(layout, settings, provider) as runtime:
        result = await runtime.route(RouteRequest(task="Say where", targetAgent="lead"))
    assert result.ok, result.message
    assert result.workspace is not None
    assert git(layout.repo, "show", f"{result.workspace.branch}:where.txt") == \
        result.workspace.path
    assert not (layout.repo / "where.txt").exists()


async def test_a_nested_route_shares_its_callers_worktree(tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    provider = script(
        lead=[call("squad_route", targetAgent="fenster", task="write the nested file"),
              call("jot", FILE="lead.txt", TEXT="lead"), text("all done")],
        fenster=[call("jot", FILE="nested.txt", TEXT="fenster"), text("written")])
    settings = load_settings(layout.root, overrides={
        "agents": {"lead": {"isolation": "worktree"}}, "tools": {"approvals": {"jot": "allow"}}})
    async with _runtime(layout, settings, provider) as runtime:
        result = await runtime.route(RouteRequest(task="Lead the work", targetAgent="lead"))
    assert result.ok and result.workspace is not None
    branch = result.workspace.branch
    assert git(layout.repo, "show", f"{branch}:nested.txt") == "fenster"
    assert git(layout.repo, "show", f"{branch}:lead.txt") == "lead"
    assert [r.session_id for r in records.load_all(layout)
            if not spares.is_spare(r)] == [result.session_id]


async def test_continuing_a_session_reuses_its_worktree_and_land_true_lands_it(
        tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    provider = script(lead=[call("jot", FILE="a.txt", TEXT="first"), text("one"),
                            call("jot", FILE="b.txt", TEXT="second"), text("two")])
    seen: list[str] = []
    async with _runtime(layout, _settings(layout, isolation="worktree"), provider) as runtime:
        runtime.bus.add_listener(lambda event: seen.append(getattr(event, "type", "")))
        first = await runtime.route(RouteRequest(task="First part", targetAgent="lead"))
        second = await runtime.route(RouteRequest(task="Second part",
                                                  sessionId=first.session_id, land=True))
    assert first.workspace is not None and second.workspace is not None
    assert first.workspace.branch == second.workspace.branch
    assert second.workspace.state == "landed"
    # Both rounds land as one squashed commit, with the last round's message.
    assert git(layout.repo, "log", "--format=%s", "main").splitlines() == ["two", "start"]
    assert "Task: Second part" in git(layout.repo, "log", "-1", "--format=%b", "main")
    assert (layout.repo / "a.txt").read_text() == "first\n"
    assert (layout.repo / "b.txt").read_text() == "second\n"
    assert [kind for kind in seen if kind.startswith("workspace.")] == [
        "workspace.created", "workspace.committed", "workspace.committed", "workspace.landed",
        "workspace.removed"]
    # Landed: its worktree and branch are gone (workspace.keep_landed = false), its record
    # keeps the outcome.
    assert not Path(second.workspace.path).exists()
    assert git(layout.repo, "branch", "--list", second.workspace.branch) == ""
    assert second.landing is not None and second.landing.state == "landed"
    assert second.landing.commit == git(layout.repo, "rev-parse", "main")


async def test_eight_agents_at_once_each_land_their_own_commit_on_a_linear_history(
        tmp_path: Path) -> None:
    import anyio

    from tests.runtime.scripted import add_agent
    layout = _squad(tmp_path)
    agents = [f"dev{n}" for n in range(8)]
    for agent in agents:
        add_agent(layout, agent)
    provider = script(**{agent: [call("jot", FILE=f"{agent}.txt", TEXT=agent),
                                 call("jot", FILE=f"{agent}.txt", TEXT=f"{agent} edited"),
                                 text(f"wrote {agent}.txt")] for agent in agents})
    settings = load_settings(layout.root, overrides={
        "workspace": {"isolation": "worktree", "land": "auto"},
        "pool": {"max_concurrent": 8}, "tools": {"approvals": {"jot": "allow"}}})
    results = []
    async with _runtime(layout, settings, provider) as runtime:
        async def one(agent: str) -> None:
            results.append(await runtime.route(RouteRequest(task=f"work of {agent}",
                                                            targetAgent=agent)))
        async with anyio.create_task_group() as group:
            for agent in agents:
                group.start_soon(one, agent)
    assert all(r.ok and r.workspace and r.workspace.state == "landed" for r in results), [
        (r.message, r.workspace) for r in results]
    subjects = git(layout.repo, "log", "--format=%s", "main").splitlines()
    assert sorted(subjects[:-1]) == sorted(f"wrote {agent}.txt" for agent in agents)
    assert set(git(layout.repo, "log", "--format=%cn", "main").splitlines()[:-1]) == \
        {"Repo Owner"}
    assert git(layout.repo, "rev-list", "--merges", "main") == ""
    for agent in agents:
        assert (layout.repo / f"{agent}.txt").read_text() == f"{agent} edited\n"


async def _spare_made(runtime: SquadRuntime) -> list[str]:
    """Wait (bounded) for the runtime's background maker to have a spare ready."""
    with anyio.fail_after(120):
        while True:
            ready = [r.path for r in await runtime.workspaces.listing() if r.state == "spare"]
            if ready:
                return ready
            await anyio.sleep(0.05)


async def test_the_runtime_makes_a_spare_worktree_ahead_and_the_next_session_takes_it(
        tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    provider = script(lead=[call("jot", FILE="out.txt", TEXT="hello"), text("done"),
                            call("jot", FILE="two.txt", TEXT="again"), text("done")])
    settings = _settings(layout, isolation="worktree", spares=1)
    async with _runtime(layout, settings, provider) as runtime:
        [spare] = await _spare_made(runtime)  # made at start: worktrees are the setting
        admin = git(Path(spare), "rev-parse", "--absolute-git-dir")
        first = await runtime.route(RouteRequest(task="Write", targetAgent="lead"))
        assert first.ok and first.workspace is not None, first.message
        tree = layout.worktree(first.session_id or "")
        assert git(tree, "rev-parse", "--absolute-git-dir") == admin  # the spare, moved
        assert git(layout.repo, "show", f"{first.workspace.branch}:out.txt") == "hello"
        [again] = await _spare_made(runtime)  # the next one, made after the first was taken
        assert again != spare
        admin = git(Path(again), "rev-parse", "--absolute-git-dir")
        second = await runtime.route(RouteRequest(task="Write again", targetAgent="lead"))
        assert second.ok and second.workspace is not None, second.message
        assert git(layout.worktree(second.session_id or ""), "rev-parse",
                   "--absolute-git-dir") == admin


async def test_a_nested_route_whose_landing_was_refused_tells_the_calling_model(
        tmp_path: Path) -> None:
    """The squad_route tool's result to the model that routed: the answer, then the landing's
    state, its check output and the next step; a failure, with `landing` in its details."""
    layout = _squad(tmp_path)
    provider = script(
        lead=[call("squad_route", targetAgent="fenster", task="Write c.txt",
                   isolation="worktree", land=True), text("told")],
        fenster=[call("jot", FILE="c.txt", TEXT="third"), text("wrote c.txt")])
    settings = _settings(layout, land_check="echo red-suite; exit 1")
    seen: list[Any] = []
    async with _runtime(layout, settings, provider) as runtime:
        runtime.bus.add_listener(seen.append)
        routed = await runtime.route(RouteRequest(task="Delegate", targetAgent="lead"))
    assert routed.ok and routed.landing is None  # the lead's own session has no worktree
    [completed] = [e for e in seen if getattr(e, "type", "") == "tool.completed"
                   and e.tool == "squad_route"]
    assert completed.result_type == "failure"
    landing = completed.details["landing"]
    assert landing["state"] == "check_failed" and "red-suite" in landing["detail"]
    told = provider_requests_tool_text(layout, routed.session_id or "")
    assert told.startswith("wrote c.txt") and "Landing: check_failed" in told
    assert "red-suite" in told and f"Next: {landing['next']}" in told
    assert git(layout.repo, "log", "--format=%s", "main").splitlines() == ["start"]


def provider_requests_tool_text(layout: SquadLayout, session_id: str) -> str:
    """The text of the first tool result in the session's transcript (what its model read)."""
    from squadd.state.transcripts import read_transcript

    transcript = read_transcript(layout.transcript(session_id))
    return str(next(m["content"] for m in transcript.messages if m["role"] == "tool"))


def _systems(gauge: Gauge) -> dict[str, list[str]]:
    """The system prompt of each model request the gauge passed on, by agent, in order."""
    found: dict[str, list[str]] = {}
    for request in gauge.requests:
        found.setdefault(request.agent, []).append(
            next(m.content for m in request.messages if m.role == "system"))
    return found


@pytest.mark.parametrize("sandbox", ["auto", "off"])
async def test_a_session_is_told_whether_squadd_commits_its_work(tmp_path: Path,
                                                                 sandbox: str) -> None:
    """A session in a worktree is told that squadd commits and lands its work (git's files
    are read-only to its commands under the sandbox, and its answer names the commit), and so
    is a session it routes to, in its worktree; the same two routed shared are told that
    their work stays uncommitted, or (sandbox off) nothing."""
    layout = _squad(tmp_path)
    seen = Gauge(script(  # each new session plays its agent's turns from the first
        lead=[call("squad_route", targetAgent="fenster", task="write the nested file"),
              text("all done")],
        fenster=[call("jot", FILE="nested.txt", TEXT="fenster"), text("written")]))
    settings = load_settings(layout.root, overrides={
        "tools": {"approvals": {"jot": "allow"}}, "sandbox": {"mode": sandbox}})
    async with _runtime(layout, settings, seen) as runtime:
        isolated = await runtime.route(RouteRequest(task="Lead the work", targetAgent="lead",
                                                    isolation="worktree"))
        shared = await runtime.route(RouteRequest(task="Lead again", targetAgent="lead"))
    assert isolated.ok and isolated.workspace is not None, isolated.message
    assert git(layout.repo, "show", f"{isolated.workspace.branch}:nested.txt") == "fenster"
    assert shared.ok and shared.workspace is None, shared.message
    assert (layout.repo / "nested.txt").read_text() == "fenster\n"
    told = {agent: ["worktree" if WORKTREE_NOTE in system else
                    "shared" if SHARED_NOTE in system else "" for system in systems]
            for agent, systems in _systems(seen).items()}
    shared_note = "" if sandbox == "off" else "shared"
    expected = ["worktree", "worktree", shared_note, shared_note]
    assert told == {"lead": expected, "fenster": expected}


async def test_a_worktree_route_stopped_before_it_started_resumes_in_a_worktree_and_lands(
        tmp_path: Path) -> None:
    """Accepted with isolation "worktree" and land, stopped while it waited for a slot, then
    resumed after a restart: it works in a worktree of its own, its prompt (made only now,
    from its recorded task) says so, and its work lands, as its route asked."""
    layout = _squad(tmp_path)
    settings = load_settings(layout.root, overrides={
        "tools": {"approvals": {"jot": "allow"}}, "pool": {"max_concurrent": 1}})
    holding = Gauge(script([text("never")]), hold={"*": anyio.Event()})
    async with _runtime(layout, settings, holding) as runtime:
        await runtime.route(RouteRequest(targetAgent="lead", task="hold the slot",
                                         waitForResult=False))
        queued = await runtime.route(RouteRequest(targetAgent="fenster", task="wait in line",
                                                  isolation="worktree", land=True,
                                                  waitForResult=False))
    session_id = queued.session_id or ""
    fresh = Gauge(script(fenster=[call("jot", FILE="late.txt", TEXT="late"), text("done")]))
    async with _runtime(layout, settings, fresh) as runtime:
        resumed = await runtime.resume(session_id)
    assert resumed.ok, resumed.message
    assert resumed.workspace is not None, "resumed shared: its route asked for a worktree"
    assert resumed.landing is not None and resumed.landing.state == "landed", resumed.landing
    assert git(layout.repo, "show", "main:late.txt") == "late"
    assert all(WORKTREE_NOTE in system for system in _systems(fresh)["fenster"])


async def test_a_session_keeps_its_slot_until_its_worktree_has_landed(tmp_path: Path) -> None:
    # One slot. A session in a worktree of its own still has work after its last turn (its
    # commit and landing): the next route is spawned only once it has landed.
    layout = _squad(tmp_path)
    provider = script(lead=[call("jot", FILE="lead.txt", TEXT="lead"), text("wrote lead.txt")],
                      fenster=[text("looked")])
    settings = load_settings(layout.root, overrides={
        "pool": {"max_concurrent": 1}, "tools": {"approvals": {"jot": "allow"}}})
    seen: list[tuple[str, str]] = []
    async with _runtime(layout, settings, provider) as runtime:
        runtime.bus.add_listener(lambda e: seen.append((e.type, getattr(e, "agent", ""))))
        landing = await runtime.route(RouteRequest(task="write", targetAgent="lead",
                                                   isolation="worktree", land=True,
                                                   waitForResult=False))
        after = await runtime.route(RouteRequest(task="look", targetAgent="fenster"))
    assert landing.ok and after.ok, (landing.message, after.message)
    order = [kind for kind, _agent in seen if kind in ("workspace.landed", "agent.spawned")]
    assert order == ["agent.spawned", "workspace.landed", "agent.spawned"]
    assert [agent for kind, agent in seen if kind == "agent.spawned"] == ["lead", "fenster"]
