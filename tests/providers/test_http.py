"""A model server's answer that is hostile (nested too deeply, holding NaN, not UTF-8) is a
`ProviderError` naming the malformed response; bad text in a good answer is mended. A request's
tools and its long texts (the system prompt), encoded once, are the bytes `json.dumps` of the
whole body would have sent."""

from __future__ import annotations

import json
import socket
from typing import Any

import httpx
import pytest

from squadd.config import ProviderSettings
from squadd.contracts.messages import SystemMessage, ToolMessage, ToolSpec, UserMessage
from squadd.errors import ProviderError
from squadd.providers.anthropic import AnthropicProvider
from squadd.providers.base import (
    LONG_TEXT_CHARS,
    TOOLS_JSON_KEPT,
    CompletionRequest,
    TextJson,
    ToolsJson,
    tool_specs,
    with_members,
)
from squadd.providers.http import (
    JsonEndpoint,
    _root_cause,
    api_key_from,
    error_text,
    key_hint,
)
from squadd.providers.openai import OpenAIProvider
from tests.providers._shared import FAST_RETRIES, TIMEOUT


def _endpoint(body: bytes, status: int = 200) -> JsonEndpoint:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": "application/json"})

    return JsonEndpoint(provider="openai", url="http://model.test/v1/chat/completions",
                        headers={}, timeout=TIMEOUT, policy=FAST_RETRIES,
                        transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(("body", "problem"), [
    (b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than"),
    (b'{"usage": {"prompt_tokens": NaN}}', "not a JSON number"),
    (b'{"choices": [{"message": {"content": "\xff\xfe"}}]}', "not UTF-8"),
])
async def test_a_hostile_answer_is_a_malformed_response_error(body: bytes,
                                                              problem: str) -> None:
    endpoint = _endpoint(body)
    try:
        with pytest.raises(ProviderError) as caught:
            await endpoint.post({"model": "m"})
    finally:
        await endpoint.aclose()
    assert "malformed response" in str(caught.value) and problem in str(caught.value)


async def test_unpaired_surrogates_in_an_answer_are_mended() -> None:
    endpoint = _endpoint(b'{"text": "a \\ud800 b", "\\udfffk": 1}')
    try:
        data = await endpoint.post({"model": "m"})
    finally:
        await endpoint.aclose()
    assert data == {"text": "a \ufffd b", "\ufffdk": 1}


def test_an_error_body_nested_too_deeply_is_shown_as_a_snippet() -> None:
    body = b"[" * 100_000
    assert error_text(body) == "[" * 1000


def test_the_api_key_comes_from_the_named_variable_and_an_empty_one_counts_as_unset() -> None:
    named = ProviderSettings(api_key_env="MY_KEY")
    assert api_key_from(named, "OPENAI_API_KEY", {"MY_KEY": "sk-1"}) == ("sk-1", "MY_KEY")
    assert api_key_from(ProviderSettings(), "OPENAI_API_KEY",
                        {"OPENAI_API_KEY": ""}) == (None, "OPENAI_API_KEY")
    assert key_hint(None, "OPENAI_API_KEY") == "$OPENAI_API_KEY is not set"
    assert key_hint("sk-1", "MY_KEY") == "check the API key in $MY_KEY"


@pytest.mark.parametrize("body", [{}, {"model": "m", "messages": [{"content": "é \u2028"}]}])
def test_members_encoded_ahead_are_written_as_json_dumps_writes_them(
        body: dict[str, Any]) -> None:
    tools = [{"name": "t", "parameters": {"type": "object", "x": "é"}}]
    assert with_members(json.dumps(body), {"tools": json.dumps(tools)}) == json.dumps(
        {**body, "tools": tools})
    assert with_members(json.dumps(body), None) == json.dumps(body)


SPECS = [ToolSpec(name=f"tool_{n}", description=f"Does {n} — safely.",
                  parameters={"type": "object", "properties": {"p": {"type": "string"}}})
         for n in range(3)]
OPENAI_OK = {"choices": [{"message": {"role": "assistant", "content": "ok"},
                          "finish_reason": "stop"}]}
ANTHROPIC_OK = {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}


def _recorded(kind: str) -> tuple[OpenAIProvider | AnthropicProvider, list[bytes]]:
    """A provider of `kind` whose requests' bodies are kept, each answered "ok"."""
    sent: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.content)
        return httpx.Response(200, json=OPENAI_OK if kind == "openai" else ANTHROPIC_OK)

    settings = ProviderSettings(kind=kind, base_url="http://model.test/v1" if kind == "openai"
                                else "http://model.test", model="m")
    transport, environ = httpx.MockTransport(answer), {"ANTHROPIC_API_KEY": "k"}
    provider = (OpenAIProvider.from_settings(settings, transport=transport, environ=environ)
                if kind == "openai" else
                AnthropicProvider.from_settings(settings, transport=transport, environ=environ))
    return provider, sent


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_request_with_tools_is_the_bytes_of_its_whole_body(kind: str) -> None:
    provider, sent = _recorded(kind)
    request = CompletionRequest(messages=[UserMessage(content="hi")], tools=SPECS)
    try:
        for specs in (SPECS, SPECS, SPECS[:2]):
            await provider.complete(request.model_copy(update={"tools": specs}))
    finally:
        await provider.aclose()
    bodies = [json.loads(raw) for raw in sent]
    expected = (tool_specs(SPECS) if kind == "openai" else
                [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                 for t in SPECS])
    assert [body["tools"] for body in bodies] == [expected, expected, expected[:2]]
    for raw, body in zip(sent, bodies, strict=True):
        assert raw == json.dumps(body).encode()  # as one json.dumps of the body writes it
        assert list(body)[-1] == "tools"


def _prompt(n: int) -> str:
    """A long prompt built anew each call (an equal text, another object)."""
    return "".join(f'- rule {i}: "quote", back\\slash, é — ✓\n' for i in range(n))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_a_request_with_a_long_prompt_is_the_bytes_of_its_whole_body(kind: str) -> None:
    provider, sent = _recorded(kind)
    long_result = "x" * (LONG_TEXT_CHARS + 1)
    try:
        for turn in range(2):
            messages = [SystemMessage(content=_prompt(200)), UserMessage(content="hi")]
            if turn:  # a long tool result: its content goes last in its message
                messages.append(ToolMessage(content=long_result, tool_call_id="c1", name="t"))
            await provider.complete(CompletionRequest(messages=messages, tools=SPECS))
    finally:
        await provider.aclose()
    bodies = [json.loads(raw) for raw in sent]
    for raw, body in zip(sent, bodies, strict=True):
        assert raw == json.dumps(body).encode()
    if kind == "openai":
        assert [m["content"] for m in bodies[0]["messages"]] == [_prompt(200), "hi"]
        assert bodies[1]["messages"][-1] == {"role": "tool", "tool_call_id": "c1",
                                             "content": long_result}
    else:
        assert [body["system"] for body in bodies] == [_prompt(200)] * 2
        assert bodies[1]["messages"][-1]["content"][-1]["content"] == long_result


def test_long_texts_are_encoded_once_and_what_is_kept_is_bounded() -> None:
    encode = TextJson(min_chars=100, max_chars=1_000)
    first = encode(_prompt(4))
    assert json.loads(first) == _prompt(4)
    assert encode(_prompt(4)) is first  # an equal text built anew: the same encoding
    assert encode("short") == json.dumps("short") and len(encode) == 1  # short: not kept
    second = encode(_prompt(5))
    assert len(encode) == 2 and encode(_prompt(4)) is first  # now the most recently used
    encode(_prompt(6))  # past 1,000 characters kept: the least recently used goes
    assert len(encode) == 2 and encode(_prompt(4)) is first
    assert encode(_prompt(5)) is not second
    huge = encode(_prompt(100))  # larger than the bound alone: encoded, not kept
    assert json.loads(huge) == _prompt(100) and encode(_prompt(100)) is not huge
    assert encode.object_with({"role": "system"}, "content", _prompt(4)) == json.dumps(
        {"role": "system", "content": _prompt(4)})
    assert encode.object_with({}, "content", "hi") == json.dumps({"content": "hi"})


def test_tools_are_encoded_once_per_set_of_specs_and_the_sets_kept_are_bounded() -> None:
    shaped: list[int] = []

    def shape(specs: Any) -> list[dict[str, Any]]:
        shaped.append(len(specs))
        return tool_specs(specs)

    encode = ToolsJson(shape)
    first = encode(SPECS)
    assert encode(list(SPECS)) is first  # the same spec objects, in another list
    assert encode(SPECS[:1]) != first
    assert shaped == [3, 1]
    for n in range(TOOLS_JSON_KEPT):  # the oldest sets go first
        encode([ToolSpec(name=f"x{n}", description="", parameters={})])
    encode(SPECS)
    assert shaped[-1] == 3 and len(shaped) == 2 + TOOLS_JSON_KEPT + 1


def test_a_connection_error_names_the_systems_or_the_resolvers_own_words() -> None:
    def chained(root: OSError) -> httpx.ConnectError:
        try:
            try:
                raise root
            except OSError as exc:
                raise httpx.ConnectError("cannot connect to model.test:80") from exc
        except httpx.ConnectError as outer:
            return outer

    refused = chained(ConnectionRefusedError(111, "Connect call failed ('model.test', 80)"))
    assert _root_cause(refused) == "cannot connect to model.test:80 (Connection refused)"
    unknown = chained(socket.gaierror(-2, "Name or service not known"))
    assert _root_cause(unknown) == "cannot connect to model.test:80 (Name or service not known)"
