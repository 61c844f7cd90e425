"""Recovery after a crash: what a write-ahead record holds and its file lacks is put back.

`finish_append` is the one place an append a crash cut short is made whole (never twice):
`replay_journals` applies it to every frame that ended runtimes' group-commit journals hold
(run before the sessions are recovered), and `squadd.state.intent` to a team file's pending
append intent. A journal is replayed only when no process holds its lock: its owner is gone.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from squadd.errors import InvalidNameError, StateError
from squadd.fsio import PRIVATE_FILE, fsync_dir, private_dir, write_all
from squadd.state.journal import files
from squadd.state.journal.format import Frame, decode
from squadd.state.layout import JOURNAL_SUFFIX, SquadLayout, safe_id

log = structlog.get_logger("squadd.journal")

_FOLDERS = (("run", "transcripts"), ("sessions",))
"""Where a journaled transcript may live, relative to the squad root."""
_ORCHESTRATION = ("orchestration-log",)
"""Where a journaled orchestration-log entry lives, relative to the squad root."""

AppendState = Literal["complete", "finished", "stale"]
"""`complete`: the append was whole; `finished`: it was torn (or lost) and is now whole;
`stale`: the file changed since, so the record no longer applies and nothing was written."""


def finish_append(target: Path, start: int, data: bytes, *, inode: int = 0,
                  mode: int = PRIVATE_FILE, sync: bool = True, follow: bool = False,
                  name: str = "") -> AppendState:
    """Make the append of `data` at offset `start` of `target` whole, if the file still ends
    inside it (blocking). `inode` (0: not known) must still be the file's; with `sync` what
    is written is fsynced (and a new file's folder entry). A folder at `target` is never
    written into, nor a link (unless `follow`: a team file the user linked is written as
    its first write was); `name` says which file in a warning."""
    end = start + len(data)
    name = name or target.name
    links = 0 if follow else os.O_NOFOLLOW
    try:
        # (O_NONBLOCK: a FIFO planted there opens at once, and is then found not a file)
        fd = os.open(target, os.O_RDONLY | links | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        log.warning("write-ahead record's file is a link; left alone", path=name)
        return "stale"
    if fd is None:
        size, have = 0, b""
    else:
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode):
                log.warning("write-ahead record's file is not a file; left alone", path=name)
                return "stale"
            if inode and found.st_ino != inode:
                return "stale"
            size = found.st_size
            have = os.pread(fd, max(0, min(size, end) - start), start) if size >= start else b""
        finally:
            os.close(fd)
    if size < start:
        log.warning("file shorter than its write-ahead record says; left alone", path=name,
                    size=size, recorded_from=start)
        return "stale"
    if not data.startswith(have):
        # After a replay that failed, recovery may have appended its own record where the
        # lost bytes were: the rest of them must not follow it.
        log.warning("file was written past its write-ahead record; left alone", path=name)
        return "stale"
    if size >= end:
        return "complete"
    created = fd is None
    if not target.parent.is_dir():
        if mode & 0o077:
            target.parent.mkdir(parents=True, exist_ok=True)
        else:
            private_dir(target.parent)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | links | os.O_CLOEXEC, mode)
    try:
        write_all(fd, data[len(have):])
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync and created:
        fsync_dir(target.parent)
    return "finished"


@dataclass
class Replayed:
    journals: int = 0
    """Journals of ended runtimes read (and removed)."""
    restored: list[str] = field(default_factory=list)
    """Transcripts (paths in the squad) that lacked journaled bytes and got them back."""


def replay_journals(layout: SquadLayout) -> Replayed:
    """Restore what ended runtimes' journals hold and their transcripts lack (blocking).

    All their frames are applied together, each transcript's in the order of its offsets: a
    transcript one runtime wrote and another continued has its appends in two journals, and
    the later one's cannot be put back before the earlier one's."""
    replayed = Replayed()
    folder = layout.transcript_journals_dir
    try:
        names = sorted(entry.name for entry in os.scandir(folder)
                       if entry.name.endswith(JOURNAL_SUFFIX))
    except FileNotFoundError:
        return replayed
    held: list[tuple[str, int]] = []
    """Journals of ended runtimes, locked until they are replayed and removed."""
    try:
        frames: list[Frame] = []
        for name in names:
            fd = _ended_journal(folder / name)
            if fd is None:
                continue
            try:
                with os.fdopen(os.dup(fd), "rb") as handle:
                    # the zeros past the last frame are room its runtime never used
                    frames.extend(decode(handle.read().rstrip(b"\0")))
            except OSError as exc:  # left in place; the daemon still starts
                log.warning("transcript journal not replayed", journal=name, error=str(exc))
                os.close(fd)
                continue
            held.append((name, fd))
        if not held:
            return replayed
        try:
            replayed.restored = _replay(layout, frames)
            for name, _fd in held:
                (folder / name).unlink()
        except OSError as exc:  # what is left is replayed at the next start
            log.warning("transcript journals not replayed", journals=[n for n, _ in held],
                        error=str(exc))
            return replayed
    finally:
        for _name, fd in held:
            os.close(fd)
    replayed.journals = len(held)
    fsync_dir(folder)
    log.info("transcript journals replayed", journals=replayed.journals,
             restored=len(replayed.restored))
    return replayed


def _ended_journal(path: Path) -> int | None:
    """`path` opened and locked if it is a journal no live runtime holds; else None."""
    try:
        return files.lock_ended(path)
    except OSError as exc:  # e.g. a link (never ours): left alone
        log.warning("transcript journal not replayed", journal=path.name, error=str(exc))
        return None


@dataclass(frozen=True)
class _Line:
    where: str
    target: Path
    start: int
    data: bytes


def _replay(layout: SquadLayout, frames: list[Frame]) -> list[str]:
    lines: list[_Line] = []
    for frame in frames:
        where, end = frame.where, frame.end
        if not isinstance(end, int) or isinstance(end, bool) or not isinstance(where, str):
            continue  # not one of ours
        target = _journaled_at(layout, where)
        if target is not None and end >= len(frame.data):  # else not one of ours
            lines.append(_Line(where, target, frame.start, frame.data))
    lines.sort(key=lambda line: (line.where, line.start))
    restored: dict[str, Path] = {}
    failed: dict[str, OSError] = {}
    """Files a line could not be put back into: their later lines wait for the next replay,
    and the other files go on (an orchestration-log folder that became a file must not keep
    every transcript from being restored)."""
    try:
        for line in lines:
            if line.where in failed:
                continue
            try:
                if _restore(line):
                    restored[line.where] = line.target
            except OSError as exc:
                failed[line.where] = exc
    finally:  # what was put back is durable even when a later line fails: a replay next time
        for target in restored.values():  # finds it whole, and so neither writes nor syncs it
            files.sync_file(target, created=True)
    if failed:  # the journals stay for the next start
        where, error = next(iter(failed.items()))
        raise OSError(error.errno, f"{where} not restored: {error.strerror or error}") from error
    return list(restored)


def _restore(line: _Line) -> bool:
    """Append the part of `line` its file lacks (synced with the others after); False when
    it lacks none, or cannot take it (see `finish_append`)."""
    return finish_append(line.target, line.start, line.data, sync=False,
                         name=line.where) == "finished"


def _journaled_at(layout: SquadLayout, where: object) -> Path | None:
    """The file a journal line names, if it is one the journal writes: a transcript (a
    `{id}.jsonl` directly inside `run/transcripts/` or `sessions/`) or an orchestration-log
    entry (`orchestration-log/{stamp}-{agent}.md`). Nothing else is ever written from a
    journal."""
    if not isinstance(where, str):
        return None
    *folder, name = Path(where).parts or ("",)
    if tuple(folder) == _ORCHESTRATION and name.endswith(".md"):
        stamp, _, agent = name.removesuffix(".md").partition("-")
        try:
            target = layout.orchestration_log(stamp, agent)
        except StateError:  # not a name squadd writes there, or the folder leads outside
            return None
        return target if target.name == name else None
    if tuple(folder) not in _FOLDERS or not name.endswith(".jsonl"):
        return None
    try:
        safe_id(name.removesuffix(".jsonl"))
    except InvalidNameError:
        return None
    base = layout.transcripts_dir if tuple(folder) == _FOLDERS[0] \
        else layout.legacy_transcripts_dir
    return base / name
