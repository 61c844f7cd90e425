"""The records a route writes to its session's transcript outside the session's loop.

An accepted route (a new session, or a new task for one at rest) is made durable before its
caller hears it was accepted; a route whose session never started (its wait for a slot timed out
or was cancelled) has its end appended. The loop itself is `AgentSession`'s.
"""

from __future__ import annotations

from typing import Any

from squadd.runtime.session_info import SessionInfo, session_meta
from squadd.state.layout import SquadLayout
from squadd.state.owner import current_owner
from squadd.state.transcripts import SpareFiles, TranscriptWriter, now_iso


def acceptance_writer(layout: SquadLayout, info: SessionInfo, context: str | None,
                      spares: SpareFiles | None = None) -> TranscriptWriter:
    """What makes an accepted route durable before its caller hears it was accepted (blocking:
    the path is checked): its meta (with the context) and a `queued` state. A daemon that dies
    before the session starts leaves this transcript; recovery marks it interrupted, and
    resuming it starts the task from the beginning."""
    writer = TranscriptWriter(layout.transcript(info.session_id), spares)
    writer.add("meta", **session_meta(info), context=context, created=now_iso(),
               owner=current_owner())
    writer.add("state", state="queued")
    return writer


def record_acceptance(layout: SquadLayout, info: SessionInfo, context: str | None,
                      spares: SpareFiles | None = None) -> None:
    """`acceptance_writer`'s records, written and fsynced at once (blocking)."""
    acceptance_writer(layout, info, context, spares).flush()


def continuation_writer(layout: SquadLayout, session_id: str, task: str,
                        context: str | None) -> TranscriptWriter:
    """What makes an accepted continuation (a new task for a session at rest) durable before
    its caller hears it was accepted (blocking): a `queued` state with the task. If the daemon
    dies before the task starts, recovery marks the session interrupted and resuming it runs
    this task (see `pending_task`)."""
    writer = TranscriptWriter(layout.transcript(session_id))
    writer.add("state", state="queued", task=task, context=context)
    return writer


def record_unstarted_end(layout: SquadLayout, session_id: str, state: str,
                         **fields: Any) -> None:
    """The end of an accepted route whose session never started (its wait for a slot timed
    out or was cancelled), appended to its transcript (blocking)."""
    writer = TranscriptWriter(layout.transcript(session_id))
    writer.add("state", state=state, **fields)
    writer.flush()
