"""What a tool call may ask of a person: the seam between the tools that wait on one (an
approval, `squad_ask`) and the runtime's inbox, which keeps the question durable, parks the
session (no slot held) and wakes it with the answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

AskKind = Literal["approval", "question"]


@dataclass(frozen=True)
class PersonRequest:
    """One question for a person, from one tool call."""

    kind: AskKind
    session_id: str
    agent: str
    call_id: str
    reason: str
    actions: tuple[str, ...]
    details: dict[str, Any] = field(default_factory=dict)
    on_added: Callable[[str], None] | None = None
    """Told the new item's id once it is in the inbox (not for a call that finds its own)."""


@dataclass(frozen=True)
class PersonAnswer:
    """How a person (or an expiry) resolved it: `approve`, `deny`, `answer`, `dismiss`."""

    action: str
    answer: str = ""
    reason: str = ""
    by: str = ""
    item_id: str = ""

    @property
    def expired(self) -> bool:
        return self.by == "expiry"


class PersonQueue(Protocol):
    """The inbox, as tools see it."""

    async def ask_person(self, request: PersonRequest) -> PersonAnswer:
        """Add the request to the inbox (once per call: a call run again after a restart
        finds its item) and wait, parked, for its answer."""
        ...
