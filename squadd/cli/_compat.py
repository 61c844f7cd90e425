"""Where squadd reads a squad dir differently from Squad: `squadd doctor --squad-compat`.

Each `Finding` names a file (relative to the repo) and, where it can, a line. A `warn` is
something squadd cannot use as Squad would (a row it cannot read, a member without a charter, a
routing row naming nobody); a `note` is something squadd reads in its own way or leaves alone
(a section it does not read, a status that keeps a member out of routing rules).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from squadd.contracts.names import NAME_RULE, is_safe_name
from squadd.errors import StateError
from squadd.runtime.router import name_index, resolve_agent_cell, tables
from squadd.state.layout import SquadLayout
from squadd.state.members import (
    Member,
    data_lines,
    is_members_heading,
    parse_members,
    plain_words,
)
from squadd.state.skills import front_matter, list_skills

Level = Literal["warn", "note"]
TEAM_SECTIONS = frozenset({"members", "project context", "coordinator", "issue source",
                           "human members", "alumni", "team", "notes"})
"""team.md sections squadd reads (Members) or knows are prose for people."""
CHARTER_SECTIONS = frozenset({"identity", "what i own", "how i work", "boundaries", "model",
                              "collaboration", "voice", "tools"})
_HEADING_RE = re.compile(r"^##\s+(.+?)\s*$")
_NO_AGENT = re.compile(r"^[\s—–-]*$")
_WORK_WORDS = ("work type", "pattern", "work", "area", "domain")
_AGENT_WORDS = ("route to", "agent", "owner", "primary", "secondary")


_SQUAD_ROUTING_RE = re.compile(r"##\s*routing\s*table|##\s*work\s*type\s*.{0,5}agent", re.I)
"""The sections whose tables Squad reads as routing rules."""


def _section_at(lines: list[str], line: int) -> str:
    """The last `## ` heading above 1-based `line` ("" for none)."""
    return next((lines[i] for i in range(line - 2, -1, -1) if lines[i].startswith("## ")), "")


def _why_not(header: list[str]) -> str:
    """Why a table's header makes it no rule table, naming the columns it lacks."""
    cells = [plain_words(c) for c in header]
    missing = []
    if not any(c.startswith(_WORK_WORDS) for c in cells):
        missing.append("Work Type (or Pattern) column")
    if not any(c.startswith(_AGENT_WORDS[:-1]) for c in cells):
        missing.append("agent column (Route To, Agent, Owner or Primary)")
    shown = " | ".join(header)
    return f"its header '| {shown} |' has no {' and no '.join(missing) or 'usable columns'}"


@dataclass(frozen=True)
class Finding:
    file: str
    line: int | None
    level: Level
    message: str

    def render(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.level}: {self.message}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


class _Checker:
    def __init__(self, layout: SquadLayout):
        self.layout = layout
        self.findings: list[Finding] = []

    def add(self, path: Path, line: int | None, level: Level, message: str) -> None:
        try:
            shown = str(path.relative_to(self.layout.repo))
        except ValueError:
            shown = str(path)
        self.findings.append(Finding(shown, line, level, message))

    def headings(self, text: str) -> Iterator[tuple[int, str]]:
        for number, line in enumerate(data_lines(text), start=1):
            match = _HEADING_RE.match(line)
            if match:
                yield number, match.group(1)

    def team(self) -> dict[str, Member]:
        path = self.layout.team_md
        text = _read(path)
        if text is None:
            self.add(path, None, "warn", "team.md is missing or not UTF-8: squadd lists no "
                                         "members (run 'squadd init' to add one)")
            return {}
        table = parse_members(text)
        if not table.found:
            self.add(path, None, "warn", "no '## Members' section: Squad and squadd list "
                                         "members from its table")
        for number, title in self.headings(text):
            if title.lower() not in TEAM_SECTIONS and not is_members_heading(f"## {title}"):
                self.add(path, number, "note", f"section '## {title}' is not read by squadd "
                                               "(it is left as it is)")
        for problem in table.problems:
            self.add(path, problem.line, "warn", f"row cannot be read ({problem.reason}): "
                                                 f"{problem.text}")
        members: dict[str, Member] = {}
        for member in table.members:
            if member.folder in members:
                self.add(path, member.line, "warn", f"{member.display_name} is listed twice "
                         f"(first at line {members[member.folder].line}); the first row counts")
                continue
            members[member.folder] = member
            if not self.layout.charter(member.folder).is_file():
                self.add(path, member.line, "warn",
                         f"{member.display_name} has no charter at .squad/agents/"
                         f"{member.folder}/charter.md: routes to it fail")
            if member.status_kind == "other":
                self.add(path, member.line, "note",
                         f"{member.display_name}'s status '{member.status}' is not Active, "
                         "Silent or Monitor: squadd shows it, and routing rules skip it")
        return members

    def agents(self, members: dict[str, Member]) -> None:
        folder = self.layout.agents_dir
        if not folder.is_dir():
            return
        for child in sorted(folder.iterdir()):
            charter = child / "charter.md"
            if not child.is_dir() or not charter.is_file():
                continue
            name = child.name.lower()
            if not is_safe_name(name):
                self.add(charter, None, "warn", f"agents/{child.name}/ is not read: agent "
                                                f"folders are names matching {NAME_RULE}")
                continue
            if name != child.name and (folder / name).is_dir():
                self.add(charter, None, "warn", f"agents/{child.name}/ is not read: "
                                                f"agents/{name}/ is the agent {name}")
                continue
            if name not in members:
                self.add(charter, None, "note", f"{name} has a charter but no row in "
                                                "team.md's Members: Squad does not count it")
            try:
                text = _read(self.layout.charter(name)) or ""
            except StateError as exc:
                self.add(charter, None, "warn", f"the charter is not read: {exc}")
                continue
            for number, title in self.headings(text):
                if title.lower() not in CHARTER_SECTIONS:
                    self.add(charter, number, "note", f"section '## {title}' is prompt text "
                                                      "to squadd: no setting is read from it")

    def routing(self, members: dict[str, Member]) -> None:
        path = self.layout.routing_md
        text = _read(path)
        if text is None:
            return
        names = name_index(list(members.values()))
        rules = 0
        lines = text.replace("\r\n", "\n").split("\n")
        for table in tables(text):
            squads = _SQUAD_ROUTING_RE.search(_section_at(lines, table.line)) is not None
            if table.columns is None:
                self.add(path, table.line, "warn" if squads else "note",
                         f"this table is not read as routing rules: {_why_not(table.header)}")
                continue
            if not squads:
                self.add(path, table.line, "note", "squadd routes by this table, but Squad "
                         "reads routing rules only under '## Routing Table' or "
                         "'## Work Type → Agent'")
            for number, row in table.rows:
                for key in ("route to", "secondary"):
                    index = table.columns.get(key)
                    cell = row[index] if index is not None and index < len(row) else ""
                    if key == "secondary" and _NO_AGENT.match(cell):
                        continue
                    rules += self.routing_row(path, number, cell, members, names)
        if rules == 0:
            self.add(path, None, "note", "no routing rules yet: a route that names no agent fails "
                     "(add rows to a table with Work Type and Route To, Agent, Owner or Primary "
                     "columns)")

    def routing_row(self, path: Path, number: int, cell: str, members: dict[str, Member],
                    names: dict[str, str]) -> int:
        """Check one rule row; 1 when squadd can route by it, else 0."""
        agent = resolve_agent_cell(cell, names)
        if not agent:
            self.add(path, number, "warn", f"routing row names no agent ({cell!r}): it is "
                                           "skipped")
            return 0
        member = members.get(agent)
        if not self.layout.charter(agent).is_file():
            self.add(path, number, "warn", f"routing row names {cell!r} ({agent}), which has "
                                           "no charter: it is skipped")
            return 0
        if member is not None and not member.routable:
            self.add(path, number, "note", f"routing row names {member.display_name}, whose "
                     f"status is '{member.status}': routing rules skip it")
        return 1

    def skills(self) -> None:
        for info in list_skills(self.layout):
            data, _ = front_matter(_read(info.path) or "")
            if not isinstance(data.get("description"), str):
                self.add(info.path, 1, "note", "no 'description' in the front matter: the "
                                               "skills index shows its first heading instead")
            for hidden in info.hidden:
                self.add(info.path, None, "note", f"skill {info.name!r} is also in the "
                         f"{hidden} skills folder; this one ({info.source}) is used")
        for source, folder in self.layout.skill_roots():
            if not folder.is_dir():
                continue
            for child in sorted(folder.iterdir()):
                if (child / "SKILL.md").is_file() and not (
                        is_safe_name(child.name) and child.name == child.name.lower()):
                    self.add(child / "SKILL.md", None, "warn",
                             f"skill folder {child.name!r} ({source}) is not read: skill "
                             "names are lower-case")


def squad_compat(layout: SquadLayout) -> list[Finding]:
    """Every difference found, file by file and line by line (blocking: reads the squad dir)."""
    checker = _Checker(layout)
    members = checker.team()
    checker.agents(members)
    checker.routing(members)
    checker.skills()
    files = list(dict.fromkeys(f.file for f in checker.findings))
    return sorted(checker.findings, key=lambda f: (files.index(f.file), f.line or 0))
