"""The dashboard's routes, in process: nothing without the token (the stream included), no
cross-origin action, the squad's live picture (sessions tree, tool progress, approvals answered
through the API's own handler), the event stream's `Last-Event-ID` resume, and no secret."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.contracts.events import ApprovalRequested, ToolUpdated
from squadd.contracts.routes import RouteRequest
from squadd.daemon.dashboard import TRANSCRIPT_TAIL, UI_PREFIX
from squadd.daemon.dashboard_access import DASHBOARD_HEADERS
from tests.daemon.dashboard_support import (
    SECRET,
    SECRET_NAME,
    TOKEN,
    Squad,
    auth,
    read_stream,
    running_squad,
)
from tests.runtime.scripted import call, script, text
from tests.workspaces.conftest import git

UI = UI_PREFIX


def with_squad(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Run `test(squad, ...)` inside a running squad (a task group cannot span a fixture's
    setup and teardown, which run in different tasks)."""
    @functools.wraps(test)
    async def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **params: Any) -> None:
        slots = params.get("slots", 8)
        monkeypatch.setenv(SECRET_NAME, SECRET)
        provider = script(
            lead=[call("squad_route", targetAgent="fenster", task="do the two steps",
                       waitForResult=False), text("routed", (10, 5))],
            fenster=[call("steps"), text("steps done", (20, 7))],
            hockney=[call("deploy"), text("deployed", (30, 9))],
        )
        async with running_squad(tmp_path, provider, max_concurrent=slots) as squad:
            await test(squad, **params)

    shown = inspect.signature(test)
    extra = [p for name, p in shown.parameters.items() if name != "squad"]
    run.__signature__ = shown.replace(parameters=[  # type: ignore[attr-defined]
        inspect.Parameter("tmp_path", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        inspect.Parameter("monkeypatch", inspect.Parameter.POSITIONAL_OR_KEYWORD), *extra])
    return run


async def _wait_for(squad: Squad, kind: type, timeout_s: float = 20.0) -> None:
    with squad.runtime.bus.subscribe() as sub, anyio.fail_after(timeout_s):
        async for event in sub:
            if isinstance(event, kind):
                return


@pytest.mark.parametrize(("method", "path"), [
    ("GET", f"{UI}/"), ("GET", f"{UI}/static/app.js"), ("GET", f"{UI}/api/state"),
    ("GET", f"{UI}/api/sessions/abc"), ("POST", f"{UI}/api/approvals/abc"),
])
@with_squad
async def test_without_the_token_there_is_nothing_to_see(squad: Squad, method: str,
                                                         path: str) -> None:
    await squad.runtime.route(RouteRequest(task="hello", target_agent="lead"))
    for headers in ({}, {"x-squadd-token": TOKEN[:-1] + "x"},
                    {"authorization": "Bearer nope"}, {"authorization": TOKEN}):
        response = await squad.http.request(method, path, headers=headers)
        assert response.status_code == 401, (path, headers)
        assert "lead" not in response.text and "hello" not in response.text
        assert response.json()["error"].startswith("missing or wrong dashboard token")
        assert response.headers["cache-control"] == "no-store"
    status, frames = await read_stream(squad.app, f"{UI}/api/events?since=0",
                                       until=lambda frames: True)
    assert status == 401 and frames == []


@with_squad
async def test_the_page_carries_its_token_and_keeps_to_its_own_origin(squad: Squad) -> None:
    response = await squad.http.get(f"{UI}/?token={TOKEN}",
                                    headers={"origin": "http://evil.example"})
    assert response.status_code == 200 and "text/html" in response.headers["content-type"]
    assert f'content="{TOKEN}"' in response.text and "static/app.js" in response.text
    for name, value in DASHBOARD_HEADERS.items():
        assert response.headers[name] == value
    assert not any(h.startswith("access-control-") for h in response.headers)
    script_file = await squad.http.get(f"{UI}/static/app.js", headers=auth())
    assert script_file.status_code == 200 and "EventSource" in script_file.text
    missing = await squad.http.get(f"{UI}/static/..%2Fdashboard.py", headers=auth())
    assert missing.status_code == 404
    preflight = await squad.http.options(f"{UI}/api/approvals/x", headers={
        **auth(), "origin": "http://evil.example", "access-control-request-method": "POST"})
    assert preflight.status_code == 405
    assert not any(h.startswith("access-control-") for h in preflight.headers)


@with_squad
async def test_the_ui_port_serves_the_dashboard_and_nothing_else(squad: Squad) -> None:
    for path in ("/v1/health", "/v1/sessions", "/"):
        response = await squad.http.get(path, headers=auth())
        assert response.status_code == 404, path
        assert "pid" not in response.text


@with_squad
async def test_a_foreign_host_is_refused_even_with_the_token(squad: Squad) -> None:
    response = await squad.http.get(f"{UI}/api/state", headers={**auth(),
                                                                 "host": "attacker.example"})
    assert response.status_code == 403 and "loopback" in response.json()["error"]


@with_squad
async def test_actions_refuse_another_origin_and_a_token_in_the_url(squad: Squad) -> None:
    path = f"{UI}/api/approvals/abc"
    body = {"approved": True}
    foreign = await squad.http.post(path, json=body,
                                    headers={**auth(), "origin": "http://evil.example"})
    assert foreign.status_code == 403 and "Origin" in foreign.json()["error"]
    cross_site = await squad.http.post(path, json=body,
                                       headers={**auth(), "sec-fetch-site": "cross-site"})
    assert cross_site.status_code == 403
    in_url = await squad.http.post(f"{path}?token={TOKEN}", json=body)
    assert in_url.status_code == 401 and "X-Squadd-Token header" in in_url.json()["error"]
    same_origin = await squad.http.post(path, json=body, headers={
        **auth(), "origin": "http://127.0.0.1:8765", "sec-fetch-site": "same-origin"})
    assert same_origin.status_code == 404  # past the guard: no such approval waits


@with_squad
async def test_the_state_shows_the_tree_the_tool_progress_and_the_turns(squad: Squad) -> None:
    lead = await squad.runtime.route(RouteRequest(task="split the work", target_agent="lead"))
    assert lead.ok
    with anyio.fail_after(20):
        await squad.gate.halfway.wait()
    state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    by_agent = {s["agent"]: s for s in state["sessions"]}
    child = by_agent["fenster"]
    assert child["parent_session_id"] == lead.session_id and child["state"] == "active"
    assert child["tool"]["tool"] == "steps" and child["tool"]["fraction"] == 0.5
    assert child["tool"]["message"] == "step 1 of 2 done" and child["turns"] == 1
    assert by_agent["lead"]["turns"] == 2
    assert state["pool"]["running"] == 1 and state["at_capacity"] is False
    assert [p["agent"] for p in state["tokens"]] == ["lead"]
    squad.gate.release.set()
    await squad.runtime.settle(timeout_s=20)
    after = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    finished = {s["agent"]: s for s in after["sessions"]}["fenster"]
    assert finished["tool"] is None and finished["turns"] == 2
    assert sorted(p["agent"] for p in after["tokens"]) == ["fenster", "lead"]
    transcript = (await squad.http.get(f"{UI}/api/sessions/{child['session_id']}",
                                       headers=auth())).json()
    contents = [r["message"].get("content") for r in transcript["transcript"]
                if r["kind"] == "message"]
    assert "both steps done" in contents and contents[-1] == "steps done"
    whole = squad.runtime.layout.transcript(child["session_id"]).read_text().splitlines()
    assert transcript["total"] == len(whole) and len(transcript["transcript"]) == min(
        len(whole), TRANSCRIPT_TAIL)


@with_squad
async def test_a_session_cancelled_mid_tool_shows_no_tool_running(squad: Squad) -> None:
    started = await squad.runtime.route(RouteRequest(task="two steps", target_agent="fenster",
                                                     wait_for_result=False))
    assert started.ok and started.session_id
    with anyio.fail_after(20):
        await squad.gate.halfway.wait()
    state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    shown = {s["session_id"]: s for s in state["sessions"]}[started.session_id]
    assert shown["tool"]["tool"] == "steps"
    assert await squad.runtime.cancel(started.session_id)
    await squad.runtime.settle(timeout_s=20)
    state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    shown = {s["session_id"]: s for s in state["sessions"]}[started.session_id]
    assert shown["state"] != "active" and shown["tool"] is None, shown


@with_squad
async def test_decisions_are_parsed_again_only_when_the_file_changes(squad: Squad) -> None:
    import squadd.daemon.dashboard as dashboard

    path = squad.runtime.layout.decisions_md
    path.write_text("# Decisions\n\n### 2026-01-02: Keep the queue bounded\n"
                    "**By:** lead\n\nA bound on every queue.\n")
    parsed: list[Path] = []

    def counted(file: Path) -> Any:
        parsed.append(file)
        return real(file)

    real = dashboard.parse_decisions
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dashboard, "parse_decisions", counted)
        for _ in range(3):
            state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
            assert [d["title"] for d in state["decisions"]] == ["Keep the queue bounded"]
        assert len(parsed) == 1
        path.write_text(path.read_text() + "\n### 2026-01-03: Fsync the journal\n"
                        "**By:** lead\n\nAppend and fsync.\n")
        state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
        assert [d["title"] for d in state["decisions"]] == [
            "Fsync the journal", "Keep the queue bounded"]
        assert len(parsed) == 2
        path.unlink()
        state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
        assert state["decisions"] == []


@with_squad
async def test_approve_on_the_page_answers_through_the_api_handler(squad: Squad) -> None:
    routed = await squad.runtime.route(RouteRequest(task="ship it", target_agent="hockney",
                                                    wait_for_result=False))
    await _wait_for(squad, ApprovalRequested)
    state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    [pending] = state["approvals"]
    assert pending["tool"] == "deploy" and pending["agent"] == "hockney"
    answer = await squad.http.post(f"{UI}/api/approvals/{pending['approval_id']}",
                                   json={"approved": True, "wrong": 1}, headers=auth())
    assert answer.status_code == 422 and "unknown field(s) wrong" in answer.json()["error"]
    answer = await squad.http.post(f"{UI}/api/approvals/{pending['approval_id']}",
                                   json={"approved": True}, headers=auth())
    assert answer.status_code == 200 and answer.json()["approved"] is True
    await squad.runtime.settle(timeout_s=20)
    view = await squad.runtime.session(routed.session_id or "")
    assert view is not None and view.answer == "deployed"
    again = await squad.http.post(f"{UI}/api/approvals/{pending['approval_id']}",
                                  json={"approved": False}, headers=auth())
    assert again.status_code == 404


@with_squad
async def test_secrets_never_reach_the_page(squad: Squad) -> None:
    routed = await squad.runtime.route(RouteRequest(task="ship it", target_agent="hockney",
                                                    wait_for_result=False))
    await _wait_for(squad, ApprovalRequested)
    [pending] = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()["approvals"]
    await squad.http.post(f"{UI}/api/approvals/{pending['approval_id']}",
                          json={"approved": True}, headers=auth())
    await squad.runtime.settle(timeout_s=20)
    seen = [(await squad.http.get(f"{UI}/api/state", headers=auth())).text,
            (await squad.http.get(f"{UI}/api/sessions/{routed.session_id}",
                                  headers=auth())).text]
    _, frames = await read_stream(
        squad.app, f"{UI}/api/events?since=0&token={TOKEN}",
        until=lambda frames: any(f["data"].get("type") == "agent.completed" for f in frames))
    seen.append(json.dumps(frames))
    assert any(f["data"].get("type") == "tool.updated" for f in frames)
    assert "deployed with key [secret:" in seen[1]
    for text_seen in seen:
        assert SECRET not in text_seen


@with_squad
async def test_the_stream_resumes_after_the_last_event_id(squad: Squad) -> None:
    await squad.runtime.route(RouteRequest(task="split the work", target_agent="lead"))
    with anyio.fail_after(20):
        await squad.gate.halfway.wait()
    upto = squad.runtime.bus.last_seq
    squad.gate.release.set()
    await squad.runtime.settle(timeout_s=20)
    last = squad.runtime.bus.last_seq
    assert last > upto + 1
    status, frames = await read_stream(
        squad.app, f"{UI}/api/events", headers={**auth(), "last-event-id": str(upto)},
        until=lambda frames: bool(frames) and int(frames[-1]["id"]) >= last)
    assert status == 200
    seqs = [int(f["id"]) for f in frames]
    assert seqs == list(range(upto + 1, last + 1))  # every missed event, once, in order
    assert all(f["data"]["seq"] == int(f["id"]) for f in frames)
    assert "tool.completed" in [f["event"] for f in frames]


@with_squad
async def test_a_gap_too_old_to_replay_asks_the_page_to_reload(squad: Squad) -> None:
    for number in range(600):  # more than the daemon keeps for replay
        squad.runtime.bus.publish(ToolUpdated(tool="t", call_id="c", message=str(number)))
    status, frames = await read_stream(squad.app, f"{UI}/api/events?since=1&token={TOKEN}",
                                       until=lambda frames: bool(frames))
    assert status == 200
    assert frames[0]["event"] == "reset"
    assert frames[0]["data"]["seq"] == squad.runtime.bus.last_seq
    bad = await squad.http.get(f"{UI}/api/events?since=abc", headers=auth())
    assert bad.status_code == 422


@pytest.mark.parametrize("slots", [1])
@with_squad
async def test_a_full_pool_shows_at_capacity_and_its_queue_urgent_first(squad: Squad,
                                                                        slots: int) -> None:
    await squad.runtime.route(RouteRequest(task="do the two steps", target_agent="fenster",
                                           wait_for_result=False))
    with anyio.fail_after(20):
        await squad.gate.halfway.wait()
    for agent, priority in (("hockney", "normal"), ("lead", "urgent")):
        await squad.runtime.route(RouteRequest(task=f"{agent}'s task", target_agent=agent,
                                               priority=priority, wait_for_result=False))
    state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    assert state["at_capacity"] is True
    assert state["pool"]["running"] == 1 and state["pool"]["queued"] == 2
    by_id = {s["session_id"]: s for s in state["sessions"]}
    assert [(by_id[i]["agent"], by_id[i]["priority"]) for i in state["queue"]] == [
        ("lead", "urgent"), ("hockney", "normal")]


async def test_a_worktree_sessions_branch_and_changes_are_in_the_state(tmp_path: Path) -> None:
    provider = script(hockney=[call("steps"), text("changed it")])
    async with running_squad(tmp_path, provider) as squad:
        repo = squad.runtime.layout.repo
        git(repo, "init", "--quiet", "-b", "main")
        (repo / "app.py").write_text("VALUE = 1\n")
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "-m", "start")
        squad.gate.release.set()
        result = await squad.runtime.route(RouteRequest(
            task="look around", target_agent="hockney", isolation="worktree"))
        assert result.ok and result.workspace is not None, result.message
        state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    [shown] = [s for s in state["sessions"] if s["agent"] == "hockney"]
    assert shown["workspace"]["branch"] == result.workspace.branch
    assert shown["workspace"]["target"] == "main"
    assert shown["workspace"]["path"] == str(squad.runtime.layout.worktree(
        result.session_id or ""))


async def test_a_sessions_landing_outcome_is_in_the_state(tmp_path: Path) -> None:
    provider = script(hockney=[call("steps"), text("looked")])
    async with running_squad(tmp_path, provider) as squad:
        repo = squad.runtime.layout.repo
        git(repo, "init", "--quiet", "-b", "main")
        (repo / "app.py").write_text("VALUE = 1\n")
        git(repo, "add", "--all")
        git(repo, "commit", "--quiet", "-m", "start")
        squad.gate.release.set()
        result = await squad.runtime.route(RouteRequest(
            task="look around", target_agent="hockney", isolation="worktree", land=True))
        assert result.ok and result.landing is not None, result.message
        state = (await squad.http.get(f"{UI}/api/state", headers=auth())).json()
    [shown] = [s for s in state["sessions"] if s["agent"] == "hockney"]
    assert shown["workspace"]["outcome"] == result.landing.model_dump(mode="json")
    assert shown["workspace"]["outcome"]["state"] == "skipped"  # it changed nothing
