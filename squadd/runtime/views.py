"""What a runtime shows of its sessions: an ended session's view from its transcript, and the
costs the spending ledger puts on views."""

from __future__ import annotations

import anyio

from squadd.contracts.sessions import AgentSpend, SessionView, SpendingView
from squadd.runtime.planning import TERMINAL_STATES, load_transcript, view_from_transcript
from squadd.runtime.pool import SessionPool
from squadd.state.layout import SquadLayout
from squadd.state.spending import SpendingLedger


def priced(ledger: SpendingLedger, views: list[SessionView]) -> list[SessionView]:
    """The views with their sessions' and route trees' costs (from the ledger)."""
    shown = []
    for view in views:
        root = ledger.root_of(view.session_id)
        shown.append(view.model_copy(update={
            "cost_usd": ledger.session(view.session_id).cost, "route": root,
            "route_cost_usd": ledger.route(root).cost if root else None}))
    return shown


def spending_today(ledger: SpendingLedger) -> SpendingView:
    today = ledger.today()
    return SpendingView(day=ledger.day, cost_usd=today.cost, tokens=today.tokens,
                        agents={agent: AgentSpend(cost_usd=t.cost, tokens=t.tokens)
                                for agent, t in ledger.agents_today().items()})


async def ended_view(layout: SquadLayout, pool: SessionPool,
                     session_id: str) -> SessionView | None:
    """The view of a session the pool no longer holds, from its transcript (None: none)."""
    transcript = await anyio.to_thread.run_sync(load_transcript, layout, session_id)
    if transcript is None:
        return None
    view = view_from_transcript(transcript)
    if transcript.last_state in TERMINAL_STATES:
        # Only an ended transcript is the last word; one still being written (a route on
        # its way out of the pool, another process's session) is read again next time.
        pool.remember(view)
    return view
