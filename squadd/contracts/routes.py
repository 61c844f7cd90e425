"""Routes: what the CLI, the daemon, MCP and the squad tools exchange with the runtime.

`RouteRequest` goes in, `RouteResult` comes out; both are JSON-able pydantic models.
`SquadService` is the Protocol the squad tools depend on, so that tools never import the
runtime that implements it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from squadd.contracts.sessions import PoolTotals, Priority, SessionState, StatusReport

FailureReason = Literal[
    "invalid",          # the request itself is wrong (bad name, empty task)
    "unknown_agent",    # no charter for the agent named
    "no_route",         # no agent named and routing.md matched nothing
    "pool_full",        # the admission queue is full
    "too_deep",         # the route would be deeper than route.max_depth
    "cycle",            # the agent is already in the chain of routes that led here
    "unknown_session",  # sessionId names no session
    "busy",             # sessionId names a session that is still working on a task
    "queue_timeout",    # no slot came free within the route's timeout
    "shutting_down",    # the runtime is stopping and admits nothing new
    "failed",           # the session ran and ended in error (provider failure, timeout, ...)
    "interrupted",      # the session was cancelled or stopped before it finished
]
RoutedBy = Literal["explicit", "mention", "rules", "session"]
MAX_TASK_CHARS = 200_000
"""The longest task a route takes (a longer one belongs in a file the agent reads)."""
MAX_ROUTE_TIMEOUT_S = 86_400.0
"""The longest `timeoutSeconds` a route may ask for."""


class RouteRequest(BaseModel):
    """One task to route: to a named agent, to whoever routing.md picks, or to a session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(min_length=1, max_length=MAX_TASK_CHARS)
    target_agent: str | None = None
    """An agent name; None or "auto" lets an `@name` in the task, then routing.md, decide."""
    context: str | None = None
    priority: Priority = "normal"
    wait_for_result: bool = True
    model: str | None = None
    session_id: str | None = None
    """Continue this (idle, errored or interrupted) session instead of spawning a new one."""
    available_tools: list[str] | None = None
    """Tool names or globs the session may use (its charter's `## Tools` narrows further)."""
    timeout_s: float | None = Field(None, gt=0)
    """Seconds the task may run (and, separately, wait for a slot); None = route.timeout_s."""
    requested_by: str | None = None
    """Who asked, for the orchestration log (a session's agent fills this in itself)."""


class RouteResult(BaseModel):
    """What became of a route. `ok` is True only if a session really ran (or was started)."""

    ok: bool
    message: str
    """A sentence for a person or a model: the answer's summary, or why the route failed."""
    session_id: str | None = None
    agent: str | None = None
    state: SessionState | None = None
    answer: str | None = None
    error: str | None = None
    reason: FailureReason | None = None
    routed_by: RoutedBy | None = None
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    pool: PoolTotals | None = None


@dataclass(frozen=True)
class RouteOrigin:
    """Who is routing: a session (through its squad_route tool) or an outside caller."""

    session_id: str | None = None
    agent: str | None = None
    depth: int = 0
    """Depth of the calling session (0 for an outside caller)."""
    lineage: tuple[str, ...] = ()
    """Agents of the sessions in the chain that led here, the caller included."""


class SquadService(Protocol):
    """What the squad_route and squad_status tools need from the runtime."""

    async def route(self, request: RouteRequest, *,
                    origin: RouteOrigin | None = None) -> RouteResult: ...

    async def status(self, *, agent: str | None = None, include_destroyed: bool = False,
                     session_id: str | None = None) -> StatusReport: ...
