"""The `## Learnings` section of a history.md as whole entries: parse, order and insert (pure text).

Squad writes learnings in two shapes, and squadd reads both and writes the one the file uses:

- A section runs from a `## ` heading titled "Learnings" (case and decoration ignored) to the
  next `# ` or `## ` heading. A file may hold several (one per `# ... History` block): all of
  them hold learnings, and new ones go to the last. Headings and bullets inside ``` fences do
  not count. Everything outside the Learnings sections is fixed and never moved.
- An entry is either a `### ` block, its heading and everything up to the next heading of level
  1-3 (so `#### ` sub-headings, paragraphs and bullets stay inside), or, outside any `### `
  block, a `- ` / `* ` bullet with its continuation lines, up to the next bullet or heading.
  Text before the first entry is the section's lead-in and is never an entry.
- Style: new learnings take the shape the file's learnings have: `### {date}: {title}` blocks
  (Squad's style) when most `### ` entries start with their date, `### {title} ({date})` blocks
  when they do not, `- **[{category}]** {text}` bullets when there are only bullets, and
  Squad's `### {date}: {title}` when the file has no learning yet.
- Order: an entry's date is the first YYYY-MM-DD in its first line. Each pair of neighbouring
  dated entries votes: a later date below an earlier one for oldest-first, the reverse for
  newest-first; the majority wins. On a tie, or with fewer than two dated entries, the lead-in
  decides when it says "newest first", "most recent first", "newest on top" or "reverse
  chronological"; otherwise the file is oldest-first, which is where Squad's template appends.
- A new entry goes at the end of the section in an oldest-first file, and right after the
  lead-in (above every entry) in a newest-first one.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from dataclasses import dataclass
from typing import Literal

from squadd.state.markdown import heading_level, nest_body

LEARNINGS_HEADING = "## Learnings"
HISTORY_SKELETON = "# Project Context\n\n## Learnings\n"
_DATE_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_DATED_HEADING_RE = re.compile(r"###[ \t]+\d{4}-\d{2}-\d{2}\b")
_NEWEST_FIRST_HINT = re.compile(
    r"newest[- ]first|most[- ]recent[- ]first|newest (?:on|at the) top|reverse[- ]chronological",
    re.IGNORECASE)
_MAX_TITLE = 60

Kind = Literal["fixed", "learning"]
Order = Literal["oldest-first", "newest-first"]
Style = Literal["bullet", "block", "dated"]


@dataclass(frozen=True)
class Segment:
    """A run of whole lines of history.md: `fixed` (always kept: headings, lead-ins, every
    section other than Learnings) or one `learning`."""

    kind: Kind
    start: int
    end: int
    """Line indices, `end` exclusive."""


@dataclass(frozen=True)
class HistoryShape:
    """history.md cut into segments whose lines, joined, give back the text exactly."""

    lines: list[str]
    """The lines, each with its newline (the last may lack one)."""
    segments: list[Segment]
    learnings_heading: int | None
    """Line index of the last `## Learnings` heading (None: the file has none)."""
    learnings_end: int
    """Line index where that Learnings section ends (the next `# ` / `## ` heading, or EOF)."""
    sections: tuple[tuple[int, int], ...] = ()
    """(heading, end) of every `## Learnings` section, in file order."""

    def text(self, segment: Segment) -> str:
        return "".join(self.lines[segment.start:segment.end])

    @property
    def entries(self) -> list[Segment]:
        return [s for s in self.segments if s.kind == "learning"]

    @property
    def style(self) -> Style:
        """`dated` (Squad's `### YYYY-MM-DD: title`) when the blocks start with their date, or
        when there are no learnings yet; `block` for `### Title (date)`; else `bullet`."""
        if not self.entries:
            return "dated"
        blocks = [self.lines[s.start] for s in self.entries
                  if heading_level(self.lines[s.start]) == 3]
        if not blocks:
            return "bullet"
        dated = sum(1 for line in blocks if _DATED_HEADING_RE.match(line))
        return "dated" if 2 * dated >= len(blocks) else "block"

    @property
    def order(self) -> Order:
        return learning_order(self)


def split_lines(content: str) -> list[str]:
    """`content` as lines that keep their "\\n" (only "\\n" ends a line)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", content)


def _title(line: str) -> str:
    return re.sub(r"[^a-z ]+", " ", line.lstrip("#").lower()).strip()


def is_learnings_heading(line: str) -> bool:
    return heading_level(line) == 2 and _title(line).split() == ["learnings"]


def parse_history(content: str) -> HistoryShape:
    """Cut history.md into segments (see the module docstring for the rules). Every `## Learnings`
    section holds learnings (a file may repeat the heading, one per `# ` block); the shape's
    `learnings_heading` and `learnings_end` are those of the last one, where new ones go."""
    lines = split_lines(content)
    segments: list[Segment] = []
    start = 0
    kind: Kind = "fixed"
    in_learnings = in_block = in_fence = False
    sections: list[list[int]] = []

    def cut(at: int, new_kind: Kind) -> None:
        nonlocal start, kind
        if at > start:
            segments.append(Segment(kind, start, at))
        start, kind = at, new_kind

    for i, line in enumerate(lines):
        bare = line.rstrip("\r\n")
        if bare.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        level = heading_level(bare)
        if level in (1, 2):
            if in_learnings:
                sections[-1][1] = i
            in_learnings = is_learnings_heading(bare)
            if in_learnings:
                sections.append([i, len(lines)])
            in_block = False
            cut(i, "fixed")
        elif in_learnings and level == 3:
            in_block = True
            cut(i, "learning")
        elif in_learnings and not in_block and bare.startswith(("- ", "* ")):
            cut(i, "learning")
    cut(len(lines), "fixed")
    if not sections:
        return HistoryShape(lines, segments, None, 0)
    return HistoryShape(lines, segments, sections[-1][0], sections[-1][1],
                        tuple((a, b) for a, b in sections))


def entry_date(first_line: str) -> dt.date | None:
    match = _DATE_RE.search(first_line)
    if not match:
        return None
    try:
        return dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def learning_order(shape: HistoryShape) -> Order:
    """Whether the file's learnings run oldest-first or newest-first (module docstring)."""
    dates = [d for s in shape.entries if (d := entry_date(shape.lines[s.start])) is not None]
    older_first = sum(1 for a, b in itertools.pairwise(dates) if b > a)
    newer_first = sum(1 for a, b in itertools.pairwise(dates) if b < a)
    if newer_first != older_first:
        return "newest-first" if newer_first > older_first else "oldest-first"
    if shape.sections:
        heading, end = shape.sections[0]
        first = min([s.start for s in shape.entries if heading < s.start < end] + [end])
        lead = "".join(shape.lines[heading:first])
        if _NEWEST_FIRST_HINT.search(lead):
            return "newest-first"
    return "oldest-first"


def format_learning(text: str, category: str) -> str:
    """One learning as a single markdown list item (inner newlines become spaces)."""
    flat = " ".join(text.split())
    return f"- **[{category}]** {flat}"


def learning_title(text: str) -> str:
    """A short title for a `### ` learning block: its first sentence, cut at a word."""
    first = " ".join(text.strip().split("\n", 1)[0].replace("**", "").split())
    sentence = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0].rstrip(".:")
    if len(sentence) <= _MAX_TITLE:
        return sentence or "Learning"
    cut = sentence[:_MAX_TITLE].rsplit(" ", 1)[0]
    return f"{cut}..."


def format_block(title: str, body: str, day: dt.date) -> str:
    """One learning as a `### {title} ({date})` block; headings in the body move below `###`
    (and an open fence is closed), so that all of it stays in the block."""
    clean = " ".join(title.split()).lstrip("#").strip() or "Learning"
    text = "\n".join(line.rstrip() for line in body.strip().replace("\r\n", "\n").split("\n"))
    return f"### {clean} ({day.isoformat()})\n\n{nest_body(text, 3)}"


def format_dated(title: str, body: str, day: dt.date) -> str:
    """One learning in Squad's style: `### {date}: {title}`, a blank line, then the learning
    (headings in it moved below `###`, an open fence closed)."""
    clean = " ".join(title.split()).lstrip("#").strip() or "Learning"
    text = "\n".join(line.rstrip() for line in body.strip().replace("\r\n", "\n").split("\n"))
    return f"### {day.isoformat()}: {clean}\n\n{nest_body(text, 3)}"


def format_in_style(style: Style, *, bullet: str, title: str, body: str, day: dt.date) -> str:
    """The new entry in `style` (`bullet` is the whole bullet line)."""
    if style == "dated":
        return format_dated(title, body, day)
    if style == "block":
        return format_block(title, body, day)
    return bullet


def learnings(content: str) -> list[str]:
    """The entries of the `## Learnings` section, in file order, without trailing blank lines."""
    shape = parse_history(content)
    return [shape.text(s).rstrip() for s in shape.entries]


def insert_learning(content: str, entry: str) -> str:
    """Return `content` with `entry` (a bullet or a `### ` block, no trailing newline) added
    where this file puts new learnings (module docstring)."""
    if not content.strip():
        content = HISTORY_SKELETON
    content = content.replace("\r\n", "\n")
    shape = parse_history(content)
    lines = shape.lines
    if shape.learnings_heading is None:
        return f"{content.rstrip(chr(10))}\n\n{LEARNINGS_HEADING}\n\n{entry}\n"
    block = entry.startswith("### ") or shape.style != "bullet"
    entries = shape.entries
    if entries and shape.order == "newest-first":
        at = entries[0].start
        gap = "\n" if block else ""
        return "".join([*lines[:at], entry + "\n" + gap, *lines[at:]])
    start, end = shape.learnings_heading, shape.learnings_end
    last = end
    while last > start + 1 and not lines[last - 1].strip():
        last -= 1
    head = [*lines[:last]]
    if head and not head[-1].endswith("\n"):
        head[-1] += "\n"
    own = [e for e in entries if start < e.start < end]
    gap = "\n" if (block or not own or last == start + 1) else ""
    rest = lines[end:]
    tail = "\n" if rest else ""
    return "".join([*head, gap, entry + "\n", tail, *rest])


def keep_newest(content: str, budget: int) -> str | None:
    """`content` within `budget` bytes by leaving out its oldest learnings, whole, with a note
    saying how many; None when that cannot work (no learnings, or the rest alone is too big)."""
    size = len(content.encode("utf-8"))
    if size <= budget:
        return content
    shape = parse_history(content)
    entries = shape.entries
    if not entries:
        return None
    note = f"[{len(entries)} of {len(entries)} older learnings cut to fit the prompt budget]\n"
    room = budget - len(note.encode("utf-8")) - sum(
        len(shape.text(s).encode("utf-8")) for s in shape.segments if s.kind != "learning")
    ordered = entries if shape.order == "newest-first" else entries[::-1]
    kept: set[int] = set()
    for s in ordered:
        cost = len(shape.text(s).encode("utf-8"))
        if cost > room:
            break
        room -= cost
        kept.add(s.start)
    if room < 0:
        return None
    cut = len(entries) - len(kept)
    body = "".join(shape.text(s) for s in shape.segments
                   if s.kind != "learning" or s.start in kept)
    return f"[{cut} of {len(entries)} older learnings cut to fit the prompt budget]\n{body}"
