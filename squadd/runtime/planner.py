"""Route planning as a runtime does it: the agent resolved, its charter read (stat-cached; one
read at a time per agent, on the event loop when nothing must be read), and the plan made with
the transcript sink its records will go through (`planning` holds the rules).
"""

from __future__ import annotations

import contextlib

import anyio

from squadd.config import Settings
from squadd.contracts.routes import RouteOrigin, RouteRequest
from squadd.errors import InvalidNameError, NotFoundError
from squadd.runtime.planning import (
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
)
from squadd.runtime.pool import SessionPool
from squadd.runtime.router import Router
from squadd.statcache import NotCached
from squadd.state.charters import Charter
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import FileSink, FileSinks


class Planner:
    """Plans the routes of one runtime."""

    def __init__(self, layout: SquadLayout, pool: SessionPool, sinks: FileSinks, *,
                 default_model: str):
        self.layout = layout
        self.pool = pool
        self.sinks = sinks
        self.default_model = default_model
        self.router = Router(layout)
        self.charters = CharterCache(layout)
        self._reads: dict[str, anyio.Event] = {}
        """Charters being read in a worker thread now, by agent: a burst of routes to an agent
        whose charter is not cached waits for one read instead of each making its own."""

    async def _sink(self, session_id: str) -> FileSink:
        """The sink of a continued session (its path check stats the disk: in a thread)."""
        return await anyio.to_thread.run_sync(self.sinks.existing, session_id)

    async def charter(self, agent: str) -> Charter:
        """The agent's charter (stat-cached); the refusal for an unknown agent lists the roster."""
        try:
            charter = await self._read(agent)
        except (InvalidNameError, NotFoundError) as exc:
            raise Refusal("invalid", f"cannot route: {exc}") from None
        if charter is None:
            raise await anyio.to_thread.run_sync(unknown_agent, self.layout, agent)
        return charter

    async def _read(self, agent: str) -> Charter | None:
        """A hit costs a stat, answered here; a read and a parse go to a worker thread, one
        per agent at a time: routes that miss while it runs wait for it, then look again."""
        while True:
            with contextlib.suppress(NotCached):
                return self.charters.known(agent)
            reading = self._reads.get(agent)
            if reading is None:
                break
            await reading.wait()
        self._reads[agent] = done = anyio.Event()
        try:
            return await anyio.to_thread.run_sync(self.charters.get, agent)
        finally:
            del self._reads[agent]
            done.set()

    async def resume_plan(self, session_id: str, settings: Settings) -> RoutePlan:
        """The plan resuming an interrupted (or parked) session; `Refusal` when it cannot."""
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
        charter = await self.charter(info.agent)
        return continue_plan(None, RouteOrigin(), info, state, charter, settings,
                             await self._sink(session_id))

    async def plan(self, request: RouteRequest, origin: RouteOrigin,
                   settings: Settings) -> RoutePlan:
        """The plan of a routed task (a new session, or the next task of one); `Refusal`
        when it must not run."""
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
            charter = await self.charter(info.agent)
            return continue_plan(request, origin, info, state, charter, settings,
                                 await self._sink(info.session_id))
        target = request.target_agent
        if target and target.strip().lower() != "auto":
            agent, routed_by = resolve_agent(request, self.router, self.charters)
        else:
            busy = frozenset(r.agent for r in self.pool.live())
            agent, routed_by = await anyio.to_thread.run_sync(
                resolve_agent, request, self.router, self.charters, busy)
        charter = await self.charter(agent)
        return new_plan(request, origin, agent, routed_by, charter, settings,
                        self.default_model, self.sinks.new)
