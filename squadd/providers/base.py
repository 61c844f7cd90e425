"""The provider Protocol and the message types that cross it.

Messages and tool JSON schemas go in; text and/or tool calls, usage and a stop reason come out.
Providers import nothing of squadd but `errors` and `config`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class ToolCall(BaseModel):
    """A tool call the model asked for."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None
    """Set when the model's arguments were not a valid JSON object: the parse error."""
    raw_arguments: str | None = None


class Message(BaseModel):
    """One message of a conversation, in squadd's provider-neutral form."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    """For role="tool": the tool's name."""
    is_error: bool = False
    """For role="tool": the tool failed."""


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


StopReason = Literal["end", "tool_calls", "max_tokens", "other"]


class Completion(BaseModel):
    """What a provider returns for one turn."""

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: StopReason = "end"
    model: str = ""


class CompletionRequest(BaseModel):
    """One turn's request: the conversation, the tools, and who is asking."""

    messages: list[Message]
    tools: list[ToolSpec] = Field(default_factory=list)
    model: str | None = None
    max_tokens: int = 4096
    agent: str = ""
    session_id: str = ""


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
