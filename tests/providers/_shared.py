"""What the provider tests share: a request with two squad tools, and short retry waits."""

from __future__ import annotations

import httpx

from squadd.contracts.messages import SystemMessage, ToolSpec, UserMessage
from squadd.providers.base import CompletionRequest
from squadd.providers.retry import RetryPolicy

# Retries wait milliseconds here, so a file of retry tests runs in seconds.
FAST_RETRIES = RetryPolicy(max_attempts=3, max_total_wait_s=10.0, backoff_s=0.01,
                           backoff_max_s=0.05)
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
