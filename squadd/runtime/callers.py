"""Whose tool set a call from outside a session's own loop gets: the daemon's tool API (and so
every `squadd mcp` an agent CLI starts) names an agent and a session, and the call may use
only what that session and that agent's charter allow, as if the session had made it.

A call from a session runs with the session's identity (agent, depth, lineage), so its routes
nest under the session, and depth and cycle checks hold as they do inside the session.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio

from squadd.errors import CallerError as CallerError
from squadd.errors import SquaddError
from squadd.runtime.planning import info_from_transcript, load_transcript
from squadd.runtime.pool import SessionPool
from squadd.runtime.session_info import SessionInfo, charter_toolset, session_toolset
from squadd.state.charters import Charter
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from squadd.tools.invoke import CallOrigin

OUTSIDE_SESSION = "external"
"""The session id of calls made from no session (their spilled outputs go under it)."""
OUTSIDE_AGENT = "user"


@dataclass(frozen=True)
class CallScope:
    """Who a call is made as, and the tools it may use (others are refused, the rule named)."""

    origin: CallOrigin
    tools: ToolSet


async def scope_call(tools: ToolSet, *, pool: SessionPool, layout: SquadLayout,
                     charter_of: Callable[[str], Charter | None], agent: str | None,
                     session_id: str | None) -> CallScope:
    """The scope of a call made as `agent` (None: a person) from `session_id` (None: none)."""
    if session_id is None or session_id == OUTSIDE_SESSION:
        name = agent or OUTSIDE_AGENT
        charter = await _charter(charter_of, name) if name != OUTSIDE_AGENT else None
        return CallScope(CallOrigin(session_id=OUTSIDE_SESSION, agent=name),
                         charter_toolset(tools, charter))
    info, recorded = await _session(pool, layout, session_id)
    if agent is not None and agent not in (OUTSIDE_AGENT, info.agent):
        raise CallerError(f"session {session_id} belongs to {info.agent}, not {agent}: a call "
                          "from a session is made as its own agent", status=403)
    by_route = session_toolset(tools, info.available_tools, None, session_id=session_id)
    if recorded is not None:
        allowed = set(recorded.names if isinstance(recorded, ToolSet) else recorded)

        def why(name: str) -> str:
            given = recorded.refusal(name) if isinstance(recorded, ToolSet) else None
            return given or by_route.refusal(name) or (
                f"session {session_id} was not given {name} when its task started")

        scoped = ToolSet([tool for tool in tools if tool.name in allowed],
                         refused={name: why(name) for name in tools.names if name not in allowed})
    else:
        scoped = by_route
    charter = await _charter(charter_of, info.agent)
    origin = CallOrigin(session_id=session_id, agent=info.agent, depth=info.depth,
                        lineage=(*info.lineage, info.agent))
    return CallScope(origin, charter_toolset(scoped, charter))


async def _charter(charter_of: Callable[[str], Charter | None], agent: str) -> Charter | None:
    try:
        return await anyio.to_thread.run_sync(charter_of, agent)
    except SquaddError:  # not an agent's name: no charter narrows its calls
        return None


async def _session(pool: SessionPool, layout: SquadLayout,
                   session_id: str) -> tuple[SessionInfo, ToolSet | list[str] | None]:
    """The session's identity, and the tools its latest task was given (their names when
    read from its transcript; None when not known: its route's `availableTools` decide)."""
    record = pool.get(session_id)
    if record is not None:
        return record.info, record.tools
    transcript = await anyio.to_thread.run_sync(load_transcript, layout, session_id)
    if transcript is None or not transcript.meta.get("agent"):
        raise CallerError(f"no session {session_id}: a call can only be made from a session "
                          "squadd knows ('squadd sessions list' shows them)", status=404)
    names = transcript.meta.get("tools")
    recorded = [str(n) for n in names] if isinstance(names, list) else None
    return info_from_transcript(transcript), recorded
