"""Agent tools and prompt tools (`type: agent` / `type: prompt` tool files): loading, their
kind in listings, rendering, and routing through the pool with its depth and cycle rules."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.state.transcripts import read_transcript
from squadd.tools.base import ToolResult
from squadd.tools.gates import ResolvedVariables
from squadd.tools.invoke import CallOrigin
from squadd.tools.yaml.agent import AgentTool, PromptTool, is_agent_tool_text, render
from tests.runtime.scripted import make_squad, settings
from tests.tools.custom_tools import call, discover, write

REVIEW = """
type: agent
name: ask-hockney
description: Ask Hockney to review a file for one concern
agent: hockney
prompt: "Review {FILE} for {CONCERN}. Reply with {{verdict}}."
context: "asked by a teammate"
parameters:
  FILE: {type: string, description: The file to review}
  CONCERN: {type: string, description: What to look for, default: bugs}
timeout: 60000
"""

CHECKLIST = """
type: prompt
description: A release checklist for a version
prompt: |
  Release {VERSION} of {PRODUCT}:
  1. bump to {VERSION}
  2. tag v{VERSION}
parameters:
  VERSION: {type: string, description: The version}
variables:
  - {name: PRODUCT, type: text, required: true, description: the product name}
"""


class Fixed:
    """A resolver with fixed values (the environment is not touched)."""

    def __init__(self, **values: str):
        self.values = values

    def resolve(self, specs: tuple[object, ...]) -> ResolvedVariables:
        return ResolvedVariables(dict(self.values), {})


def test_kind_is_found_without_parsing_the_whole_file() -> None:
    assert is_agent_tool_text("description: x\ntype: agent\n")
    assert is_agent_tool_text("type: 'prompt'  # a template\n")
    assert not is_agent_tool_text("type: alias\nbase-tool: x\n")
    assert not is_agent_tool_text("parameters:\n  X:\n    type: agent\n")  # nested: not the kind


def test_render_fills_parameters_and_keeps_doubled_braces() -> None:
    assert render("a {X} {{y}} {Z}", {"X": "1", "Z": True}) == "a 1 {y} true"


def test_tool_files_load_with_their_kind(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "review.yaml", REVIEW)
    write(layout.tools_dir, "checklist.yaml", CHECKLIST)
    found = discover(layout)
    assert found.failures == ()
    kinds = {t.name: t.kind for t in found.tools}
    assert kinds == {"ask-hockney": "agent", "checklist": "prompt"}
    review = found.get("ask-hockney")
    assert isinstance(review, AgentTool) and review.spec_file.timeout_s == 60.0
    assert set(review.spec().parameters["required"]) == {"FILE"}


@pytest.mark.parametrize(("text", "expected"), [
    ("type: prompt\ndescription: d\nprompt: 'hi {NAEM}'\nparameters:\n"
     "  NAME: {type: string, description: n}\n", "did you mean {NAME}"),
    ("type: prompt\ndescription: d\nprompt: 'key {KEY}'\nvariables:\n"
     "  - {name: KEY, type: secret}\n", "secret variable"),
    ("type: prompt\ndescription: d\nprompt: p\nagent: lead\n", "only apply to a type: agent"),
    ("type: agent\ndescription: d\nprompt: p\n", "needs 'agent'"),
    ("type: agent\ndescription: d\nprompt: p\nagent: lead\nblockng: false\n",
     "did you mean 'blocking'"),
])
def test_bad_files_are_load_failures_that_say_why(tmp_path: Path, text: str,
                                                  expected: str) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "bad.yaml", text)
    [failure] = discover(layout).failures
    assert expected in failure.reason


def test_optional_tool_exists_only_while_its_flag_is_on(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "checklist.yaml", CHECKLIST + "optional: RELEASES_ON\n")
    monkeypatch.delenv("RELEASES_ON", raising=False)
    off = discover(layout)
    assert off.get("checklist") is None
    assert [s.reason for s in off.skipped] == ["optional: RELEASES_ON is not true, 1 or yes"]
    # the flag is read where discovery looks up its environment
    assert discover(layout, environ={"RELEASES_ON": "1"}).get("checklist") is not None
    monkeypatch.setenv("RELEASES_ON", "Yes")
    assert discover(layout).get("checklist") is not None


async def test_prompt_tool_returns_its_rendered_template(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "checklist.yaml", CHECKLIST)
    tool = discover(layout).get("checklist")
    assert isinstance(tool, PromptTool)
    result = await call(layout, tool, "checklist", {"VERSION": "2.1"},
                        variables=Fixed(PRODUCT="squadd"))
    assert result.ok
    assert result.text == "Release 2.1 of squadd:\n1. bump to 2.1\n2. tag v2.1\n"


async def test_agent_tool_outside_a_running_squad_says_what_it_needs(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "review.yaml", REVIEW)
    tool = discover(layout).get("ask-hockney")
    assert tool is not None
    result = await call(layout, tool, "ask-hockney", {"FILE": "a.py"})
    assert not result.ok and "needs the running squad" in result.text


def _replay_settings(tmp_path: Path, turns: dict[str, list[dict[str, object]]]) -> Settings:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"agents": turns}), encoding="utf-8")
    base = settings()
    return base.model_copy(update={"provider": base.provider.model_copy(
        update={"kind": "replay", "replay_file": str(replay)})})


async def test_agent_tool_routes_through_the_pool_as_a_child_session(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "review.yaml", REVIEW)
    config = _replay_settings(tmp_path, {
        "lead": [{"tool_calls": [{"name": "ask-hockney", "arguments": {"FILE": "auth.py"}}]},
                 {"text": "hockney says fine"}],
        "hockney": [{"text": "no bugs in auth.py"}],
    })
    async with SquadRuntime.from_settings(layout, config) as runtime:
        with anyio.fail_after(30):
            result = await runtime.route(RouteRequest(target_agent="lead", task="review",
                                                      requested_by="cli"))
        sessions = {v.agent: v for v in runtime.snapshot().sessions}
    assert result.ok and result.answer == "hockney says fine"
    child = sessions["hockney"]
    assert child.parent_session_id == sessions["lead"].session_id
    child_transcript = read_transcript(layout.transcript(child.session_id))
    assert child_transcript.meta["task"] == "Review auth.py for bugs. Reply with {verdict}."
    lead = read_transcript(layout.transcript(sessions["lead"].session_id))
    assert child_transcript.meta["depth"] == lead.meta["depth"] + 1
    assert child_transcript.meta["lineage"] == [*lead.meta["lineage"], "lead"]
    [tool_result] = [m for m in lead.messages if m["role"] == "tool"]
    assert tool_result["content"] == "no bugs in auth.py"


async def test_agent_tool_back_to_its_caller_is_refused_as_a_cycle(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "ask-lead.yaml",
          "type: agent\ndescription: Ask the lead\nagent: lead\nprompt: 'decide {Q}'\n"
          "parameters:\n  Q: {type: string, description: the question}\n")
    config = _replay_settings(tmp_path, {
        "lead": [{"tool_calls": [{"name": "ask-lead", "arguments": {"Q": "x"}}]},
                 {"text": "gave up"}],
    })
    async with SquadRuntime.from_settings(layout, config) as runtime:
        with anyio.fail_after(30):
            result = await runtime.route(RouteRequest(target_agent="lead", task="loop",
                                                      requested_by="cli"))
        agents = [v.agent for v in runtime.snapshot().sessions]
    assert result.ok and agents == ["lead"]
    transcript = read_transcript(layout.transcript(result.session_id or ""))
    [tool_result] = [m for m in transcript.messages if m["role"] == "tool"]
    assert tool_result["is_error"] and "cycle" in tool_result["content"]




async def _invoke(runtime: SquadRuntime, name: str, arguments: dict[str, object]) -> ToolResult:
    extra = runtime.extra_tools
    assert extra is not None
    tools = runtime.tools.merged(await anyio.to_thread.run_sync(lambda: list(extra())))
    with anyio.fail_after(30):
        return await runtime.invoker.invoke(
            tools, ToolCall(id=f"c-{len(arguments)}", name=name, arguments=arguments),
            CallOrigin(session_id="outside", agent="user"))


async def test_a_resumable_agent_tool_continues_the_session_it_is_given(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "review.yaml", REVIEW + "resumable: true\n")
    config = _replay_settings(tmp_path, {
        "hockney": [{"text": "first look done"}, {"text": "second look done"}]})
    async with SquadRuntime.from_settings(layout, config) as runtime:
        first = await _invoke(runtime, "ask-hockney", {"FILE": "a.py"})
        session_id = first.details["session_id"]
        second = await _invoke(runtime, "ask-hockney", {"FILE": "b.py", "sessionId": session_id})
    assert (first.text, second.text) == ("first look done", "second look done")
    assert second.details["session_id"] == session_id
    tasks = [m["content"] for m in read_transcript(layout.transcript(session_id)).messages
             if m["role"] == "user"]
    assert tasks == ["Review a.py for bugs. Reply with {verdict}.",
                     "Review b.py for bugs. Reply with {verdict}."]


async def test_a_non_blocking_agent_tool_returns_the_session_id_at_once(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "review.yaml", REVIEW + "blocking: false\n")
    config = _replay_settings(tmp_path, {"hockney": [{"text": "looked"}]})
    async with SquadRuntime.from_settings(layout, config) as runtime:
        result = await _invoke(runtime, "ask-hockney", {"FILE": "a.py"})
        session_id = result.details["session_id"]
        assert result.ok and f'squad_status(sessionId="{session_id}")' in result.text
        assert await runtime.settle(timeout_s=30)
        [view] = runtime.snapshot().sessions
    assert view.session_id == session_id and view.answer == "looked"


async def test_an_argument_may_choose_the_agent(tmp_path: Path) -> None:
    layout = make_squad(tmp_path / "repo")
    write(layout.tools_dir, "ask.yaml",
          "type: agent\ndescription: Ask a teammate\nagent: '{WHO}'\nprompt: '{QUESTION}'\n"
          "parameters:\n  WHO: {type: string, description: the agent}\n"
          "  QUESTION: {type: string, description: the question}\n")
    config = _replay_settings(tmp_path, {"fenster": [{"text": "fenster here"}],
                                         "hockney": [{"text": "hockney here"}]})
    async with SquadRuntime.from_settings(layout, config) as runtime:
        answers = [await _invoke(runtime, "ask", {"WHO": who, "QUESTION": "who are you?"})
                   for who in ("hockney", "fenster")]
    assert [a.text for a in answers] == ["hockney here", "fenster here"]
    assert [a.details["agent"] for a in answers] == ["hockney", "fenster"]
