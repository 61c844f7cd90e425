"""SquadRuntime: the layout, settings, provider, bus, invoker and pool of one squad, wired together.

It is what the daemon and `squadd run` build. `route()` plans a task, admits it to the pool and
runs its session (in the caller's task when it waits for the result, in the runtime's task group
when it does not); `status()`, `cancel()`, `resume()` and `snapshot()` complete the API. Use it
as `async with SquadRuntime(...) as runtime:`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import NamedTuple

import anyio
import structlog
from anyio.abc import TaskGroup

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.events import EventSink, ProviderRetry
from squadd.contracts.routes import RouteOrigin, RouteRequest, RouteResult
from squadd.contracts.sessions import (
    LIVE_STATES,
    AgentSpend,
    SessionView,
    SpendingView,
    StatusReport,
)
from squadd.errors import (
    InvalidNameError,
    NotFoundError,
    PoolFullError,
    RouteError,
    SquaddError,
)
from squadd.providers.base import Provider, RetryCallback, RetryInfo
from squadd.runtime.budget import Spending
from squadd.runtime.callers import CallScope, scope_call
from squadd.runtime.events import EventBus
from squadd.runtime.inbox import Inbox
from squadd.runtime.orchestration import OrchestrationEntry, OrchestrationLog
from squadd.runtime.planning import (
    TERMINAL_STATES,
    CharterCache,
    Refusal,
    RoutePlan,
    continue_plan,
    info_from_transcript,
    load_transcript,
    new_plan,
    refuse_if_elsewhere,
    resolve_agent,
    unknown_agent,
    view_from_transcript,
)
from squadd.runtime.pool import SessionPool, SessionRecord
from squadd.runtime.prompt import file_cache
from squadd.runtime.router import Router
from squadd.runtime.runner import ExtraTools, RouteRunner
from squadd.runtime.slots import SlotLimiter, SlotTicket
from squadd.statcache import NotCached
from squadd.state.charters import Charter
from squadd.state.journal import GroupCommit, replay_journals
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache
from squadd.state.spending import SpendingLedger
from squadd.state.transcripts import PromptFiles, SpareFiles
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

log = structlog.get_logger("squadd.runtime")
SPARE_CHECK_S = 0.1
"""How often the spare files are counted (in memory; no I/O when enough)."""
ADMITTING = 64
"""Routes planned and admitted at once; more wait their turn, in the order they came. A burst
of thousands would otherwise all be planned in one pass of the event loop (about 0.1 ms each),
while the sessions already given a slot wait behind it to send their first model request."""

def retry_publisher(sink: EventSink) -> RetryCallback:
    """The `on_retry` callback for providers: each retry becomes a `provider.retry` event."""
    def publish(info: RetryInfo) -> None:
        sink.publish(ProviderRetry(provider=info.provider, attempt=info.attempt,
                                   wait_s=round(info.wait_s, 3), reason=info.reason[:500],
                                   status=info.status))
    return publish


class _Admitted(NamedTuple):
    """A waited route with its place in the pool, to be run by its caller's task."""

    plan: RoutePlan
    record: SessionRecord
    ticket: SlotTicket
    entry: OrchestrationEntry


def provider_key(settings: Settings) -> dict[str, str]:
    """The provider's API key by its variable's name, where the provider takes one and it is
    set (for redaction)."""
    from squadd.providers import anthropic, openai
    from squadd.providers.http import api_key_from

    default = {"openai": openai.DEFAULT_KEY_ENV,
               "anthropic": anthropic.DEFAULT_KEY_ENV}.get(settings.provider.kind, "")
    if not default and not settings.provider.api_key_env:
        return {}
    key, name = api_key_from(settings.provider, default)
    return {name: key} if key else {}


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
        self.router = Router(layout)
        self.commits = GroupCommit(layout)
        """Makes sessions' transcript records and the orchestration log's entries durable
        together, one journal sync a batch."""
        self.spares = SpareFiles(layout.sessions_dir)
        """New transcripts' and orchestration-log entries' files, made ahead by a background
        task."""
        self.orchestration = OrchestrationLog(layout, commits=self.commits, spares=self.spares)
        self.extra_tools = extra_tools
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
        self.runner = RouteRunner(
            layout=layout, settings=settings, provider=provider, bus=self.bus,
            invoker=self.invoker, pool=self.pool, orchestration=self.orchestration,
            tools=self.tools, extra_tools=extra_tools, files=self.files,
            summaries=self.skill_summaries, spares=self.spares, prompts=self.prompts,
            workspaces=self.workspaces,
            commits=self.commits, guard=self.spending, inbox=self.inbox)
        self._charters = CharterCache(layout)
        self._charter_reads: dict[str, anyio.Event] = {}
        """Charters being read in a worker thread now, by agent: a burst of routes to an agent
        whose charter is not cached waits for one read instead of each making its own."""
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
        from squadd.tools.discovery import ToolDiscoverer, discover_tools
        from squadd.tools.yaml import bind_agent_tools

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
        runtime: SquadRuntime | None = None

        class CustomTools:
            """The custom tools on disk now (`CachedTools`: a session start on the loop asks
            for them `cached()`, a thread when a file must be read)."""

            def __call__(self) -> ToolSet:
                return self._find(cached_only=False)

            def cached(self) -> ToolSet:
                return self._find(cached_only=True)

            def _find(self, *, cached_only: bool) -> ToolSet:
                builtins = runtime.tools.names if runtime is not None else ()
                current = runtime.settings if runtime is not None else settings
                found = discover_tools(layout, current, bus, builtin_names=builtins,
                                       discoverer=discoverer, cached_only=cached_only).toolset()
                if runtime is None:
                    return found
                # Agent tools route through this runtime, as squad_route does.
                return ToolSet(bind_agent_tools(found, runtime), found.unavailable)

        runtime = cls(layout, settings, provider, bus=bus, invoker=invoker,
                      extra_tools=CustomTools(), owns_provider=True, secrets=secrets,
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
        self.settings = self.runner.settings = settings
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
        with scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._reap_idle)
                tg.start_soon(self._keep_spare_files)
                tg.start_soon(self.workspaces.keep_spares)
                tg.start_soon(functools.partial(self.inbox.run))

    async def _reap_idle(self) -> None:
        interval = min(5.0, max(0.05, self.settings.pool.idle_timeout_s / 4))
        while True:
            await anyio.sleep(interval)
            self.pool.reap()

    async def _keep_spare_files(self) -> None:
        """Keep new transcripts' and orchestration entries' files made ahead, off the routes'
        path (see `SpareFiles`): two a route."""
        spares = self.spares
        wanted = min(2048, 4 * (self.settings.pool.max_concurrent + 32))
        while spares.usable:
            if len(spares) < wanted // 2:
                try:
                    await anyio.to_thread.run_sync(spares.refill, wanted)
                except OSError as exc:  # a full disk: sessions create their own files
                    log.warning("spare files not made", error=str(exc))
                    await anyio.sleep(5)
            await anyio.sleep(SPARE_CHECK_S)

    # The API.
    async def route(self, request: RouteRequest, *,
                    origin: RouteOrigin | None = None) -> RouteResult:
        """Route one task. Never raises for a route that cannot run: the result says why."""
        origin = origin or RouteOrigin()
        return await self._admit_and_run(functools.partial(self._plan, request, origin),
                                         wait=request.wait_for_result, origin=origin)

    async def resume(self, session_id: str, *, wait: bool = True) -> RouteResult:
        """Resume an interrupted session from its transcript (its dangling tool calls answered)."""
        return await self._admit_and_run(functools.partial(self._resume_plan, session_id),
                                         wait=wait, origin=RouteOrigin())

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
        ledger = self.ledger
        priced = []
        for view in views:
            root = ledger.root_of(view.session_id)
            priced.append(view.model_copy(update={
                "cost_usd": ledger.session(view.session_id).cost, "route": root,
                "route_cost_usd": ledger.route(root).cost if root else None}))
        return priced

    def spending_today(self) -> SpendingView:
        today = self.ledger.today()
        return SpendingView(day=self.ledger.day, cost_usd=today.cost, tokens=today.tokens,
                            agents={agent: AgentSpend(cost_usd=t.cost, tokens=t.tokens)
                                    for agent, t in self.ledger.agents_today().items()})

    async def session(self, session_id: str) -> SessionView | None:
        """One session, from the pool, the memory of ended ones, or else its transcript."""
        view = self.pool.view(session_id)
        if view is None:
            view = await self._ended_view(session_id)
            if view is None:
                return None
        workspace = await self.workspaces.view(session_id)
        if workspace is not None:
            view = view.model_copy(update={"workspace": workspace})
        return self.priced([view])[0]

    async def _ended_view(self, session_id: str) -> SessionView | None:
        transcript = await anyio.to_thread.run_sync(load_transcript, self.layout, session_id)
        if transcript is None:
            return None
        view = view_from_transcript(transcript)
        if transcript.last_state in TERMINAL_STATES:
            # Only an ended transcript is the last word; one still being written (a route on
            # its way out of the pool, another process's session) is read again next time.
            self.pool.remember(view)
        return view

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
    async def _charter(self, agent: str) -> Charter:
        """The agent's charter (stat-cached); the refusal for an unknown agent lists the roster."""
        try:
            charter = await self._read_charter(agent)
        except (InvalidNameError, NotFoundError) as exc:
            raise Refusal("invalid", f"cannot route: {exc}") from None
        if charter is None:
            raise await anyio.to_thread.run_sync(unknown_agent, self.layout, agent)
        return charter

    async def _read_charter(self, agent: str) -> Charter | None:
        """A hit costs a stat, answered here; a read and a parse go to a worker thread, one
        per agent at a time: routes that miss while it runs wait for it, then look again."""
        while True:
            with contextlib.suppress(NotCached):
                return self._charters.get(agent, cached_only=True)
            reading = self._charter_reads.get(agent)
            if reading is None:
                break
            await reading.wait()
        self._charter_reads[agent] = done = anyio.Event()
        try:
            return await anyio.to_thread.run_sync(self._charters.get, agent)
        finally:
            del self._charter_reads[agent]
            done.set()

    async def _resume_plan(self, session_id: str) -> RoutePlan:
        record = self.pool.get(session_id)
        if record is not None:
            if record.state != "interrupted":
                raise Refusal("invalid", f"session {session_id} is {record.state}: only an "
                                         "interrupted (or parked) session can be resumed")
            info, state = record.info, record.state
        else:
            transcript = await anyio.to_thread.run_sync(load_transcript, self.layout, session_id)
            if transcript is None:
                raise Refusal("unknown_session", f"no session {session_id}: there is no "
                                                 "transcript for it")
            refuse_if_elsewhere(transcript)
            last = transcript.last_state
            if last in ("completed", "error"):
                raise Refusal("invalid", f"session {session_id} ended ({last}); nothing "
                                         "to resume (route a new task to it instead)")
            info, state = info_from_transcript(transcript), None
        charter = await self._charter(info.agent)
        return continue_plan(None, RouteOrigin(), info, state, charter, self.settings)

    async def _plan(self, request: RouteRequest, origin: RouteOrigin) -> RoutePlan:
        if request.session_id is not None:
            record = self.pool.get(request.session_id)
            if record is not None:
                info, state = record.info, record.state
            else:
                transcript = await anyio.to_thread.run_sync(load_transcript, self.layout,
                                                            request.session_id)
                if transcript is None or not transcript.meta.get("agent"):
                    raise Refusal("unknown_session", f"no session {request.session_id}: "
                                                     "check the id with squad_status")
                refuse_if_elsewhere(transcript)
                info, state = info_from_transcript(transcript), None
            charter = await self._charter(info.agent)
            return continue_plan(request, origin, info, state, charter, self.settings)
        target = request.target_agent
        if target and target.strip().lower() != "auto":
            agent, routed_by = resolve_agent(request, self.router, self._charters)
        else:
            busy = frozenset(r.agent for r in self.pool.live())
            agent, routed_by = await anyio.to_thread.run_sync(
                resolve_agent, request, self.router, self._charters, busy)
        charter = await self._charter(agent)
        return new_plan(request, origin, agent, routed_by, charter, self.settings,
                        self.provider.default_model)

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
            try:
                with anyio.CancelScope(shield=True):
                    writer = await anyio.to_thread.run_sync(plan.acceptance, self.layout,
                                                            self.spares)
                    if writer is not None:
                        await self.commits.commit(writer)
            except (OSError, SquaddError) as exc:
                self.pool.withdraw(record, ticket)
                message = f"the route could not be recorded, so it was not started: {exc}"
                return RouteResult(ok=False, reason="failed", message=message, error=message,
                                   agent=plan.info.agent)
            plan.recorded = writer is not None
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
