"""SquadRuntime: the layout, settings, provider, bus, invoker and pool of one squad, wired together.

It is what the daemon and `squadd run` build. `route()` plans a task, admits it to the pool and
runs its session (in the caller's task when it waits for the result, in the runtime's task group
when it does not); `status()`, `cancel()`, `resume()` and `snapshot()` complete the API. Use it
as `async with SquadRuntime(...) as runtime:`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, NamedTuple

import anyio
import structlog
from anyio.abc import TaskGroup

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.routes import RouteOrigin, RouteRequest, RouteResult
from squadd.contracts.sessions import LIVE_STATES, SessionView, SpendingView, StatusReport
from squadd.errors import PoolFullError, RouteError, SquaddError
from squadd.providers.base import Provider
from squadd.runtime.budget import Spending
from squadd.runtime.callers import CallScope, scope_call
from squadd.runtime.custom_tools import CustomTools
from squadd.runtime.events import EventBus
from squadd.runtime.inbox import Inbox
from squadd.runtime.opening import accept
from squadd.runtime.orchestration import OrchestrationEntry, OrchestrationLog
from squadd.runtime.planner import Planner
from squadd.runtime.planning import Refusal, RoutePlan
from squadd.runtime.pool import SessionPool, SessionRecord
from squadd.runtime.prompt import file_cache
from squadd.runtime.provider_setup import provider_key, retry_publisher
from squadd.runtime.runner import RouteRunner
from squadd.runtime.services import NO_EXTRA_TOOLS, ExtraTools, RouteServices, SessionServices
from squadd.runtime.slots import SlotLimiter, SlotTicket
from squadd.runtime.upkeep import keep_spare_files, reap_idle
from squadd.runtime.views import ended_view, priced, spending_today
from squadd.state.journal import GroupCommit, replay_journals
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache
from squadd.state.spending import SpendingLedger
from squadd.state.transcripts import FileSinks, PromptFiles, SpareFiles
from squadd.tools.base import ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.hooks import events as hook_events
from squadd.tools.invoke import ToolInvoker
from squadd.tools.python import SpareWorkers
from squadd.tools.secrets import SecretRegistry
from squadd.tools.squad import file_tools
from squadd.tools.squad.ask import SquadAsk
from squadd.tools.squad.route import SquadRoute
from squadd.tools.squad.status import SquadStatus
from squadd.tools.variables import SquadVariables
from squadd.workspaces import LandResult, Workspaces

if TYPE_CHECKING:
    from squadd.tools.discovery import ToolDiscoverer

log = structlog.get_logger("squadd.runtime")
ADMITTING = 64
"""Routes planned and admitted at once; more wait their turn, in the order they came. A burst
of thousands would otherwise all be planned in one pass of the event loop (about 0.1 ms each),
while the sessions already given a slot wait behind it to send their first model request."""

class _Admitted(NamedTuple):
    """A waited route with its place in the pool, to be run by its caller's task."""

    plan: RoutePlan
    record: SessionRecord
    ticket: SlotTicket
    entry: OrchestrationEntry


class SquadRuntime:
    """One squad's runtime. Build it, then `async with` it (that starts its background tasks)."""

    def __init__(
        self,
        layout: SquadLayout,
        settings: Settings,
        provider: Provider,
        *,
        bus: EventBus | None = None,
        invoker: ToolInvoker | None = None,
        extra_tools: ExtraTools | None = None,
        discoverer: ToolDiscoverer | None = None,
        limiter: SlotLimiter | None = None,
        owns_provider: bool = False,
        secrets: SecretRegistry | None = None,
        python_workers: SpareWorkers | None = None,
    ):
        self.layout = layout
        self.settings = settings
        self.provider = provider
        self.bus = bus if bus is not None else EventBus(buffer=settings.daemon.event_buffer)
        self.invoker = invoker if invoker is not None else ToolInvoker(layout, settings, self.bus)
        self.pool = SessionPool(settings.pool, self.bus, limiter=limiter)
        self.commits = GroupCommit(layout)
        """Makes sessions' transcript records and the orchestration log's entries durable
        together, one journal sync a batch."""
        self.spares = SpareFiles(layout.sessions_dir)
        """New transcripts' and orchestration-log entries' files, made ahead by a background
        task."""
        self.orchestration = OrchestrationLog(layout, commits=self.commits, spares=self.spares)
        self.extra_tools: ExtraTools | None = extra_tools if discoverer is None else \
            CustomTools(self, layout, self.bus, discoverer)
        """Added to the built-in tools at each session start (`discoverer`: the custom tools
        on disk, found with it)."""
        self.workspaces = Workspaces(layout, settings, self.bus)
        """Each session's git worktree (with `workspace.isolation = "worktree"`) and landing."""
        self.ledger = SpendingLedger(layout)
        """Every model call's cost, durable: the budgets' and the views' totals."""
        self.inbox = Inbox(layout, settings, self.bus, self.pool)
        """What waits on a person (approvals, questions, parked and failed sessions)."""
        self.inbox.resumer = self._resume_for_inbox
        self.spending = Spending(settings, self.ledger, self.inbox, self.bus,
                                 provider=settings.provider.kind,
                                 default_model=provider.default_model)
        self.tools = ToolSet([*file_tools(layout, settings), SquadRoute(self), SquadStatus(self),
                              SquadAsk(self.inbox), *workspace_tools(settings)])
        """The built-in tools every session starts from (extra tools are added per session)."""
        # What this runtime keeps in memory is its own: two runtimes in one process (or two
        # tests) share no cache, no spare file, no discovered tool.
        self.files = file_cache(layout)
        """The prompt's files (charters, histories, decisions.md), by stat signature."""
        self.skill_summaries = summary_cache()
        """The skills' index lines in the prompt, by stat signature."""
        self.python_workers = python_workers
        """The spare processes its Python tools' calls start from, ended with the runtime."""
        self.secrets = secrets if secrets is not None else SecretRegistry()
        """Secret values this runtime's tools were given: its owner's log processor
        (`secrets.redact_log_event`) redacts them."""
        self.prompts = PromptFiles(layout.transcript_prompts_dir)
        """System prompts, each kept once, which transcripts name by digest."""
        self.runner = RouteRunner(RouteServices(
            SessionServices(layout, settings, provider, self.invoker, files=self.files,
                            summaries=self.skill_summaries, guard=self.spending),
            bus=self.bus, pool=self.pool, orchestration=self.orchestration,
            workspaces=self.workspaces, inbox=self.inbox,
            sinks=FileSinks(layout, self.commits, self.spares, self.prompts), tools=self.tools,
            extra_tools=self.extra_tools or NO_EXTRA_TOOLS))
        self.planner = Planner(layout, self.pool, self.runner.services.sinks,
                               default_model=provider.default_model)
        self.router, self._charters = self.planner.router, self.planner.charters
        self._admitting = anyio.Semaphore(ADMITTING, fast_acquire=True)
        """`ADMITTING` places for planning and admission (FIFO; no yield while one is free)."""
        self._owns_provider = owns_provider
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._background = 0
        self._background_done: anyio.Event | None = None
        self._upkeep_scope: anyio.CancelScope | None = None
        self._ledger_scope: anyio.CancelScope | None = None

    @classmethod
    def from_settings(cls, layout: SquadLayout, settings: Settings, *,
                      bus: EventBus | None = None,
                      secrets: SecretRegistry | None = None) -> SquadRuntime:
        """The runtime as `squadd serve` and `squadd run` use it (not started: `async with`
        it): the provider the settings name, with its retries as events; the invoker with the
        project's variables and secrets and the approval broker; and the custom tools
        discovered at each session start (`.squad/tools/`, the user's, `tools.extra_dirs`).
        `secrets` is the registry the caller's log processor redacts (a new one if not given:
        then `runtime.secrets.redact_log_event` is the processor to log with)."""
        from squadd.providers.factory import make_provider
        from squadd.tools.approvals import ApprovalBroker
        from squadd.tools.discovery import ToolDiscoverer

        bus = bus if bus is not None else EventBus(buffer=settings.daemon.event_buffer)
        provider = make_provider(settings.provider, on_retry=retry_publisher(bus),
                                 cwd=layout.repo)
        secrets = secrets if secrets is not None else SecretRegistry()
        # The provider's API key is a secret too: a tool that prints it (a `.env` file read)
        # has it redacted like any other.
        secrets.remember(provider_key(settings))
        invoker = ToolInvoker(layout, settings, bus,
                              variables=SquadVariables(layout, settings, registry=secrets),
                              approvals=ApprovalBroker(settings, bus))
        discoverer = ToolDiscoverer()  # this runtime's: loaded tool files, by stat
        runtime = cls(layout, settings, provider, bus=bus, invoker=invoker,
                      discoverer=discoverer, owns_provider=True, secrets=secrets,
                      python_workers=discoverer.workers)
        broker = invoker.approvals
        if isinstance(broker, ApprovalBroker):
            broker.people = runtime.inbox  # asks wait in the inbox, durable, holding no slot
        return runtime

    def apply_settings(self, settings: Settings) -> list[str]:
        """Run with changed settings from now on: the live sections (`LIVE_SECTIONS`) reach
        the pool, the tool invoker, the custom tools' discovery and the workspaces (each
        landing reads its settings when it starts). `settings` keeps the running values of
        every other section (`with_live_sections`). The keys it could not apply."""
        kept = self.pool.apply_settings(settings.pool)
        if kept:
            settings = settings.model_copy(update={"pool": self.pool.settings})
        self.settings = settings
        services = self.runner.services
        self.runner.services = dataclasses.replace(
            services, session=dataclasses.replace(services.session, settings=settings))
        self.invoker.apply_settings(settings)
        self.workspaces.apply_settings(settings)
        self.spending.reload(settings)
        self.inbox.settings_changed()  # a session parked at a raised limit goes on
        return kept

    # Lifecycle.
    async def __aenter__(self) -> SquadRuntime:
        self.bus.bind()  # events published from worker threads are handed to this loop
        self._background_done = anyio.Event()
        self._background_done.set()
        self._upkeep_scope = anyio.CancelScope()
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            # What a crashed runtime journaled and its transcripts lack, before anyone reads them.
            await anyio.to_thread.run_sync(replay_journals, self.layout)
            await anyio.to_thread.run_sync(self.ledger.load)
            await self.inbox.load()
            for note in await self.workspaces.reconcile():
                log.warning("workspace reconciled at start", note=note)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            await self._tg.start(self.commits.run)
            await self._tg.start(self.orchestration.run)
            self._ledger_scope = anyio.CancelScope()
            self._tg.start_soon(self._write_ledger, self._ledger_scope)
            self._tg.start_soon(self._upkeep, self._upkeep_scope)
            self._tg.start_soon(self.workspaces.retry_landings)
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            await self.shutdown(grace_s=0.0)
        finally:
            await stack.__aexit__(None, None, None)
            self._tg = None
            if self._owns_provider:
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self.provider.aclose()
            if self.python_workers is not None:  # killed at once; reaped in a thread
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await anyio.to_thread.run_sync(self.python_workers.close)

    async def shutdown(self, *, grace_s: float) -> None:
        """Stop admitting; give running sessions `grace_s` to end, then interrupt the rest."""
        self.pool.closed = True
        await self.settle(timeout_s=grace_s)
        for record in self.pool.live():
            if record.scope is not None:
                record.scope.cancel()
        if self._background_done is not None:
            with anyio.move_on_after(max(10.0, grace_s)):
                await self._background_done.wait()
        if self._upkeep_scope is not None:
            self._upkeep_scope.cancel()
        if self._ledger_scope is not None:
            self._ledger_scope.cancel()  # its last batch is written, shielded
        self.orchestration.close()
        with anyio.move_on_after(10):  # its last entries still share the journal's syncs
            await self.orchestration.flush()
        self.commits.close()

    async def settle(self, *, timeout_s: float) -> bool:
        """Wait until no session has a task in hand; False if some still do after `timeout_s`."""
        with anyio.move_on_after(timeout_s):
            while self.pool.live():
                await self._any_finished()
        return not self.pool.live()

    async def _any_finished(self) -> None:
        events = [r.finished for r in self.pool.live() if r.finished is not None]
        if not events:
            await anyio.sleep(0.01)
            return
        async with anyio.create_task_group() as tg:
            async def wait_one(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()
            for event in events:
                tg.start_soon(wait_one, event)

    async def _write_ledger(self, scope: anyio.CancelScope) -> None:
        with scope:
            await self.ledger.run()

    async def _upkeep(self, scope: anyio.CancelScope) -> None:
        """Idle sessions reaped, and spare files and git worktrees made ahead
        (see `Workspaces.keep_spares`), until `shutdown` cancels `scope`."""
        pool = self.settings.pool
        with scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reap_idle, self.pool, min(5.0, max(0.05, pool.idle_timeout_s / 4)))
                tg.start_soon(keep_spare_files, self.spares,
                              min(2048, 4 * (pool.max_concurrent + 32)))
                tg.start_soon(self.workspaces.keep_spares)
                tg.start_soon(self.workspaces.keep_emptied)
                tg.start_soon(functools.partial(self.inbox.run))

    # The API.
    async def route(self, request: RouteRequest, *,
                    origin: RouteOrigin | None = None) -> RouteResult:
        """Route one task. Never raises for a route that cannot run: the result says why."""
        origin = origin or RouteOrigin()
        planned = functools.partial(self.planner.plan, request, origin, self.settings)
        return await self._admit_and_run(planned, wait=request.wait_for_result, origin=origin)

    async def resume(self, session_id: str, *, wait: bool = True) -> RouteResult:
        """Resume an interrupted session from its transcript (its dangling tool calls answered)."""
        planned = functools.partial(self.planner.resume_plan, session_id, self.settings)
        return await self._admit_and_run(planned, wait=wait, origin=RouteOrigin())

    async def _resume_for_inbox(self, session_id: str, task: str | None) -> None:
        """What answering an inbox item does when nobody waits on it any more (the daemon
        restarted since): the session goes on from its transcript, in the background."""
        if task is None:
            result = await self.resume(session_id, wait=False)
        else:
            result = await self.route(RouteRequest(task=task, session_id=session_id,
                                                   wait_for_result=False))
        if not result.ok:
            log.warning("inbox answer did not resume the session", session_id=session_id,
                        reason=result.reason, message=result.message)

    async def land(self, session_id: str) -> LandResult:
        """Land a session's worktree branch on its target, in turn with every other landing."""
        return await self.workspaces.land(session_id)

    async def notify(self, message: str, *, notification_type: str, session_id: str = "",
                     agent: str = "", title: str = "squadd") -> None:
        """Tell the `Notification` hooks of something that waits on a person (an inbox item):
        `notification_type` names the kind, which their matcher is tried on. Returns once they
        ran; their answers decide nothing."""
        hooks = self.invoker.hooks
        await hook_events.notification(hooks, hooks.session(session_id, agent, None),
                                       message=message, notification_type=notification_type,
                                       title=title)

    async def cancel(self, session_id: str) -> bool:
        """Cancel a queued, running or waiting session; False when it has no task in hand."""
        record = self.pool.get(session_id)
        if record is None or record.state not in LIVE_STATES or record.scope is None:
            return False
        record.scope.cancel()
        return True

    async def status(self, *, agent: str | None = None, include_destroyed: bool = False,
                     session_id: str | None = None) -> StatusReport:
        """Sessions (filtered) and pool totals; with `session_id`, just that session."""
        if session_id is not None:
            view = await self.session(session_id)
            return StatusReport(sessions=[view] if view else [],
                                pool=self.pool.totals(), spending=self.spending_today())
        views = self.pool.views(include_destroyed=include_destroyed)
        if agent is not None:
            views = [v for v in views if v.agent == agent.lower()]
        spaces = {space.session_id: space for space in await self.workspaces.listing()}
        views = [v.model_copy(update={"workspace": spaces[v.session_id]})
                 if v.session_id in spaces else v for v in views]
        return StatusReport(sessions=self.priced(views), pool=self.pool.totals(),
                            spending=self.spending_today())

    def priced(self, views: list[SessionView]) -> list[SessionView]:
        """The views with their sessions' and route trees' costs (from the ledger)."""
        return priced(self.ledger, views)

    def spending_today(self) -> SpendingView:
        return spending_today(self.ledger)

    async def session(self, session_id: str) -> SessionView | None:
        """One session, from the pool, the memory of ended ones, or else its transcript."""
        view = self.pool.view(session_id)
        if view is None:
            view = await ended_view(self.layout, self.pool, session_id)
            if view is None:
                return None
        workspace = await self.workspaces.view(session_id)
        if workspace is not None:
            view = view.model_copy(update={"workspace": workspace})
        return self.priced([view])[0]

    async def scope_call(self, tools: ToolSet, *, agent: str | None,
                         session_id: str | None) -> CallScope:
        """Who a call from outside a session's loop is made as, and the part of `tools` it
        may use (`CallerError` for a session that does not exist or is another agent's)."""
        return await scope_call(tools, pool=self.pool, layout=self.layout,
                                charter_of=self._charters.get, agent=agent,
                                session_id=session_id)

    def snapshot(self) -> StatusReport:
        """Every session the pool knows (ended ones included) and the totals, synchronously."""
        return StatusReport(sessions=self.priced(self.pool.views(include_destroyed=True)),
                            pool=self.pool.totals(), spending=self.spending_today())

    # Planning and running.
    async def _admit_and_run(self, planned: Callable[[], Awaitable[RoutePlan]], *, wait: bool,
                             origin: RouteOrigin) -> RouteResult:
        """Plan (a `Refusal` is the result) and admit in one of the `ADMITTING` places, in
        arrival order; then, for a waited route, run it in the caller's task."""
        async with self._admitting:
            try:
                plan = await planned()
            except Refusal as refusal:
                return refusal.result
            admitted = await self._admit(plan, wait=wait, origin=origin)
        if isinstance(admitted, RouteResult):
            return admitted
        plan, record, ticket, entry = admitted
        async with self.pool.waiting_on_child(origin.session_id, plan.info.session_id):
            return await self.runner.run(plan, record, ticket, entry)

    async def _admit(self, plan: RoutePlan, *, wait: bool,
                     origin: RouteOrigin) -> RouteResult | _Admitted:
        """Give the route its place in the pool and its orchestration entry: a waited route
        to run next, else the result its caller gets now (a refusal, or a
        route accepted to run in the background, started here)."""
        record = self.pool.get(plan.info.session_id) if plan.continuing else None
        if record is None:
            record = SessionRecord(info=plan.info)
        elif record.state in LIVE_STATES:  # another route took it while this one was planned
            message = (f"session {record.session_id} ({record.agent}) is {record.state}: wait "
                       "for its task to end before sending another")
            return RouteResult(ok=False, reason="busy", message=message, error=message,
                               session_id=record.session_id, agent=record.agent)
        else:
            record.info = plan.info
        try:
            ticket = self.pool.admit(record, plan.info.priority)
        except PoolFullError as exc:
            return RouteResult(ok=False, reason="pool_full", message=str(exc), error=str(exc),
                               agent=plan.info.agent, pool=self.pool.totals())
        except RouteError as exc:
            return RouteResult(ok=False, reason="shutting_down", message=str(exc),
                               error=str(exc), agent=plan.info.agent)
        if not wait:
            # The caller hears of the route before its session starts: from here on a crash
            # must not make it vanish, nor the new task of a session it continues. (A waiting
            # caller gets the id only with the result.)
            accept(plan)
            try:
                with anyio.CancelScope(shield=True):
                    await plan.sink.commit()
            except (OSError, SquaddError) as exc:
                self.pool.withdraw(record, ticket)
                message = f"the route could not be recorded, so it was not started: {exc}"
                return RouteResult(ok=False, reason="failed", message=message, error=message,
                                   agent=plan.info.agent)
        record.scope = anyio.CancelScope()
        entry = self.orchestration.new_entry(
            agent=plan.info.agent, session_id=plan.info.session_id, task=plan.task or
            f"(resume) {plan.info.task}", requested_by=plan.info.requested_by or "user",
            priority=plan.info.priority, model=plan.info.model, role=plan.charter.role,
            routed_by=plan.routed_by, mode="sync" if wait else "background")
        await self.orchestration.submit(entry)
        if not wait:
            if self._tg is None:
                self.pool.withdraw(record, ticket)
                raise RuntimeError("SquadRuntime is not running: use `async with` first")
            if self._background == 0:
                self._background_done = anyio.Event()
            self._background += 1
            self._tg.start_soon(self._run_in_background, plan, record, ticket, entry,
                                telemetry.capture())
            return RouteResult(
                ok=True, session_id=plan.info.session_id, agent=plan.info.agent,
                state=record.state, routed_by=plan.routed_by,
                message=(f'Agent "{plan.info.agent}" spawned with session '
                         f"{plan.info.session_id}. Working on: {plan.info.task[:200]}. Collect "
                         f'its answer with squad_status(sessionId="{plan.info.session_id}").'),
            )
        return _Admitted(plan, record, ticket, entry)

    async def _run_in_background(self, plan: RoutePlan, record: SessionRecord,
                                 ticket: SlotTicket, entry: OrchestrationEntry,
                                 trace: object | None = None) -> None:
        try:
            with telemetry.resumed(trace):  # the caller's trace, though it has moved on
                await self.runner.run(plan, record, ticket, entry)
        finally:
            self._background -= 1
            if self._background == 0 and self._background_done is not None:
                self._background_done.set()
