"""Answers are bounded: an HTTP body past `provider.max_response_bytes` (endless, declared,
compressed, openai or anthropic) stops the turn with an error naming the setting; a command's
endless output is cut and the command stopped."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import AsyncIterator, Callable

import anyio
import httpx
import pytest

from squadd.config import ProviderSettings
from squadd.contracts.messages import UserMessage
from squadd.errors import ProviderError
from squadd.providers.anthropic import AnthropicProvider
from squadd.providers.base import CompletionRequest
from squadd.providers.command import CommandProvider
from squadd.providers.openai import OpenAIProvider

LIMIT = 64 * 1024
OPENAI_OK = {"choices": [{"message": {"role": "assistant", "content": "fine"},
                          "finish_reason": "stop"}]}
ANTHROPIC_OK = {"content": [{"type": "text", "text": "fine"}], "stop_reason": "end_turn"}


async def _endless() -> AsyncIterator[bytes]:
    yield b'{"choices": [{"message": {"content": "'
    while True:
        yield b"x" * 8192


def _endless_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=_endless())


def _declared_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"{}",
                          headers={"content-length": str(LIMIT * 100)})


def _bomb_answer(request: httpx.Request) -> httpx.Response:
    body = gzip.compress(b'{"text": "' + b"a" * (LIMIT * 20) + b'"}')
    assert len(body) < LIMIT  # small on the wire, large once read
    return httpx.Response(200, content=body, headers={"content-encoding": "gzip"})


def _provider(kind: str, answer: Callable[[httpx.Request], httpx.Response],
              calls: list[int]) -> OpenAIProvider | AnthropicProvider:
    def counted(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return answer(request)

    settings = ProviderSettings(kind=kind, base_url="http://model.test/v1"
                                if kind == "openai" else "http://model.test",
                                max_response_bytes=LIMIT, max_attempts=3, retry_backoff_s=0)
    transport = httpx.MockTransport(counted)
    environ = {"ANTHROPIC_API_KEY": "k"}
    if kind == "openai":
        return OpenAIProvider.from_settings(settings, transport=transport, environ=environ)
    return AnthropicProvider.from_settings(settings, transport=transport, environ=environ)


def _ask() -> CompletionRequest:
    return CompletionRequest(messages=[UserMessage(content="hi")])


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("answer", [_endless_answer, _declared_answer, _bomb_answer],
                         ids=["endless", "declared", "compressed"])
async def test_an_answer_past_the_bound_stops_the_turn_once_and_says_why(
        kind: str, answer: Callable[[httpx.Request], httpx.Response]) -> None:
    calls: list[int] = []
    provider = _provider(kind, answer, calls)
    try:
        with anyio.fail_after(30), pytest.raises(ProviderError) as caught:
            await provider.complete(_ask())
    finally:
        await provider.aclose()
    message = str(caught.value)
    assert f"larger than {LIMIT} bytes" in message and "provider.max_response_bytes" in message
    assert not caught.value.retryable and len(calls) == 1  # never asked again


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_an_answer_within_the_bound_is_read(kind: str) -> None:
    body = OPENAI_OK if kind == "openai" else ANTHROPIC_OK
    padded = json.dumps({**body, "pad": "p" * (LIMIT - 200)}).encode()
    assert len(padded) <= LIMIT
    provider = _provider(kind, lambda request: httpx.Response(200, content=padded), [])
    try:
        completion = await provider.complete(_ask())
    finally:
        await provider.aclose()
    assert completion.text == "fine"


async def test_a_huge_error_answer_is_read_only_as_far_as_its_message() -> None:
    async def error_then_endless() -> AsyncIterator[bytes]:
        yield b'{"error": {"message": "bad request, see below", "type": "invalid"}, "x": "'
        while True:
            yield b"y" * 8192

    calls: list[int] = []
    provider = _provider("openai", lambda request: httpx.Response(
        400, content=error_then_endless()), calls)
    try:
        with anyio.fail_after(30), pytest.raises(ProviderError) as caught:
            await provider.complete(_ask())
    finally:
        await provider.aclose()
    assert "HTTP 400" in str(caught.value) and len(calls) == 1


@pytest.mark.parametrize("script", [
    "import sys\nwhile True: sys.stdout.write('z' * 4096)",
    "import os\nos.write(1, b'w' * 3_000_000)\nimport time\ntime.sleep(120)",
], ids=["endless", "large-then-hangs"])
async def test_a_command_past_its_output_bound_is_cut_and_stopped(script: str) -> None:
    provider = CommandProvider([sys.executable, "-c", script], timeout_s=120,
                               max_output_bytes=4096, kill_grace_s=1)
    with anyio.fail_after(60):  # without the stop it would run to its 120 s timeout
        completion = await provider.complete(_ask())
    assert completion.text.endswith("[output cut at 4096 bytes]")
    assert len(completion.text) < 4096 + 100 and completion.stop_reason == "max_tokens"


