"""RouteRunner: runs one admitted route to its end.

It takes the route's slot (within the route's timeout), opens the session (`runtime.opening`)
or continues it, runs its task through its host (here, or on a cluster worker), puts it to
rest in the state its task ended in, and completes the orchestration log entry. Whatever
happens (a provider crash, a broken transcript, cancellation) the pool's record ends at rest
and the caller gets a `RouteResult`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog

from squadd import telemetry
from squadd.contracts.events import AgentError, AgentSpawned
from squadd.contracts.routes import RouteResult
from squadd.contracts.workspaces import WorkspaceView
from squadd.errors import SquaddError
from squadd.runtime.opening import SessionTools, end_unstarted, open_new
from squadd.runtime.orchestration import OrchestrationEntry
from squadd.runtime.planning import RoutePlan
from squadd.runtime.pool import SessionPool, SessionRecord
from squadd.runtime.services import RouteServices
from squadd.runtime.session import AgentSession, SessionOutcome
from squadd.runtime.session_hooks import (
    RouteHooks,
    after_landing,
    before_landing,
    closing,
    closing_hooks_absent,
    opening,
    route_hooks,
)
from squadd.runtime.session_sink import SessionSink
from squadd.runtime.slots import SlotTicket
from squadd.statcache import NotCached
from squadd.telemetry import genai
from squadd.tools.base import ToolSet
from squadd.workspaces import Workspaces
from squadd.workspaces import records as workspace_records

log = structlog.get_logger("squadd.runtime")

RunHere = Callable[[], Awaitable[SessionOutcome]]


class SessionHost(Protocol):
    """Where a session's task runs (`LOCAL`: in this process; the cluster's coordinator:
    on a worker, or here). It gets the session's narrowed tools and its sink, and `run_here`,
    which runs the task in this process."""

    async def run(self, plan: RoutePlan, record: SessionRecord, tools: ToolSet,
                  sink: SessionSink, run_here: RunHere) -> SessionOutcome: ...


class LocalHost:
    """Every session runs in this process."""

    async def run(self, plan: RoutePlan, record: SessionRecord, tools: ToolSet,
                  sink: SessionSink, run_here: RunHere) -> SessionOutcome:
        return await run_here()


LOCAL = LocalHost()


class RouteRunner:
    """What running a route needs, and the run itself."""

    def __init__(self, services: RouteServices):
        self.services = services
        """Replaced whole when the settings change (`SquadRuntime.apply_settings`)."""
        self._in_use: dict[str, WorkspaceView] = {}
        """The worktree each running session works in (a nested route shares its caller's)."""
        self.host: SessionHost = LOCAL
        """Where sessions run: set at start-up when they may run elsewhere (cluster mode)."""

    @property
    def pool(self) -> SessionPool:
        return self.services.pool

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
                genai.PROVIDER: self.services.session.provider.name,
                genai.REQUEST_MODEL: info.model or None,
                genai.SQUAD_NAME: self.services.layout.repo.name,
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
                    await end_unstarted(plan, "error", error=message)
                finally:
                    self.pool.abandon(record)
                await self._log_end(entry, "queue_timeout", message, started, record)
                return RouteResult(ok=False, reason="queue_timeout", message=message,
                                   error=message, agent=info.agent, pool=self.pool.totals())
            except BaseException:
                with anyio.CancelScope(shield=True):
                    try:
                        await end_unstarted(plan, "interrupted",
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
            await self._failed(plan, failure)
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
        if outcome.status == "error":
            await self._failed(plan, outcome.error or "failed")
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
        route = route_hooks(self.services.session.invoker.hooks, plan,
                            workspace.path if workspace else None,
                            parent.path if parent is not None else None)
        outcome = await self._converse(plan, record, workspace, route,
                                       slot_back_early=not (owned and workspace is not None))
        if owned and workspace is not None:
            workspace = await self._end_workspace(plan, record, outcome, workspace,
                                                  self.services.workspaces, route)
        return outcome, workspace

    async def _workspace(self, plan: RoutePlan) -> tuple[WorkspaceView | None, bool]:
        """The session's worktree and whether it is its own (False: its caller's, or none).
        A nested route shares its caller's worktree unless it asks for an isolation."""
        info, spaces = plan.info, self.services.workspaces
        parent = self._in_use.get(info.parent_session_id or "")
        if parent is not None and plan.isolation is None:
            return parent, False
        if plan.continuing and await anyio.to_thread.run_sync(
                workspace_records.load, self.services.layout, info.session_id) is not None:
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
            prompt = None if self.host is not LOCAL else \
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
        repair_plan = dataclasses.replace(plan, task=prompt, continuing=True, context=None)
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
                        workspace: WorkspaceView | None, route: RouteHooks, *,
                        slot_back_early: bool = False) -> SessionOutcome:
        """Run the session's task between its opening and closing hooks. With
        `slot_back_early` (no worktree of its own to commit and land after it), its slot goes
        back as soon as its conversation is over, unless a closing hook is to run under it."""
        info = plan.info
        self.services.bus.publish(AgentSpawned(
            session_id=info.session_id, agent=info.agent, task=info.task[:500],
            requested_by=info.requested_by, model=info.model,
            parent_session_id=info.parent_session_id,
        ))
        outcome: SessionOutcome | None = None
        ended = "error"  # what the Stop hooks hear when no outcome came: a crash, or ...
        try:
            opened = await opening(route, plan)
            if isinstance(opened, str):  # a hook refused the task: the session never runs
                await end_unstarted(plan, "error", error=opened)
                self.services.bus.publish(AgentError(session_id=info.session_id, agent=info.agent,
                                            error=opened, state="error"))
                outcome = SessionOutcome(session_id=info.session_id, agent=info.agent,
                                         status="error", error=opened, model=info.model)
                return outcome
            over = functools.partial(self._conversation_over, record, route) \
                if slot_back_early else None
            outcome = await self._run_session(opened, record, workspace, over)
            return outcome
        except anyio.get_cancelled_exc_class():
            ended = "interrupted"  # ... a cancellation
            raise
        finally:
            await closing(route, status=outcome.status if outcome else ended,
                          answer=outcome.answer if outcome else "", cancelled=outcome is None)

    def _conversation_over(self, record: SessionRecord, route: RouteHooks) -> None:
        """The session's last turn is over: its slot goes to the next route (or the parent
        waiting on it) while its end records are made durable, unless a Stop hook is to run.
        The pool, the bus and the caller hear of the end only once it is durable, as before."""
        if closing_hooks_absent(route):
            self.services.pool.conversation_over(record)

    async def _run_session(self, plan: RoutePlan, record: SessionRecord,
                           workspace: WorkspaceView | None,
                           ended: Callable[[], None] | None = None) -> SessionOutcome:
        info, services = plan.info, self.services
        events = SessionSink(services.bus, services.pool, record)
        tools = SessionTools(services, plan, record)
        found: ToolSet | None = None
        if self.host is not LOCAL:  # the host is handed the session's tools: find them now,
            try:                    # on the loop when no tool file must be read
                found = tools.known()
            except NotCached:
                found = await anyio.to_thread.run_sync(tools.find)

        async def run_here() -> SessionOutcome:
            session = AgentSession(
                info, services.session, sink=plan.sink, events=events, tools=tools,
                workspace_dir=Path(workspace.path) if workspace is not None else None,
                on_deadline=functools.partial(_set_deadline, record),
                on_ended=ended)
            events.session = session
            services.inbox.attach(info.session_id, session)
            if plan.continuing:
                if plan.task is None:  # a resume records no new message: active from here
                    services.pool.activate(record)
                return await session.continue_with(plan.task, timeout_s=plan.timeout_s)
            messages = await open_new(services, plan, tools, plan.task or info.task,
                                      worktree=workspace is not None)
            return await session.run_opened(messages, timeout_s=plan.timeout_s)

        try:
            if found is not None:
                return await self.host.run(plan, record, found, events, run_here)
            return await run_here()
        finally:
            services.inbox.detach(info.session_id)

    async def _failed(self, plan: RoutePlan, error: str) -> None:
        """A failed session waits on a person in the inbox (resume or dismiss)."""
        info = plan.info
        try:
            with anyio.CancelScope(shield=True):
                await self.services.inbox.add(
                    "failed", error[:500], agent=info.agent, session_id=info.session_id,
                    key=f"failed:{info.session_id}",
                    details={"error": error[:4000], "task": info.task[:500]})
        except (OSError, SquaddError) as exc:
            log.warning("failed session not put in the inbox", session_id=info.session_id,
                        error=str(exc))

    async def _log_end(self, entry: OrchestrationEntry, outcome: str, error: str | None,
                       started: float, record: SessionRecord) -> None:
        await self.services.orchestration.submit(entry.ended(
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


def _set_deadline(record: SessionRecord, scope: anyio.CancelScope | None) -> None:
    record.deadline = scope
