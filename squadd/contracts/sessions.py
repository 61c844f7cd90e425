"""Session views: what `squad_status`, `GET /v1/sessions` and `squadd status` show of the
pool's sessions, and the pool's totals."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel

from squadd.contracts.workspaces import WorkspaceView

Priority = Literal["normal", "urgent"]
SessionState = Literal[
    "queued", "creating", "active", "waiting", "idle", "error", "interrupted", "destroyed"
]
LIVE_STATES: frozenset[str] = frozenset({"queued", "creating", "active", "waiting"})
"""States of a session that has a task in hand (it cannot take another one yet)."""


class PoolTotals(BaseModel):
    running: int
    """Sessions holding a slot (creating or active)."""
    queued: int
    """Routes waiting in the admission queue."""
    waiting: int
    """Sessions waiting on a child route (they hold no slot)."""
    idle: int
    max_concurrent: int
    max_queued: int


class SessionView(BaseModel):
    """One session as `squad_status` and `squadd status` show it."""

    session_id: str
    agent: str
    state: SessionState
    task: str
    model: str = ""
    priority: Priority = "normal"
    parent_session_id: str | None = None
    requested_by: str | None = None
    depth: int = 0
    created: dt.datetime | None = None
    age_s: float = 0.0
    idle_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    answer: str | None = None
    """The final answer of its last task, once that task has ended."""
    error: str | None = None
    workspace: WorkspaceView | None = None
    """Its git worktree, branch, commits and diffstat (asked for by id, with a worktree)."""
    worker: str | None = None
    """The cluster worker that runs (or last ran) it; None: this daemon."""
    worker_host: str | None = None

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class StatusReport(BaseModel):
    sessions: list[SessionView]
    pool: PoolTotals
