"""The team: team.md's Members table, and adding an agent (charter, history and roster row).

`add_agent` writes nothing unless every input is valid, creates each new file with O_EXCL,
updates team.md under its lock with an atomic replace, and removes what it created on failure.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import safe_name
from squadd.errors import ConfigError, StateError
from squadd.fsio import atomic_write, create_exclusive, file_lock, read_text
from squadd.state.layout import SquadLayout

MEMBERS_HEADING = "## Members"
MEMBERS_TABLE_HEAD = "| Name | Role | Charter | Status |\n|------|------|---------|--------|"
TEAM_SKELETON = f"# Team\n\n{MEMBERS_HEADING}\n\n{MEMBERS_TABLE_HEAD}\n"
MAX_ROLE_CHARS = 120
_SEPARATOR_ROW_RE = re.compile(r"^\|[\s:|-]+\|?$")


@dataclass(frozen=True)
class AddedAgent:
    """What `add_agent` did."""

    name: str
    role: str
    charter: Path
    history: Path
    created: list[Path]
    team_updated: bool


def check_role(role: str) -> str:
    """Return `role` stripped if it fits on one table cell, else raise `StateError`."""
    cleaned = role.strip()
    if not cleaned:
        raise StateError("the role must not be empty: say what the agent does, e.g. --role Tester")
    if any(char in cleaned for char in "\n\r\x00"):
        raise StateError("the role must be one line of text (no line breaks or NUL bytes)")
    if len(cleaned) > MAX_ROLE_CHARS:
        raise StateError(
            f"the role is {len(cleaned)} characters, over the limit of {MAX_ROLE_CHARS}: "
            "keep it short and put the details in the charter"
        )
    return cleaned


def render_template(text: str, *, name: str, role: str) -> str:
    """Fill the `{name}` and `{role}` placeholders of a charter or history template."""
    return text.replace("{name}", name).replace("{role}", role)


def _members_span(lines: list[str]) -> tuple[int, int] | None:
    """Index of the `## Members` heading and the end of its section, or None."""
    start = next((i for i, line in enumerate(lines) if line.strip() == MEMBERS_HEADING), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("#")), len(lines))
    return start, end


def _cells(row: str) -> list[str]:
    inner = row.strip().strip("|")
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", inner)]


def member_names(team_md: str) -> list[str]:
    """The names in the first column of team.md's Members table, lower-cased, in order."""
    lines = team_md.replace("\r\n", "\n").split("\n")
    span = _members_span(lines)
    if span is None:
        return []
    rows = [line for line in lines[span[0] + 1:span[1]] if line.strip().startswith("|")]
    names = []
    for row in rows[1:]:  # the first row is the header
        if _SEPARATOR_ROW_RE.match(row.strip()):
            continue
        first = _cells(row)[0].strip("`*_ ")
        if first:
            names.append(first.lower())
    return names


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|")


def add_member_row(team_md: str, *, name: str, role: str, status: str = "active") -> str:
    """Return team.md with a row for `name` at the end of the Members table.

    A missing `## Members` section (or table) is created.
    """
    row = (f"| {name} | {_escape_cell(role)} | [charter](agents/{name}/charter.md) "
           f"| {status} |")
    if not team_md.strip():
        team_md = TEAM_SKELETON
    lines = team_md.replace("\r\n", "\n").split("\n")
    span = _members_span(lines)
    if span is None:
        body = team_md.rstrip("\n")
        return f"{body}\n\n{MEMBERS_HEADING}\n\n{MEMBERS_TABLE_HEAD}\n{row}\n"
    start, end = span
    table_rows = [i for i in range(start + 1, end) if lines[i].strip().startswith("|")]
    if table_rows:
        at = table_rows[-1] + 1
        new_lines = [*lines[:at], row, *lines[at:]]
    else:
        block = ["", *MEMBERS_TABLE_HEAD.split("\n"), row]
        new_lines = [*lines[:start + 1], *block, *lines[start + 1:]]
    result = "\n".join(new_lines)
    return result if result.endswith("\n") else result + "\n"


def _read_template(folder: Path, filename: str) -> str:
    path = folder / filename
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"squadd's {filename} template at {path} cannot be read ({exc}): reinstall squadd"
        ) from exc


def add_agent(layout: SquadLayout, name: str, role: str, *, templates: Path) -> AddedAgent:
    """Create `agents/{name}/charter.md` and `history.md` from the templates; list it in team.md.

    Refuses a bad name or role, or an agent that already has a charter, before writing anything.
    """
    name = safe_name(name)
    role = check_role(role)
    charter_path = layout.charter(name)
    history_path = layout.history(name)
    team_path = layout.team_md
    if charter_path.exists():
        raise StateError(f"agent {name!r} already exists: its charter is {charter_path}")
    charter = render_template(_read_template(templates, "charter.md"), name=name, role=role)
    history = render_template(_read_template(templates, "history.md"), name=name, role=role)

    agent_dir = layout.agent_dir(name)
    made_dir = not agent_dir.exists()
    created: list[Path] = []
    try:
        if not create_exclusive(charter_path, charter):
            raise StateError(f"agent {name!r} already exists: its charter is {charter_path}")
        created.append(charter_path)
        if create_exclusive(history_path, history):
            created.append(history_path)
        with file_lock(layout.lock_for(team_path)):
            team = read_text(team_path)
            team_updated = name not in member_names(team)
            if team_updated:
                atomic_write(team_path, add_member_row(team, name=name, role=role))
    except BaseException:
        for path in created:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if made_dir:
            with contextlib.suppress(OSError):
                agent_dir.rmdir()
        raise
    return AddedAgent(name=name, role=role, charter=charter_path, history=history_path,
                      created=created, team_updated=team_updated)
