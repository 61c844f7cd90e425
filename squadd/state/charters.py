"""Charters: parsing an agent's charter.md (role, preferred model, tools) and the team roster.

Sections follow Squad's template: Identity, What I Own, How I Work, Boundaries, Model,
Collaboration, Voice. ``## Model`` may say ``Preferred: {model}``; an optional ``## Tools``
lists the tools the agent may use.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from squadd.contracts.names import is_safe_name, safe_name
from squadd.errors import NotFoundError, StateError
from squadd.state.layout import SquadLayout
from squadd.state.members import Member, StatusKind, parse_members, status_kind

# Each quantifier has one way to match (no `\s*` that spans lines, no two runs of spaces side by
# side), so a hostile charter cannot make a search backtrack: linear in the text.
_PREFERRED_RE = re.compile(r"^[ \t]*(?:[-*][ \t]*)?\**Preferred:?\**:?[ \t]*(\S[^\n]*)$",
                           re.IGNORECASE | re.MULTILINE)
_ROLE_RE = re.compile(r"^[ \t]*(?:[-*][ \t]*)?\**Role:?\**:?[ \t]*(\S[^\n]*)$",
                      re.IGNORECASE | re.MULTILINE)
_TOOL_NAME_RE = re.compile(r"`?([A-Za-z0-9_.*?-]+)`?")
_NO_MODEL = {"auto", "default", "none", "-", ""}


@dataclass(frozen=True)
class Charter:
    agent: str
    text: str
    role: str = ""
    model: str | None = None
    tools: tuple[str, ...] | None = None
    """Tools named under `## Tools`, or None when the charter has no such section."""
    sections: dict[str, str] = field(default_factory=dict)


def split_sections(text: str) -> dict[str, str]:
    """Map each `## ` heading (lower-cased) to the text under it."""
    sections: dict[str, str] = {}
    current: str | None = None
    buffer: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("## "):
            if current is not None:
                sections[current] = "\n".join(buffer).strip()
            current = line[3:].strip().lower()
            buffer = []
        elif current is not None:
            buffer.append(line)
    if current is not None:
        sections[current] = "\n".join(buffer).strip()
    return sections


def parse_charter(agent: str, text: str) -> Charter:
    sections = split_sections(text)
    model = None
    if "model" in sections:
        match = _PREFERRED_RE.search(sections["model"])
        preferred = match.group(1).strip().strip("`").strip() if match else ""
        if match and preferred.lower() not in _NO_MODEL:
            model = preferred
    role = ""
    role_match = _ROLE_RE.search(sections.get("identity", ""))
    if role_match:
        role = role_match.group(1).strip()
    tools: tuple[str, ...] | None = None
    if "tools" in sections:
        names: list[str] = []
        for line in sections["tools"].split("\n"):
            stripped = line.strip().lstrip("-*").strip()
            if not stripped or stripped.startswith(("<!--", ">")):
                continue
            head = re.split(r"\s[—–:-]\s|:", stripped, maxsplit=1)[0]
            for part in head.split(","):
                match = _TOOL_NAME_RE.fullmatch(part.strip())
                if match:
                    names.append(match.group(1))
        tools = tuple(dict.fromkeys(names))
    return Charter(agent=agent, text=text, role=role, model=model, tools=tools,
                   sections=sections)


def read_charter(layout: SquadLayout, agent: str) -> Charter:
    """Read and parse `agent`'s charter; `NotFoundError` lists the agents that exist."""
    agent = safe_name(agent)
    path = layout.charter(agent)
    try:
        text = layout.read_text(path)
    except (FileNotFoundError, NotADirectoryError):
        raise NotFoundError(f"no agent named {agent!r}: {no_charter(layout, agent)}") from None
    return parse_charter(agent, text)


def no_charter(layout: SquadLayout, agent: str) -> str:
    """Why `agent` (a safe name) has no charter to read, and the agents there are (blocking):
    the one sentence every refusal of an unknown agent gives."""
    path = layout.prompt_file("charter", agent, check=False)  # only shown: never read here
    why = (f"its charter at {path} is not a regular file inside the repository"
           if os.path.lexists(path) else f"there is no charter at {path}")
    known = ", ".join(entry.name for entry in roster(layout)) or "none yet"
    return f"{why} (agents: {known}; add one with 'squadd agent add NAME --role ROLE')"


@dataclass(frozen=True)
class RosterEntry:
    name: str
    """The agent's folder under `agents/` (lower-case): what routes and tools name it by."""
    role: str
    model: str | None
    tools: tuple[str, ...] | None
    charter: Path
    has_history: bool
    display_name: str = ""
    """The name team.md shows (`EECOM`); the folder name when team.md does not list it."""
    status: str = ""
    """team.md's status cell as written (`✅ Active`, `📋 Silent`); "" when not listed."""

    @property
    def status_kind(self) -> StatusKind:
        return status_kind(self.status)


def team_members(layout: SquadLayout) -> dict[str, Member]:
    """team.md's members by agent folder (an unreadable team.md lists nobody)."""
    try:
        text = layout.team_md.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return parse_members(text).by_folder()


def roster(layout: SquadLayout) -> list[RosterEntry]:
    """Every agent with a charter under `agents/`, sorted by name, with team.md's display name,
    status and role (the charter's `Role:` when team.md gives none)."""
    agents_dir = layout.root / "agents"
    if not agents_dir.is_dir():
        return []
    members = team_members(layout)
    out = []
    seen: set[str] = set()
    # Folders are read whatever their case (Squad makes `agents/Rai/`: the agent `rai`); where
    # `rai/` and `Rai/` both exist, the lower-case one is the agent.
    def order(child: Path) -> tuple[str, bool]:
        return child.name.lower(), child.name != child.name.lower()

    for child in sorted(agents_dir.iterdir(), key=order):
        charter_path = child / "charter.md"
        name = child.name.lower()
        if not (is_safe_name(name) and name not in seen and charter_path.is_file()):
            continue
        seen.add(name)
        try:
            text = layout.read_text(charter_path)
        except (OSError, UnicodeDecodeError, StateError):
            text = ""  # listed without a role; reading it for a route says what is wrong
        parsed = parse_charter(name, text)
        member = members.get(name)
        out.append(RosterEntry(
            name=name, role=(member.role if member and member.role else parsed.role),
            model=parsed.model, tools=parsed.tools, charter=charter_path,
            has_history=(child / "history.md").is_file(),
            display_name=member.display_name if member else child.name,
            status=member.status if member else "",
        ))
    return out
