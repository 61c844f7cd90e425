"""RouteRunner: runs one admitted route to its end.

It takes the route's slot (within the route's timeout), starts or continues the AgentSession
with its tool set, puts the session to rest in the state its task ended in, and completes the
orchestration log entry. Whatever happens (a provider crash, a broken transcript, cancellation)
the pool's record ends at rest and the caller gets a `RouteResult`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.events import AgentError, AgentSpawned
from squadd.contracts.routes import RouteResult
from squadd.contracts.workspaces import WorkspaceView
from squadd.errors import SquaddError
from squadd.providers.base import Provider
from squadd.runtime.acceptance import record_unstarted_end
from squadd.runtime.events import EventBus
from squadd.runtime.orchestration import OrchestrationEntry, OrchestrationLog
from squadd.runtime.planning import RoutePlan
from squadd.runtime.pool import SessionPool, SessionRecord
from squadd.runtime.session import AgentSession, SessionOutcome
from squadd.runtime.session_hooks import (
    RouteHooks,
    after_landing,
    before_landing,
    closing,
    opening,
    route_hooks,
)
from squadd.runtime.session_info import session_toolset
from squadd.runtime.session_sink import SessionSink
from squadd.runtime.slots import SlotTicket
from squadd.statcache import NotCached, StatCache
from squadd.state.journal import GroupCommit
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import PromptFiles, SpareFiles
from squadd.telemetry import genai
from squadd.tools.base import Tool, ToolSet
from squadd.tools.invoke import ToolInvoker
from squadd.workspaces import Workspaces
from squadd.workspaces import records as workspace_records

log = structlog.get_logger("squadd.runtime")

ExtraTools = Callable[[], Iterable[Tool[Any]]]


@runtime_checkable
class CachedTools(Protocol):
    """Extra tools that can also be answered without reading a file (on the event loop)."""

    def __call__(self) -> Iterable[Tool[Any]]: ...

    def cached(self) -> Iterable[Tool[Any]]:
        """The same tools when no file must be read to find them, else `NotCached`."""
        ...
RunHere = Callable[[], Awaitable[SessionOutcome]]


class SessionHost(Protocol):
    """Where a session's task runs when it may run elsewhere than in this process (the
    cluster's workers). It gets the session's narrowed tools and its sink, and `run_here`,
    which runs the task in this process as without a host."""

    async def run(self, plan: RoutePlan, record: SessionRecord, tools: ToolSet,
                  sink: SessionSink, run_here: RunHere) -> SessionOutcome: ...


class RouteRunner:
    """What running a route needs, and the run itself."""

    def __init__(self, *, layout: SquadLayout, settings: Settings, provider: Provider,
                 bus: EventBus, invoker: ToolInvoker, pool: SessionPool,
                 orchestration: OrchestrationLog, tools: ToolSet,
                 extra_tools: ExtraTools | None, files: StatCache[str] | None = None,
                 summaries: StatCache[str] | None = None, spares: SpareFiles | None = None,
                 prompts: PromptFiles | None = None, workspaces: Workspaces | None = None,
                 commits: GroupCommit | None = None):
        self.layout = layout
        self.settings = settings
        self.provider = provider
        self.bus = bus
        self.invoker = invoker
        self.pool = pool
        self.orchestration = orchestration
        self.tools = tools
        self.extra_tools = extra_tools
        self.files = files
        self.summaries = summaries
        self.spares = spares
        self.prompts = prompts
        self.workspaces = workspaces
        self._in_use: dict[str, WorkspaceView] = {}
        """The worktree each running session works in (a nested route shares its caller's)."""
        self.host: SessionHost | None = None
        """Set (at start-up) when sessions may run elsewhere; None runs every one here."""
        self.commits = commits

    def workspace_of(self, session_id: str) -> WorkspaceView | None:
        """The worktree a running session works in (None: none, or not running here)."""
        return self._in_use.get(session_id)

    async def run(self, plan: RoutePlan, record: SessionRecord, ticket: SlotTicket,
                  entry: OrchestrationEntry) -> RouteResult:
        """Take a slot, run the session's task, and put the session to rest. With tracing on,
        all of it is an `invoke_agent {agent}` span, a child of the span the route was called
        in (a parent session's `squad_route`, an HTTP or MCP caller's `traceparent`)."""
        if not telemetry.active():
            return await self._run(plan, record, ticket, entry)
        info = plan.info
        with telemetry.span(f"{genai.INVOKE_AGENT} {info.agent}", {
                genai.OPERATION: genai.INVOKE_AGENT, genai.AGENT_NAME: info.agent,
                genai.AGENT_ID: info.agent, genai.CONVERSATION_ID: info.session_id,
                genai.PROVIDER: self.provider.name, genai.REQUEST_MODEL: info.model or None,
                genai.SQUAD_NAME: self.layout.repo.name,
                genai.PARENT_SESSION: info.parent_session_id, genai.ROUTE_DEPTH: info.depth,
                genai.PRIORITY: info.priority}) as span:
            result = await self._run(plan, record, ticket, entry)
            span.set(genai.USAGE_INPUT, result.input_tokens)
            span.set(genai.USAGE_OUTPUT, result.output_tokens)
            if not result.ok:
                span.fail(result.reason or "failed", result.message or "")
            return result

    async def _run(self, plan: RoutePlan, record: SessionRecord, ticket: SlotTicket,
                   entry: OrchestrationEntry) -> RouteResult:
        info = plan.info
        started = time.monotonic()
        base_in, base_out = record.input_tokens, record.output_tokens
        scope = record.scope or anyio.CancelScope()
        outcome: SessionOutcome | None = None
        workspace: WorkspaceView | None = None
        failure: str | None = None
        with scope:
            try:
                with telemetry.span("squadd.queue_wait", {
                        genai.AGENT_NAME: info.agent, genai.CONVERSATION_ID: info.session_id,
                        genai.PRIORITY: info.priority}):
                    await self.pool.take_slot(record, ticket, plan.timeout_s)
            except TimeoutError:
                message = (f"no slot came free within {plan.timeout_s:g}s (route timeout); "
                           "the pool is busy: try again later")
                # The transcript says how it ended before the pool forgets the session, so
                # that nobody reads it in between as a session that stopped mid-way.
                try:
                    await self._end_unstarted(plan, "error", error=message)
                finally:
                    self.pool.abandon(record)
                await self._log_end(entry, "queue_timeout", message, started, record)
                return RouteResult(ok=False, reason="queue_timeout", message=message,
                                   error=message, agent=info.agent, pool=self.pool.totals())
            except BaseException:
                with anyio.CancelScope(shield=True):
                    try:
                        await self._end_unstarted(plan, "interrupted",
                                                  reason="cancelled before it started")
                    finally:
                        self.pool.abandon(record)
                    await self._log_end(entry, "cancelled", "cancelled before it started",
                                        started, record)
                raise
            try:
                outcome, workspace = await self._start_session(plan, record)
            except Exception as exc:  # a broken session must not take the pool down
                log.exception("session failed", session_id=info.session_id)
                failure = f"{type(exc).__name__}: {exc}"
            except BaseException:
                self.pool.finish(record, "interrupted", error="cancelled")
                with anyio.CancelScope(shield=True):
                    await self._log_end(entry, "interrupted", "cancelled", started, record)
                raise
            finally:
                self._in_use.pop(info.session_id, None)
        duration = round(time.monotonic() - started, 6)
        if outcome is None:
            if failure is None:  # cancel() stopped it: the pool and the log already know
                message = (f"{info.agent} did not finish: cancelled by request"
                           if record.state == "interrupted"
                           else f"{info.agent} was cancelled before it started")
                return RouteResult(ok=False, reason="interrupted", message=message,
                                   error="cancelled", session_id=info.session_id,
                                   agent=info.agent, state=record.state, duration_s=duration)
            self.pool.finish(record, "error", error=failure)
            await self._log_end(entry, "error", failure, started, record)
            return RouteResult(ok=False, reason="failed", error=failure,
                               message=f'Agent "{info.agent}" failed: {failure}',
                               session_id=info.session_id, agent=info.agent,
                               state=record.state, duration_s=duration)
        record.input_tokens = base_in + outcome.usage.input_tokens
        record.output_tokens = base_out + outcome.usage.output_tokens
        if outcome.status == "completed":
            self.pool.finish(record, "idle", answer=outcome.answer)
        else:
            self.pool.finish(record, "interrupted" if outcome.status == "interrupted" else "error",
                             error=outcome.error or outcome.status)
        await self._log_end(entry, outcome.status, outcome.error, started, record)
        return self._result(plan, record, outcome).model_copy(update={
            "workspace": workspace,
            "landing": workspace.outcome if workspace is not None else None})

    async def _start_session(self, plan: RoutePlan, record: SessionRecord
                             ) -> tuple[SessionOutcome, WorkspaceView | None]:
        info = plan.info
        workspace, owned = await self._workspace(plan)
        if workspace is not None:
            self._in_use[info.session_id] = workspace
        parent = self._in_use.get(info.parent_session_id or "")
        route = route_hooks(self.invoker.hooks, plan, workspace.path if workspace else None,
                            parent.path if parent is not None else None)
        outcome = await self._converse(plan, record, workspace, route)
        if owned and workspace is not None and self.workspaces is not None:
            workspace = await self._end_workspace(plan, record, outcome, workspace,
                                                  self.workspaces, route)
        return outcome, workspace

    async def _workspace(self, plan: RoutePlan) -> tuple[WorkspaceView | None, bool]:
        """The session's worktree and whether it is its own (False: its caller's, or none).
        A nested route shares its caller's worktree unless it asks for an isolation."""
        info, spaces = plan.info, self.workspaces
        if spaces is None:
            return None, False
        parent = self._in_use.get(info.parent_session_id or "")
        if parent is not None and plan.isolation is None:
            return parent, False
        if plan.continuing and await anyio.to_thread.run_sync(
                workspace_records.load, self.layout, info.session_id) is not None:
            return await spaces.open(info.session_id, info.agent), True
        if spaces.isolation_for(info.agent, plan.charter.sections, plan.isolation) != "worktree":
            return None, False
        return await spaces.open(info.session_id, info.agent), True

    async def _end_workspace(self, plan: RoutePlan, record: SessionRecord,
                             outcome: SessionOutcome, workspace: WorkspaceView,
                             spaces: Workspaces, route: RouteHooks) -> WorkspaceView:
        """Commit what the session changed; land it when the route or the settings say so. A
        conflict or a failed check goes back to the agent as a repair turn (up to
        `workspace.repair_attempts`), then waits for a person (`needs_attention`). The result
        is the workspace's record, its `outcome` the landing's end."""
        info = plan.info
        answer = outcome.answer if outcome.status == "completed" else ""
        workspace_records.kill_point("session.before_commit")
        try:
            with anyio.CancelScope(shield=True):
                workspace = await spaces.close(workspace, title=plan.task or info.task,
                                               display_name=info.agent.title(), answer=answer)
        except SquaddError as exc:
            log.warning("session work not committed", session_id=info.session_id,
                        error=str(exc))
            workspace.message = f"not committed: {exc}"
            return workspace
        if outcome.status != "completed" or not (plan.land or spaces.settings.land == "auto"):
            with anyio.CancelScope(shield=True):
                return await spaces.not_landed(
                    workspace, why="landing was not asked for" if outcome.status == "completed"
                    else f"the session did not complete ({outcome.status})")
        with telemetry.span("squadd.land", {
                genai.AGENT_NAME: info.agent, genai.CONVERSATION_ID: info.session_id,
                "squadd.land.branch": workspace.branch,
                "squadd.land.target": workspace.target}) as span:
            refused = await before_landing(route, workspace)
            if refused is not None:
                workspace.message, workspace.outcome = refused.detail, refused
                span.fail("blocked", refused.detail)
                return workspace
            workspace = await self._land(plan, record, workspace, spaces, route)
            landing = workspace.outcome
            if landing is not None:
                span.set("squadd.land.state", landing.state)
                span.set("squadd.land.commit", landing.commit)
                if landing.state not in ("landed", "skipped"):
                    span.fail(landing.state, landing.detail)
            await after_landing(route, workspace)
        return workspace

    async def _land(self, plan: RoutePlan, record: SessionRecord, workspace: WorkspaceView,
                    spaces: Workspaces, route: RouteHooks) -> WorkspaceView:
        """Land the session's work; a conflict or failed check goes to a repair turn while
        attempts remain, then waits for a person. The workspace's record, with its outcome."""
        info = plan.info
        with anyio.CancelScope(shield=True):
            landed = await spaces.land(info.session_id)
        while not landed.ok and landed.reason in ("conflict", "check_failed"):
            # A repair turn works on this machine's worktree (squadd's rebase, its conflict
            # markers): with a host that may run it elsewhere, the session waits for a person.
            prompt = None if self.host is not None else \
                await spaces.start_repair(info.session_id, landed)
            if prompt is None:
                with anyio.CancelScope(shield=True):
                    held = await spaces.hold_for_person(info.session_id, landed)
                return held or workspace
            why = await self._repair_turn(plan, record, workspace, prompt, spaces, route)
            if why:  # the work is as it was: landing it again spends the next attempt
                log.info("repair turn did not resolve the landing", session_id=info.session_id,
                         why=why)
            with anyio.CancelScope(shield=True):
                landed = await spaces.land(info.session_id)
        return landed.workspace or await spaces.view(info.session_id) or workspace

    async def _repair_turn(self, plan: RoutePlan, record: SessionRecord,
                           workspace: WorkspaceView, prompt: str, spaces: Workspaces,
                           route: RouteHooks) -> str:
        """One follow-up turn of the session in its worktree to repair its landing; "" when
        its repair is ready to land, else why not (the work is kept either way). A turn
        cancelled mid-way undoes the rebase squadd began before it re-raises."""
        info = plan.info
        repair_plan = dataclasses.replace(plan, task=prompt, continuing=True, context=None,
                                          recorded=False)
        try:
            turn = await self._converse(repair_plan, record, workspace, route)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await spaces.abandon_repair(info.session_id, "the session was cancelled")
            raise
        if turn.status != "completed":
            why = turn.error or turn.status
            await spaces.abandon_repair(info.session_id, why)
            return why
        return await spaces.finish_repair(info.session_id, answer=turn.answer)

    async def _converse(self, plan: RoutePlan, record: SessionRecord,
                        workspace: WorkspaceView | None, route: RouteHooks) -> SessionOutcome:
        """Run the session's task between its opening and closing hooks."""
        info = plan.info
        self.bus.publish(AgentSpawned(
            session_id=info.session_id, agent=info.agent, task=info.task[:500],
            requested_by=info.requested_by, model=info.model,
            parent_session_id=info.parent_session_id,
        ))
        outcome: SessionOutcome | None = None
        ended = "error"  # what the Stop hooks hear when no outcome came: a crash, or ...
        try:
            opened = await opening(route, plan)
            if isinstance(opened, str):  # a hook refused the task: the session never runs
                await self._end_unstarted(plan, "error", error=opened)
                self.bus.publish(AgentError(session_id=info.session_id, agent=info.agent,
                                            error=opened, state="error"))
                outcome = SessionOutcome(session_id=info.session_id, agent=info.agent,
                                         status="error", error=opened, model=info.model)
                return outcome
            outcome = await self._run_session(opened, record, workspace)
            return outcome
        except anyio.get_cancelled_exc_class():
            ended = "interrupted"  # ... a cancellation
            raise
        finally:
            await closing(route, status=outcome.status if outcome else ended,
                          answer=outcome.answer if outcome else "", cancelled=outcome is None)

    async def _run_session(self, plan: RoutePlan, record: SessionRecord,
                           workspace: WorkspaceView | None) -> SessionOutcome:
        info = plan.info
        sink = SessionSink(self.bus, self.pool, record)

        def session_tools(cached_only: bool = False) -> ToolSet:
            """The built-in tools, the custom ones found on disk now, narrowed by the route,
            the session's first route and the charter (blocking: run in the session's first
            worker-thread trip, with its prompt's reads and first write; with `cached_only`,
            on the loop, `NotCached` when a tool file must be read)."""
            tools = self.tools
            if self.extra_tools is not None:
                if not cached_only:
                    extras = self.extra_tools()
                elif isinstance(self.extra_tools, CachedTools):
                    extras = self.extra_tools.cached()
                else:
                    raise NotCached("these extra tools are found by reading files")
                tools = tools.merged(extras if isinstance(extras, ToolSet) else list(extras))
            if info.available_tools is not None and plan.continuing:
                # The route that made the session set its tools; a later task only narrows them.
                tools = session_toolset(tools, info.available_tools, None,
                                        session_id=info.session_id)
            tools = session_toolset(tools, plan.available_tools, plan.charter,
                                    session_id=info.session_id)
            record.tools = tools
            return tools

        known: ToolSet | None = None
        if self.host is not None:  # the host is handed the session's tools: find them now
            known = await anyio.to_thread.run_sync(session_tools)

        async def run_here() -> SessionOutcome:
            session = AgentSession(
                info, layout=self.layout, settings=self.settings, provider=self.provider,
                invoker=self.invoker, tools=known if known is not None else self.tools,
                sink=sink, files=self.files, summaries=self.summaries, spares=self.spares,
                prompts=self.prompts, commits=self.commits,
                tools_source=session_tools if known is None else None,
                workspace_dir=Path(workspace.path) if workspace is not None else None,
            )
            sink.session = session
            if plan.continuing:
                if plan.task is None:  # a resume records no new message: active from here
                    self.pool.activate(record)
                return await session.continue_with(plan.task, timeout_s=plan.timeout_s)
            return await session.start(plan.task or info.task, plan.context,
                                       timeout_s=plan.timeout_s, accepted=plan.recorded)

        if self.host is not None and known is not None:
            return await self.host.run(plan, record, known, sink, run_here)
        return await run_here()

    async def _end_unstarted(self, plan: RoutePlan, state: str, **fields: str) -> None:
        """Close the transcript the route's acceptance opened, or end the continuation it
        recorded as queued, if it did."""
        if not plan.recorded:
            return
        try:
            await anyio.to_thread.run_sync(functools.partial(
                record_unstarted_end, self.layout, plan.info.session_id, state, **fields))
        except OSError as exc:
            log.warning("transcript not closed", session_id=plan.info.session_id,
                        error=str(exc))

    async def _log_end(self, entry: OrchestrationEntry, outcome: str, error: str | None,
                       started: float, record: SessionRecord) -> None:
        await self.orchestration.submit(entry.ended(
            outcome, error=error, duration_s=time.monotonic() - started,
            input_tokens=record.input_tokens, output_tokens=record.output_tokens))

    def _result(self, plan: RoutePlan, record: SessionRecord,
                outcome: SessionOutcome) -> RouteResult:
        info = plan.info
        common: dict[str, Any] = dict(
            session_id=info.session_id, agent=info.agent, state=record.state,
            routed_by=plan.routed_by, turns=outcome.turns,
            input_tokens=outcome.usage.input_tokens, output_tokens=outcome.usage.output_tokens,
            duration_s=round(outcome.duration_s, 6),
        )
        if outcome.status == "completed":
            answer = outcome.answer
            message = answer or f'Agent "{info.agent}" completed but returned no response.'
            return RouteResult(ok=True, answer=answer, message=message, **common)
        error = outcome.error or outcome.status
        return RouteResult(ok=False, reason="failed" if outcome.status == "error"
                           else "interrupted", error=error,
                           message=f'Agent "{info.agent}" failed: {error}', **common)
