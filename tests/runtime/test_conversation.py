"""Tool call ids unique in a session, and every call answered on resume (`runtime.conversation`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from squadd import ToolContext, tool
from squadd.config import Settings
from squadd.contracts.messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from squadd.contracts.routes import RouteRequest
from squadd.providers.factory import make_provider
from squadd.runtime.conversation import (
    INTERRUPTED_TOOL_TEXT,
    NOT_STARTED_TOOL_TEXT,
    name_calls,
    paired,
)
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript
from tests.support.model_servers import OpenAIServer, Reply


@tool
def dump(label: str, ctx: ToolContext) -> str:
    """Print a long report for `label`."""
    return f"report {label}\n" + "\n".join(f"{label} line {n}" for n in range(400))


def _calls_turn(ids: list[Any], labels: list[str]) -> Reply:
    calls = []
    for call_id, label in zip(ids, labels, strict=True):
        call: dict[str, Any] = {"type": "function", "function": {
            "name": "dump", "arguments": json.dumps({"label": label})}}
        if call_id is not None:
            call["id"] = call_id
        calls.append(call)
    return Reply(body={"choices": [{"message": {"role": "assistant", "content": None,
                                                "tool_calls": calls},
                                    "finish_reason": "tool_calls"}]})


@pytest.mark.parametrize("ids", [
    [None, None],             # no ids at all
    ["", ""],                 # empty ids
    ["call_0", "call_1"],     # the same ids every turn
    ["0", "0"],               # one id twice in a turn, and every turn
    ["../x", "a/b"],          # ids that would name a path
], ids=["missing", "empty", "repeated", "duplicated", "path-like"])
async def test_calls_without_usable_ids_get_ids_unique_in_the_session(
        layout: SquadLayout, ids: list[Any]) -> None:
    with OpenAIServer() as server:
        server.script(_calls_turn(ids, ["a1", "a2"]), _calls_turn(ids, ["b1", "b2"]),
                      OpenAIServer.text_turn("first done"),
                      _calls_turn(ids, ["c1", "c2"]), OpenAIServer.text_turn("second done"))
        config = Settings.model_validate({
            "provider": {"kind": "openai", "base_url": server.url, "retry_backoff_s": 0},
            "tools": {"max_output_bytes": 1024}})
        runtime = SquadRuntime(layout, config, make_provider(config.provider),
                               extra_tools=lambda: [dump])
        async with runtime:
            first = await runtime.route(RouteRequest(target_agent="fenster", task="one"))
            assert first.ok and first.session_id
            second = await runtime.route(RouteRequest(session_id=first.session_id,
                                                      task="two"))
            assert second.ok, second.message
            await runtime.provider.aclose()
        sent = server.bodies[-1]["messages"]
    transcript = read_transcript(layout.transcript(first.session_id))
    calls = [c for m in transcript.messages for c in m.get("tool_calls") or []]
    call_ids = [c["id"] for c in calls]
    assert len(call_ids) == 6 and len(set(call_ids)) == 6
    # Each result's spill file holds that call's own output, and the model was told its path.
    results = {m["tool_call_id"]: m["content"] for m in transcript.messages
               if m["role"] == "tool"}
    for call in calls:
        label = call["arguments"]["label"]
        spilled = layout.tool_output(first.session_id, call["id"])
        assert spilled.read_text(encoding="utf-8").startswith(f"report {label}\n")
        assert str(spilled.relative_to(layout.repo)) in results[call["id"]] or \
            str(spilled) in results[call["id"]]
    # What went to the API pairs every result with a call sent before it.
    sent_ids = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls")
                or []]
    assert sent_ids == call_ids
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == call_ids


def _assistant(*ids: str) -> AssistantMessage:
    return AssistantMessage(tool_calls=[ToolCall(id=i, name="t") for i in ids])


def _result(call_id: str, text: str = "ok") -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, name="t", content=text)


USER = UserMessage(content="go")


def _shape(messages: list[Message]) -> list[str]:
    shown = []
    for m in messages:
        if isinstance(m, ToolMessage):
            shown.append(f"tool:{m.tool_call_id}:"
                         + ("stand-in" if m.content == INTERRUPTED_TOOL_TEXT else m.content))
        elif isinstance(m, AssistantMessage) and m.tool_calls:
            shown.append("calls:" + ",".join(c.id for c in m.tool_calls))
        else:
            shown.append(m.role)
    return shown


@pytest.mark.parametrize(("conversation", "expected", "made"), [
    # A crash after the calls were written: both get stand-ins.
    ([USER, _assistant("a", "b")],
     ["user", "calls:a,b", "tool:a:stand-in", "tool:b:stand-in"], 2),
    # One result written, the other cut off.
    ([USER, _assistant("a", "b"), _result("a")],
     ["user", "calls:a,b", "tool:a:ok", "tool:b:stand-in"], 1),
    # An older transcript with `call_0` every turn: the unanswered one is the later one.
    ([USER, _assistant("call_0"), _result("call_0", "first"), _assistant("call_0")],
     ["user", "calls:call_0", "tool:call_0:first", "calls:call_0", "tool:call_0:stand-in"], 1),
    # A gap in the middle (its stand-in was appended at the end by an earlier resume) goes
    # back where it belongs; nothing new is made.
    ([USER, _assistant("a"), USER, _assistant("b"), _result("b"), _result("a", "late")],
     ["user", "calls:a", "tool:a:late", "user", "calls:b", "tool:b:ok"], 0),
    # A result answering no call is dropped; results out of order follow their calls' order.
    ([USER, _result("zz"), _assistant("a", "b"), _result("b"), _result("a")],
     ["user", "calls:a,b", "tool:a:ok", "tool:b:ok"], 0),
    # A whole, well-paired conversation is left as it is.
    ([USER, _assistant("a"), _result("a"), AssistantMessage(content="done")],
     ["user", "calls:a", "tool:a:ok", "assistant"], 0),
])
def test_resume_answers_every_call_right_after_it(
        conversation: list[Message], expected: list[str], made: int) -> None:
    fixed, stand_ins = paired(conversation)
    assert _shape(fixed) == expected
    assert len(stand_ins) == made


def test_names_are_unique_even_against_names_taken_by_providers() -> None:
    used = {"call_t2_0"}
    calls = [ToolCall(id="", name="t"), ToolCall(id="x", name="t"), ToolCall(id="x", name="t")]
    named = name_calls(calls, 2, used)
    assert [c.id for c in named] == ["call_t2_0_1", "x", "call_t2_2"]
    assert used == {"call_t2_0", "call_t2_0_1", "x", "call_t2_2"}


def _turn(*ids: str, message_id: str | None = "msg-1") -> AssistantMessage:
    return AssistantMessage(id=message_id, tool_calls=[ToolCall(id=i, name="step") for i in ids])


def _result(call_id: str, text: str) -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, name="step", content=text)


def test_of_a_turns_unanswered_calls_only_the_first_may_have_run() -> None:
    messages = [UserMessage(content="go"), _turn("a", "b", "c"), _result("a", "A")]
    fixed, stand_ins = paired(messages)
    assert [(m.tool_call_id, m.content) for m in fixed[2:]
            if isinstance(m, ToolMessage)] == [
        ("a", "A"), ("b", INTERRUPTED_TOOL_TEXT), ("c", NOT_STARTED_TOOL_TEXT)]
    assert [m.tool_call_id for m in stand_ins] == ["b", "c"]
    assert all(m.is_error for m in stand_ins)


def test_a_turn_without_an_id_reads_every_unanswered_call_as_interrupted() -> None:
    fixed, _ = paired([_turn("a", "b", message_id=None)])
    assert [m.content for m in fixed[1:]] == [INTERRUPTED_TOOL_TEXT, INTERRUPTED_TOOL_TEXT]
