"""Write-ahead intents: appends that land exactly once, even when the process is killed mid-write.

Before an append that must not be torn, lost or repeated, the bytes and the offset they go to are
saved (fsynced) in an intent file under ``run/journal/``: one frame of the durability log's
format (`squadd.state.journal.format`). After a crash, `finish_append` completes a torn append
or confirms a whole one through the log's one recovery step (`squadd.state.journal.replay`);
the caller then redoes its follow-up step and clears it.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from squadd.fsio import TEAM_FILE, append_fsync, atomic_write, fsync_dir
from squadd.state.crashpoint import crash_point
from squadd.state.journal import format as frames
from squadd.state.journal import replay
from squadd.state.journal.replay import AppendState
from squadd.state.layout import SquadLayout

log = structlog.get_logger("squadd.state")

_KIND = "append-intent"
"""What an intent's frame says it is (`kind` in its header)."""
_MAGIC = "squadd-append-intent-1"
"""The first line of an intent an older version wrote (a JSON header, then the bytes)."""

__all__ = ["AppendIntent", "AppendState", "append_with_intent", "clear_intent",
           "clear_intent_file", "finish_append", "intent_file", "pending_intent",
           "sweep_temp_files"]


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
    where = str(target.relative_to(layout.root))
    atomic_write(journal, frames.encode(where, start + len(data), data,
                                        {"kind": _KIND, "inode": inode, "meta": meta or {}}))
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
    found = _read_intent(raw, str(target.relative_to(layout.root)))
    if found is None:
        # atomic_write never leaves a partial intent, so this file was damaged by hand.
        log.warning("intent.damaged", file=str(journal), action="ignored")
        clear_intent_file(journal)
        return None
    start, inode, data, meta = found
    return AppendIntent(journal=journal, target=target, start=start, inode=inode, data=data,
                        meta=meta)


def _read_intent(raw: bytes, where: str) -> tuple[int, int, bytes, dict[str, Any]] | None:
    """The start, inode, bytes and meta of an intent file's one frame (or of the form an
    older version wrote), or None when it is not a whole intent for `where`."""
    frame = next(frames.decode(raw), None)
    if frame is not None and frame.extra.get("kind") == _KIND:
        inode, meta = frame.extra.get("inode"), frame.extra.get("meta")
        if frame.where != where or not _count(frame.end) or not _count(inode) \
                or not isinstance(meta, dict) or frame.start < 0:
            return None
        assert isinstance(inode, int)
        return frame.start, inode, frame.data, meta
    head, sep, data = raw.partition(b"\n")
    try:
        header = json.loads(head) if sep else {}
    except ValueError:
        return None
    if not isinstance(header, dict) or header.get("magic") != _MAGIC \
            or header.get("length") != len(data) \
            or header.get("sha256") != hashlib.sha256(data).hexdigest() \
            or not _count(header.get("start")) or not _count(header.get("inode")):
        return None
    return int(header["start"]), int(header["inode"]), data, dict(header.get("meta") or {})


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def finish_append(intent: AppendIntent) -> AppendState:
    """Make the append of `intent` whole if the target still ends inside it; never write twice."""
    return replay.finish_append(intent.target, intent.start, intent.data, inode=intent.inode,
                                mode=TEAM_FILE, follow=True, name=intent.target.name)


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
