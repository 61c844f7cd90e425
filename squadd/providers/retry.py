"""The retry policy every HTTP provider shares, built on tenacity.

Only failures marked retryable (429, 5xx, connection errors, read timeouts) are retried, with
exponential backoff and jitter, never sooner than `Retry-After` asks, within a bounded number of
attempts and a bounded total wait. Each retry is logged and told to the `on_retry` callback.
"""

from __future__ import annotations

import datetime as dt
import email.utils
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

import anyio
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    wait_exponential,
    wait_random,
)

from squadd.config import ProviderSettings
from squadd.errors import ProviderError, ProviderTimeoutError, RetryableStatusError
from squadd.providers.base import RetryCallback, RetryInfo

log = structlog.get_logger("squadd.providers")

T = TypeVar("T")




@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long one request is retried."""

    max_attempts: int = 5
    """Attempts in all, the first included."""
    max_total_wait_s: float = 120.0
    """Most seconds spent sleeping between the attempts of one request."""
    backoff_s: float = 1.0
    """Backoff before the first retry; it doubles for each retry after."""
    backoff_max_s: float = 30.0
    """Most backoff before one retry (a longer `Retry-After` still wins, within the budget)."""
    sleep: Callable[[float], Awaitable[None]] = field(default=anyio.sleep, compare=False,
                                                     repr=False)
    """How a wait between attempts is spent: `anyio.sleep`, or a recorder in tests, so that
    tests check the waits asked for instead of waiting them out."""

    @classmethod
    def from_settings(cls, settings: ProviderSettings) -> RetryPolicy:
        return cls(
            max_attempts=settings.max_attempts,
            max_total_wait_s=settings.max_retry_wait_s,
            backoff_s=settings.retry_backoff_s,
            backoff_max_s=settings.retry_backoff_max_s,
        )


def parse_retry_after(headers: Mapping[str, str], *, now: dt.datetime | None = None,
                      ) -> float | None:
    """Seconds a server asked us to wait: `Retry-After` in seconds or as an HTTP date.

    `retry-after-ms` (sent by OpenAI) is honoured too. None when absent or unreadable.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis)
        except ValueError:
            value = -1.0
        if value >= 0:
            return value / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    current = now if now is not None else dt.datetime.now(dt.UTC)
    return max(0.0, (when - current).total_seconds())


class _Plan:
    """What the wait step decided for the next retry, read by the stop step."""

    def __init__(self) -> None:
        self.give_up: str | None = None


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    provider: str,
    policy: RetryPolicy,
    on_retry: RetryCallback | None = None,
) -> T:
    """Run `attempt` until it succeeds, fails for good, or the policy's bounds are reached.

    A `ProviderError` with `retryable=False` is raised at once. When the bounds are reached the
    last failure is raised again, its message saying how many attempts were made and why
    squadd stopped.
    """
    # The first attempt runs bare: most calls succeed at once, and building tenacity's loop
    # costs more than the call's own JSON. A retryable failure becomes the loop's first
    # attempt, so waits, counts and messages are what they would have been.
    try:
        return await attempt()
    except ProviderError as exc:
        if not exc.retryable:
            raise
        first = [exc]
    return await _retried(attempt, first, provider=provider, policy=policy, on_retry=on_retry)


async def _retried(
    attempt: Callable[[], Awaitable[T]],
    first: list[ProviderError],
    *,
    provider: str,
    policy: RetryPolicy,
    on_retry: RetryCallback | None,
) -> T:
    """The retry loop, its first attempt the failure in `first`."""
    plan = _Plan()
    # backoff_s, 2x, 4x ... up to backoff_max_s, plus up to backoff_s of random jitter.
    backoff = (wait_exponential(multiplier=policy.backoff_s, max=policy.backoff_max_s)
               + wait_random(0, policy.backoff_s))

    def wait(state: RetryCallState) -> float:
        error = _failure(state)
        remaining = policy.max_total_wait_s - state.idle_for
        asked = error.retry_after_s if isinstance(error, RetryableStatusError) else None
        if asked is not None and asked > remaining:
            plan.give_up = (
                f"the server asked to retry after {asked:.3g}s but only {max(remaining, 0):.3g}s"
                f" of the retry budget (provider.max_retry_wait_s = "
                f"{policy.max_total_wait_s:g}) remain"
            )
            return 0.0
        if remaining <= 0:
            plan.give_up = (f"the retry budget of {policy.max_total_wait_s:g}s "
                            "(provider.max_retry_wait_s) is spent")
            return 0.0
        return min(max(backoff(state), asked or 0.0), remaining)

    def stop(state: RetryCallState) -> bool:
        return plan.give_up is not None or state.attempt_number >= policy.max_attempts

    def before_sleep(state: RetryCallState) -> None:
        error = _failure(state)
        info = RetryInfo(provider=provider, attempt=state.attempt_number,
                         wait_s=state.upcoming_sleep, reason=str(error), status=error.status)
        log.warning("provider.retry", provider=provider, attempt=info.attempt,
                    wait_s=round(info.wait_s, 3), status=info.status, reason=info.reason)
        if on_retry is not None:
            on_retry(info)

    def give_up(state: RetryCallState) -> T:
        error = _failure(state)
        why = plan.give_up or f"provider.max_attempts = {policy.max_attempts} reached"
        attempts = state.attempt_number
        message = (f"{error} (gave up after {attempts} attempt{'s' if attempts > 1 else ''}: "
                   f"{why})")
        kind = ProviderTimeoutError if isinstance(error, ProviderTimeoutError) else ProviderError
        raise kind(message, provider=provider, status=error.status,
                   retryable=True) from error

    retrying = AsyncRetrying(
        retry=retry_if_exception(lambda exc: isinstance(exc, ProviderError) and exc.retryable),
        wait=wait,
        stop=stop,
        before_sleep=before_sleep,
        retry_error_callback=give_up,
        sleep=policy.sleep,
        reraise=True,
    )

    async def run() -> T:  # tenacity awaits only what it sees is a coroutine function
        if first:
            raise first.pop()
        return await attempt()

    return await retrying(run)


def _failure(state: RetryCallState) -> ProviderError:
    outcome = state.outcome
    error = outcome.exception() if outcome is not None else None
    if not isinstance(error, ProviderError):  # the retry predicate admits nothing else
        raise TypeError(f"retry state without a ProviderError: {error!r}")
    return error
