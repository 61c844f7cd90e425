"""The coordinator: `squadd serve --cluster` as the single writer for a cluster of workers.

It is the runtime's `SessionHost`: a routed session runs in one of the `--local-slots` here,
or becomes a job on the Redis job stream that a worker takes, and its route waits until the
worker reports the end. It answers the workers' requests (one at a time per request id, see
`squadd.cluster.requests`; what each answer does is `squadd.daemon.cluster_requests`), relays
the workers' events onto the bus, watches their heartbeats, and keeps its prefix's lease
(`squadd.daemon.cluster_keeper`).

Anyone who can write to Redis can send a request, so a worker is trusted with no more than a
worker sends: a claim only of a job the group gave that worker; then, for the session it holds
under its current epoch, records, its end, and calls of the squad tools. Anything else (a
workspace or custom tool, another worker's session, a stale epoch) is refused and logged.
"""

from __future__ import annotations

import contextlib
import functools
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog

from squadd import telemetry
from squadd.cluster import keys
from squadd.cluster.connection import ClusterError, RedisGuard
from squadd.cluster.events import relay_events
from squadd.cluster.jobs import JobQueue
from squadd.cluster.requests import RequestServer
from squadd.cluster.wire import Job, WorkerBeat
from squadd.cluster.workers import live_workers
from squadd.config import ClusterSettings
from squadd.daemon import remote_worktrees
from squadd.daemon.cluster_keeper import PrefixKeeper
from squadd.daemon.cluster_requests import REDO_SAFE, WorkerRequests
from squadd.daemon.orphans import Orphans
from squadd.daemon.placement import RemoteSession
from squadd.runtime.opening import accept
from squadd.runtime.planning import RoutePlan
from squadd.runtime.pool import SessionRecord
from squadd.runtime.runner import RunHere
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session import SessionOutcome
from squadd.runtime.session_info import SessionInfo
from squadd.runtime.session_sink import SessionSink
from squadd.tools.base import ToolSet
from squadd.workspaces.git import Git

if TYPE_CHECKING:
    from squadd.daemon.cluster_mode import ClusterStart

log = structlog.get_logger("squadd.coordinator")


class Coordinator:
    """Runs sessions on the cluster's workers for one runtime, and serves their requests."""

    def __init__(self, runtime: SquadRuntime, settings: ClusterSettings, guard: RedisGuard,
                 *, start: ClusterStart | None = None):
        self.runtime = runtime
        self.start = start
        """Its ownership lease, run marker and squad (None: a test's coordinator, unowned)."""
        self.settings = settings
        self.guard = guard
        self.jobs = JobQueue(guard)
        self._git = Git(runtime.settings.workspace.git_timeout_s)

        self.local_free = settings.local_slots
        self.workers: list[WorkerBeat] = []
        """The live workers, as last seen (refreshed every heartbeat)."""
        self._remote: dict[str, RemoteSession] = {}
        self.keeper = None if start is None else PrefixKeeper(
            runtime, settings, guard, self.jobs, start, self._remote, lambda: self.workers,
            self._submit)
        """Its lease, run marker and routes submitted again (None: unowned, in tests)."""
        self._orphans = Orphans(runtime, guard)
        self.requests = WorkerRequests(runtime, guard, self.jobs, self._remote, self._orphans,
                                       self._git, self._claimed)
        self.handle = self.requests.handle
        """Answers one worker request (what the request server calls)."""
        self.server = RequestServer(guard, self.handle, reply_ttl_s=settings.reply_ttl_s,
                                    redo_safe=REDO_SAFE)

    # Lifecycle.
    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                  ) -> None:
        """Serve requests, relay events and watch the workers until cancelled."""
        await self.jobs.ensure()
        async with anyio.create_task_group() as tg:
            if self.keeper is not None:
                tg.start_soon(self._resilient, self.keeper.keep)
            tg.start_soon(self._resilient, self.server.run)
            tg.start_soon(self._resilient, functools.partial(
                relay_events, self.guard, self.runtime.bus.publish))
            tg.start_soon(self._watch_workers)
            task_status.started()

    async def _resilient(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run `loop` again whenever it stops: Redis stayed away past its bound (routes that
        need Redis fail, naming `cluster.redis_down_s`) or refused a command (it lost its
        data: the loop makes its group again). The daemon keeps serving."""
        while True:
            failed: list[str] = []
            try:
                await loop()
            except* Exception as group:
                failed.extend(f"{type(e).__name__}: {e}" for e in group.exceptions[:1])
            log.error("cluster loop stopped; starting it again", error=failed[:1])
            await anyio.sleep(self.settings.heartbeat_s)

    async def report(self) -> dict[str, Any]:
        """What `squadd status` and `squadd doctor` show: Redis, the workers and their slots,
        the job streams' lags, the sessions out on workers."""
        lags: dict[str, dict[str, int]] = {}
        backlog: dict[str, Any] = {}
        if self.guard.up:
            with contextlib.suppress(ClusterError, TimeoutError), anyio.fail_after(5):
                # Now, not as the last heartbeat's listing left them: a worker that started
                # since is listed (and serving) already.
                self.workers = await live_workers(self.guard)
                lags = await self.jobs.lags()
                backlog = await self.jobs.backlog(now_ms=int(time.time() * 1000))
        return {
            "url": self.guard.url, "redis_up": self.guard.up, "redis_outages": self.guard.outages,
            "owner": self.start.ownership.holder if self.start is not None else None,
            "squad": self.start.identity.model_dump() if self.start is not None else None,
            "streams": backlog.get("streams", {}),
            "pending_per_worker": backlog.get("pending_per_worker", {}),
            "resubmitting": dict(self.keeper.resubmitting) if self.keeper is not None else {},
            "local_slots": self.settings.local_slots,
            "local_free": self.local_free,
            "workers": [w.model_dump(mode="json") for w in self.workers],
            "slots": sum(w.slots for w in self.workers),
            "busy": sum(w.busy for w in self.workers),
            "remote_sessions": {sid: r.worker for sid, r in self._remote.items()},
            "jobs": lags, "requests_answered": self.server.handled,
        }

    async def close(self) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            if self.keeper is not None:
                with contextlib.suppress(ClusterError):
                    await self.keeper.release()
            await self.guard.client.aclose()

    async def _submit(self, plan: RoutePlan, *, uncancel: bool = False,
                      handed: dict[str, Any] | None = None) -> None:
        """Put the route's session on the job stream; `handed`: a new session's hand-over
        (`Job.handed`), so the worker that takes it may start without a claim."""
        info = plan.info
        nonce = secrets.token_hex(16)
        remote = self._remote.get(info.session_id)
        if remote is not None:  # marked before the job is out: its claim may come at once
            remote.nonces.add(nonce)
        job = Job(session_id=info.session_id, agent=info.agent,
                  priority="urgent" if info.priority == "urgent" else "normal",
                  timeout_s=plan.timeout_s, nonce=nonce, traceparent=telemetry.traceparent(),
                  handed=handed)
        entry = await self.jobs.submit(job, uncancel=uncancel)
        if remote is not None:
            remote.entries[entry] = self.jobs.stream_of(job)

    async def _watch_workers(self) -> None:
        while True:
            try:
                self.workers = await live_workers(self.guard)
                if self.keeper is not None:
                    await self.keeper.recheck()
                # Every session out on a worker may hold one request while it waits.
                self.server.fit(max(sum(w.slots for w in self.workers), len(self._remote)))
            except ClusterError as exc:
                log.warning("workers not listed", error=str(exc))
            await anyio.sleep(self.settings.heartbeat_s)

    # The runtime's SessionHost.
    async def run_session(self, plan: RoutePlan, record: SessionRecord, tools: ToolSet,
                          sink: SessionSink, run_here: RunHere) -> SessionOutcome:
        if self.local_free > 0:
            self.local_free -= 1
            try:
                return await run_here()
            finally:
                self.local_free += 1
        info = plan.info
        remote = RemoteSession(plan, record, tools, sink)
        self._remote[info.session_id] = remote
        # Seen before as an orphan (an earlier run's worker): that cached answer, its cancel
        # state included, is over; once this run ends, a request reads it afresh.
        self._orphans.drop(info.session_id)
        bound = 2 * plan.timeout_s + self.settings.lease_s
        try:
            handed = await self._hand_ahead(plan)
            if handed is None:
                await self._open(plan)
            # A cancel of an earlier run of this session (now resumed or continued) is over.
            await self._submit(plan, uncancel=True, handed=handed)
            with anyio.fail_after(bound):
                await remote.done.wait()
            with anyio.CancelScope(shield=True):
                await remote_worktrees.bring_back(self._git, self.runtime.layout,
                                                  info.session_id)
        except TimeoutError:
            await self._cancel(remote)
            return _failed(info, f"no worker finished it within {bound:g}s (twice "
                                 "route.timeout_s plus cluster.lease_s); 'squadd status' "
                                 "lists the live workers")
        except ClusterError as exc:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._cancel(remote)
            return _failed(info, str(exc))
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self._cancel(remote)
            raise
        finally:
            self._remote.pop(info.session_id, None)
            if self.keeper is not None:
                self.keeper.claimed(info.session_id)
        assert remote.outcome is not None
        return remote.outcome


    def _claimed(self, session_id: str) -> None:
        if self.keeper is not None:
            self.keeper.claimed(session_id)

    def host(self) -> _Host:
        """This coordinator as the runner's `SessionHost`."""
        return _Host(self)

    async def _hand_ahead(self, plan: RoutePlan) -> dict[str, Any] | None:
        """A new session's opening made durable and its hand-over for its job, when it may
        have one (`WorkerRequests.hand_ahead`); a failure is logged, and the claim does it."""
        try:
            return await self.requests.hand_ahead(plan.info.session_id)
        except Exception as exc:
            log.warning("session not handed over with its job; its worker claims it",
                        session_id=plan.info.session_id, error=f"{type(exc).__name__}: {exc}")
            return None

    async def _open(self, plan: RoutePlan) -> None:
        """Make the route's start durable before a worker may take it, unless its acceptance
        did. A continuation's task is recorded as accepted; the claim's `conversation()`
        makes it the next user message, as a local resume would. Records a hand-over that
        failed left in the sink go with it."""
        if not plan.sink.written and not plan.sink.pending:
            accept(plan)
        if plan.sink.pending:
            with anyio.CancelScope(shield=True):
                await plan.sink.commit()


    async def _cancel(self, remote: RemoteSession) -> None:
        """Tell the workers the session is cancelled (a worker holding it stops at its next
        request; a claim is refused). Without Redis, the flag stays in memory."""
        remote.cancelled = True
        client = self.guard.client
        sid = remote.plan.info.session_id
        try:
            await self.guard.run(lambda: client.set(keys.cancel(sid), "1",
                                                     ex=self.settings.reply_ttl_s))
        except ClusterError as exc:
            log.warning("cancel not stored in Redis", session_id=sid, error=str(exc))

class _Host:
    """Adapts a `Coordinator` to the runner's `SessionHost` Protocol."""

    def __init__(self, coordinator: Coordinator):
        self.coordinator = coordinator

    async def run(self, plan: RoutePlan, record: SessionRecord, tools: ToolSet,
                  sink: SessionSink, run_here: RunHere) -> SessionOutcome:
        return await self.coordinator.run_session(plan, record, tools, sink, run_here)


def _failed(info: SessionInfo, error: str) -> SessionOutcome:
    return SessionOutcome(session_id=info.session_id, agent=info.agent, status="error",
                          error=error, model=info.model)
