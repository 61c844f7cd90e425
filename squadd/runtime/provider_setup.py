"""The provider as a runtime sets it up: its retries published as events, and its API key
(a secret to redact from what tools print)."""

from __future__ import annotations

from squadd.config import Settings
from squadd.contracts.events import EventSink, ProviderRetry
from squadd.providers.base import RetryCallback, RetryInfo


def retry_publisher(sink: EventSink) -> RetryCallback:
    """The `on_retry` callback for providers: each retry becomes a `provider.retry` event."""
    def publish(info: RetryInfo) -> None:
        sink.publish(ProviderRetry(provider=info.provider, attempt=info.attempt,
                                   wait_s=round(info.wait_s, 3), reason=info.reason[:500],
                                   status=info.status))
    return publish


def provider_key(settings: Settings) -> dict[str, str]:
    """The provider's API key by its variable's name, where the provider takes one and it is
    set (for redaction)."""
    from squadd.providers import anthropic, openai
    from squadd.providers.http import api_key_from

    default = {"openai": openai.DEFAULT_KEY_ENV,
               "anthropic": anthropic.DEFAULT_KEY_ENV}.get(settings.provider.kind, "")
    if not default and not settings.provider.api_key_env:
        return {}
    key, name = api_key_from(settings.provider, default)
    return {name: key} if key else {}
