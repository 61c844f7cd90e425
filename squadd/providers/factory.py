"""`make_provider`: the one place that turns `[provider]` settings into a `Provider`.

Keyword overrides (from command-line flags, say) replace settings before the choice is made;
`record_file` wraps the chosen provider so that its turns are written to a replay file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from squadd.config import ProviderSettings
from squadd.errors import ConfigError
from squadd.providers.anthropic import AnthropicProvider
from squadd.providers.base import Provider, RetryCallback
from squadd.providers.command import CommandProvider
from squadd.providers.openai import OpenAIProvider
from squadd.providers.replay import DEFAULT_MODEL as REPLAY_MODEL
from squadd.providers.replay import RecordingProvider, ReplayProvider


def make_provider(
    settings: ProviderSettings,
    *,
    on_retry: RetryCallback | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    cwd: Path | None = None,
    **overrides: Any,
) -> Provider:
    """Build the provider `settings.kind` names.

    `overrides` are `ProviderSettings` fields (`kind="replay"`, `model=...`, `base_url=...`);
    None values are ignored, so unset flags can be passed as they are. `transport` reaches the
    HTTP providers (tests pass `httpx.MockTransport`); `cwd` is where a command runs.
    """
    settings = apply_overrides(settings, overrides)
    provider: Provider
    if settings.kind == "openai":
        provider = OpenAIProvider.from_settings(settings, on_retry=on_retry, transport=transport)
    elif settings.kind == "anthropic":
        provider = AnthropicProvider.from_settings(settings, on_retry=on_retry,
                                                   transport=transport)
    elif settings.kind == "command":
        if not settings.command:
            raise ConfigError("provider.kind = 'command' needs provider.command: the agent CLI "
                              'and its arguments, e.g. ["claude", "-p", "{prompt}"]',
                              key="provider.command")
        provider = CommandProvider.from_settings(settings, cwd=cwd)
    else:
        if not settings.replay_file:
            raise ConfigError("provider.kind = 'replay' needs provider.replay_file: the YAML or "
                              "JSON file of scripted turns", key="provider.replay_file")
        provider = ReplayProvider.from_file(Path(settings.replay_file),
                                            model=settings.model or REPLAY_MODEL)
    if settings.record_file:
        provider = RecordingProvider(provider, Path(settings.record_file))
    return provider


def apply_overrides(settings: ProviderSettings, overrides: dict[str, Any]) -> ProviderSettings:
    """`settings` with `overrides` applied and validated; a bad one is a `ConfigError`."""
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return settings
    unknown = sorted(set(given) - set(ProviderSettings.model_fields))
    if unknown:
        known = ", ".join(ProviderSettings.model_fields)
        raise ConfigError(f"unknown provider setting(s) {', '.join(unknown)} (known: {known})",
                          key=f"provider.{unknown[0]}", source="command line")
    try:
        return ProviderSettings.model_validate({**settings.model_dump(), **given})
    except ValidationError as exc:
        problems = "; ".join(
            f"provider.{'.'.join(str(p) for p in err['loc'])} = {err.get('input')!r}: "
            f"{err['msg']}" for err in exc.errors())
        raise ConfigError(f"invalid provider setting: {problems}", source="command line",
                          ) from None
