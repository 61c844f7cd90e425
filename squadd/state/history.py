"""An agent's history.md on disk: adding learnings and team updates, and compaction, all under the
file's lock, each write atomic.

What an entry is, where a new one goes and in which shape is `squadd.state.learnings`'s rule.
Compaction moves whole entries only: it keeps the context sections and the newest learnings that
fit, never moves an entry written in the same Scribe pass, and always keeps the newest one. The
archive is appended and fsynced (through a write-ahead intent) before history.md is rewritten.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import safe_name
from squadd.errors import LimitExceededError, NotUtf8Error, StateError
from squadd.fsio import TEAM_FILE, atomic_write, file_lock
from squadd.state.crashpoint import crash_point
from squadd.state.intent import (
    append_with_intent,
    clear_intent,
    finish_append,
    intent_file,
    pending_intent,
    sweep_temp_files,
)
from squadd.state.layout import SquadLayout
from squadd.state.learnings import (
    HISTORY_SKELETON,
    LEARNINGS_HEADING,
    HistoryShape,
    Segment,
    entry_date,
    format_in_style,
    format_learning,
    insert_learning,
    learning_title,
    learnings,
    parse_history,
)
from squadd.state.textstyle import TextStyle, detect, file_style, in_style, plain, restyle

__all__ = [
    "HISTORY_SKELETON", "LEARNINGS_HEADING", "LEARNING_CATEGORIES", "HistoryNote",
    "append_history_lines", "append_learning", "compact_history", "format_learning",
    "insert_learning", "learnings", "read_history",
]

log = logging.getLogger(__name__)

LEARNING_CATEGORIES = ("technical", "process", "architecture", "team", "general")


def read_history(path: Path) -> str:
    """history.md as text ("" when missing); bytes that are not UTF-8 raise `NotUtf8Error`."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8Error(
            f"{path} is not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}; "
            "re-save it as UTF-8 (squadd leaves it alone until then)",
            path=str(path), offset=exc.start,
        ) from None


def _styled(content: str, *, bullet: str, title: str, body: str, day: dt.date) -> str:
    """The new entry in the shape this history uses (plain `content`)."""
    style = parse_history(content).style if content.strip() else "dated"
    return format_in_style(style, bullet=bullet, title=title, body=body, day=day)


def append_learning(
    layout: SquadLayout,
    agent: str,
    text: str,
    *,
    category: str = "general",
    max_bytes: int = 65536,
    today: dt.date | None = None,
) -> Path:
    """Add a learning to `agent`'s history.md, in the file's shape and where it puts new ones,
    under its lock; return the file's path."""
    agent = safe_name(agent)
    if category not in LEARNING_CATEGORIES:
        raise StateError(
            f"unknown category {category!r}: use one of {', '.join(LEARNING_CATEGORIES)}"
        )
    if not text.strip():
        raise StateError("a learning must not be empty")
    if "\x00" in text:
        raise StateError("a learning may not contain NUL bytes")
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise LimitExceededError(
            f"learning is {size} bytes, over the limit of {max_bytes} bytes "
            "(limits.max_entry_bytes)"
        )
    path = layout.history(agent)
    with file_lock(layout.lock_for(path)):
        raw = read_history(path)
        content = plain(raw)
        entry = _styled(content, bullet=format_learning(text, category),
                        title=learning_title(text), body=text, day=today or dt.date.today())
        atomic_write(path, restyle(raw, insert_learning(content, entry)), new_mode=TEAM_FILE)
    return path


@dataclass(frozen=True)
class HistoryNote:
    """A note the Scribe adds to a history (a team update): `- {text}` in a bullet file,
    `### {title} ({day})` over `text` in a block file."""

    title: str
    text: str
    day: dt.date


def append_history_lines(
    layout: SquadLayout, agent: str, notes: Sequence[HistoryNote]
) -> list[str]:
    """Add each note unless the history already holds its text; return the entries added (as
    written, so compaction in the same pass can leave them alone). One locked, atomic rewrite."""
    path = layout.history(agent)
    with file_lock(layout.lock_for(path)):
        raw = read_history(path)
        content = plain(raw)
        added: list[str] = []
        for note in dict.fromkeys(notes):
            flat = " ".join(note.text.split())
            if flat in content:
                continue
            entry = _styled(content, bullet=f"- {flat}", title=note.title, body=flat,
                            day=note.day)
            content = insert_learning(content, entry)
            added.append(entry)
        if added:
            atomic_write(path, restyle(raw, content), new_mode=TEAM_FILE)
    return added


def _digest(text: str) -> str:
    return hashlib.blake2b(" ".join(text.split()).encode("utf-8"), digest_size=16).hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def compact_history(
    layout: SquadLayout,
    agent: str,
    *,
    max_bytes: int,
    keep_bytes: int | None = None,
    today: dt.date | None = None,
    dry_run: bool = False,
    protect: Collection[str] = (),
    recovered: list[str] | None = None,
) -> int:
    """Compact `agent`'s history.md once it reaches `max_bytes`; return how many entries moved.

    Everything outside the learnings (headings, lead-ins, other sections) and the newest
    learnings within `keep_bytes` (half of `max_bytes` by default) stay, and so do the newest
    learning and those in `protect` (entry texts written in this pass). The older learnings, from
    whichever `## Learnings` section holds them, go to history-archive.md, each whole; a section
    never moves whole. Lines that stay keep their bytes (line endings, BOM). A compaction a
    crash interrupted is finished first, and said so in `recovered`.
    """
    path = layout.history(agent)
    archive = layout.history_archive(agent)
    budget = max_bytes // 2 if keep_bytes is None else keep_bytes
    with file_lock(layout.lock_for(path)):
        if not dry_run:
            note = _recover(layout, path, archive)
            if note and recovered is not None:
                recovered.append(f"{note} of agents/{agent}/history.md")
        raw = read_history(path)
        if len(raw.encode("utf-8")) < max_bytes:
            return 0
        content = plain(raw)
        shape = parse_history(content)
        moved = _segments_to_move(shape, budget, {" ".join(p.split()) for p in protect})
        if not moved or dry_run:
            return len(moved)
        day = (today or dt.date.today()).isoformat()
        prefix = "" if archive.exists() and archive.stat().st_size else (
            f"# History Archive: {agent}\n\nLearnings moved out of history.md by the Scribe.\n\n")
        texts = [shape.text(s) for s in moved]
        body = "".join(t if t.endswith("\n") else t + "\n" for t in texts)
        style = TextStyle(bom=False, eol=detect(raw).eol) if prefix else file_style(archive)
        chunk = in_style(f"{prefix}## Archived {day}\n\n{body}\n", style)
        gone = {s.start for s in moved}
        after = restyle(raw, "".join(shape.text(s) for s in shape.segments
                                     if s.start not in gone))
        intent = append_with_intent(layout, archive, chunk.encode("utf-8"), {
            "remove": [_digest(t) for t in texts], "before": _sha(raw), "after": _sha(after),
        })
        crash_point("history-archived")
        atomic_write(path, after, new_mode=TEAM_FILE)
        crash_point("history-rewritten")
        clear_intent(intent)
        return len(moved)


def _recover(layout: SquadLayout, path: Path, archive: Path) -> str:
    """Finish a compaction a crash interrupted: the archive append first, then the rewrite.
    Returns what was done ("" for nothing)."""
    sweep_temp_files(path)
    sweep_temp_files(intent_file(layout, archive))
    intent = pending_intent(layout, archive)
    if intent is None:
        return ""
    state = finish_append(intent)
    if state != "stale":
        current = read_history(path)
        if _sha(current) != intent.meta.get("after"):
            if _sha(current) != intent.meta.get("before"):
                log.warning("%s changed since an interrupted compaction; removing the archived "
                            "entries it still holds", path)
            _rewrite_without(path, current, intent.meta.get("remove", []))
    clear_intent(intent)
    if state == "stale":
        log.warning("%s changed since an interrupted compaction; not repeating it", archive)
        return "skipped an interrupted compaction (its archive changed since)"
    return f"finished an interrupted compaction ({state} append)"


def _segments_to_move(shape: HistoryShape, budget: int, protect: set[str]) -> list[Segment]:
    """The oldest learnings, whichever `## Learnings` section holds them, past the newest ones
    that fit `budget` bytes beside the fixed parts. Dated learnings rank by their date; an
    undated one ranks with the dated one before it in the file's order (file order breaks
    ties)."""
    size = {s.start: len(shape.text(s).encode("utf-8")) for s in shape.segments}
    room = budget - sum(size[s.start] for s in shape.segments if s.kind == "fixed")
    oldest_first = list(shape.entries)
    if shape.order == "newest-first":
        oldest_first.reverse()
    carry = dt.date.min
    ranked: list[tuple[dt.date, int, Segment]] = []
    for position, s in enumerate(oldest_first):
        carry = entry_date(shape.lines[s.start]) or carry
        ranked.append((carry, position, s))
    newest_first = [s for _, _, s in sorted(ranked, key=lambda r: (r[0], r[1]), reverse=True)]
    keep: set[int] = set()
    for s in newest_first:
        if " ".join(shape.text(s).split()) in protect:
            keep.add(s.start)
            room -= size[s.start]
    for rank, s in enumerate(newest_first):
        if s.start in keep:
            continue
        if size[s.start] > room and rank > 0:
            break
        room -= size[s.start]
        keep.add(s.start)
    return [s for s in shape.entries if s.start not in keep]


def _rewrite_without(path: Path, content: str, remove: list[str]) -> None:
    """Rewrite history.md without the entries whose digests are listed (each once, in order)."""
    left = Counter(remove)
    shape = parse_history(plain(content))
    kept: list[str] = []
    for segment in shape.segments:
        text = shape.text(segment)
        digest = _digest(text)
        if segment.kind != "fixed" and left[digest] > 0:
            left[digest] -= 1
        else:
            kept.append(text)
    new = restyle(content, "".join(kept))
    if new != content:
        atomic_write(path, new, new_mode=TEAM_FILE)
