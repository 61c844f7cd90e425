"""An agent's history.md: appending learnings under `## Learnings`, safely between processes.

A learning is ``- **[{category}]** {text}``, inserted at the end of the Learnings section
(created when missing). Every append takes the file's lock and replaces the file atomically.
"""

from __future__ import annotations

from pathlib import Path

from squadd.errors import LimitExceededError, StateError
from squadd.state.fsio import atomic_write, file_lock, read_text
from squadd.state.layout import SquadLayout, safe_name

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
