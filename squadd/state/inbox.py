"""The decisions inbox as the Scribe sees it: files in merge order, read safely, split into entries,
and the bad ones moved to ``inbox/.rejected/`` with a ``.reason`` file (never deleted).

A file is merged only when complete: sealed (read-only, as squad tools write it: a temp file
linked into place) or, from any other writer, quiet for `scribe.settle_ms` with the same size
and mtime at the listing and at the read. A file is rejected when it is empty, binary (holds
NUL bytes), not UTF-8 (its text or its name), too large, or not a plain file. Each file becomes
one Squad entry (`file_entries`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import re
import stat as stat_mode
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from squadd.fsio import TEAM_FILE, atomic_write, fsync_dir
from squadd.state.decision_index import fence_parity
from squadd.state.decisions import META_LINE_RE, heading_title, parse_entries
from squadd.state.layout import SquadLayout
from squadd.state.markdown import heading_level, nest_body
from squadd.state.textstyle import plain
from squadd.untrusted import has_surrogate, shown_name

EMPTY_GRACE_S = 10.0
"""An empty file younger than this is left alone: its writer may not have written it yet."""
STALE_TEMP_S = 3600.0
"""A hidden `.tmp` file in the inbox this old was left by a writer that died."""
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
    sealed: bool = False
    """Read-only: its writer said it is complete (squad tools write inbox files so)."""

    @property
    def identity(self) -> tuple[int, int, int]:
        return (self.inode, self.size, self.mtime_ns)

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
                sealed=not info.st_mode & 0o222,
            ))
    found.sort(key=lambda f: (f.mtime_ns, f.name))
    return found


class InboxLooks:
    """When the Scribe first saw each unsealed inbox file as it is now, across passes.

    One pass alone judges quiet by the file's mtime; a long-lived Scribe (the daemon's) also
    remembers its own looks, so a file whose mtime lies (in the future) still settles.
    """

    MAX_FILES = 10_000

    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[int, int, int], float]] = {}

    def quiet_since(self, file: InboxFile, now: float) -> float:
        """Since when `file` is known to be unchanged: its mtime or the first look at it."""
        seen = self._seen.get(file.name)
        if seen is None or seen[0] != file.identity:
            if len(self._seen) >= self.MAX_FILES:
                self._seen.pop(next(iter(self._seen)))
            seen = self._seen[file.name] = (file.identity, now)
        return min(seen[1], file.mtime_ns / 1e9)

    def keep_only(self, names: set[str]) -> None:
        """Forget files that are gone from the inbox."""
        for name in [n for n in self._seen if n not in names]:
            del self._seen[name]


def settle_wait(file: InboxFile, *, now: float, settle_s: float,
                looks: InboxLooks | None = None) -> str:
    """Why `file` is not yet complete ("" when it is): sealed files are complete; others once
    quiet (no change of size or mtime) for `settle_s` seconds."""
    if file.sealed or settle_s <= 0:
        return ""
    since = looks.quiet_since(file, now) if looks is not None else file.mtime_ns / 1e9
    quiet = now - since
    if quiet >= settle_s:
        return ""
    return (f"changed {max(quiet, 0.0):.1f}s ago: files not written by squad tools are merged "
            f"once quiet for scribe.settle_ms ({settle_s * 1000:g} ms)")


def read_inbox_file(
    file: InboxFile, *, max_bytes: int, agents: Sequence[str] = (), now: float | None = None,
    settle_s: float = 0.0, looks: InboxLooks | None = None,
) -> Accepted | Refused | Deferred:
    """Read one inbox file and decide: its entries, a reason to reject it, or a reason to wait.

    An unsealed file is read only once quiet for `settle_s` (first look: the listing), and only
    kept when the read found it as listed (second look: its size and mtime, unchanged).
    """
    now = time.time() if now is None else now
    waiting = settle_wait(file, now=now, settle_s=settle_s, looks=looks)
    if waiting and file.regular:
        return Deferred(file, waiting)
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
    if not file.sealed and settle_s > 0 and (info.st_ino, info.st_size, info.st_mtime_ns) != \
            file.identity:
        return Deferred(file, "it changed between two looks: its writer is still at work")
    if len(data) > max_bytes:
        return Refused(file, _oversized(max(len(data), info.st_size), max_bytes))
    if not data:
        age = now - info.st_mtime_ns / 1e9
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
    """An inbox file as the entries it adds to decisions.md, each one Squad entry as Squad's own
    merge (`prepareInboxBodyForMerge`) makes it.

    A file holding several decisions (decision headings: dated, `Decision:`, or with their own
    `**By:**` line) gives one entry per decision, any text before the first one its own entry.
    Otherwise the whole file is one entry. An entry is `### {date}: {title}`: the title from its
    first heading (`# Decision: T`, `## T`, a dated heading) else the file name; the date from
    that heading or a `**Date:**` line, else the file's `day`; then a `**By:**` line naming the
    author from `**By:**` / `**Author:**`, else the file name. The body's headings move down so
    that the shallowest is `####`: Squad's parsers read the decision whole, title, date, author.
    """
    parsed = parse_entries(text)
    agent, file_title = agent_and_title(name, agents)
    if sum(1 for e in parsed.entries if e.kind == "decision") < 2:
        return [close_fence(_as_entry(plain(text), file_title, agent, day))]
    groups: list[str] = [parsed.preamble + "\n"]
    for entry in parsed.entries:
        if entry.kind == "decision":
            groups.append(entry.text)
        else:  # a plain heading's text belongs to the decision above it
            groups[-1] += "\n" + entry.text
    return [close_fence(_as_entry(group, file_title, agent, day))
            for group in groups if group.strip()]


def _as_entry(text: str, title: str, agent: str, day: dt.date) -> str:
    """A whole inbox file as one Squad entry (see `file_entries`)."""
    lines = text.strip("\n").split("\n")
    lead = next((i for i, line in enumerate(lines) if line.strip()), 0)
    dated: dt.date | None = None
    if lines and heading_level(lines[lead]):
        title, dated = heading_title(lines[lead])
        title = title or lines[lead].lstrip("#").strip()
        lines = lines[:lead] + lines[lead + 1:]
    author: str | None = None
    has_by = False
    for line in lines:
        meta = META_LINE_RE.match(line)
        value = meta.group(2).strip() if meta else ""
        if not meta or not value:
            continue
        key = meta.group(1).lower()
        if key in ("by", "author") and author is None:
            author = value
            has_by = key == "by" and line.lstrip().startswith("**By:**")
        elif key == "date" and dated is None:
            found = re.search(r"\d{4}-\d{2}-\d{2}", value)
            if found:
                with contextlib.suppress(ValueError):
                    dated = dt.date.fromisoformat(found.group(0))
    body = nest_body("\n".join(lines).strip("\n"), 3)
    by = "" if has_by else f"**By:** {author or agent}\n\n"
    heading = f"### {(dated or day).isoformat()}: {' '.join(title.split()) or 'Decision'}"
    return f"{heading}\n\n{by}{body}\n"


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


def sweep_stale_temps(layout: SquadLayout, now: float) -> int:
    """Remove the hidden temp files that writers killed mid-write left in the inbox over
    `STALE_TEMP_S` ago (a live writer's is younger); return how many."""
    removed = 0
    try:
        listing = os.scandir(layout.inbox_dir)
    except FileNotFoundError:
        return 0
    with listing:
        for item in listing:
            if not (item.name.startswith(".") and item.name.endswith(".tmp")):
                continue
            with contextlib.suppress(FileNotFoundError):
                info = item.stat(follow_symlinks=False)
                if stat_mode.S_ISREG(info.st_mode) and now - info.st_mtime > STALE_TEMP_S:
                    os.unlink(item.path)
                    removed += 1
    return removed


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
                 f"{file.shown}: {reason}\nrejected by the Scribe at {stamp}\n",
                 new_mode=TEAM_FILE)  # beside the team's own inbox entry
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
