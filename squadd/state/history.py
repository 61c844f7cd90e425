"""An agent's history.md: appending learnings under `## Learnings`, safely between processes.

A learning is ``- **[{category}]** {text}``, inserted at the end of the Learnings section
(created when missing). Every append takes the file's lock and replaces the file atomically.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import safe_name
from squadd.errors import LimitExceededError, StateError
from squadd.fsio import atomic_write, file_lock, read_text
from squadd.state.intent import (
    append_with_intent,
    clear_intent,
    finish_append,
    intent_file,
    pending_intent,
    sweep_temp_files,
)
from squadd.state.layout import SquadLayout

LEARNING_CATEGORIES = ("technical", "process", "architecture", "team", "general")
LEARNINGS_HEADING = "## Learnings"
HISTORY_SKELETON = "# Project Context\n\n## Learnings\n"


def format_learning(text: str, category: str) -> str:
    """One learning as a single markdown list item (inner newlines become spaces)."""
    flat = " ".join(text.split())
    return f"- **[{category}]** {flat}"


def insert_learning(content: str, line: str) -> str:
    """Return `content` with `line` added at the end of its `## Learnings` section."""
    if not content.strip():
        content = HISTORY_SKELETON
    lines = content.replace("\r\n", "\n").split("\n")
    start = next((i for i, text in enumerate(lines) if text.strip() == LEARNINGS_HEADING), None)
    if start is None:
        body = content.rstrip("\n")
        return f"{body}\n\n{LEARNINGS_HEADING}\n\n{line}\n"
    end = next(
        (i for i in range(start + 1, len(lines))
         if lines[i].startswith("## ") or lines[i].startswith("# ")),
        len(lines),
    )
    last = end
    while last > start + 1 and not lines[last - 1].strip():
        last -= 1
    section = lines[start + 1:last]
    has_items = any(text.strip() for text in section)
    new_section = [*section, line] if has_items else ["", line]
    rest = lines[end:]
    joined = [*lines[: start + 1], *new_section]
    if rest:
        joined += ["", *rest]
    result = "\n".join(joined)
    return result if result.endswith("\n") else result + "\n"


def append_learning(
    layout: SquadLayout,
    agent: str,
    text: str,
    *,
    category: str = "general",
    max_bytes: int = 65536,
) -> Path:
    """Append a learning to `agent`'s history.md under its lock; return the file's path."""
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
    line = format_learning(text, category)
    with file_lock(layout.lock_for(path)):
        content = read_text(path)
        atomic_write(path, insert_learning(content, line))
    return path


def learnings(content: str) -> list[str]:
    """The list items of the `## Learnings` section, in file order."""
    lines = content.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    inside = False
    for text in lines:
        if text.strip() == LEARNINGS_HEADING:
            inside = True
            continue
        if inside and (text.startswith("## ") or text.startswith("# ")):
            inside = False
        if inside and text.startswith("- "):
            out.append(text)
    return out


def append_history_lines(layout: SquadLayout, agent: str, lines: list[str]) -> int:
    """Add each of `lines` as a learning item unless the history already holds it; return how
    many were added. One locked, atomic rewrite for all of them (the Scribe's team updates)."""
    path = layout.history(agent)
    with file_lock(layout.lock_for(path)):
        content = read_text(path)
        present = {text.strip() for text in content.splitlines()}
        added = 0
        for line in dict.fromkeys(lines):
            item = f"- {' '.join(line.split())}"
            if item in present:
                continue
            content = insert_learning(content, item)
            present.add(item)
            added += 1
        if added:
            atomic_write(path, content)
    return added


@dataclass(frozen=True)
class _Block:
    """A run of history.md lines: fixed (always kept), a learning item, or another section."""

    text: str
    kind: str  # "fixed" | "learning" | "section"


def _history_blocks(content: str) -> list[_Block]:
    """Split history.md into blocks whose texts, joined, give back `content` exactly."""
    blocks: list[_Block] = []
    current: list[str] = []
    kind = "fixed"
    in_learnings = False

    def flush() -> None:
        if current:
            blocks.append(_Block("".join(current), kind))
            current.clear()

    for line in content.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if bare.startswith(("# ", "## ")) and (blocks or current):
            flush()
            title = bare.lstrip("#").strip().lower()
            in_learnings = bare.startswith("## ") and title == LEARNINGS_HEADING[3:].lower()
            kept = in_learnings or title in ("core context", "project context")
            kind = "fixed" if kept else "section"
        elif in_learnings and bare.startswith(("- ", "* ")):
            flush()
            kind = "learning"
        current.append(line)
    flush()
    return blocks


def _block_digest(text: str) -> str:
    return hashlib.blake2b(" ".join(text.split()).encode("utf-8"), digest_size=16).hexdigest()


def compact_history(
    layout: SquadLayout,
    agent: str,
    *,
    max_bytes: int,
    keep_bytes: int | None = None,
    today: dt.date | None = None,
    dry_run: bool = False,
) -> int:
    """Compact `agent`'s history.md once it reaches `max_bytes`; return how many blocks moved.

    `# Project Context`, `## Core Context` and the newest learnings within `keep_bytes` (half of
    `max_bytes` by default) stay; older learnings and any other section go to history-archive.md,
    which is appended and fsynced (through a write-ahead intent) before history.md is rewritten.
    """
    path = layout.history(agent)
    archive = layout.history_archive(agent)
    budget = max_bytes // 2 if keep_bytes is None else keep_bytes
    with file_lock(layout.lock_for(path)):
        if not dry_run:
            sweep_temp_files(path)
            sweep_temp_files(intent_file(layout, archive))
            intent = pending_intent(layout, archive)
            if intent is not None:
                if finish_append(intent) != "stale":
                    _rewrite_without(path, intent.meta.get("remove", []))
                clear_intent(intent)
        content = read_text(path)
        if len(content.encode("utf-8")) < max_bytes:
            return 0
        blocks = _history_blocks(content)
        moved = _blocks_to_move(blocks, budget)
        if not moved or dry_run:
            return len(moved)
        day = (today or dt.date.today()).isoformat()
        prefix = "" if archive.exists() and archive.stat().st_size else (
            f"# History Archive: {agent}\n\nLearnings moved out of history.md by the Scribe.\n\n")
        body = "".join(b.text if b.text.endswith("\n") else b.text + "\n" for b in moved)
        chunk = f"{prefix}## Archived {day}\n\n{body}\n"
        intent = append_with_intent(layout, archive, chunk.encode("utf-8"),
                                    {"remove": [_block_digest(b.text) for b in moved]})
        _rewrite_without(path, intent.meta["remove"])
        clear_intent(intent)
        return len(moved)


def _blocks_to_move(blocks: list[_Block], budget: int) -> list[_Block]:
    fixed = sum(len(b.text.encode("utf-8")) for b in blocks if b.kind == "fixed")
    room = budget - fixed
    keep: set[int] = set()
    for i in range(len(blocks) - 1, -1, -1):
        if blocks[i].kind != "learning":
            continue
        size = len(blocks[i].text.encode("utf-8"))
        if size > room:
            break
        room -= size
        keep.add(i)
    return [b for i, b in enumerate(blocks) if b.kind != "fixed" and i not in keep]


def _rewrite_without(path: Path, remove: list[str]) -> None:
    """Rewrite history.md without the blocks whose digests are listed (each once, oldest first)."""
    left = Counter(remove)
    kept: list[str] = []
    for block in _history_blocks(read_text(path)):
        digest = _block_digest(block.text)
        if block.kind != "fixed" and left[digest] > 0:
            left[digest] -= 1
        else:
            kept.append(block.text)
    new = "".join(kept)
    if new != read_text(path):
        atomic_write(path, new)
