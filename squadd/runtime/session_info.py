"""What a session is, apart from the loop that runs it: its identity (`SessionInfo`, its id),
what its transcript's meta record says, the model it asks and the tools it may use. Planning,
the pool, a route's acceptance and the coordinator use these without a running session.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from squadd.config import Settings
from squadd.contracts.workspaces import Isolation
from squadd.state.charters import Charter
from squadd.tools.base import ToolSet


def new_session_id() -> str:
    """The second it began and 32 random bits: unique, not secret. They come from `random`
    (seeded by the system at start, and again in a forked child), where `secrets` would ask
    the kernel on every route."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{random.getrandbits(32):08x}"


def choose_model(route_model: str | None, charter: Charter | None, settings: Settings,
                 agent: str, provider_default: str) -> str:
    """route `model` > charter `Preferred:` > `[agents.{name}] model` > provider default."""
    if route_model:
        return route_model
    if charter is not None and charter.model:
        return charter.model
    configured = settings.agents.get(agent)
    if configured is not None and configured.model:
        return configured.model
    return settings.provider.model or provider_default


def session_toolset(tools: ToolSet, available: Iterable[str] | None,
                    charter: Charter | None, *, session_id: str | None = None) -> ToolSet:
    """The caller's `availableTools` narrow the set; the charter's `## Tools` narrows it further.
    A tool either rule leaves out is refused with the rule named."""
    if available is not None:
        allowed = list(available)
        whose = f"session {session_id}" if session_id else "this session"
        narrowed = tools.narrowed(allowed, rule=(
            f"the route that started {whose} allows only {', '.join(allowed) or 'no tools'} "
            "(availableTools)"))
    else:
        narrowed = tools
    return charter_toolset(narrowed, charter)


def charter_toolset(tools: ToolSet, charter: Charter | None) -> ToolSet:
    """`tools` narrowed by the charter's `## Tools` (all of them when it has none)."""
    if charter is None or charter.tools is None:
        return tools
    return tools.narrowed(charter.tools, rule=(
        f"{charter.agent}'s charter allows only {', '.join(charter.tools) or 'no tools'} "
        f"(## Tools in agents/{charter.agent}/charter.md)"))


@dataclass
class SessionInfo:
    """What a session is, fixed at creation."""

    session_id: str
    agent: str
    model: str
    task: str
    parent_session_id: str | None = None
    requested_by: str | None = None
    depth: int = 0
    lineage: tuple[str, ...] = ()
    priority: str = "normal"
    available_tools: tuple[str, ...] | None = None
    """The `availableTools` of the route that made the session: its later tasks keep to them."""
    isolation: Isolation | None = None
    """The `isolation` the route of its current task asked for (None: the agent's or the
    settings'): a resume after a restart works where that route asked."""
    land: bool = False
    """Whether the route of its current task asked to land its work (a resume lands it too)."""


def session_meta(info: SessionInfo) -> dict[str, Any]:
    """What a transcript's meta record says about its session."""
    return {"session_id": info.session_id, "agent": info.agent, "model": info.model,
            "task": info.task, "parent_session_id": info.parent_session_id,
            "requested_by": info.requested_by, "depth": info.depth,
            "lineage": list(info.lineage), "priority": info.priority,
            "available_tools": (list(info.available_tools)
                                if info.available_tools is not None else None),
            **route_intent(info)}


def route_intent(info: SessionInfo) -> dict[str, Any]:
    """What the route of the session's current task asked of its workspace, as its meta
    records it (the last meta record of a transcript wins: a continuation records its own)."""
    return {"isolation": info.isolation, "land": info.land}


def intent_of(meta: dict[str, Any]) -> tuple[Isolation | None, bool]:
    """`route_intent` read back from a transcript's meta (anything else: none asked)."""
    found = meta.get("isolation")
    isolation: Isolation | None = ("worktree" if found == "worktree"
                                   else "shared" if found == "shared" else None)
    return isolation, meta.get("land") is True
