"""The provider Protocol and the request one turn sends it.

Messages and tool JSON schemas go in (`squadd.contracts.messages`); text and/or tool calls, usage
and a stop reason come out. Providers import nothing of squadd above `contracts`, `config` and
`fsio`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from squadd.contracts.messages import Completion, Message, ToolSpec


class CompletionRequest(BaseModel):
    """One turn's request: the conversation, the tools, and who is asking."""

    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    model: str | None = None
    max_tokens: int = 4096
    agent: str = ""
    session_id: str = ""
    cwd: str | None = None
    """Where a provider that runs a command (an agent CLI) runs it: the session's worktree;
    None: the provider's own default (the repository root)."""


class RetryInfo(BaseModel):
    """Told to the retry callback before each retry sleeps."""

    provider: str
    attempt: int
    """The attempt that failed (1 = the first request)."""
    wait_s: float
    reason: str
    status: int | None = None


RetryCallback = Callable[[RetryInfo], None]


@runtime_checkable
class Provider(Protocol):
    """A model that completes one turn of a conversation."""

    name: str
    default_model: str

    async def complete(self, request: CompletionRequest) -> Completion: ...

    async def aclose(self) -> None: ...


def tool_specs(specs: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The OpenAI `tools` array for `specs` (also handy for logging)."""
    return [
        {"type": "function",
         "function": {"name": s.name, "description": s.description, "parameters": s.parameters}}
        for s in specs
    ]
