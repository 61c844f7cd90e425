"""The workspace records under ``run/workspaces/`` (one JSON file per session, replaced
atomically), and the kill points crash tests choose through ``SQUADD_KILL_POINT``.

A record is written before each step it names (`creating`, `committing`, `landing`), so after
a crash the record says which step was under way; start-up reconciliation finishes or undoes it.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import signal
from pathlib import Path

from squadd.contracts.workspaces import WorkspaceView
from squadd.fsio import atomic_write
from squadd.state.layout import SquadLayout

KILL_ENV = "SQUADD_KILL_POINT"
"""Names a kill point (e.g. `land.after_rebase`): the process SIGKILLs itself on reaching it."""


def kill_point(name: str) -> None:
    """Die here, as a kill -9 would, when the kill point named in `KILL_ENV` is this one."""
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def parse_time(stamp: str) -> dt.datetime | None:
    """A record's time (ISO 8601; one without a zone is UTC), or None when it is not one
    (edited by hand)."""
    try:
        moment = dt.datetime.fromisoformat(stamp)
    except (ValueError, TypeError):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def save(layout: SquadLayout, record: WorkspaceView) -> WorkspaceView:
    """Write `record` durably (atomic replace + fsync), stamping its `updated` time."""
    record.updated = now_iso()
    atomic_write(layout.workspace_record(record.session_id),
                 record.model_dump_json(indent=1) + "\n")
    return record


def load(layout: SquadLayout, session_id: str) -> WorkspaceView | None:
    return _read(layout.workspace_record(session_id))


def _read(path: Path) -> WorkspaceView | None:
    try:
        return WorkspaceView.model_validate_json(path.read_bytes())
    except (FileNotFoundError, ValueError):  # none, or damaged (a ValidationError is one)
        return None


def drop(layout: SquadLayout, session_id: str) -> None:
    layout.workspace_record(session_id).unlink(missing_ok=True)


def load_all(layout: SquadLayout, *, prefix: str = "") -> list[WorkspaceView]:
    """Every readable record (only those whose id starts with `prefix`: the others are not
    read), oldest first (a damaged one, or a file that is not a record, is skipped, not
    fatal)."""
    folder = layout.workspaces_dir
    records = []
    for path in sorted(folder.glob(f"{glob.escape(prefix)}*.json")) if folder.is_dir() else ():
        record = _read(path)
        if record is not None and record.session_id == path.stem:
            records.append(record)
    return sorted(records, key=lambda r: r.created)


def next_step(record: WorkspaceView) -> str | None:
    """What moves a workspace that will not move by itself: one command or action (None for
    one that moves by itself: a session at work, a step a start-up finishes, or one done)."""
    sid = record.session_id
    if record.state == "conflict" and record.message.startswith("repair turn"):
        return None  # its agent is at work on it
    if record.state in ("conflict", "needs_attention", "interrupted", "committed"):
        if record.outcome is not None and record.outcome.next:
            return record.outcome.next
        if record.state == "interrupted":
            return f"squadd sessions resume {sid}"
        return f"squadd land {sid}"
    return None
