"""JSON over HTTP for the HTTP providers: one httpx client with explicit timeouts per provider.

`JsonEndpoint.post` sends one request through the shared retry policy and turns every way it can
fail (refused, dropped, timed out, 4xx/5xx, a body that is not JSON, a body larger than
`provider.max_response_bytes`) into a `ProviderError` that names the provider, the HTTP status and
the provider's own error text. Bodies are read as a stream and counted, never held past the bound.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx

from squadd.config import ProviderSettings
from squadd.contracts.messages import Usage
from squadd.errors import (
    ProviderError,
    ProviderTimeoutError,
    RetryableStatusError,
    UntrustedInputError,
)
from squadd.providers.base import RetryCallback, with_members
from squadd.providers.pool import DEFAULT_MAX_CONNECTIONS, KEEPALIVE_EXPIRY_S, default_transport
from squadd.providers.retry import RetryPolicy, call_with_retries, parse_retry_after
from squadd.untrusted import MAX_JSON_DEPTH, parse_json

_ERROR_TEXT_CHARS = 1000
RESPONSE_MAX_DEPTH = MAX_JSON_DEPTH + 20
"""Deepest nesting accepted in an answer: room for its own structure around a tool call's
arguments, which are held to `MAX_JSON_DEPTH` themselves (a deeper call gets a failure result)."""

# Failures of the connection itself: the request may not have reached the model, or its answer
# was lost on the way back, so another attempt is worth it.
_CONNECTION_ERRORS = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ConnectTimeout)


DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
"""The largest answer body read (after decompression) unless `provider.max_response_bytes` says."""
ERROR_BODY_BYTES = 65536
"""How much of an error answer's body is read for its message."""

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
"""What a provider built without settings waits: 10 s to connect, 120 s for an answer."""


def api_key_from(settings: ProviderSettings, default_env: str,
                 environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The API key (None when unset or empty) and the name of the variable it is read from."""
    key_env = settings.api_key_env or default_env
    env = os.environ if environ is None else environ
    return env.get(key_env) or None, key_env


def key_hint(api_key: str | None, api_key_env: str) -> str:
    """What to check when the provider answers 401/403."""
    return f"check the API key in ${api_key_env}" if api_key else f"${api_key_env} is not set"


def timeouts(settings: ProviderSettings) -> httpx.Timeout:
    """Connect and read timeouts from the settings; writes get the read budget, the pool the
    connect one."""
    return httpx.Timeout(connect=settings.connect_timeout_s, read=settings.read_timeout_s,
                         write=settings.read_timeout_s, pool=settings.connect_timeout_s)


class JsonEndpoint:
    """POSTs JSON to one URL with retries; owns the provider's one `httpx.AsyncClient`."""

    def __init__(
        self,
        *,
        provider: str,
        url: str,
        headers: dict[str, str],
        timeout: httpx.Timeout | None = None,
        policy: RetryPolicy | None = None,
        on_retry: RetryCallback | None = None,
        key_hint: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        self.provider = provider
        self.url = url
        self.max_response_bytes = max_response_bytes
        self.policy = policy or RetryPolicy()
        self.on_retry = on_retry
        self._key_hint = key_hint
        limits = httpx.Limits(max_connections=DEFAULT_MAX_CONNECTIONS,
                              max_keepalive_connections=DEFAULT_MAX_CONNECTIONS,
                              keepalive_expiry=KEEPALIVE_EXPIRY_S)
        transport = transport if transport is not None else default_transport()
        self._client = httpx.AsyncClient(
            headers=headers, timeout=timeout or DEFAULT_TIMEOUT, limits=limits,
            transport=transport, follow_redirects=False)
        # Built once: every request goes to the same URL with the client's headers (httpx's
        # defaults and ours), its timeouts and a JSON body, so there is nothing to merge per
        # request.
        self._url = httpx.URL(url)
        self._headers = httpx.Headers(self._client.headers)
        self._headers["content-type"] = "application/json"
        self._extensions = {"timeout": self._client.timeout.as_dict()}
        # With no proxy to route through, requests go straight to the one transport: the
        # client's send (auth, redirects, hooks, a cookie-jar pass on every answer) has
        # nothing to do for a POST that follows no redirect, and cost a third of the call.
        self._direct = transport

    async def post(self, body: dict[str, Any],
                   encoded: Mapping[str, str] | None = None) -> dict[str, Any]:
        """Send `body`, with the members in `encoded` (JSON texts) after its own; return the
        answer's JSON object, or raise `ProviderError`."""
        payload = with_members(json.dumps(body), encoded).encode("utf-8")
        return await call_with_retries(lambda: self._attempt(payload), provider=self.provider,
                                       policy=self.policy, on_retry=self.on_retry)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _attempt(self, payload: bytes) -> dict[str, Any]:
        name, url = self.provider, self.url
        try:
            if self._client.cookies:  # a server set some: let the client send them back
                request = self._client.build_request("POST", self._url, headers=self._headers,
                                                     content=payload)
            else:
                request = httpx.Request("POST", self._url, headers=self._headers,
                                        content=payload, extensions=self._extensions)
            if self._direct is None:
                response = await self._client.send(request, stream=True)
            else:
                response = await self._direct.handle_async_request(request)
                response.request = request
                if "set-cookie" in response.headers:
                    self._client.cookies.extract_cookies(response)
            try:
                body = await self._read_body(response)
            finally:
                await response.aclose()
        except httpx.ReadTimeout as exc:
            raise ProviderTimeoutError(
                f"{name}: no answer from {url} within {self._client.timeout.read:g}s "
                "(provider.read_timeout_s)", provider=name, retryable=True) from exc
        except httpx.TimeoutException as exc:
            retryable = isinstance(exc, httpx.ConnectTimeout)
            raise ProviderTimeoutError(f"{name}: {type(exc).__name__} talking to {url}: {exc}",
                                       provider=name, retryable=retryable) from exc
        except _CONNECTION_ERRORS as exc:
            raise ProviderError(
                f"{name}: connection to {url} failed ({type(exc).__name__}): "
                f"{_root_cause(exc)}", provider=name, retryable=True) from exc
        except httpx.HTTPError as exc:
            raise ProviderError(f"{name}: request to {url} failed ({type(exc).__name__}): {exc}",
                                provider=name) from exc
        status = response.status_code
        if status >= 400:
            raise self._status_error(response, body)
        try:
            # Unpaired surrogates become U+FFFD: the model's text must be writable as UTF-8.
            data = parse_json(body, max_depth=RESPONSE_MAX_DEPTH, mend_surrogates=True)
        except UntrustedInputError as exc:
            raise ProviderError(
                f"{name}: malformed response from {url} (HTTP {status}): the body is not JSON "
                f"({exc}): {_snippet(body)!r}", provider=name, status=status,
            ) from exc
        if not isinstance(data, dict):
            raise ProviderError(
                f"{name}: malformed response from {url} (HTTP {status}): expected a JSON "
                f"object, got {type(data).__name__}", provider=name, status=status)
        return data

    async def _read_body(self, response: httpx.Response) -> bytes:
        """The body, counted as it arrives: an answer past `max_response_bytes` stops the turn
        (an error answer is only read as far as its message needs)."""
        limit = self.max_response_bytes
        if response.status_code >= 400:
            return await _read_up_to(response, min(limit, ERROR_BODY_BYTES))
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > limit:
            raise self._too_large(response.status_code, f"it declares {declared} bytes")
        body = await _read_up_to(response, limit + 1)
        if len(body) > limit:
            raise self._too_large(response.status_code, "it went on past that")
        return body

    def _too_large(self, status: int, how: str) -> ProviderError:
        return ProviderError(
            f"{self.provider}: the answer from {self.url} (HTTP {status}) is larger than "
            f"{self.max_response_bytes} bytes ({how}); the turn was stopped. Raise "
            "provider.max_response_bytes if such answers are expected",
            provider=self.provider, status=status, retryable=False)

    def _status_error(self, response: httpx.Response, body: bytes) -> ProviderError:
        name, status = self.provider, response.status_code
        text = error_text(body)
        message = f"{name}: HTTP {status} from {self.url}: {text}"
        if status in (401, 403) and self._key_hint:
            message += f" ({self._key_hint})"
        if status == 429 or status >= 500:
            return RetryableStatusError(message, provider=name, status=status,
                                        retry_after_s=parse_retry_after(response.headers))
        return ProviderError(message, provider=name, status=status, retryable=False)


async def _read_up_to(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk[:limit - len(body)]
        if len(body) >= limit:
            break
    return bytes(body)


def error_text(body: bytes) -> str:
    """The provider's own words from an error body: `error.message` when it is there."""
    try:
        data = parse_json(body, mend_surrogates=True)
    except UntrustedInputError:
        return _snippet(body) or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type")
            prefix = f"{kind}: " if isinstance(kind, str) and kind else ""
            return (prefix + str(error["message"]))[:_ERROR_TEXT_CHARS]
        if isinstance(error, str):
            return error[:_ERROR_TEXT_CHARS]
        if isinstance(data.get("message"), str):
            return str(data["message"])[:_ERROR_TEXT_CHARS]
    return _snippet(body)


def _root_cause(exc: BaseException) -> str:
    """The most specific words in an exception chain ("Connection refused", not "All connection
    attempts failed")."""
    detail = str(exc) or type(exc).__name__
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            # A resolver's error (a negative number) has its own words: strerror() knows only
            # the system's, and a socket's own text may be asyncio's ("Connect call failed").
            errno = current.errno
            words = os.strerror(errno) if errno > 0 else current.strerror or os.strerror(errno)
            return f"{detail} ({words})"
        current = current.__cause__ or current.__context__
    return detail


def _snippet(body: bytes) -> str:
    return body[:_ERROR_TEXT_CHARS].decode("utf-8", errors="replace").strip()


def malformed(provider: str, url: str, what: str) -> ProviderError:
    """A clear error for a JSON answer that lacks what the provider's API promises."""
    return ProviderError(f"{provider}: malformed response from {url}: {what}", provider=provider)


def usage_from(data: dict[str, Any], input_key: str, output_key: str) -> Usage:
    """Token counts from an answer's `usage` object; what is missing counts as 0.

    Cache tokens in either shape: OpenAI's `prompt_tokens_details.cached_tokens` (already
    part of `prompt_tokens`), Anthropic's `cache_read_input_tokens` and
    `cache_creation_input_tokens` (not part of `input_tokens`: added to it here, so that
    `input_tokens` is every prompt token for both)."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return Usage()

    def count(key: str, within: dict[str, Any] = usage) -> int:
        value = within.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    def cached(key: str, within: Any = usage) -> int | None:
        # Anthropic: cache_read_input_tokens / cache_creation_input_tokens; OpenAI:
        # prompt_tokens_details.cached_tokens.
        return count(key, within) if isinstance(within, dict) and key in within else None

    details = usage.get("prompt_tokens_details")
    read = cached("cache_read_input_tokens")
    in_prompt = cached("cached_tokens", details)  # OpenAI: part of prompt_tokens
    written = cached("cache_creation_input_tokens")
    prompt = count(input_key)
    billed_read = read if read is not None else min(prompt, in_prompt or 0)
    return Usage(input_tokens=prompt, output_tokens=count(output_key),
                 cache_read_input_tokens=read if read is not None else in_prompt,
                 cache_creation_input_tokens=written,
                 cache_read_tokens=billed_read, cache_write_tokens=written or 0,
                 cached_in_input=0 if read is not None else billed_read)
