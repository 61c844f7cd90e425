"""Where each cluster session runs, as the coordinator records and tells it: the worker that
claimed it last and the highest lease epoch its transcript holds (epochs never go back, even
when Redis lost them), the `session.claimed` / `session.reclaimed` events, and the sessions
out on workers whose route waits on this coordinator (`RemoteSession`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from squadd.cluster.wire import Request
from squadd.contracts.events import BaseEvent, SessionClaimed, SessionReclaimed
from squadd.runtime.planning import RoutePlan
from squadd.runtime.pool import SessionRecord
from squadd.runtime.session import SessionOutcome
from squadd.runtime.session_sink import SessionSink
from squadd.state.transcripts import read_transcript
from squadd.tools.base import ToolSet


@dataclass(eq=False)
class RemoteSession:
    """A session this coordinator handed to the workers and whose route waits for it."""

    plan: RoutePlan
    record: SessionRecord
    tools: ToolSet
    sink: SessionSink
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: SessionOutcome | None = None
    worker: str | None = None
    cancelled: bool = False
    nonces: set[str] = field(default_factory=set)
    """The marks of the jobs submitted for it: a claim must hold a job with one of these."""
    entries: dict[str, str] = field(default_factory=dict)
    """The stream entries of those jobs (entry id to stream), once Redis has answered."""
    unheld: bool = False
    """Its job's hand-over is durable and no worker holds it yet: its transcript names no
    holder, so a first request need not read it to know (`WorkerRequests._holder`)."""


def recorded_holder(path: Path) -> tuple[str, int] | None:
    """The worker whose claim (or first request of a handed job) holds the session, and its
    epoch, as the transcript at `path` records it (blocking)."""
    if not path.exists():
        return None
    for record in reversed(read_transcript(path).records):
        if record.get("kind") == "state" and "cluster" not in record \
                and isinstance(record.get("worker"), str) \
                and isinstance(record.get("epoch"), int):
            return record["worker"], record["epoch"]
    return None


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


def job_of(remote: RemoteSession | None, offered: Any) -> tuple[str, str] | None:
    """The job an end offers to have acknowledged with its reply (`{"stream", "entry"}`),
    when it is one submitted for the session (else the worker acknowledges it itself)."""
    if remote is None or not isinstance(offered, dict):
        return None
    stream, entry = offered.get("stream"), offered.get("entry")
    if not isinstance(entry, str) or not isinstance(stream, str) \
            or remote.entries.get(entry) != stream:
        return None
    return stream, entry


def marked_held(remote: RemoteSession | None, request: Request) -> bool:
    """Whether the group gave the request's worker a job of the session, as Redis marked the
    request when the worker added it (`Request.held`: the job was pending for that worker
    then), with no `XPENDING` of the coordinator's own. The mark must name a job submitted for
    the session, and the request carry that session's job nonce: a field anyone who can add a
    request could write, the nonce only a reader of the job streams can know."""
    held, nonce = request.held, request.body.get("nonce")
    return (held is not None and remote is not None and isinstance(nonce, str)
            and nonce in remote.nonces and remote.entries.get(held[1]) == held[0])
