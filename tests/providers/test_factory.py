"""make_provider: the choice by `kind`, overrides from flags, and the recording wrapper."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from squadd.config import ProviderSettings
from squadd.errors import ConfigError
from squadd.providers.anthropic import AnthropicProvider
from squadd.providers.base import Provider
from squadd.providers.factory import make_provider
from squadd.providers.openai import OpenAIProvider
from squadd.providers.replay import RecordingProvider, ReplayProvider
from tests.providers._shared import ask


async def test_kind_chooses_the_provider_and_defaults_fill_the_blanks(tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    script.write_text('[{"text": "hi"}]', encoding="utf-8")
    openai = make_provider(ProviderSettings(kind="openai"))
    anthropic = make_provider(ProviderSettings(kind="anthropic", model="claude-x"))
    replay = make_provider(ProviderSettings(kind="replay", replay_file=str(script)))
    try:
        assert isinstance(openai, OpenAIProvider) and isinstance(openai, Provider)
        assert openai.url == "https://api.openai.com/v1/chat/completions"
        assert isinstance(anthropic, AnthropicProvider)
        assert anthropic.default_model == "claude-x"
        assert anthropic.url == "https://api.anthropic.com/v1/messages"
        assert isinstance(replay, ReplayProvider) and replay.default_model == "replay"
    finally:
        for provider in (openai, anthropic, replay):
            await provider.aclose()


async def test_overrides_replace_settings_and_none_means_not_given() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "mock"},
                                                      "finish_reason": "stop"}]})

    provider = make_provider(ProviderSettings(kind="anthropic"), kind="openai",
                             base_url="http://models.test/v1", model="qwen", api_key_env=None,
                             transport=httpx.MockTransport(answer))
    try:
        assert isinstance(provider, OpenAIProvider)
        completion = await provider.complete(ask())
    finally:
        await provider.aclose()
    assert completion.text == "mock" and completion.model == "qwen"
    assert str(seen[0].url) == "http://models.test/v1/chat/completions"


def test_a_bad_override_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"unknown provider setting.*modle"):
        make_provider(ProviderSettings(), modle="x")
    with pytest.raises(ConfigError, match=r"provider\.kind = 'gemini'"):
        make_provider(ProviderSettings(), kind="gemini")
    with pytest.raises(ConfigError, match=r"provider\.max_attempts = 0"):
        make_provider(ProviderSettings(), max_attempts=0)


async def test_record_file_wraps_any_provider(tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    script.write_text('[{"text": "hi"}]', encoding="utf-8")
    provider = make_provider(ProviderSettings(kind="replay", replay_file=str(script),
                                              record_file=str(tmp_path / "out.json")))
    assert isinstance(provider, RecordingProvider) and isinstance(provider.inner, ReplayProvider)
    assert (provider.name, provider.default_model) == ("replay", "replay")
