"""A model server's answer that is hostile (nested too deeply, holding NaN, not UTF-8) is a
`ProviderError` naming the malformed response; bad text in a good answer is mended."""

from __future__ import annotations

import httpx
import pytest

from squadd.config import ProviderSettings
from squadd.errors import ProviderError
from squadd.providers.http import JsonEndpoint, api_key_from, error_text, key_hint
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
