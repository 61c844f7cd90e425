"""The openai provider against a real OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from squadd.config import ProviderSettings
from squadd.contracts.messages import AssistantMessage, ToolMessage
from squadd.errors import ProviderError
from squadd.providers.base import RetryInfo, tool_specs
from squadd.providers.factory import make_provider
from squadd.providers.openai import OpenAIProvider
from squadd.providers.retry import RetryPolicy
from tests.providers._shared import DECIDE, FAST_RETRIES, MEMORY, TIMEOUT, ask
from tests.support.model_servers import OpenAIServer, Reply


@pytest.fixture
async def provider(openai_server: OpenAIServer) -> AsyncIterator[OpenAIProvider]:
    provider = OpenAIProvider(base_url=openai_server.url, model="test-model",
                              timeout=TIMEOUT, policy=FAST_RETRIES)
    yield provider
    await provider.aclose()


async def test_tool_call_turn_is_parsed_and_tool_results_go_back_in_order(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(
        OpenAIServer.tool_call_turn(("squad_decide", {"title": "Use Postgres"}, "call_a"),
                                    ("squad_memory", {"learning": "we like SQL"}, "call_b"),
                                    text="Recording it."),
        OpenAIServer.text_turn("Done."),
    )
    request = ask()
    first = await provider.complete(request)

    assert first.stop_reason == "tool_calls"
    assert first.text == "Recording it."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_a", "squad_decide", {"title": "Use Postgres"}),
        ("call_b", "squad_memory", {"learning": "we like SQL"}),
    ]
    sent = openai_server.requests[0].body
    assert sent["model"] == "test-model"
    assert sent["tools"] == tool_specs([DECIDE, MEMORY])
    assert sent["tools"][0] == {"type": "function", "function": {
        "name": "squad_decide", "description": DECIDE.description,
        "parameters": DECIDE.parameters}}
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]

    request.messages += [
        AssistantMessage(content=first.text, tool_calls=first.tool_calls),
        ToolMessage(tool_call_id="call_a", name="squad_decide",
                content="decision written"),
        ToolMessage(tool_call_id="call_b", name="squad_memory",
                content="agent not found", is_error=True),
    ]
    second = await provider.complete(request)

    assert second.text == "Done." and second.stop_reason == "end" and not second.tool_calls
    messages = openai_server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool"]
    assistant = messages[2]
    assert assistant["content"] == "Recording it."
    assert [(c["id"], c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]] == [
        ("call_a", "function", "squad_decide", {"title": "Use Postgres"}),
        ("call_b", "function", "squad_memory", {"learning": "we like SQL"}),
    ]
    assert messages[3] == {"role": "tool", "tool_call_id": "call_a",
                           "content": "decision written"}
    assert messages[4] == {"role": "tool", "tool_call_id": "call_b",
                           "content": "agent not found"}


async def test_text_turn_reports_usage_model_and_stop_reason(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(
        OpenAIServer.text_turn("Hello", prompt_tokens=42, completion_tokens=3, model="served"),
        OpenAIServer.text_turn("Cut sho", finish_reason="length"),
    )
    first = await provider.complete(ask(tools=[]))
    assert (first.text, first.stop_reason, first.model) == ("Hello", "end", "served")
    assert (first.usage.input_tokens, first.usage.output_tokens) == (42, 3)
    assert "tools" not in openai_server.requests[0].body  # no empty tools array

    second = await provider.complete(ask())
    assert second.stop_reason == "max_tokens"


async def test_request_model_wins_over_the_default(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(OpenAIServer.text_turn("ok"))
    request = ask()
    request.model = "llama3.1"
    request.max_tokens = 77
    await provider.complete(request)
    body = openai_server.requests[0].body
    assert (body["model"], body["max_tokens"]) == ("llama3.1", 77)


async def test_arguments_that_are_not_json_set_arguments_error_instead_of_raising(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(OpenAIServer.tool_call_turn(
        ("squad_decide", '{"title": "unterminated'), ("squad_memory", "[1, 2]"),
        ("squad_decide", "")))
    completion = await provider.complete(ask())

    broken, array, empty = completion.tool_calls
    assert broken.arguments_error is not None and "Unterminated string" in broken.arguments_error
    assert broken.raw_arguments == '{"title": "unterminated'
    assert broken.arguments == {}
    assert array.arguments_error == "expected a JSON object, got list"
    assert empty.arguments == {} and empty.arguments_error is None


async def test_broken_arguments_are_sent_back_as_the_model_wrote_them(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(OpenAIServer.tool_call_turn(("squad_decide", "{oops", "call_x")),
                         OpenAIServer.text_turn("fixed"))
    request = ask()
    first = await provider.complete(request)
    request.messages += [
        AssistantMessage(tool_calls=first.tool_calls),
        ToolMessage(tool_call_id="call_x", is_error=True,
                content="arguments were not valid JSON: ..."),
    ]
    await provider.complete(request)
    assistant = openai_server.requests[1].body["messages"][2]
    assert assistant["content"] is None
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{oops"


async def test_400_is_not_retried_and_the_error_names_provider_status_and_server_text(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(OpenAIServer.error(400, "max_tokens is too large: 999999"),
                         OpenAIServer.text_turn("never sent"))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask())

    message = str(caught.value)
    assert "openai" in message and "HTTP 400" in message
    assert "max_tokens is too large: 999999" in message
    assert caught.value.status == 400 and caught.value.retryable is False
    assert len(openai_server.requests) == 1


async def test_wrong_api_key_gets_401_once_with_a_hint_naming_the_key_variable(
        openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUADD_TEST_OPENAI_KEY", "sk-wrong")
    openai_server.script(OpenAIServer.error(401, "Incorrect API key provided: sk-wrong",
                                            kind="invalid_api_key"))
    retries: list[RetryInfo] = []
    provider = make_provider(
        ProviderSettings(kind="openai", base_url=openai_server.url, model="m",
                         api_key_env="SQUADD_TEST_OPENAI_KEY", retry_backoff_s=0.01),
        on_retry=retries.append)
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()

    assert openai_server.requests[0].headers["authorization"] == "Bearer sk-wrong"
    assert len(openai_server.requests) == 1 and retries == []
    message = str(caught.value)
    assert "HTTP 401" in message and "Incorrect API key provided" in message
    assert "$SQUADD_TEST_OPENAI_KEY" in message


async def test_no_api_key_means_no_authorization_header(
        openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai_server.script(OpenAIServer.text_turn("local model here"))
    provider = make_provider(ProviderSettings(kind="openai", base_url=openai_server.url + "/"))
    try:
        completion = await provider.complete(ask())
    finally:
        await provider.aclose()
    assert completion.text == "local model here"
    request = openai_server.requests[0]
    assert request.path == "/v1/chat/completions"  # the trailing slash did not double up
    assert "authorization" not in request.headers


async def test_a_body_that_is_not_json_is_a_clear_provider_error(
        openai_server: OpenAIServer, provider: OpenAIProvider) -> None:
    openai_server.script(Reply(raw=b"<html>Bad Gateway, kind of</html>"))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(ask())
    message = str(caught.value)
    assert "openai: malformed response" in message and "not JSON" in message
    assert "<html>Bad Gateway" in message
    assert len(openai_server.requests) == 1


@pytest.mark.parametrize(("body", "expected"), [
    ({"id": "x", "object": "chat.completion"}, "no 'choices'"),
    ({"choices": []}, "no 'choices'"),
    ({"choices": [{"index": 0, "finish_reason": "stop"}]}, "has no 'message' object"),
    ({"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c"}]}}]},
     "tool call 0 has no 'function' object"),
    ({"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"arguments": "{}"}}]}}]}, "tool call 0 has no function name"),
    ({"error": {"message": "model not loaded"}}, "model not loaded"),
    ([1, 2, 3], "expected a JSON object, got list"),
])
async def test_answers_missing_fields_are_malformed_errors(
        openai_server: OpenAIServer, provider: OpenAIProvider, body: object,
        expected: str) -> None:
    openai_server.script(Reply(body=body))
    with pytest.raises(ProviderError, match="malformed response") as caught:
        await provider.complete(ask())
    assert expected in str(caught.value)


async def test_connection_refused_is_a_provider_error_after_bounded_attempts() -> None:
    from tests.support.model_servers import unused_port

    retries: list[RetryInfo] = []
    provider = OpenAIProvider(base_url=f"http://127.0.0.1:{unused_port()}/v1", timeout=TIMEOUT,
                              policy=RetryPolicy(max_attempts=4, backoff_s=0.01,
                                                 backoff_max_s=0.02),
                              on_retry=retries.append)
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()
    message = str(caught.value)
    assert "openai: connection to http://127.0.0.1:" in message
    assert "Connection refused" in message and "gave up after 4 attempts" in message
    assert [r.attempt for r in retries] == [1, 2, 3]
