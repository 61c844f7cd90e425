"""Provider messages: the conversation in squadd's provider-neutral form (`Message`), the tool
calls a model asks for, the tools it is offered, and what one turn returns (`Completion`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class ToolCall(BaseModel):
    """A tool call the model asked for."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    arguments_error: str | None = None
    """Set when the model's arguments were not a valid JSON object: the parse error."""
    raw_arguments: str | None = None


class SystemMessage(BaseModel):
    """Instructions: the agent's system prompt."""

    role: Literal["system"] = "system"
    content: str = ""


class UserMessage(BaseModel):
    """A task (or more context) given to the agent."""

    role: Literal["user"] = "user"
    content: str = ""


class AssistantMessage(BaseModel):
    """What the model said in one turn: text and/or the tool calls it asked for."""

    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    id: str | None = None
    """The message's id in its session (the tools it calls know it); None in transcripts
    written before messages had ids."""


class ImagePart(BaseModel):
    """An image a tool returned, base64-encoded, for providers that take images."""

    model_config = ConfigDict(frozen=True)

    data: str
    """The image bytes in base64."""
    mime_type: str
    """E.g. ``image/png``."""

    @property
    def size(self) -> int:
        """The decoded size in bytes (from the base64 length)."""
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")


class ToolMessage(BaseModel):
    """A tool call's result, sent back to the model."""

    role: Literal["tool"] = "tool"
    content: str = ""
    tool_call_id: str | None = None
    """The id of the `ToolCall` this answers."""
    name: str | None = None
    """The tool's name."""
    is_error: bool = False
    """The tool failed."""
    images: list[ImagePart] = Field(default_factory=list)
    """Images the tool returned besides its text."""


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolMessage,
                    Field(discriminator="role")]
"""One message of a conversation, in squadd's provider-neutral form, discriminated by `role`."""
MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)


def parse_message(data: Mapping[str, Any]) -> Message:
    """A message from its recorded form (a transcript's `message` record)."""
    return MESSAGE_ADAPTER.validate_python(data)


def message_record(message: Message) -> dict[str, Any]:
    """A message's recorded form: its role, then every field that differs from its default."""
    return {"role": message.role, **message.model_dump(exclude_defaults=True)}


def image_note(images: Sequence[ImagePart]) -> str:
    """What a model that cannot be sent images reads in their place."""
    if not images:
        return ""
    shown = ", ".join(f"{image.mime_type}, {image.size} bytes" for image in images)
    count = f"{len(images)} image{'s' if len(images) != 1 else ''}"
    return f"\n[the tool also returned {count} ({shown}); this model's provider is not sent images]"


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    """Input tokens served from the provider's prompt cache (None: the provider did not say)."""
    cache_creation_input_tokens: int | None = None
    """Input tokens written to the provider's prompt cache (None: the provider did not say)."""

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
