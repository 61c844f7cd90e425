"""Decision entries: writing inbox files, and parsing decisions.md (or an inbox file) into
whole decisions.

squadd writes ``### {YYYY-MM-DD}: {title}``, a blank line, ``**By:** {agent}``,
``**Category:** {category}``, a blank line, and the body. It reads every shape Squad writes: a
decision runs from its heading (``### {date}: {title}``, ``# Decision: {title}``, ``## `` ones
too) to the next decision heading or the next plain heading above its level, so its
sub-sections stay inside it; `parse_entries` states the rule. ``**Date:**``, ``**By:**`` and
``**Author:**`` lines in the body give its date and author when the heading has none.

Inbox files are named ``{agent}-{slug}.md``. They are written to a hidden temp file and linked
into place (the link fails when the name is taken, as O_EXCL would), so a reader never sees a
half-written file and two writers never overwrite each other.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from squadd.contracts.names import safe_name
from squadd.errors import LimitExceededError, StateError
from squadd.fsio import publish_exclusive, read_text
from squadd.state.layout import SquadLayout
from squadd.state.markdown import nest_body
from squadd.state.textstyle import plain

CATEGORIES = ("architecture", "process", "security", "feature", "team", "general")
# Every pattern here runs in linear time on hostile text: values are stripped in code, not by
# a lazy group followed by optional spaces (quadratic on a long run of spaces).
_ATX_RE = re.compile(r"^(#{1,6})[ \t]+(.*)$")
_DATED_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})\s*(?::|—|–|-)\s*(.*)$")
_DECISION_RE = re.compile(r"^decision\s*:\s*(.*)$", re.IGNORECASE)
_META = r"^[ \t]*(?:[-*][ \t]+)?\*\*(by|author|date)(?::\*\*|\*\*[ \t]*:)(.*)$"
META_LINE_RE = re.compile(_META, re.IGNORECASE)
"""A `**By:**`, `**Author:**` or `**Date:**` line (group 1: the key, group 2: its value)."""
_META_RE = re.compile(_META, re.IGNORECASE | re.MULTILINE)
_CATEGORY_RE = re.compile(r"^\*\*Category:\*\*(.*)$", re.MULTILINE)
_MAX_SLUG = 60
SEALED_MODE = 0o444
"""Inbox files squad tools write are read-only: the Scribe takes that as "complete" and merges
them at once (files from other writers wait for `scribe.settle_ms` of quiet)."""
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
    kind: Literal["decision", "bare", "section"] = "decision"
    """`decision`: under a decision heading; `bare`: under a plain `### Title` with no date or
    author; `section`: text under a plain heading above the decisions' level (`## Superseded`),
    kept in place and never archived."""

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
    """Render an entry in the decisions.md format, ending with a newline. Headings in the body
    move below `###` (and an open fence is closed), so that all of it stays in the entry."""
    day = (date or dt.date.today()).isoformat()
    clean_title = " ".join(title.split())
    return (
        f"### {day}: {clean_title}\n\n**By:** {agent}\n**Category:** {category}\n\n"
        f"{nest_body(body.strip(), 3)}\n"
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
        if publish_exclusive(path, content, mode=SEALED_MODE):
            return path
    raise StateError(f"more than {_MAX_SUFFIX} inbox files named {stem}-*.md: run 'squadd scribe'")


@dataclass(frozen=True)
class _Heading:
    line: int
    level: int
    text: str
    qualified: bool
    """Dated, `Decision:`, or carrying its own `**By:**` / `**Author:**` / `**Date:**` line."""


def _headings(lines: list[str]) -> list[_Heading]:
    """The ATX headings outside ``` fences, each marked as a decision heading or not."""
    found: list[tuple[int, int, str]] = []
    fenced: set[int] = set()
    """Lines inside (or opening, closing) a fence: an example in a fence is no metadata."""
    in_fence = False
    for i, line in enumerate(lines):
        if line.startswith(("#", "`")) or line[:1].isspace():  # the only lines that matter
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                fenced.add(i)
                continue
            if in_fence:
                fenced.add(i)
                continue
            match = _ATX_RE.match(line)
            if match:
                found.append((i, len(match.group(1)), match.group(2).strip()))
        elif in_fence:
            fenced.add(i)
    out: list[_Heading] = []
    for n, (i, level, text) in enumerate(found):
        qualified = level <= 3 and bool(_DATED_RE.match(text) or _DECISION_RE.match(text))
        if level <= 3 and not qualified:
            own_end = found[n + 1][0] if n + 1 < len(found) else len(lines)
            own = "\n".join(lines[j] for j in range(i + 1, own_end) if j not in fenced)
            qualified = bool(_META_RE.search(own))
        out.append(_Heading(i, level, text, qualified))
    return out


def parse_entries(text: str) -> ParsedDecisions:
    """Split markdown into the preamble and its entries (`\r\n` read as `\n`; a stray `\r`
    and the BOM's absence are left to `squadd.state.textstyle.restyle` when writing back).

    The rule, in order, for each heading outside a ``` fence:

    1. A decision heading (level 1-3, and dated `YYYY-MM-DD: title`, or `Decision: title`, or
       followed before the next heading by its own `**By:**`, `**Author:**` or `**Date:**`
       line) always starts a new decision, whatever came before.
    2. Inside a decision of level L, a plain heading deeper than L is a sub-section and stays
       inside. A plain heading of level L stays inside too when the decision is a decision
       heading (hand-written decisions often reuse `### ` for `### Files Updated`); a plain
       `### ` after a plain `### ` entry starts a new entry (bare `### Title` entries).
    3. A plain heading above L ends the decision: it and its text, up to the next entry, are a
       `section` entry that is kept in place and never archived (`## Superseded`).
    4. Outside any decision, a plain `### ` heading starts a bare entry; other headings belong
       to the preamble (before the first entry) or to the section they are in.
    """
    text = plain(text)
    lines = text.split("\n")
    starts: list[tuple[int, str]] = []
    current: _Heading | None = None
    for heading in _headings(lines):
        if heading.qualified or (heading.level == 3 and (
                current is None or (current.level == 3 and not current.qualified))):
            starts.append((heading.line, "decision" if heading.qualified else "bare"))
            current = heading
        elif current is not None and heading.level < current.level:
            starts.append((heading.line, "section"))
            current = None
    preamble = "\n".join(lines[:starts[0][0]]) if starts else text
    entries: list[DecisionEntry] = []
    for n, (at, kind) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        body = "\n".join(lines[at:end]).rstrip("\n") + "\n"
        entries.append(_section(body) if kind == "section" else _entry(body, kind == "bare"))
    return ParsedDecisions(preamble=preamble, entries=entries)


def parse_decisions(path: Path) -> ParsedDecisions:
    """Parse decisions.md (a missing file has no entries)."""
    return parse_entries(read_text(path))


def heading_title(heading: str) -> tuple[str, dt.date | None]:
    """A decision heading's title and date: `### 2025-01-31: T` gives ("T", 2025-01-31);
    `# Decision: T` gives ("T", None)."""
    match = _ATX_RE.match(heading)
    title = match.group(2).strip() if match else heading.strip()
    day: dt.date | None = None
    dated = _DATED_RE.match(title)
    if dated:
        day = _date(dated.group(1))
        title = dated.group(2)
    decision = _DECISION_RE.match(title)
    if decision:
        title = decision.group(1)
    return title.strip(), day


def _date(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None


def _entry(text: str, bare: bool = False) -> DecisionEntry:
    title, day = heading_title(text.split("\n", 1)[0])
    by: str | None = None
    for match in _META_RE.finditer(text):
        key, value = match.group(1).lower(), match.group(2).strip()
        if not value:
            continue
        if key == "date" and day is None:
            found = re.search(r"\d{4}-\d{2}-\d{2}", value)
            day = _date(found.group(0)) if found else None
        elif key in ("by", "author") and by is None:
            by = value
    category = _CATEGORY_RE.search(text)
    return DecisionEntry(text=text, title=title, date=day, by=by,
                         category=(category.group(1).strip() or None) if category else None,
                         kind="bare" if bare else "decision")


def _section(text: str) -> DecisionEntry:
    title, _ = heading_title(text.split("\n", 1)[0])
    return DecisionEntry(text=text, title=title, date=None, by=None, category=None,
                         kind="section")
