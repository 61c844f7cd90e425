"""The group commit's states (`CommitState`), and what `GroupCommit.begin` hands back."""

from __future__ import annotations

import enum

from squadd.state.journal.writer import Job


class CommitState(enum.Enum):
    """Where the group commit's loop side is. A batch is with the commit thread exactly in
    `SYNCING` and `WRITING_AHEAD`."""

    STOPPED = "stopped"
    """No `run()` yet: a commit syncs its writer by itself."""
    IDLE = "idle"
    """Running, with nothing at the thread and nothing waiting."""
    GATHERING = "gathering"
    """A commit lets the other tasks ready now add theirs (one pass of the loop) first."""
    LINGERING = "lingering"
    """Begun or written-ahead records wait (up to `LINGER_S`) for a batch to ride."""
    SYNCING = "syncing"
    """A batch, with its journal sync, is at the thread."""
    WRITING_AHEAD = "writing ahead"
    """Background appends are being written with no sync while the thread has nothing else
    to do; the next sync makes them durable."""
    CLOSED = "closed"
    """Drained and stopped: as `STOPPED`, a commit syncs its writer by itself."""


AT_THREAD = (CommitState.SYNCING, CommitState.WRITING_AHEAD)
RUNNING = (CommitState.IDLE, CommitState.GATHERING, CommitState.LINGERING, *AT_THREAD)


class Pending:
    """Records on their way to being durable (`GroupCommit.begin`): `GroupCommit.finish`
    waits for them."""

    __slots__ = ("_job",)

    def __init__(self, job: Job | None):
        self._job = job
