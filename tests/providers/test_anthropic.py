"""The anthropic provider against a real Messages-API server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from squadd.config import ProviderSettings
from squadd.contracts.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from squadd.errors import ProviderError
from squadd.providers.anthropic import AnthropicProvider, to_anthropic_messages
from squadd.providers.base import RetryInfo
from squadd.providers.factory import make_provider
from tests.providers._shared import DECIDE, FAST_RETRIES, MEMORY, TIMEOUT, ask
from tests.support.model_servers import AnthropicServer, Reply


@pytest.fixture
async def provider(anthropic_server: AnthropicServer) -> AsyncIterator[AnthropicProvider]:
    provider = AnthropicProvider(base_url=anthropic_server.url, model="claude-test",
                                 api_key="sk-ant-test", timeout=TIMEOUT, policy=FAST_RETRIES)
    yield provider
    await provider.aclose()


async def test_tool_use_turn_is_parsed_and_tool_results_go_back_as_one_user_message(
        anthropic_server: AnthropicServer, provider: AnthropicProvider) -> None:
    anthropic_server.script(
        AnthropicServer.tool_call_turn(("squad_decide", {"title": "Use Postgres"}, "toolu_1"),
                                       ("squad_memory", {"learning": "SQL"}, "toolu_2"),
                                       text="Recording it."),
        AnthropicServer.text_turn("Done.", input_tokens=120, output_tokens=4),
    )
    request = ask()
    first = await provider.complete(request)

    assert first.stop_reason == "tool_calls" and first.text == "Recording it."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("toolu_1", "squad_decide", {"title": "Use Postgres"}),
        ("toolu_2", "squad_memory", {"learning": "SQL"}),
    ]
    sent = anthropic_server.requests[0]
    assert sent.headers["x-api-key"] == "sk-ant-test"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.body["system"] == "You are lead, a Squad agent."
    assert sent.body["model"] == "claude-test" and sent.body["max_tokens"] == 4096
    assert sent.body["tools"] == [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in (DECIDE, MEMORY)]
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Pick a database."}]}]

    request.messages += [
        AssistantMessage(content=first.text, tool_calls=first.tool_calls),
        ToolMessage(tool_call_id="toolu_1", name="squad_decide", content="written"),
        ToolMessage(tool_call_id="toolu_2", name="squad_memory",
                content="no such agent", is_error=True),
    ]
    second = await provider.complete(request)

    assert second.text == "Done." and second.stop_reason == "end"
    assert (second.usage.input_tokens, second.usage.output_tokens) == (120, 4)
    messages = anthropic_server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Recording it."},
        {"type": "tool_use", "id": "toolu_1", "name": "squad_decide",
         "input": {"title": "Use Postgres"}},
        {"type": "tool_use", "id": "toolu_2", "name": "squad_memory",
         "input": {"learning": "SQL"}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "written"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such agent",
         "is_error": True},
    ]


def test_system_messages_join_and_same_role_messages_merge() -> None:
    system, messages = to_anthropic_messages([
        SystemMessage(content="Part one."),
        SystemMessage(content="Part two."),
        UserMessage(content="Task."),
        AssistantMessage(content=""),  # empty: dropped, the API refuses it
        UserMessage(content="More context."),
        AssistantMessage(tool_calls=[ToolCall(
            id="t1", name="squad_decide", raw_arguments="{bad", arguments_error="bad JSON")]),
        ToolMessage(tool_call_id="t1", content="arguments were not valid JSON",
                is_error=True),
        UserMessage(content="Try again."),
    ])
    assert system == "Part one.\n\nPart two."
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["text"] for b in messages[0]["content"]] == ["Task.", "More context."]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "squad_decide", "input": {}}]
    assert [b["type"] for b in messages[2]["content"]] == ["tool_result", "text"]


@pytest.mark.parametrize(("stop_reason", "expected"), [
    ("end_turn", "end"), ("stop_sequence", "end"), ("max_tokens", "max_tokens"),
    ("refusal", "other")])
async def test_stop_reasons_map_to_squadd_stop_reasons(
        anthropic_server: AnthropicServer, provider: AnthropicProvider, stop_reason: str,
        expected: str) -> None:
    anthropic_server.script(AnthropicServer.text_turn("x", stop_reason=stop_reason))
    assert (await provider.complete(ask())).stop_reason == expected


async def test_wrong_api_key_gets_401_once_with_a_hint_naming_the_key_variable(
        anthropic_server: AnthropicServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    anthropic_server.script(
        AnthropicServer.error(401, "invalid x-api-key", kind="authentication_error"))
    retries: list[RetryInfo] = []
    provider = make_provider(ProviderSettings(kind="anthropic", base_url=anthropic_server.url),
                             on_retry=retries.append)
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()
    assert anthropic_server.requests[0].headers["x-api-key"] == "sk-ant-wrong"
    assert len(anthropic_server.requests) == 1 and retries == []
    message = str(caught.value)
    assert message.startswith("anthropic: HTTP 401")
    assert "authentication_error: invalid x-api-key" in message
    assert "$ANTHROPIC_API_KEY" in message
    assert caught.value.provider == "anthropic" and caught.value.status == 401


async def test_400_is_not_retried(anthropic_server: AnthropicServer,
                                  provider: AnthropicProvider) -> None:
    anthropic_server.script(AnthropicServer.error(400, "messages: roles must alternate"))
    with pytest.raises(ProviderError, match=r"HTTP 400.*roles must alternate"):
        await provider.complete(ask())
    assert len(anthropic_server.requests) == 1


async def test_overloaded_529_is_retried_then_succeeds(
        anthropic_server: AnthropicServer, provider: AnthropicProvider) -> None:
    anthropic_server.script(AnthropicServer.error(529, "Overloaded", kind="overloaded_error"),
                            AnthropicServer.text_turn("made it"))
    assert (await provider.complete(ask())).text == "made it"
    assert len(anthropic_server.requests) == 2


@pytest.mark.parametrize(("body", "expected"), [
    ({"type": "message", "role": "assistant"}, "no 'content' list"),
    ({"content": ["just a string"]}, "content[0] is not an object"),
    ({"content": [{"type": "tool_use", "input": {}}]}, "lacks its 'name'"),
    ({"type": "error", "error": {"type": "api_error", "message": "internal"}}, "internal"),
])
async def test_answers_missing_fields_are_malformed_errors(
        anthropic_server: AnthropicServer, provider: AnthropicProvider, body: object,
        expected: str) -> None:
    anthropic_server.script(Reply(body=body))
    with pytest.raises(ProviderError, match="anthropic: malformed response") as caught:
        await provider.complete(ask())
    assert expected in str(caught.value)


async def test_tool_input_that_is_not_an_object_sets_arguments_error(
        anthropic_server: AnthropicServer, provider: AnthropicProvider) -> None:
    anthropic_server.script(AnthropicServer.tool_call_turn(("squad_decide", "{not json")))
    call = (await provider.complete(ask())).tool_calls[0]
    assert call.arguments_error is not None and call.raw_arguments == "{not json"
