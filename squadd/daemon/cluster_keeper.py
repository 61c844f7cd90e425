"""What keeps a coordinator's cluster whole when nobody watches: its ownership lease renewed
every heartbeat (another holder: it stops serving), its run marker checked (gone: Redis lost
its data, and the routes it holds are submitted again: at once where no worker had claimed
them, once their worker is gone where one had), and, after its own restart, every route it
had accepted and not finished resumed (those with a job in Redis are left to the worker that
takes it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import structlog

from squadd.cluster import keys, ownership
from squadd.cluster.connection import RedisGuard
from squadd.cluster.jobs import JobQueue
from squadd.cluster.wire import WorkerBeat
from squadd.config import ClusterSettings
from squadd.runtime.planning import RoutePlan
from squadd.runtime.runtime import SquadRuntime

if TYPE_CHECKING:
    from squadd.daemon.cluster_mode import ClusterStart

log = structlog.get_logger("squadd.coordinator")


class HeldRoute(Protocol):
    """A route the coordinator handed to the workers (its `RemoteSession`)."""

    plan: RoutePlan
    worker: str | None
    done: anyio.Event


class PrefixKeeper:
    """The coordinator's lease, its run marker and the routes it submits again."""

    def __init__(self, runtime: SquadRuntime, settings: ClusterSettings, guard: RedisGuard,
                 jobs: JobQueue, start: ClusterStart, held: Mapping[str, HeldRoute],
                 workers: Callable[[], list[WorkerBeat]],
                 submit: Callable[[RoutePlan], Awaitable[None]]):
        self.runtime = runtime
        self.settings = settings
        self.guard = guard
        self.jobs = jobs
        self.start = start
        self.held = held
        self._workers = workers
        self._submit = submit
        self.on_lost: Callable[[str], None] = lambda reason: None
        """Called when another coordinator took the prefix: the daemon stops serving."""
        self.resubmitting: dict[str, str] = {}
        """Routes submitted again, and why (until a worker claims them)."""
        self._suspect: dict[str, int] = {}
        """Sessions a worker held when Redis lost its jobs, and how many worker scans in a
        row have missed that worker: at two, its job is submitted again."""

    async def keep(self) -> None:
        """Every heartbeat: renew the lease, check the run marker."""
        start = self.start
        client = self.guard.client
        while True:
            found = await ownership.renew(self.guard, start.ownership)
            if found == ownership.LOST:
                holder = await ownership.holder(self.guard)
                reason = ("another coordinator took this cluster's prefix ("
                          f"{ownership.describe(holder or {})}); this one stops serving")
                log.error("coordinator lease lost", holder=holder)
                self.on_lost(reason)
                return
            marker: Any = await self.guard.run(lambda: client.get(keys.RUN))
            if marker != start.run_id:
                await self.guard.run(lambda: client.set(keys.SQUAD,
                                                        start.identity.model_dump_json()))
                await self.guard.run(lambda: client.set(keys.RUN, start.run_id))
                if marker is None:
                    log.error("Redis lost its data (the run marker is gone): submitting every "
                              "route held here again", routes=len(self.held))
                    await self._after_data_loss()
            await anyio.sleep(self.settings.heartbeat_s)

    async def release(self) -> None:
        await ownership.release(self.guard, self.start.ownership)

    def claimed(self, session_id: str) -> None:
        """A worker claimed the session: it is no longer being submitted again."""
        self.resubmitting.pop(session_id, None)
        self._suspect.pop(session_id, None)

    async def _after_data_loss(self) -> None:
        """The job streams are gone. Jobs no worker claimed are submitted again now; a claimed
        one stays with its worker (it carries on without a lease) unless that worker is gone
        too (`recheck`)."""
        await self.jobs.ensure()
        for sid, route in list(self.held.items()):
            if route.done.is_set():
                continue
            if route.worker is None:
                await self._resubmit(route, "Redis lost its data before a worker took it")
            else:
                self._suspect[sid] = 0

    async def recheck(self) -> None:
        """After each scan of the workers: submit again the routes whose worker is gone."""
        live = {w.name for w in self._workers()}
        for sid in list(self._suspect):
            route = self.held.get(sid)
            if route is None or route.done.is_set():
                self._suspect.pop(sid, None)
                continue
            if route.worker in live:
                self._suspect[sid] = 0
                continue
            self._suspect[sid] += 1
            if self._suspect[sid] >= 2:
                self._suspect.pop(sid, None)
                await self._resubmit(route, f"Redis lost its job and its worker "
                                            f"{route.worker} is gone")

    async def _resubmit(self, route: HeldRoute, why: str) -> None:
        sid = route.plan.info.session_id
        self.resubmitting[sid] = why
        log.warning("route submitted again", session_id=sid, reason=why)
        await self._submit(route.plan)

    async def resume_unqueued(self, session_ids: list[str]) -> list[str]:
        """After a restart: resume each accepted, unfinished route (marked interrupted at
        start) that has no job in Redis (its job was never submitted, or was lost); one
        with a job is left to the worker that takes it. Returns those resumed."""
        if not session_ids:
            return []
        queued = await self.jobs.sessions_queued()
        resumed: list[str] = []
        for sid in session_ids:
            if sid in queued:
                continue
            result = await self.runtime.resume(sid, wait=False)
            if result.ok:
                resumed.append(sid)
                self.resubmitting[sid] = "accepted before the coordinator restarted"
            else:
                log.warning("accepted route not resumed", session_id=sid,
                            error=result.error or result.message)
        if resumed:
            log.info("routes accepted before the restart resumed", sessions=resumed)
        return resumed
