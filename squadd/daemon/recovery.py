"""Sessions a stopped daemon left behind: found at startup, marked `interrupted`, shown as such.

A transcript whose last record is not a terminal state was running when its process died (a
crash, kill -9): it gets an `interrupted` state record (append + fsync; no line before it is
touched). Its `meta` names the process that runs it (pid and start time): while that process
still runs (a `squadd run` beside this daemon), the session is left alone. Those marked, and
sessions a graceful stop interrupted, are shown as `interrupted` until
`squadd sessions resume ID` continues them. Only each file's tail is read.

Sessions that ended (completed, failed, cancelled) under an earlier daemon are listed too, with
`--all`: the same scan finds their transcripts, and `past_views` reads them in the background
once the daemon serves.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squadd.contracts.sessions import SessionView
from squadd.errors import PathEscapeError
from squadd.runtime.planning import TERMINAL_STATES, view_from_transcript
from squadd.state.journal import replay_journals
from squadd.state.layout import SquadLayout
from squadd.state.owner import is_current, owner_alive
from squadd.state.transcripts import (
    Transcript,
    TranscriptWriter,
    list_transcripts,
    read_transcript,
)

CRASH_REASON = "squadd stopped before the session finished (found when the daemon started)"
_TAIL_BYTES = 65536


@dataclass(frozen=True)
class Recovered:
    views: list[SessionView]
    marked: list[str]
    """Sessions that had no terminal state and were marked interrupted now."""
    running_elsewhere: list[str] = dataclasses.field(default_factory=list)
    """Sessions without a terminal state whose owning process still runs: left alone."""
    ended: list[Path] = dataclasses.field(default_factory=list)
    """Transcripts of the newest `keep` sessions that ended (completed, failed, cancelled),
    newest first: found by the same scan, read later by `past_views`."""


STALE_TEMP_AGE_S = 60.0
EMPTY_ENTRY_AGE_S = 10.0
"""An entry file is written in the one write that follows its creation: one empty this long
was cut off between the two by a kill."""


def sweep_stale_temp_files(layout: SquadLayout, *, now: float | None = None) -> list[Path]:
    """Remove the temp files a kill left in `orchestration-log/` mid atomic write.

    Only files older than a minute go: a `squadd run` elsewhere may be writing a fresh one.
    """
    folder = _orchestration_dir(layout)
    if folder is None:
        return []
    now = time.time() if now is None else now
    removed = []
    for path in folder.glob(".*.tmp"):
        try:
            if path.is_file() and not path.is_symlink() \
                    and now - path.stat().st_mtime > STALE_TEMP_AGE_S:
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def sweep_empty_entries(layout: SquadLayout, *, now: float | None = None) -> list[Path]:
    """Remove the orchestration-log entry files a kill cut off between creating and writing
    them: empty, and older than `EMPTY_ENTRY_AGE_S` (a `squadd run` elsewhere may be writing
    a fresh one). A stat per entry: the daemon runs it in the background once it serves."""
    folder = _orchestration_dir(layout)
    if folder is None:
        return []
    now = time.time() if now is None else now
    removed = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.endswith(".md"):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(info.st_mode) and info.st_size == 0 \
                            and now - info.st_mtime > EMPTY_ENTRY_AGE_S:
                        os.unlink(entry.path)
                        removed.append(Path(entry.path))
                except OSError:
                    continue
    except OSError:
        return removed
    return sorted(removed)


def _orchestration_dir(layout: SquadLayout) -> Path | None:
    """`orchestration-log/` if it is a folder inside the repository (a link out: None)."""
    try:
        folder = layout.orchestration_dir
    except PathEscapeError:
        return None
    return folder if folder.is_dir() else None


def last_record(path: Path) -> dict[str, Any] | None:
    """The last whole JSON record of a transcript (a torn last line is skipped), or None."""
    size = path.stat().st_size
    chunk = _TAIL_BYTES
    with path.open("rb") as handle:
        while True:
            start = max(0, size - chunk)
            handle.seek(start)
            lines = handle.read(size - start).split(b"\n")
            if start > 0:
                lines = lines[1:]  # the first piece may be the end of a longer line
            for raw in reversed(lines):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    continue
                if isinstance(record, dict):
                    return record
            if start == 0:
                return None
            chunk *= 4


def recover_sessions(layout: SquadLayout, *, keep: int, cluster: bool = False,
                     now: dt.datetime | None = None) -> Recovered:
    """Mark crashed sessions interrupted; views of the newest `keep` interrupted ones (blocking).
    With `cluster`, a session a cluster worker holds is left to it (its lease decides). First,
    what a crashed runtime's journal holds and its transcripts lack is put back. Ages are
    counted to `now` (default: the clock)."""
    replay_journals(layout)
    views: list[SessionView] = []
    marked: list[str] = []
    elsewhere: list[str] = []
    ended: list[Path] = []
    for path in reversed(list_transcripts(layout)):
        if len(views) >= keep and len(ended) >= keep:
            break
        try:
            last = last_record(path)
        except OSError:
            continue
        if last is None:
            continue
        state = last.get("state") if last.get("kind") == "state" else None
        if state in TERMINAL_STATES and state != "interrupted":
            if len(ended) < keep:
                ended.append(path)
            continue
        if len(views) >= keep:
            continue
        if state != "interrupted":
            owner = read_transcript(path).meta.get("owner")
            if (owner_alive(owner) and not is_current(owner)) or \
                    (cluster and isinstance(owner, dict) and "worker" in owner):
                elsewhere.append(path.name.removesuffix(".jsonl"))
                continue
            writer = TranscriptWriter(path)
            writer.add("state", state="interrupted", reason=CRASH_REASON)
            writer.flush()
            marked.append(path.name.removesuffix(".jsonl"))
        transcript = read_transcript(path)
        if not transcript.meta.get("agent"):
            continue
        last_state = transcript.states[-1] if transcript.states else {}
        why = last_state.get("reason") or last_state.get("error") or "stopped"
        views.append(_past_view(transcript, now, state="interrupted",
                                error=f"interrupted: {why}"))
    views.reverse()
    return Recovered(views=views, marked=marked, running_elsewhere=elsewhere, ended=ended)


def past_views(ended: list[Path], *, now: dt.datetime | None = None) -> list[SessionView]:
    """Views of the sessions that ended under an earlier daemon (`Recovered.ended`, newest
    first), oldest first (blocking: each transcript is read whole). Ages are counted to
    `now` (default: the clock)."""
    views: list[SessionView] = []
    for path in reversed(ended):
        try:
            transcript = read_transcript(path)
        except OSError:  # removed since the scan
            continue
        if transcript.meta.get("agent"):
            views.append(_past_view(transcript, now))
    return views


def _past_view(transcript: Transcript, now: dt.datetime | None,
               **update: Any) -> SessionView:
    """`view_from_transcript`, with its age counted from when the session was created."""
    created = _created(transcript.meta)
    now = now or dt.datetime.now(dt.UTC)
    return view_from_transcript(transcript).model_copy(update={
        "created": created, **update,
        "age_s": round((now - created).total_seconds(), 3) if created else 0.0,
    })


def _created(meta: dict[str, Any]) -> dt.datetime | None:
    try:
        created = dt.datetime.fromisoformat(str(meta.get("created")))
    except ValueError:
        return None
    return created if created.tzinfo is not None else created.replace(tzinfo=dt.UTC)
