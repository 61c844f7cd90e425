"""Decision entries: writing inbox files, and parsing decisions.md into entries.

An entry is ``### {YYYY-MM-DD}: {title}``, a blank line, ``**By:** {agent}``,
``**Category:** {category}``, a blank line, and the body. Inbox files are named
``{agent}-{slug}.md`` and created with O_EXCL, so two writers never overwrite each other.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import safe_name
from squadd.errors import LimitExceededError, StateError
from squadd.fsio import create_exclusive, read_text
from squadd.state.layout import SquadLayout

CATEGORIES = ("architecture", "process", "security", "feature", "team", "general")
# Linear on any text (inbox files come from models): no lazy group before a `\s*$`.
_HEADING_RE = re.compile(r"^### +(?:(\d{4}-\d{2}-\d{2})[ \t]*:[ \t]*)?(.*)$")
_BY_RE = re.compile(r"^\*\*By:\*\*[ \t]*(\S.*)$", re.MULTILINE)
_CATEGORY_RE = re.compile(r"^\*\*Category:\*\*[ \t]*(\S.*)$", re.MULTILINE)
_MAX_SLUG = 60
_MAX_SUFFIX = 10_000


@dataclass(frozen=True)
class DecisionEntry:
    """One `### ` entry of decisions.md or an inbox file, kept exactly as written."""

    text: str
    """The whole entry, heading line included, with its trailing newline."""
    title: str
    date: dt.date | None
    by: str | None
    category: str | None

    @property
    def heading(self) -> str:
        return self.text.split("\n", 1)[0]

    @property
    def body(self) -> str:
        return self.text.split("\n", 1)[1] if "\n" in self.text else ""


@dataclass(frozen=True)
class ParsedDecisions:
    """decisions.md split into the text before the first entry and the entries."""

    preamble: str
    entries: list[DecisionEntry]


def slugify(title: str) -> str:
    """A file-name slug for `title`: lower-case words joined by '-', at most 60 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug[:_MAX_SLUG].rstrip("-") or "decision"


def format_entry(
    *, title: str, body: str, agent: str, category: str, date: dt.date | None = None
) -> str:
    """Render an entry in the decisions.md format, ending with a newline."""
    day = (date or dt.date.today()).isoformat()
    clean_title = " ".join(title.split())
    return (
        f"### {day}: {clean_title}\n\n**By:** {agent}\n**Category:** {category}\n\n"
        f"{body.strip()}\n"
    )


def write_inbox_entry(
    layout: SquadLayout,
    *,
    agent: str,
    title: str,
    body: str,
    category: str = "general",
    max_bytes: int = 65536,
    date: dt.date | None = None,
    by: str | None = None,
) -> Path:
    """Write a decision to the inbox as `{agent}-{slug}.md` (or `-2`, `-3`, ...); return it.

    `by` is the name its `**By:**` line shows (the team's display name); default: `agent`."""
    agent = safe_name(agent)
    shown = " ".join((by or "").split()) or agent
    if category not in CATEGORIES:
        raise StateError(f"unknown category {category!r}: use one of {', '.join(CATEGORIES)}")
    if not title.strip():
        raise StateError("a decision needs a non-empty title")
    if "\x00" in title or "\x00" in body or "\x00" in shown:
        raise StateError("a decision may not contain NUL bytes")
    size = len(body.encode("utf-8"))
    if size > max_bytes:
        raise LimitExceededError(
            f"decision body is {size} bytes, over the limit of {max_bytes} bytes "
            "(limits.max_entry_bytes)"
        )
    content = format_entry(title=title, body=body, agent=shown, category=category, date=date)
    inbox = layout.inbox_dir
    stem = f"{agent}-{slugify(title)}"
    for n in range(1, _MAX_SUFFIX):
        name = f"{stem}.md" if n == 1 else f"{stem}-{n}.md"
        path = layout.inside(inbox / name)
        if create_exclusive(path, content):
            return path
    raise StateError(f"more than {_MAX_SUFFIX} inbox files named {stem}-*.md: run 'squadd scribe'")


def parse_entries(text: str) -> ParsedDecisions:
    """Split markdown into the preamble and its `### ` entries (line endings normalized)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    preamble_lines: list[str] = []
    blocks: list[list[str]] = []
    in_fence = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not in_fence and line.startswith("### "):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
        else:
            preamble_lines.append(line)
    entries = [_entry("\n".join(block).rstrip("\n") + "\n") for block in blocks]
    preamble = "\n".join(preamble_lines)
    return ParsedDecisions(preamble=preamble, entries=entries)


def parse_decisions(path: Path) -> ParsedDecisions:
    """Parse decisions.md (a missing file has no entries)."""
    return parse_entries(read_text(path))


def _entry(text: str) -> DecisionEntry:
    heading = text.split("\n", 1)[0]
    match = _HEADING_RE.match(heading)
    date: dt.date | None = None
    title = heading[4:].strip()
    if match:
        title = match.group(2).strip()
        if match.group(1):
            try:
                date = dt.date.fromisoformat(match.group(1))
            except ValueError:
                date = None
    by = _BY_RE.search(text)
    category = _CATEGORY_RE.search(text)
    return DecisionEntry(
        text=text,
        title=title,
        date=date,
        by=by.group(1).rstrip() if by else None,
        category=category.group(1).rstrip() if category else None,
    )
