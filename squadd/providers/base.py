"""The provider Protocol and the request one turn sends it.

Messages and tool JSON schemas go in (`squadd.contracts.messages`); text and/or tool calls, usage
and a stop reason come out. Providers import nothing of squadd above `contracts`, `config` and
`fsio`.
"""

from __future__ import annotations

import json
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


TOOLS_JSON_KEPT = 64
"""Sets of tool specs whose encoded `tools` member a provider keeps."""


class ToolsJson:
    """A request body's `tools` member for a set of tool specs, as JSON text, encoded once.

    A session asks with the same spec objects turn after turn, and sessions of one toolset
    share them (`Tool.spec` keeps its spec), while their schemas are most of a request's
    bytes. Kept by the specs' identities, the specs held with the text (so no id is reused
    while it is kept), at most `TOOLS_JSON_KEPT` sets, the oldest dropped first.
    """

    def __init__(self, shape: Callable[[Sequence[ToolSpec]], list[dict[str, Any]]]):
        self._shape = shape
        self._kept: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], str]] = {}

    def __call__(self, specs: Sequence[ToolSpec]) -> str:
        key = tuple(map(id, specs))
        found = self._kept.get(key)
        if found is not None:
            return found[1]
        text = json.dumps(self._shape(specs))
        if len(self._kept) >= TOOLS_JSON_KEPT:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = (tuple(specs), text)
        return text
