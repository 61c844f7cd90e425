"""Sessions out on the cluster's workers whose route caller is gone (the coordinator was
restarted): they still end, so the coordinator answers their requests from what their
transcript and Redis say, read once at their first request and kept (bounded) until they end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import anyio

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.runtime.planning import info_from_transcript, load_transcript
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session_info import SessionInfo
from squadd.tools.base import ToolSet

ORPHANS_KEPT = 1024
"""Orphans kept at most: one whose session never ends (its worker died, or Redis lost its
job) must not stay for the daemon's lifetime (a later request reads it again)."""


@dataclass(frozen=True)
class Orphan:
    """A session on the workers whose route caller is gone, as read at its first request."""

    info: SessionInfo
    tools: ToolSet
    cancelled: bool


class Orphans:
    """The orphans met so far, newest last."""

    def __init__(self, runtime: SquadRuntime, guard: RedisGuard):
        self.runtime = runtime
        self.guard = guard
        self._kept: OrderedDict[str, Orphan] = OrderedDict()

    async def get(self, session_id: str) -> Orphan | None:
        """The orphan `session_id`, read from its transcript and Redis the first time; None
        when no transcript is kept (anyone may name a session that does not exist)."""
        orphan = self._kept.get(session_id)
        if orphan is not None:
            self._kept.move_to_end(session_id)
            return orphan
        runtime = self.runtime
        transcript = await anyio.to_thread.run_sync(load_transcript, runtime.layout, session_id)
        if transcript is None:
            return None
        tools = runtime.tools
        if runtime.extra_tools is not None:
            tools = tools.merged(list(await anyio.to_thread.run_sync(runtime.extra_tools)))
        names = transcript.meta.get("tools")
        if isinstance(names, list):
            tools = tools.narrowed([str(n) for n in names])
        client = self.guard.client
        cancelled = bool(await self.guard.run(lambda: client.exists(keys.cancel(session_id))))
        orphan = self._kept[session_id] = Orphan(info_from_transcript(transcript), tools,
                                                 cancelled)
        while len(self._kept) > ORPHANS_KEPT:
            self._kept.popitem(last=False)
        return orphan

    def __iter__(self) -> Iterator[str]:
        return iter(self._kept)

    def drop(self, session_id: str) -> None:
        """Forget it: it ended, or is run again by this coordinator."""
        self._kept.pop(session_id, None)
