"""A session's opening: its tool set and its transcript's first records, through the route's
one sink.

The route's `TranscriptSink` is made when the route is planned and carried in its `RoutePlan`;
every record of the transcript goes through it, from the acceptance on:
- `accept`: what makes a route durable before its caller hears it was accepted (a new
  session's meta and `queued` state, a continuation's queued task);
- `open_new`: a new session's tool set (`SessionTools`) and first records (meta, system
  prompt, task, `active`), made on the event loop when every file they need is cached and
  unchanged (a `stat` each), else in one worker-thread trip that reads what changed;
- `first_records`: those records (also for a session accepted and never started);
- `end_unstarted`: the end of an accepted route whose session never started.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import anyio
import structlog

from squadd.contracts.messages import Message, SystemMessage, UserMessage, message_record
from squadd.runtime.planning import RoutePlan
from squadd.runtime.pool import SessionRecord
from squadd.runtime.prompt import build_system_prompt, gather, gather_known, workspace_note
from squadd.runtime.services import RouteServices
from squadd.runtime.session_info import (
    SessionInfo,
    route_intent,
    session_meta,
    session_toolset,
)
from squadd.statcache import NotCached
from squadd.state.layout import SquadLayout
from squadd.state.owner import current_owner
from squadd.state.transcripts import TranscriptSink, TranscriptWriter, now_iso
from squadd.tools.base import Tool, ToolSet

log = structlog.get_logger("squadd.runtime")


class SessionTools:
    """A routed session's tool set: the built-in tools, the extra ones found on disk now,
    narrowed by the route, the session's first route and the charter. Found once; the pool's
    record shows it."""

    def __init__(self, services: RouteServices, plan: RoutePlan, record: SessionRecord, *,
                 found: ToolSet | None = None):
        """`found`: the set, found already for this route (nothing is looked for again)."""
        self._services = services
        self._plan = plan
        self._record = record
        self._found: ToolSet | None = found

    def find(self) -> ToolSet:
        """Blocking: extra tools are discovered on disk (a worker thread's work)."""
        if self._found is None:
            self._found = self._narrowed(self._services.extra_tools())
        return self._found

    def known(self) -> ToolSet:
        """`find` without reading a file (the event loop may call it): `NotCached` when a
        tool file must be read."""
        if self._found is None:
            # `CachedTools.cached`, looked up by name.
            cached: Callable[[], Iterable[Tool[Any]]] | None = getattr(
                self._services.extra_tools, "cached", None)
            if cached is None:
                raise NotCached("these extra tools are found by reading files")
            self._found = self._narrowed(cached())
        return self._found

    def _narrowed(self, extras: Any) -> ToolSet:
        plan, info = self._plan, self._plan.info
        tools = self._services.tools.merged(extras if isinstance(extras, ToolSet)
                                            else list(extras))
        if info.available_tools is not None and plan.continuing:
            # The route that made the session set its tools; a later task only narrows them.
            tools = session_toolset(tools, info.available_tools, None, session_id=info.session_id)
        tools = session_toolset(tools, plan.available_tools, plan.charter,
                                session_id=info.session_id)
        self._record.tools = tools
        return tools


def accept(plan: RoutePlan) -> None:
    """Add what makes an accepted route durable before its caller hears it was accepted to its
    sink (no I/O: the caller commits them): a new session's meta (with the context) and a
    `queued` state, a continuation's `queued` state with its task, nothing for a resume (its
    transcript has all it needs). A daemon that dies before the session starts leaves them:
    recovery marks the session interrupted, and resuming it starts the task (`pending_task`)."""
    info, sink = plan.info, plan.sink
    if not plan.continuing:
        sink.add("meta", **session_meta(info), context=plan.context, created=now_iso(),
                 owner=current_owner())
        sink.add("state", state="queued")
    elif plan.task is not None:
        sink.add("meta", **route_intent(info))
        sink.add("state", state="queued", task=plan.task, context=plan.context)


def record_acceptance(layout: SquadLayout, info: SessionInfo, context: str | None) -> None:
    """A new session's acceptance written and fsynced at once, as `accept` adds it (blocking:
    for a session made outside a route, e.g. by a test)."""
    writer = TranscriptWriter(layout.transcript(info.session_id))
    writer.add("meta", **session_meta(info), context=context, created=now_iso(),
               owner=current_owner())
    writer.add("state", state="queued")
    writer.flush()


async def end_unstarted(plan: RoutePlan, state: str, **fields: str) -> None:
    """The end of a route whose session never started (its wait for a slot timed out or was
    cancelled, or a hook refused it), made durable after its acceptance's records; nothing when
    none were (a waiting caller hears the end itself)."""
    sink = plan.sink
    if not sink.written:
        return
    sink.add("state", state=state, **fields)
    try:
        with anyio.CancelScope(shield=True):
            await sink.commit()
    except OSError as exc:
        log.warning("transcript not closed", session_id=plan.info.session_id, error=str(exc))


async def open_new(services: RouteServices, plan: RoutePlan, tools: SessionTools,
                   task: str, *, worktree: bool = False) -> list[Message]:
    """A new session's tool set found and first records added to its sink (made durable while
    its first request is out); the messages they hold. On the event loop when nothing must be
    read, else in one worker-thread trip. `worktree`: the session works in one (its prompt
    says how its work reaches git)."""
    note = workspace_note(worktree=worktree, sandbox=services.session.settings.sandbox.mode)
    try:
        return _open_known(services, plan, tools, task, note)
    except NotCached:
        return await anyio.to_thread.run_sync(_open_read, services, plan, tools, task, note)


def _open_known(services: RouteServices, plan: RoutePlan, tools: SessionTools,
                task: str, note: str) -> list[Message]:
    session, info = services.session, plan.info
    found = tools.known()
    parts = gather_known(session.layout, info.agent, plan.context, session.files,
                         session.summaries, charter=plan.charter.text)
    system = build_system_prompt(info.agent, parts, session.settings.prompt, workspace=note)
    if not services.sinks.prompts.kept(system):
        raise NotCached("a system prompt this process has not kept yet")
    return first_records(plan.sink, found, system, task, _meta(plan, task))


def _open_read(services: RouteServices, plan: RoutePlan, tools: SessionTools,
               task: str, note: str) -> list[Message]:
    """`_open_known`, reading what must be read (blocking)."""
    session, info = services.session, plan.info
    found = tools.find()
    parts = gather(session.layout, info.agent, plan.context, session.files, session.summaries,
                   charter=plan.charter.text)
    system = build_system_prompt(info.agent, parts, session.settings.prompt, workspace=note)
    return first_records(plan.sink, found, system, task, _meta(plan, task))


def _meta(plan: RoutePlan, task: str) -> dict[str, Any]:
    """Who and what, for the first meta record: nothing more when the acceptance wrote them."""
    if plan.sink.written:
        return {}
    return {**session_meta(plan.info), "task": task, "created": now_iso()}


def first_records(sink: TranscriptSink, tools: ToolSet, system: str, task: str,
                  meta: dict[str, Any]) -> list[Message]:
    """Add a session's first records to its sink: its meta (`meta`, the tools and this
    process as owner), the system prompt, the task, and `active`; the messages they hold.
    Blocking only the first time a prompt is kept: nothing is added when that fails."""
    system_fields = sink.system_fields(system)
    user = UserMessage(content=task)
    sink.add("meta", **meta, tools=tools.names, owner=current_owner())
    sink.add("message", **system_fields)
    sink.add("message", message=message_record(user))
    sink.add("state", state="active")
    return [SystemMessage(content=system), user]


def pending_task(records: list[dict[str, Any]]) -> str | None:
    """The task of a continuation that was accepted and never started: a `queued` state with a
    task after the last message, not ended since (by a timeout or an error)."""
    pending: str | None = None
    for record in records:
        kind = record.get("kind")
        if kind == "message":
            pending = None
        elif kind == "state":
            state = record.get("state")
            if state == "queued" and isinstance(record.get("task"), str):
                pending = record["task"]
            elif state in ("error", "completed"):
                pending = None
    return pending
