"""The chaos model server: its agents play a conversation to its answer without repeating a
step, the same conversation gets the same turn, and its faults are logged with what a retry must
respect."""

from __future__ import annotations

import email.utils
import time
from typing import Any

import httpx

from tests.support.chaos_agent import MAX_TURNS, AgentScript, Behaviour, task_text
from tests.support.chaos_server import ChaosServer, FaultRates
from tests.support.chaos_workspace import ESCAPE, SCENE

AGENTS = ("lead", "backend", "tester")
NO_FAULTS = FaultRates(rate_limited=0, server_error=0, unavailable=0, dropped=0, slow=0,
                       malformed=0, client_error=0)


def _start(task_id: str, agent: str = "lead") -> list[dict[str, Any]]:
    return [{"role": "system", "content": f"You are {agent}, a Squad agent.\n\n## Charter"},
            {"role": "user", "content": task_text(task_id, (agent,), "do the work")}]


def test_a_conversation_reaches_its_answer_and_never_repeats_a_step() -> None:
    script = AgentScript(seed=3, agents=AGENTS, behaviour=Behaviour(), max_depth=3)
    for number in range(40):
        messages = _start(f"T{number:05d}")
        seen: list[str] = []
        while True:
            turn = script.read({"messages": messages})
            assert turn is not None and turn.number < MAX_TURNS + 1
            action = script.act(turn)
            assert action == script.act(script.read({"messages": messages}) or turn)
            if not action.calls:
                break
            ids = [str(call[2]) for call in action.calls]
            assert not set(ids) & set(seen), f"a step was taken twice: {ids}"
            seen += ids
            messages.append({"role": "assistant", "tool_calls": [
                {"id": i, "type": "function", "function": {"name": c[0], "arguments": "{}"}}
                for i, c in zip(ids, action.calls, strict=True)]})
            messages += [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
        assert action.text and f"T{number:05d}" in action.text


def test_routes_stay_within_max_depth_and_out_of_the_chain() -> None:
    script = AgentScript(seed=5, agents=AGENTS, behaviour=Behaviour(route_by_depth=(1.0, 1.0)),
                         max_depth=3)
    deep = script.read({"messages": [
        {"role": "system", "content": "You are tester, a Squad agent."},
        {"role": "user", "content": task_text("T1.0.0", ("lead", "backend", "tester"), "x")}]})
    assert deep is not None and all(s.kind != "route" for s in script.plan(deep))
    middle = script.read({"messages": _start("T2.0", "backend")})
    assert middle is not None
    routes = [s for s in script.plan(middle) if s.kind == "route"]
    assert len(routes) == 1 and routes[0].target in ("lead", "tester")


def test_rate_limits_are_logged_with_the_moment_a_retry_may_come() -> None:
    faults = FaultRates(rate_limited=1.0, server_error=0, unavailable=0, dropped=0, slow=0,
                        malformed=0, client_error=0)
    body = {"model": "m", "messages": _start("T00001")}
    with ChaosServer(seed=1, agents=AGENTS, faults=faults) as server:
        answers = [httpx.post(f"{server.url}/chat/completions", json=body, timeout=5)
                   for _ in range(8)]
        server.begin_epoch()
        httpx.post(f"{server.url}/chat/completions", json=body, timeout=5)
        records = server.records
    assert {a.status_code for a in answers} == {429}
    headers = [a.headers["retry-after"] for a in answers]
    assert "1" in headers and any(not h.isdigit() for h in headers)  # both kinds of Retry-After
    for answer, record in zip(answers, records, strict=False):
        asked = answer.headers["retry-after"]
        if not asked.isdigit():
            date = email.utils.parsedate_to_datetime(asked).timestamp()
            assert date - time.time() < 3
        assert record.not_before is not None and record.not_before >= record.answered + 0.99
    assert [r.attempt for r in records] == list(range(9))
    assert {r.body_hash for r in records} == {records[0].body_hash}
    assert [r.epoch for r in records] == [0] * 8 + [1]
    assert {r.conversation for r in records} == {"T00001"}


def test_without_faults_the_same_conversation_gets_the_same_answer() -> None:
    body = {"model": "m", "messages": _start("T00002")}
    with ChaosServer(seed=2, agents=AGENTS, faults=NO_FAULTS) as server:
        first, second = (httpx.post(f"{server.url}/chat/completions", json=body,
                                    timeout=5).json() for _ in range(2))
        assert server.fault_counts() in ({"none": 2}, {"invalid_args": 2}, {"unknown_tool": 2})
    strip = {"id", "created"}
    assert {k: v for k, v in first.items() if k not in strip} == \
        {k: v for k, v in second.items() if k not in strip}


def test_workspace_work_runs_its_calls_in_order_on_one_file_per_task_in_three_turns() -> None:
    script = AgentScript(seed=2, agents=AGENTS, behaviour=Behaviour(
        workspace=1.0, escape=1.0, decide=0, remember=0, pair=0, python_tool=0, python_stall=0,
        shell_tool=0, route_by_depth=(), invalid_args=0, unknown_tool=0), max_depth=3)
    turn = script.read({"messages": _start("T7")})
    assert turn is not None
    assert [step.kind for step in script.plan(turn)] == [ESCAPE, *SCENE[1:]]
    messages = _start("T7")
    called: list[tuple[str, str]] = []
    turns = 0
    while (turn := script.read({"messages": messages})) is not None and \
            (action := script.act(turn)).calls:
        ids = [str(call[2]) for call in action.calls]
        turns += 1
        called += [(str(c[0]), str(dict(c[1]).get("path", ""))) for c in action.calls
                   if isinstance(c[1], dict)]
        messages.append({"role": "assistant", "tool_calls": [
            {"id": i, "type": "function", "function": {"name": c[0], "arguments": "{}"}}
            for i, c in zip(ids, action.calls, strict=True)]})
        messages += [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]
    assert called == [("write", "soak-work/T7.txt"), ("write", "../soak-outside/T7.txt"),
                      ("edit", "soak-escape/sentinel.txt"), ("read", "soak-work/T7.txt"),
                      ("edit", "soak-work/T7.txt"), ("grep", "soak-work"),
                      ("find", "soak-work"), ("bash", "")]
    assert turns == 3
