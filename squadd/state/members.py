"""team.md's Members table as Squad writes it: display names, roles, charter paths, statuses.

A row reads ``| EECOM | Flight Engineer | `.squad/agents/eecom/charter.md` | ✅ Active |``.
The display name keeps its case (`EECOM`); the agent's folder is lower-case and comes from the
charter path when the row has one, else from the name. Statuses mean, for squadd:

- `✅ Active` (or plain `active`, or no status): a working member. Routing rules pick it.
- `📋 Silent`: a background helper such as the Scribe. Routing rules skip it; routing to it
  by name or `@name` still works.
- `🔄 Monitor`: a watcher that reports on the team's work. Treated like Silent.
- anything else (`💤 Inactive`, `❌ Retired`, ...): kept and shown as written; routing rules
  skip it; routing to it by name still works while it has a charter.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from squadd.contracts.names import is_safe_name
from squadd.untrusted import replace_spans

MEMBERS_HEADING = "## Members"
StatusKind = Literal["active", "silent", "monitor", "other"]
_SEPARATOR_RE = re.compile(r"^\|[\s:|-]+\|?$")
_CHARTER_FOLDER_RE = re.compile(r"agents/([^/\s`)\]]+)/charter\.md", re.IGNORECASE)
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_KNOWN_COLUMNS = ("name", "role", "charter", "status")


@dataclass(frozen=True)
class Member:
    """One row of the Members table."""

    display_name: str
    """The name as team.md writes it (`EECOM`, `Apollo`)."""
    folder: str
    """The agent's folder under `agents/`, lower-case (`eecom`)."""
    role: str
    charter_cell: str
    status: str
    """The status cell as written (`✅ Active`), or "" when the row has none."""
    line: int
    """1-based line number in team.md."""

    @property
    def status_kind(self) -> StatusKind:
        return status_kind(self.status)

    @property
    def routable(self) -> bool:
        """Whether routing rules may pick this member (see the module docstring)."""
        return self.status_kind == "active"


@dataclass(frozen=True)
class RowProblem:
    """A Members row squadd cannot read: its line and why."""

    line: int
    text: str
    reason: str


@dataclass(frozen=True)
class MembersTable:
    members: list[Member]
    problems: list[RowProblem]
    header: list[str]
    """The table's header cells, lower-cased ([] when there is no table)."""
    found: bool
    """True when team.md has a `## Members` section."""

    def by_folder(self) -> dict[str, Member]:
        return {member.folder: member for member in self.members}


def plain_words(text: str) -> str:
    """`text` without emoji, markup and punctuation, lower-cased and single-spaced."""
    kept = []
    for char in text:
        category = unicodedata.category(char)
        kept.append(char.lower() if category[0] in "LN" else " ")
    return " ".join("".join(kept).split())


def status_kind(status: str) -> StatusKind:
    words = plain_words(status).split()
    if not words or words[0] == "active":
        return "active"
    if words[0] in ("silent", "monitor"):
        return "silent" if words[0] == "silent" else "monitor"
    return "other"


def folder_for(name: str) -> str | None:
    """The folder a display name maps to: its plain words joined by '-', if that is a safe
    name (`EECOM 🔧` -> `eecom`, `Mission Control` -> `mission-control`); None for a name
    with path characters or control characters."""
    if ".." in name or any(c in "/\\" or unicodedata.category(c) == "Cc" for c in name):
        return None  # path characters are never decoration
    folder = "-".join(plain_words(name).split())
    return folder if folder and is_safe_name(folder) else None


def cells(row: str) -> list[str]:
    inner = row.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", inner)]


def is_members_heading(line: str) -> bool:
    """`## Members`, or a decorated form of it (`## 👥 Members`, `## Team Members`)."""
    return line.startswith("## ") and plain_words(line[3:]).endswith("members")


def members_span(lines: list[str]) -> tuple[int, int] | None:
    """Index of the `## Members` heading and the end of its section, or None."""
    start = next((i for i, line in enumerate(lines) if is_members_heading(line.strip())), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return start, end


def blank_comments(text: str) -> str:
    """HTML comments replaced by blank lines, so line numbers stay true (an unclosed `<!--` is
    text)."""
    return replace_spans(text, "<!--", "-->", lambda span: "\n" * span.count("\n"))


def data_lines(text: str) -> list[str]:
    """The lines of `text` with HTML comments and fenced code blanked: template examples
    are not data, for Squad's readers or squadd's."""
    return unfenced(blank_comments(text.replace("\r\n", "\n")).split("\n"))


def unfenced(lines: list[str]) -> list[str]:
    """`lines` with fenced code blanked (the fence lines too)."""
    fenced = False
    out = []
    for line in lines:
        if _FENCE_RE.match(line):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def _column(header: list[str], key: str) -> int:
    return next((i for i, cell in enumerate(header) if key in cell), -1)


def parse_members(team_md: str) -> MembersTable:
    """The Members table of `team_md`: one `Member` per readable row, a problem per other."""
    lines = data_lines(team_md)
    span = members_span(lines)
    if span is None:
        return MembersTable([], [], [], found=False)
    members: list[Member] = []
    problems: list[RowProblem] = []
    header: list[str] = []
    for index in range(span[0] + 1, span[1]):
        row = lines[index].strip()
        if not row.startswith("|"):
            continue
        if not header:
            header = [plain_words(cell) for cell in cells(row)]
            continue
        if _SEPARATOR_RE.match(row):
            continue
        row_cells = cells(row)
        get = _row_getter(header, row_cells)
        name = get("name", 0).strip("`*_ ")
        if not name:
            problems.append(RowProblem(index + 1, row, "the Name cell is empty"))
            continue
        charter_cell = get("charter", 2)
        match = _CHARTER_FOLDER_RE.search(charter_cell)
        folder = match.group(1).lower() if match else folder_for(name)
        if folder is None or not is_safe_name(folder):
            problems.append(RowProblem(
                index + 1, row, f"no agent folder can be made from the name {name!r}"))
            continue
        members.append(Member(display_name=name, folder=folder, role=get("role", 1),
                              charter_cell=charter_cell, status=get("status", 3),
                              line=index + 1))
    return MembersTable(members, problems, header, found=True)


def _row_getter(header: list[str], row_cells: list[str]) -> Callable[[str, int], str]:
    """A cell by column name; by Squad's column order when the header names none of them."""
    positional = not any(key in cell for cell in header for key in _KNOWN_COLUMNS)

    def get(key: str, position: int) -> str:
        index = position if positional else _column(header, key)
        return row_cells[index].strip() if 0 <= index < len(row_cells) else ""
    return get


def member_names(team_md: str) -> list[str]:
    """The agent folders listed in team.md's Members table, in order."""
    return [member.folder for member in parse_members(team_md).members]
