"""The events squadd publishes: pydantic models discriminated by ``type``, their union's
`TypeAdapter` (`parse_event`), the event-type matcher, and the `EventSink` Protocol.

These are the wire shapes of `GET /v1/events` and `squadd events`; the bus that carries them is
`squadd.runtime.events.EventBus`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from squadd.contracts.workspaces import LandingOutcome
from squadd.untrusted import mend


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


_SCALARS = (int, float, bool, dt.datetime)
"""Value types with no text in them (exactly these types: a subclass may carry text)."""


class BaseEvent(BaseModel):
    model_config = ConfigDict(frozen=True)

    ts: dt.datetime = Field(default_factory=_now)
    session_id: str | None = None
    agent: str | None = None
    seq: int = 0
    """Set by the bus: a number that grows with each published event."""
    worker: str | None = None
    """The cluster worker the event happened on (None: on this daemon)."""

    @model_validator(mode="before")
    @classmethod
    def _valid_text(cls, data: Any) -> Any:
        # Names and text from outside (a file name that is not UTF-8) must not make an event
        # unserializable: every stream that replays it would break. Most events hold only
        # ASCII text and scalars: those are taken as they are, without a copy.
        if not isinstance(data, dict):
            return data
        mended: dict[str, Any] | None = None
        for key, value in data.items():
            kind = type(value)
            if not (value is None or (kind is str and value.isascii()) or kind in _SCALARS):
                if mended is None:
                    mended = dict(data)
                mended[key] = mend(value)
        return data if mended is None else mended


class DaemonStarted(BaseEvent):
    type: Literal["daemon.started"] = "daemon.started"
    pid: int
    repo: str


class DaemonStopping(BaseEvent):
    type: Literal["daemon.stopping"] = "daemon.stopping"
    reason: str = ""


class RouteQueued(BaseEvent):
    type: Literal["route.queued"] = "route.queued"
    task: str
    priority: str = "normal"
    position: int = 0


class AgentSpawned(BaseEvent):
    type: Literal["agent.spawned"] = "agent.spawned"
    task: str
    requested_by: str | None = None
    model: str = ""
    parent_session_id: str | None = None


class AgentStateChanged(BaseEvent):
    type: Literal["agent.state"] = "agent.state"
    state: str
    previous: str | None = None


class AgentIdle(BaseEvent):
    type: Literal["agent.idle"] = "agent.idle"


class AgentCompleted(BaseEvent):
    type: Literal["agent.completed"] = "agent.completed"
    answer: str = ""
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0


class AgentError(BaseEvent):
    type: Literal["agent.error"] = "agent.error"
    error: str
    state: str = "error"


class SessionMessage(BaseEvent):
    type: Literal["session.message"] = "session.message"
    role: str
    content: str = ""
    tool_calls: list[str] = Field(default_factory=list)


class ToolStarted(BaseEvent):
    type: Literal["tool.started"] = "tool.started"
    tool: str
    call_id: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolUpdated(BaseEvent):
    type: Literal["tool.updated"] = "tool.updated"
    tool: str
    call_id: str
    message: str = ""
    fraction: float | None = None


class ToolCompleted(BaseEvent):
    type: Literal["tool.completed"] = "tool.completed"
    tool: str
    call_id: str
    result_type: Literal["success", "failure"]
    summary: str = ""
    duration_s: float = 0.0
    details: dict[str, Any] = Field(default_factory=dict)
    """The tool's details (never sent to the model); a size note when they are large."""


class PoolAtCapacity(BaseEvent):
    type: Literal["pool.at_capacity"] = "pool.at_capacity"
    running: int
    queued: int
    max_concurrent: int


class PoolEmpty(BaseEvent):
    type: Literal["pool.empty"] = "pool.empty"


class ProviderRetry(BaseEvent):
    type: Literal["provider.retry"] = "provider.retry"
    provider: str
    attempt: int
    wait_s: float
    reason: str
    status: int | None = None


class ScribeMerged(BaseEvent):
    type: Literal["scribe.merged"] = "scribe.merged"
    merged: int
    skipped: int = 0
    files: list[str] = Field(default_factory=list)


class ScribeRejected(BaseEvent):
    type: Literal["scribe.rejected"] = "scribe.rejected"
    file: str
    reason: str


class ScribeArchived(BaseEvent):
    type: Literal["scribe.archived"] = "scribe.archived"
    moved: int
    target: str
    reason: str = ""


class ApprovalRequested(BaseEvent):
    type: Literal["approval.requested"] = "approval.requested"
    approval_id: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Long strings cut (ending in "…"); the dashboard and `squadd approvals` show them whole."""
    arguments_bytes: int = 0
    """The size of the whole arguments (compact UTF-8 JSON)."""
    question: str = ""
    timeout_s: float = 0.0


class ApprovalResolved(BaseEvent):
    type: Literal["approval.resolved"] = "approval.resolved"
    approval_id: str
    approved: bool
    reason: str = ""


class VariableRequested(BaseEvent):
    """A tool call waits for a required variable: answer with `squadd var set NAME`."""

    type: Literal["variable.requested"] = "variable.requested"
    request_id: str
    tool: str
    name: str
    variable_type: Literal["text", "secret"] = "text"
    description: str = ""
    timeout_s: float = 0.0


class VariableResolved(BaseEvent):
    """A variable request ended: the value was set (never shown), or the wait ended."""

    type: Literal["variable.resolved"] = "variable.resolved"
    request_id: str
    name: str
    provided: bool
    reason: str = ""


class ToolsLoadFailed(BaseEvent):
    type: Literal["tools.load_failed"] = "tools.load_failed"
    file: str
    reason: str


class BusOverflow(BaseEvent):
    type: Literal["bus.overflow"] = "bus.overflow"
    lost: int


class WorkspaceCreated(BaseEvent):
    type: Literal["workspace.created"] = "workspace.created"
    branch: str
    path: str
    target: str | None = None


class WorkspaceCommitted(BaseEvent):
    type: Literal["workspace.committed"] = "workspace.committed"
    branch: str
    commits: list[str] = Field(default_factory=list)
    diffstat: str = ""


class WorkspaceLanded(BaseEvent):
    type: Literal["workspace.landed"] = "workspace.landed"
    branch: str
    target: str
    old_tip: str
    new_tip: str
    outcome: LandingOutcome | None = None
    """The landing as the route's result carries it (state `landed`)."""


class WorkspaceLandFailed(BaseEvent):
    """A landing that did not land: a conflict, a failed check, a dirty tree, a moved target.
    `outcome` says which (`check_failed`, `conflict`, `pending`) and what to do `next`."""

    type: Literal["workspace.land_failed"] = "workspace.land_failed"
    branch: str
    target: str | None = None
    reason: str
    paths: list[str] = Field(default_factory=list)
    message: str = ""
    outcome: LandingOutcome | None = None


class WorkspaceConflict(BaseEvent):
    """No longer published: `workspace.land_failed` took its place (a failed check was shown
    as a conflict). Kept so that streams and logs written before still parse."""

    type: Literal["workspace.conflict"] = "workspace.conflict"
    branch: str
    target: str | None = None
    reason: str
    paths: list[str] = Field(default_factory=list)
    message: str = ""


class WorkspaceRemoved(BaseEvent):
    type: Literal["workspace.removed"] = "workspace.removed"
    branch: str
    branch_kept: bool = False


class SettingsReloaded(BaseEvent):
    """The daemon read its settings files again (on a change, SIGHUP or `squadd reload`):
    what it applied, what waits for a restart, or why it refused the files."""

    type: Literal["settings.reloaded"] = "settings.reloaded"
    why: str = ""
    """What made it read them: "changed on disk", "SIGHUP" or "squadd reload"."""
    applied: list[str] = Field(default_factory=list)
    restart_needed: list[str] = Field(default_factory=list)
    error: str = ""


class SessionClaimed(BaseEvent):
    """A cluster worker claimed a session's job (`worker` names it)."""

    type: Literal["session.claimed"] = "session.claimed"
    host: str = ""
    epoch: int = 0


class SessionReclaimed(BaseEvent):
    """A cluster worker took over a session another worker held (it died, or was cut off)."""

    type: Literal["session.reclaimed"] = "session.reclaimed"
    host: str = ""
    epoch: int = 0
    previous_worker: str | None = None


class ModelCalled(BaseEvent):
    """One model call's tokens and cost (None: its model has no price)."""

    type: Literal["model.called"] = "model.called"
    provider: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None
    route: str | None = None
    """The session that started the route tree the call belongs to."""


class InboxAdded(BaseEvent):
    """Something now waits on a person (`squadd inbox`)."""

    type: Literal["inbox.added"] = "inbox.added"
    item_id: str
    kind: str
    reason: str
    actions: list[str] = Field(default_factory=list)
    route: str | None = None


class InboxResolved(BaseEvent):
    type: Literal["inbox.resolved"] = "inbox.resolved"
    item_id: str
    kind: str
    action: str
    by: str = ""


Event = Annotated[
    DaemonStarted | DaemonStopping | RouteQueued | AgentSpawned | AgentStateChanged | AgentIdle
    | AgentCompleted | AgentError | SessionMessage | ToolStarted | ToolUpdated | ToolCompleted
    | PoolAtCapacity | PoolEmpty | ProviderRetry | ScribeMerged | ScribeRejected
    | ScribeArchived | ApprovalRequested | ApprovalResolved | VariableRequested
    | VariableResolved | ToolsLoadFailed | BusOverflow
    | WorkspaceCreated | WorkspaceCommitted | WorkspaceLanded | WorkspaceConflict
    | WorkspaceRemoved | SessionClaimed | SessionReclaimed | WorkspaceLandFailed
    | SettingsReloaded | ModelCalled | InboxAdded | InboxResolved,
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
EVENT_TYPES: tuple[str, ...] = tuple(
    cls.model_fields["type"].default
    for cls in BaseEvent.__subclasses__()
)


def parse_event(data: str | bytes | dict[str, Any]) -> Event:
    """Rebuild an event from its JSON form (as sent over the daemon's event stream)."""
    if isinstance(data, dict):
        return EVENT_ADAPTER.validate_python(data)
    return EVENT_ADAPTER.validate_json(data)


class EventSink(Protocol):
    """Anything events can be published to (the bus, or a list in a test)."""

    def publish(self, event: BaseEvent) -> None: ...


class NullSink:
    """Publishes nowhere: for code run without a bus (a one-off CLI command)."""

    def publish(self, event: BaseEvent) -> None:
        return None


def type_matches(kind: str, pattern: str) -> bool:
    """True when the event type `kind` is `pattern`, or falls under a glob like ``tool.*``."""
    return kind == pattern or (pattern.endswith(".*") and kind.startswith(pattern[:-1]))


def event_matches(event: BaseEvent, types: Collection[str] | None,
                  session_id: str | None) -> bool:
    """The filter of a bus subscription and of an event stream: the event's type matches one
    of `types` (any type when None) and, when `session_id` is given, it is that session's."""
    if types is not None:
        kind = getattr(event, "type", "")
        if kind not in types and not any(type_matches(kind, t) for t in types):
            return False
    return session_id is None or event.session_id == session_id
