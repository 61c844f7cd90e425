"""What the provider tests share: a request with two squad tools, and short retry waits."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import httpx

from squadd.contracts.messages import SystemMessage, ToolSpec, UserMessage
from squadd.providers.base import CompletionRequest
from squadd.providers.retry import RetryPolicy


class RecordedSleeps:
    """A sleep for `RetryPolicy.sleep` that waits for nothing and records what it was asked:
    (monotonic time when asked, seconds asked)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []

    @property
    def seconds(self) -> list[float]:
        return [asked for _, asked in self.calls]

    async def __call__(self, seconds: float) -> None:
        self.calls.append((time.monotonic(), seconds))
        await anyio.lowlevel.checkpoint()


async def no_wait(seconds: float) -> None:
    """A retry sleep that returns at once (still a checkpoint, so cancellation works)."""
    await anyio.lowlevel.checkpoint()


# Retries do not wait here, so a file of retry tests runs in a second.
FAST_RETRIES = RetryPolicy(max_attempts=3, max_total_wait_s=10.0, backoff_s=0.01,
                           backoff_max_s=0.05, sleep=no_wait)
TIMEOUT = httpx.Timeout(5.0, connect=2.0)

DECIDE = ToolSpec(
    name="squad_decide", description="Record a team decision.",
    parameters={"type": "object", "properties": {"title": {"type": "string"}},
                "required": ["title"]})
MEMORY = ToolSpec(
    name="squad_memory", description="Remember a learning.",
    parameters={"type": "object", "properties": {"learning": {"type": "string"}}})


def ask(text: str = "Pick a database.", *, tools: list[ToolSpec] | None = None,
        ) -> CompletionRequest:
    """A first turn: system prompt, the task, and the two tools."""
    return CompletionRequest(
        messages=[SystemMessage(content="You are lead, a Squad agent."),
                  UserMessage(content=text)],
        tools=[DECIDE, MEMORY] if tools is None else tools, agent="lead", session_id="s1")
