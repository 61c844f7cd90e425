"""Retries: what is retried, how long squadd waits, and where it stops (real HTTP servers)."""

from __future__ import annotations

import datetime as dt
import email.utils
import math
import time
from dataclasses import replace
from typing import Any

import httpx
import pytest

from squadd.config import ProviderSettings
from squadd.errors import ProviderError, ProviderTimeoutError
from squadd.providers.base import RetryInfo
from squadd.providers.http import timeouts
from squadd.providers.openai import OpenAIProvider
from squadd.providers.retry import RetryPolicy, call_with_retries, parse_retry_after
from tests.providers._shared import FAST_RETRIES, TIMEOUT, RecordedSleeps, ask, no_wait
from tests.support.model_servers import OpenAIServer, Reply, unused_port


def make(server: OpenAIServer, retries: list[RetryInfo], *,
         policy: RetryPolicy = FAST_RETRIES, timeout: httpx.Timeout = TIMEOUT,
         ) -> OpenAIProvider:
    return OpenAIProvider(base_url=server.url, model="m", timeout=timeout, policy=policy,
                          on_retry=retries.append)


async def test_429_retry_after_in_seconds_is_waited_out_before_each_retry(
        openai_server: OpenAIServer) -> None:
    openai_server.script(OpenAIServer.error(429, "rate limited", retry_after=1),
                         OpenAIServer.error(429, "rate limited", retry_after="0.5"),
                         OpenAIServer.text_turn("finally"))
    retries: list[RetryInfo] = []
    sleeps = RecordedSleeps()
    provider = make(openai_server, retries, policy=replace(FAST_RETRIES, sleep=sleeps))
    try:
        assert (await provider.complete(ask())).text == "finally"
    finally:
        await provider.aclose()

    assert len(openai_server.requests) == 3
    first, second = sleeps.seconds
    assert first >= 1.0 and second >= 0.5
    assert [(r.attempt, r.status) for r in retries] == [(1, 429), (2, 429)]
    assert retries[0].wait_s >= 1.0 and retries[1].wait_s >= 0.5
    assert retries[0].provider == "openai" and "rate limited" in retries[0].reason


async def test_429_retry_after_as_http_date_is_waited_out(openai_server: OpenAIServer) -> None:
    asked: list[tuple[float, float]] = []  # (monotonic when sent, seconds the date asks)

    def rate_limited_once(body: Any) -> Reply:
        if asked:
            return OpenAIServer.text_turn("after the date")
        now = time.time()
        when = math.ceil(now) + 1  # a whole second, as HTTP dates have no fractions
        asked.append((time.monotonic(), when - now))
        date = email.utils.formatdate(when, usegmt=True)
        return OpenAIServer.error(429, "slow down", retry_after=date)

    openai_server.respond_with(rate_limited_once)
    retries: list[RetryInfo] = []
    sleeps = RecordedSleeps()
    provider = make(openai_server, retries, policy=replace(FAST_RETRIES, sleep=sleeps))
    try:
        assert (await provider.complete(ask())).text == "after the date"
    finally:
        await provider.aclose()

    sent_at, asked_s = asked[0]
    assert 1.0 < asked_s <= 2.0
    assert len(openai_server.requests) == 2
    # The wait ends no sooner than the date, however long the answer took to arrive.
    [(slept_at, slept_s)] = sleeps.calls
    assert slept_at + slept_s >= sent_at + asked_s - 0.01
    assert len(retries) == 1 and retries[0].status == 429


async def test_retry_after_beyond_the_wait_budget_gives_up_at_once_with_a_clear_error(
        openai_server: OpenAIServer) -> None:
    openai_server.script(OpenAIServer.error(429, "quota exceeded", retry_after=30),
                         OpenAIServer.text_turn("too early"))
    retries: list[RetryInfo] = []
    sleeps = RecordedSleeps()
    provider = make(openai_server, retries,
                    policy=RetryPolicy(max_attempts=5, max_total_wait_s=2.0, backoff_s=0.01,
                                       sleep=sleeps))
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()
    assert sleeps.calls == []  # gave up without waiting
    assert len(openai_server.requests) == 1 and retries == []
    message = str(caught.value)
    assert "HTTP 429" in message and "quota exceeded" in message
    assert "asked to retry after 30s" in message and "max_retry_wait_s" in message
    assert caught.value.status == 429


async def test_500_then_success_is_retried_once(openai_server: OpenAIServer) -> None:
    openai_server.script(OpenAIServer.error(500, "internal error", kind="server_error"),
                         OpenAIServer.text_turn("recovered"))
    retries: list[RetryInfo] = []
    provider = make(openai_server, retries)
    try:
        assert (await provider.complete(ask())).text == "recovered"
    finally:
        await provider.aclose()
    assert len(openai_server.requests) == 2
    assert [(r.attempt, r.status) for r in retries] == [(1, 500)]
    assert openai_server.requests[0].body == openai_server.requests[1].body


async def test_attempts_are_bounded_by_max_attempts(openai_server: OpenAIServer) -> None:
    openai_server.script([OpenAIServer.error(503, "unavailable")] * 10)
    retries: list[RetryInfo] = []
    provider = make(openai_server, retries,
                    policy=RetryPolicy(max_attempts=4, backoff_s=0.01, backoff_max_s=0.02,
                                       sleep=no_wait))
    try:
        with pytest.raises(ProviderError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()
    assert len(openai_server.requests) == 4 and len(retries) == 3
    message = str(caught.value)
    assert "HTTP 503" in message and "unavailable" in message
    assert "gave up after 4 attempts" in message and "max_attempts = 4" in message


async def test_total_waiting_is_bounded_by_the_wait_budget(openai_server: OpenAIServer) -> None:
    openai_server.script([OpenAIServer.error(502, "bad gateway")] * 20)
    retries: list[RetryInfo] = []
    sleeps = RecordedSleeps()
    provider = make(openai_server, retries, policy=RetryPolicy(
        max_attempts=20, max_total_wait_s=0.5, backoff_s=0.1, backoff_max_s=10.0, sleep=sleeps))
    try:
        with pytest.raises(ProviderError, match=r"retry budget of 0\.5s"):
            await provider.complete(ask())
    finally:
        await provider.aclose()
    assert sum(r.wait_s for r in retries) <= 0.5 + 1e-9
    assert sleeps.seconds == [r.wait_s for r in retries]
    assert sum(sleeps.seconds) <= 0.5 + 1e-9
    assert len(openai_server.requests) < 20


async def test_dropped_connections_are_retried(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(drop=True),
                         Reply(body=OpenAIServer.text_turn("x").body, drop_after_bytes=20),
                         OpenAIServer.text_turn("third time lucky"))
    retries: list[RetryInfo] = []
    provider = make(openai_server, retries)
    try:
        assert (await provider.complete(ask())).text == "third time lucky"
    finally:
        await provider.aclose()
    assert len(openai_server.requests) == 3
    assert [r.status for r in retries] == [None, None]
    assert "connection to" in retries[0].reason


async def test_a_response_slower_than_the_read_timeout_is_retried(
        openai_server: OpenAIServer) -> None:
    # The late answer never comes while the test runs; the retried one comes at once, which
    # on a loaded machine can still take a while, hence the read timeout of a second.
    openai_server.script(Reply(body=OpenAIServer.text_turn("late").body, delay_s=60.0),
                         OpenAIServer.text_turn("in time"))
    retries: list[RetryInfo] = []
    provider = make(openai_server, retries, timeout=httpx.Timeout(5.0, read=1.0))
    try:
        assert (await provider.complete(ask())).text == "in time"
    finally:
        await provider.aclose()
    assert len(openai_server.requests) == 2
    assert "within 1s" in retries[0].reason


async def test_read_timeouts_on_every_attempt_raise_provider_timeout_error(
        openai_server: OpenAIServer) -> None:
    openai_server.script([Reply(body={}, delay_s=60.0)] * 3)
    provider = make(openai_server, [], timeout=httpx.Timeout(5.0, read=0.2),
                    policy=RetryPolicy(max_attempts=2, backoff_s=0.01, sleep=no_wait))
    try:
        with pytest.raises(ProviderTimeoutError) as caught:
            await provider.complete(ask())
    finally:
        await provider.aclose()
    assert len(openai_server.requests) == 2
    assert "no answer from" in str(caught.value) and "gave up after 2 attempts" in str(
        caught.value)


async def test_backoff_grows_exponentially_with_bounded_jitter() -> None:
    retries: list[RetryInfo] = []
    provider = OpenAIProvider(
        base_url=f"http://127.0.0.1:{unused_port()}/v1", timeout=TIMEOUT,
        policy=RetryPolicy(max_attempts=5, backoff_s=0.02, backoff_max_s=0.08, sleep=no_wait),
        on_retry=retries.append)
    try:
        with pytest.raises(ProviderError):
            await provider.complete(ask())
    finally:
        await provider.aclose()
    waits = [r.wait_s for r in retries]
    # backoff_s * 2**n, capped at backoff_max_s, plus up to backoff_s of jitter
    for wait, base in zip(waits, [0.02, 0.04, 0.08, 0.08], strict=True):
        assert base <= wait <= base + 0.02


async def test_an_error_marked_not_retryable_is_raised_at_once() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise ProviderError("nope", provider="p", status=404)

    with pytest.raises(ProviderError, match=r"^nope$"):
        await call_with_retries(attempt, provider="p", policy=FAST_RETRIES)
    assert calls == 1


def test_retry_after_is_read_in_seconds_and_as_http_dates() -> None:
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert parse_retry_after({"Retry-After": "7"}, now=now) == 7.0
    assert parse_retry_after({"retry-after": " 1.5 "}, now=now) == 1.5
    assert parse_retry_after({"Retry-After": "Fri, 02 Jan 2026 03:04:15 GMT"}, now=now) == 10.0
    assert parse_retry_after({"Retry-After": "Fri, 02 Jan 2026 03:00:00 GMT"}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}, now=now) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}, now=now) is None
    assert parse_retry_after({"Retry-After": "-3"}, now=now) is None
    assert parse_retry_after({}, now=now) is None


def test_timeouts_and_policy_come_from_settings() -> None:
    settings = ProviderSettings(connect_timeout_s=3, read_timeout_s=45, max_attempts=7,
                                max_retry_wait_s=12, retry_backoff_s=0.5,
                                retry_backoff_max_s=4)
    timeout = timeouts(settings)
    assert (timeout.connect, timeout.read, timeout.write, timeout.pool) == (3, 45, 45, 3)
    assert RetryPolicy.from_settings(settings) == RetryPolicy(
        max_attempts=7, max_total_wait_s=12, backoff_s=0.5, backoff_max_s=4)
