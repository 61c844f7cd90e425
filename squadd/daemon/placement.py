"""Where each cluster session runs, as the coordinator records and tells it: the worker that
claimed it last and the highest lease epoch its transcript holds (epochs never go back, even
when Redis lost them), and the `session.claimed` / `session.reclaimed` events.
"""

from __future__ import annotations

from typing import Any

from squadd.contracts.events import BaseEvent, SessionClaimed, SessionReclaimed


def last_epoch(states: list[dict[str, Any]]) -> int:
    """The highest lease epoch a claim recorded in the transcript (0: never claimed)."""
    return max((int(r["epoch"]) for r in states if isinstance(r.get("epoch"), int)), default=0)


def last_worker(states: list[dict[str, Any]]) -> str | None:
    """The worker that claimed the session last, as its transcript records it."""
    for record in reversed(states):
        if record.get("worker"):
            return str(record["worker"])
    return None


def claim_event(session_id: str, agent: str, worker: str, host: str, epoch: int,
                previous: str | None) -> BaseEvent:
    """`session.claimed`, or `session.reclaimed` when another worker held it before."""
    if previous is None:
        return SessionClaimed(session_id=session_id, agent=agent, worker=worker, host=host,
                              epoch=epoch)
    return SessionReclaimed(session_id=session_id, agent=agent, worker=worker, host=host,
                            epoch=epoch, previous_worker=previous)
