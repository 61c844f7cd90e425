"""Stand-in results for a conversation read back after a crash: call order, and which calls
may have run."""

from __future__ import annotations

from squadd.contracts.messages import AssistantMessage, ToolCall, ToolMessage, UserMessage
from squadd.runtime.resume import INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT, answer_unfinished


def _turn(*ids: str, message_id: str | None = "msg-1") -> AssistantMessage:
    return AssistantMessage(id=message_id, tool_calls=[ToolCall(id=i, name="step") for i in ids])


def _result(call_id: str, text: str) -> ToolMessage:
    return ToolMessage(tool_call_id=call_id, name="step", content=text)


def test_results_come_back_in_call_order_with_stand_ins_in_their_place() -> None:
    messages = [UserMessage(content="go"), _turn("a", "b", "c"), _result("a", "A")]
    fixed, stand_ins = answer_unfinished(messages)
    assert [(m.tool_call_id, m.content) for m in fixed[2:]] == [
        ("a", "A"), ("b", INTERRUPTED_TOOL_TEXT), ("c", NOT_STARTED_TOOL_TEXT)]
    assert [m.tool_call_id for m in stand_ins] == ["b", "c"]
    assert all(m.is_error for m in stand_ins)


def test_a_complete_conversation_needs_no_stand_in_and_keeps_its_order() -> None:
    messages = [_turn("a", "b"), _result("b", "B"), _result("a", "A"),
                AssistantMessage(content="done")]
    fixed, stand_ins = answer_unfinished(messages)
    assert stand_ins == []
    assert [m.content for m in fixed] == ["", "A", "B", "done"]


def test_a_result_of_no_call_of_its_turn_is_kept_after_the_turns_results() -> None:
    fixed, _ = answer_unfinished([_turn("a"), _result("zz", "stray"), _result("a", "A")])
    assert [m.content for m in fixed[1:]] == ["A", "stray"]


def test_a_turn_without_an_id_reads_every_unanswered_call_as_interrupted() -> None:
    fixed, _ = answer_unfinished([_turn("a", "b", message_id=None)])
    assert [m.content for m in fixed[1:]] == [INTERRUPTED_TOOL_TEXT, INTERRUPTED_TOOL_TEXT]
