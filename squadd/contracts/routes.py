"""Routes: what the CLI, the daemon, MCP and the squad tools exchange with the runtime.

`RouteRequest` goes in, `RouteResult` comes out; both are JSON-able pydantic models.
`SquadService` is the Protocol the squad tools depend on, so that tools never import the
runtime that implements it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from squadd.contracts.names import safe_name
from squadd.contracts.sessions import PoolTotals, Priority, SessionState, StatusReport
from squadd.contracts.workspaces import Isolation, LandingOutcome, WorkspaceView
from squadd.errors import InvalidNameError

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


def _without_description(schema: dict[str, Any]) -> None:
    # The tool's own description tells the model what a route is; this docstring is for people.
    schema.pop("description", None)


SDK_PRIORITIES = {"low": "normal", "normal": "normal", "high": "urgent", "critical": "urgent"}
"""The Squad SDK's four priorities mapped onto the pool's two (urgent is admitted first)."""


class RouteRequest(BaseModel):
    """One task to route: to a named agent, to whoever routing.md picks, or to a session.

    Defined once for every way in: it is the `squad_route` tool's arguments, the body of
    `POST /v1/route` and what `SquadRuntime.route` takes. On the wire (and to a model) its fields
    have camelCase names (`targetAgent`, `waitForResult`, `timeoutSeconds`...); in Python either
    name works: ``RouteRequest(task="t", target_agent="lead")``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              json_schema_extra=_without_description)

    target_agent: str = Field(
        "auto", alias="targetAgent", min_length=1, max_length=65,
        description="Name of the agent to route work to (e.g. 'fenster'); 'auto' lets an "
                    "@name in the task, then routing.md's rules, choose")
    task: str = Field(min_length=1, max_length=MAX_TASK_CHARS,
                      description="Description of the work to be done")
    context: str | None = Field(None, description="Additional context from the requesting agent")
    priority: Priority = Field("normal", description="Task priority")

    @field_validator("priority", mode="before")
    @classmethod
    def _squad_sdk_priority(cls, value: Any) -> Any:
        # The Squad SDK's four priorities onto the pool's two (urgent is admitted first).
        return SDK_PRIORITIES.get(value, value) if isinstance(value, str) else value
    wait_for_result: bool = Field(
        True, alias="waitForResult",
        description="If true, block until the agent completes and return its answer. If "
                    "false, return at once with the session ID (collect the answer with "
                    "squad_status).")
    model: str | None = Field(None, description="Model override for the target agent's session")
    session_id: str | None = Field(
        None, alias="sessionId",
        description="Continue this idle session (from an earlier route) instead of "
                    "spawning a new one")
    available_tools: list[str] | None = Field(
        None, alias="availableTools",
        description="Tool names (or globs) the agent may use; default: all")
    timeout_s: float | None = Field(
        None, alias="timeoutSeconds", gt=0, le=MAX_ROUTE_TIMEOUT_S,
        description="Seconds the task may run (default: route.timeout_s)")
    isolation: Isolation | None = Field(
        None, description="'worktree': the agent works in its own git worktree and branch; "
                          "'shared': in the repository's working tree (default: the settings')")
    land: bool = Field(
        False, description="With a worktree: land the session's commits on the target branch "
                           "(rebase, check, fast-forward) when it ends")
    requested_by: SkipJsonSchema[str | None] = Field(None, alias="requestedBy")
    """Who asked, for the orchestration log. Not offered to models: `squad_route` sets it to
    the calling session's agent; over the API it defaults to "user"."""

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):  # lax parsing would read true as 1 second
            raise ValueError("must be a number of seconds, not true or false")
        return value

    @field_validator("requested_by")
    @classmethod
    def _an_agent_name(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                safe_name(value)
            except InvalidNameError as exc:
                raise ValueError(str(exc)) from None
        return value

    def wire(self) -> dict[str, Any]:
        """The JSON body of `POST /v1/route` (camelCase, fields left unset are left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


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
    workspace: WorkspaceView | None = None
    """The session's worktree, branch, commits and diffstat (sessions with a worktree)."""
    landing: LandingOutcome | None = None
    """How the session's landing ended, when one was asked for (`land`, `workspace.land`)."""


@dataclass(frozen=True)
class RouteOrigin:
    """Who is routing: a session (through its squad_route tool) or an outside caller."""

    session_id: str | None = None
    agent: str | None = None
    depth: int = 0
    """Depth of the calling session (0 for an outside caller)."""
    lineage: tuple[str, ...] = ()
    """Agents of the sessions in the chain that led here, the caller included."""
    workspace_session: str | None = None
    """The session whose worktree the caller works in (a nested route shares it)."""


class SquadService(Protocol):
    """What the squad_route and squad_status tools need from the runtime."""

    async def route(self, request: RouteRequest, *,
                    origin: RouteOrigin | None = None) -> RouteResult: ...

    async def status(self, *, agent: str | None = None, include_destroyed: bool = False,
                     session_id: str | None = None) -> StatusReport: ...
