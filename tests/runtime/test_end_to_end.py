"""End to end over real HTTP: a coordinator fans out to two agents and collects their answers.

The model is the test suite's OpenAI-compatible server on 127.0.0.1; squadd talks to it with its
real `openai` provider. The coordinator routes to fenster and hockney with waitForResult=false,
polls squad_status until both have answered, and both agents' decisions land in the inbox.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.state.decisions import parse_decisions
from squadd.state.layout import SquadLayout
from tests.runtime.scripted import settings
from tests.support.model_servers import OpenAIServer, Reply

_AGENT_RE = re.compile(r"^You are ([a-z0-9._-]+), a Squad agent\.")
_SPAWNED_RE = re.compile(r'Agent "([a-z]+)" spawned with session (\S+)\.')


def _agent_of(body: dict[str, Any]) -> str:
    match = _AGENT_RE.match(body["messages"][0]["content"])
    assert match, body["messages"][0]["content"][:80]
    return match.group(1)


def _worker(agent: str, body: dict[str, Any]) -> Reply:
    turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turn == 0:
        return OpenAIServer.tool_call_turn(("squad_decide", {
            "title": f"{agent} picks a plan", "body": f"{agent} will do it this way.",
            "agentName": agent, "category": "architecture"}))
    return OpenAIServer.text_turn(f"{agent} finished its part")


def _coordinator(body: dict[str, Any]) -> Reply:
    messages = body["messages"]
    if not any(m["role"] == "assistant" for m in messages):
        return OpenAIServer.tool_call_turn(
            ("squad_route", {"targetAgent": "fenster", "task": "design the API",
                             "waitForResult": False}),
            ("squad_route", {"targetAgent": "hockney", "task": "plan the tests",
                             "waitForResult": False}))
    sessions = {}
    answers: dict[str, str] = {}
    for message in messages:
        if message["role"] != "tool":
            continue
        spawned = _SPAWNED_RE.search(message["content"])
        if spawned:
            sessions[spawned.group(1)] = spawned.group(2)
        if "Final answer:" in message["content"]:
            agent = re.search(r"\*\*([a-z]+)\*\*", message["content"])
            assert agent
            answers[agent.group(1)] = message["content"].split("Final answer:\n", 1)[1] \
                .splitlines()[0]
    waiting = [sid for agent, sid in sorted(sessions.items()) if agent not in answers]
    if not waiting:
        summary = "; ".join(f"{a}: {answers[a]}" for a in sorted(answers))
        return OpenAIServer.text_turn(f"all done ({summary})")
    reply = OpenAIServer.tool_call_turn(*[("squad_status", {"sessionId": sid})
                                          for sid in waiting])
    return Reply(status=reply.status, body=reply.body, delay_s=0.05)


def _responder(body: dict[str, Any]) -> Reply:
    agent = _agent_of(body)
    return _coordinator(body) if agent == "lead" else _worker(agent, body)


async def test_coordinator_fans_out_over_http_and_collects_answers(layout: SquadLayout) -> None:
    with OpenAIServer(responder=_responder) as server:
        config = settings(session_max_turns=40)
        config = config.model_copy(update={"provider": config.provider.model_copy(
            update={"kind": "openai", "base_url": server.url, "model": "test-model"})})
        async with SquadRuntime.from_settings(layout, config) as runtime:
            with anyio.fail_after(30):
                result = await runtime.route(RouteRequest(
                    target_agent="lead", task="ship the feature", requested_by="cli"))
            snapshot = runtime.snapshot()
        assert server.errors == []
        bodies = server.bodies

    assert result.ok, result.message
    assert result.answer == ("all done (fenster: fenster finished its part; "
                             "hockney: hockney finished its part)")
    # both agents' decisions are in the inbox, in the Squad format
    inbox = sorted(p.name for p in layout.inbox_dir.glob("*.md"))
    assert inbox == ["fenster-fenster-picks-a-plan.md", "hockney-hockney-picks-a-plan.md"]
    for name in ("fenster", "hockney"):
        [entry] = parse_decisions(layout.inbox_dir / f"{name}-{name}-picks-a-plan.md").entries
        assert (entry.by, entry.category, entry.title) == (name, "architecture",
                                                          f"{name} picks a plan")
    # the coordinator really polled squad_status over the wire, and the children ran in parallel
    agents = [_agent_of(b) for b in bodies]
    assert agents.count("fenster") == 2 and agents.count("hockney") == 2
    polls = [c for b in bodies for m in b["messages"] if m["role"] == "assistant"
             for c in m.get("tool_calls") or [] if c["function"]["name"] == "squad_status"]
    assert polls and all(json.loads(c["function"]["arguments"])["sessionId"] for c in polls)
    by_agent = {v.agent: v for v in snapshot.sessions}
    assert set(by_agent) == {"lead", "fenster", "hockney"}
    lead_id = by_agent["lead"].session_id
    assert by_agent["fenster"].parent_session_id == lead_id
    assert by_agent["hockney"].parent_session_id == lead_id
    assert all(v.state == "idle" for v in snapshot.sessions)
    assert by_agent["fenster"].tokens > 0  # usage came back from the server
    assert len(list(layout.orchestration_dir.glob("*.md"))) == 3
