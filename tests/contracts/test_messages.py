"""Provider messages: a union discriminated by role, recorded exactly as transcripts hold them."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from squadd.contracts.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    message_record,
    parse_message,
)


def test_each_role_parses_to_its_own_type() -> None:
    assert isinstance(parse_message({"role": "system", "content": "s"}), SystemMessage)
    assert isinstance(parse_message({"role": "user", "content": "u"}), UserMessage)
    called = parse_message({"role": "assistant", "tool_calls": [{"id": "1", "name": "x"}]})
    assert isinstance(called, AssistantMessage) and called.tool_calls[0].name == "x"
    answer = parse_message({"role": "tool", "tool_call_id": "1", "content": "ok"})
    assert isinstance(answer, ToolMessage) and answer.tool_call_id == "1"


def test_an_unknown_or_missing_role_is_refused() -> None:
    for record in ({"role": "robot", "content": "x"}, {"content": "x"}):
        with pytest.raises(ValidationError):
            parse_message(record)


def test_records_keep_the_role_first_and_only_what_differs_from_defaults() -> None:
    messages = [
        (SystemMessage(content="s"), '{"role": "system", "content": "s"}'),
        (UserMessage(), '{"role": "user"}'),
        (AssistantMessage(content="a", tool_calls=[ToolCall(id="1", name="x",
                                                            arguments={"a": 1})]),
         '{"role": "assistant", "content": "a", "tool_calls": '
         '[{"id": "1", "name": "x", "arguments": {"a": 1}}]}'),
        (ToolMessage(tool_call_id="1", name="x", content="ok", is_error=True),
         '{"role": "tool", "content": "ok", "tool_call_id": "1", "name": "x", '
         '"is_error": true}'),
    ]
    for message, recorded in messages:
        assert json.dumps(message_record(message)) == recorded
        assert parse_message(json.loads(recorded)) == message
