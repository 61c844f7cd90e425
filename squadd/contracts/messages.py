"""Provider messages: the conversation in squadd's provider-neutral form (`Message`), the tool
calls a model asks for, the tools it is offered, and what one turn returns (`Completion`)."""

from __future__ import annotations

from typing import Any, Literal

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
