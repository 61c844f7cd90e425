"""Write-ahead intents: appends that land exactly once, even when the process is killed mid-write.

Before an append that must not be torn, lost or repeated, the bytes and the offset they go to are
saved (fsynced) in an intent file under ``run/journal/``. After a crash, `finish_append` completes
a torn append or confirms a whole one; the caller then redoes its follow-up step and clears it.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from squadd.fsio import TEAM_FILE, append_fsync, atomic_write, fsync_dir
from squadd.state.crashpoint import crash_point
from squadd.state.layout import SquadLayout

log = structlog.get_logger("squadd.state")

_MAGIC = "squadd-append-intent-1"

AppendState = Literal["complete", "finished", "stale"]
"""`complete`: the append was whole; `finished`: it was torn and is now whole; `stale`: the
target changed since, so the intent no longer applies and nothing was written."""


@dataclass(frozen=True)
class AppendIntent:
    """An append of `data` to `target` at offset `start`, saved before it was attempted."""

    journal: Path
    target: Path
    start: int
    inode: int
    """The target's inode when the intent was written (0: the target did not exist yet)."""
    data: bytes
    meta: dict[str, Any] = field(default_factory=dict)


def intent_file(layout: SquadLayout, target: Path) -> Path:
    """Where the intent for appends to `target` is kept (one pending intent per target)."""
    relative = layout.inside(target).relative_to(layout.root)
    return layout.inside(layout.run_dir / "journal" / ("__".join(relative.parts) + ".intent"))


def append_with_intent(
    layout: SquadLayout, target: Path, data: bytes, meta: dict[str, Any] | None = None
) -> AppendIntent:
    """Save the intent, then append `data` to `target` and fsync it. The caller holds the lock."""
    journal = intent_file(layout, target)
    try:
        stat = target.stat()
        start, inode = stat.st_size, stat.st_ino
    except FileNotFoundError:
        start, inode = 0, 0
    header = {
        "magic": _MAGIC,
        "target": str(target.relative_to(layout.root)),
        "start": start,
        "inode": inode,
        "length": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "meta": meta or {},
    }
    atomic_write(journal, json.dumps(header).encode("utf-8") + b"\n" + data)
    crash_point(f"intent-saved-{target.name}")
    crash_point(f"append-torn-{target.name}",
                before=lambda: append_fsync(target, data[:len(data) // 2], mode=TEAM_FILE))
    append_fsync(target, data, mode=TEAM_FILE)
    return AppendIntent(journal, target, start, inode, data, dict(meta or {}))


def pending_intent(layout: SquadLayout, target: Path) -> AppendIntent | None:
    """The intent left for `target` by a run that did not clear it, or None."""
    journal = intent_file(layout, target)
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        return None
    head, sep, data = raw.partition(b"\n")
    try:
        header = json.loads(head) if sep else {}
        valid = (
            header.get("magic") == _MAGIC
            and header.get("length") == len(data)
            and header.get("sha256") == hashlib.sha256(data).hexdigest()
            and isinstance(header.get("start"), int) and isinstance(header.get("inode"), int)
        )
    except (ValueError, AttributeError):
        valid = False
    if not valid:
        # atomic_write never leaves a partial intent, so this file was damaged by hand.
        log.warning("intent.damaged", file=str(journal), action="ignored")
        clear_intent_file(journal)
        return None
    return AppendIntent(
        journal=journal,
        target=target,
        start=int(header["start"]),
        inode=int(header["inode"]),
        data=data,
        meta=dict(header.get("meta") or {}),
    )


def finish_append(intent: AppendIntent) -> AppendState:
    """Make the append of `intent` whole if the target still ends inside it; never write twice."""
    end = intent.start + len(intent.data)
    try:
        fd = os.open(intent.target, os.O_RDONLY)
    except FileNotFoundError:
        if intent.start == 0:
            append_fsync(intent.target, intent.data, mode=TEAM_FILE)
            return "finished"
        return "stale"
    try:
        stat = os.fstat(fd)
        if (intent.inode and stat.st_ino != intent.inode) or stat.st_size < intent.start:
            return "stale"
        have = os.pread(fd, min(stat.st_size, end) - intent.start, intent.start)
    finally:
        os.close(fd)
    if not intent.data.startswith(have):
        return "stale"
    if stat.st_size >= end:
        return "complete"
    append_fsync(intent.target, intent.data[len(have):], mode=TEAM_FILE)
    return "finished"


def clear_intent(intent: AppendIntent) -> None:
    """Forget `intent` once its follow-up step is done (durably, so it is never replayed)."""
    clear_intent_file(intent.journal)


def sweep_temp_files(path: Path) -> int:
    """Remove the temp files that a killed `atomic_write` of `path` left beside it.

    Only safe while holding the lock that guards `path`: a live writer's temp file looks the same.
    """
    removed = 0
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        leftover.unlink(missing_ok=True)
        removed += 1
    return removed


def clear_intent_file(journal: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(journal)
        fsync_dir(journal.parent)
