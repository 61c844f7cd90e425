"""The decisions inbox as the Scribe sees it: files in merge order, read safely, split into entries,
and the bad ones moved to ``inbox/.rejected/`` with a ``.reason`` file (never deleted).

A file is rejected when it is empty, binary (holds NUL bytes), not UTF-8 (its text or its name),
too large, or not a plain file. A file with text but no ``### `` heading becomes one entry named
after the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat as stat_mode
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from squadd.fsio import atomic_write, fsync_dir
from squadd.state.decision_index import fence_parity
from squadd.state.decisions import format_entry, parse_entries
from squadd.state.layout import SquadLayout
from squadd.untrusted import has_surrogate, shown_name

EMPTY_GRACE_S = 10.0
"""An empty file younger than this is left alone: its writer may not have written it yet."""
MAX_REJECTED_NAME_BYTES = 200
"""Longest name a rejected file keeps: room for its `-N` and `.reason` (a name has 255 bytes)."""


@dataclass(frozen=True)
class InboxFile:
    """One file found in the inbox, with the identity it had when it was listed."""

    path: Path
    name: str
    mtime_ns: int
    size: int
    inode: int
    regular: bool

    @property
    def shown(self) -> str:
        """The name as text (bytes that are not UTF-8 shown as U+FFFD)."""
        return shown_name(self.name)


@dataclass(frozen=True)
class Accepted:
    file: InboxFile
    entries: list[str]
    """Entry texts as they will be written, each ending in a newline."""
    identity: tuple[int, int, int]
    """(inode, size, mtime_ns) of the content read: the file is deleted only if it still matches."""


@dataclass(frozen=True)
class Refused:
    file: InboxFile
    reason: str


@dataclass(frozen=True)
class Deferred:
    file: InboxFile
    reason: str


def scan_inbox(layout: SquadLayout) -> list[InboxFile]:
    """Inbox files in merge order: modification time, then name. Hidden names are skipped."""
    found: list[InboxFile] = []
    try:
        listing = os.scandir(layout.inbox_dir)
    except FileNotFoundError:
        return []
    with listing:
        for item in listing:
            if item.name.startswith(".") or item.is_dir(follow_symlinks=False):
                continue
            try:
                info = item.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            found.append(InboxFile(
                path=Path(item.path), name=item.name, mtime_ns=info.st_mtime_ns,
                size=info.st_size, inode=info.st_ino, regular=stat_mode.S_ISREG(info.st_mode),
            ))
    found.sort(key=lambda f: (f.mtime_ns, f.name))
    return found


def read_inbox_file(
    file: InboxFile, *, max_bytes: int, agents: Sequence[str] = (), now: float | None = None
) -> Accepted | Refused | Deferred:
    """Read one inbox file and decide: its entries, a reason to reject it, or a reason to wait."""
    if not file.regular:
        return Refused(file, "not a plain file (a symlink, FIFO or device): only plain files "
                             "are merged")
    if has_surrogate(file.name):
        return Refused(file, "the file name is not valid UTF-8: name inbox files "
                             "{agent}-{title}.md in UTF-8")
    if file.size > max_bytes:
        return Refused(file, _oversized(file.size, max_bytes))
    try:
        fd = os.open(file.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Deferred(file, "it disappeared while the Scribe read the inbox")
    except OSError as exc:
        return Refused(file, f"unreadable: {exc.strerror}")
    try:
        info = os.fstat(fd)
        if not stat_mode.S_ISREG(info.st_mode):
            return Refused(file, "not a plain file: only plain files are merged")
        data = os.pread(fd, max_bytes + 1, 0)
    finally:
        os.close(fd)
    identity = (info.st_ino, len(data), info.st_mtime_ns)
    if len(data) > max_bytes:
        return Refused(file, _oversized(max(len(data), info.st_size), max_bytes))
    if not data:
        age = (time.time() if now is None else now) - info.st_mtime_ns / 1e9
        if age < EMPTY_GRACE_S:
            return Deferred(file, "empty and only just created: its writer may not be done")
        return Refused(file, "empty: the file holds no text")
    nul = data.find(b"\x00")
    if nul >= 0:
        return Refused(file, f"binary: NUL byte at offset {nul}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Refused(file, f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                             "is not valid UTF-8 (save the file as UTF-8)")
    text = text.removeprefix("\ufeff")
    if not text.strip():
        return Refused(file, "empty: the file holds only whitespace")
    day = dt.datetime.fromtimestamp(info.st_mtime_ns / 1e9).date()
    return Accepted(file, file_entries(text, file.name, day, agents), identity)


def _oversized(size: int, limit: int) -> str:
    return (f"oversized: {size} bytes, over the limit of {limit} bytes "
            "(scribe.max_inbox_file_bytes)")


def file_entries(text: str, name: str, day: dt.date, agents: Sequence[str] = ()) -> list[str]:
    """Split an inbox file into entries; text outside any `### ` entry becomes its own entry."""
    parsed = parse_entries(text)
    out: list[str] = []
    if parsed.preamble.strip():
        agent, title = agent_and_title(name, agents)
        out.append(close_fence(format_entry(
            title=title, body=parsed.preamble, agent=agent, category="general", date=day)))
    out.extend(close_fence(entry.text) for entry in parsed.entries)
    return out


def close_fence(entry: str) -> str:
    """Close a code fence left open, so the entry cannot swallow the entries after it."""
    return entry + "```\n" if fence_parity(entry) else entry


def agent_and_title(name: str, agents: Sequence[str] = ()) -> tuple[str, str]:
    """The agent and title an inbox file name stands for: `{agent}-{slug}.md`.

    A known agent whose name holds '-' wins over the split at the first '-'.
    """
    stem = name.rsplit(".", 1)[0] if "." in name else name
    agent = next((a for a in sorted(agents, key=len, reverse=True)
                  if stem == a or stem.startswith(a + "-")), None)
    if agent is None:
        agent = stem.split("-", 1)[0] if "-" in stem else stem
    rest = stem[len(agent) + 1:]
    title = " ".join(rest.replace("-", " ").replace("_", " ").split()) or stem
    return agent, title


def unchanged(file: InboxFile, identity: tuple[int, int, int]) -> bool:
    """True when the file still has the content that was read (so deleting it loses nothing)."""
    try:
        info = os.lstat(file.path)
    except FileNotFoundError:
        return False
    return (info.st_ino, info.st_size, info.st_mtime_ns) == identity


def reject_file(layout: SquadLayout, file: InboxFile, reason: str) -> Path:
    """Move a bad inbox file to ``.rejected/`` with a ``.reason`` file beside it; return its path.

    The reason is written first: a crash in between leaves the file in the inbox, and the next
    run picks the same name and writes the reason again.
    """
    rejected = layout.rejected_dir
    rejected.mkdir(parents=True, exist_ok=True)
    name = _rejected_name(file.name)
    target = rejected / name
    stem, dot, suffix = name.partition(".")
    n = 2
    while os.path.lexists(target):
        target = rejected / f"{stem}-{n}{dot}{suffix}"
        n += 1
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    atomic_write(target.with_name(target.name + ".reason"),
                 f"{file.shown}: {reason}\nrejected by the Scribe at {stamp}\n")
    file.path.rename(target)
    fsync_dir(rejected)
    fsync_dir(file.path.parent)
    return target


def _rejected_name(name: str) -> str:
    """`name`, or for a name too long to take a `.reason` beside it, its cut stem, a hash of
    the whole and its extension."""
    raw = os.fsencode(name)
    if len(raw) <= MAX_REJECTED_NAME_BYTES:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:12]
    extension = os.fsencode(Path(name).suffix)[:16]
    keep = MAX_REJECTED_NAME_BYTES - len(digest) - len(extension) - 1
    return os.fsdecode(raw[:keep] + b"-" + digest.encode() + extension)
