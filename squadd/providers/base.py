"""The provider Protocol and the request one turn sends it.

Messages and tool JSON schemas go in (`squadd.contracts.messages`); text and/or tool calls, usage
and a stop reason come out. Providers import nothing of squadd above `contracts`, `config` and
`fsio`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
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
LONG_TEXT_CHARS = 2048
"""A text this long or longer (a system prompt) is encoded once and kept (`TextJson`)."""
TEXT_JSON_KEPT_CHARS = 8_000_000
"""At most this many characters of long texts and their encodings are kept, the least
recently sent dropped first."""


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


class TextJson:
    """Texts as JSON strings, the long ones (`LONG_TEXT_CHARS` and up) encoded once.

    A request carries the session's system prompt on every turn, and the sessions of an agent
    share it: tens of kilobytes that `json.dumps` escaped again each time (about 40 µs for 26 KB
    here). Kept by the text itself, so a text built anew finds its encoding too; the least
    recently used are dropped past `max_chars` (the texts and their encodings counted).
    """

    def __init__(self, *, min_chars: int = LONG_TEXT_CHARS,
                 max_chars: int = TEXT_JSON_KEPT_CHARS):
        self.min_chars = min_chars
        self.max_chars = max_chars
        self._kept: dict[str, str] = {}
        self._chars = 0

    def __call__(self, text: str) -> str:
        if len(text) < self.min_chars:
            return json.dumps(text)
        found = self._kept.pop(text, None)
        if found is None:
            found = json.dumps(text)
            size = len(text) + len(found)
            if size > self.max_chars:  # alone past the bound: not kept
                return found
            self._chars += size
            while self._chars > self.max_chars:
                oldest = next(iter(self._kept))
                self._chars -= len(oldest) + len(self._kept.pop(oldest))
        self._kept[text] = found  # last: the most recently used
        return found

    def __len__(self) -> int:
        return len(self._kept)

    def object_with(self, members: dict[str, Any], key: str, text: str) -> str:
        """The JSON object of `members` with `key` set to `text` (encoded as above) last,
        written as `json.dumps` writes it."""
        return with_members(json.dumps(members), {key: self(text)})


def with_members(text: str, encoded: Mapping[str, str] | None) -> str:
    """The JSON object `text` with the members of `encoded` (values already JSON) added last,
    written as `json.dumps` writes them."""
    if not encoded:
        return text
    members = ", ".join(f"{json.dumps(key)}: {value}" for key, value in encoded.items())
    return "{" + members + "}" if text == "{}" else text[:-1] + ", " + members + "}"
