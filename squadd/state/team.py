"""The team: team.md's Members table, and adding an agent (charter, history and roster row).

`add_agent` writes nothing unless every input is valid, creates each new file with O_EXCL,
updates team.md under its lock with an atomic replace, and removes what it created on failure.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from squadd.contracts.names import safe_name
from squadd.errors import ConfigError, StateError
from squadd.fsio import TEAM_FILE, atomic_write, create_exclusive, file_lock, read_text
from squadd.state.casting import register_agent
from squadd.state.layout import SquadLayout
from squadd.state.members import (
    MEMBERS_HEADING,
    Member,
    MembersTable,
    data_lines,
    member_names,
    members_span,
    parse_members,
)
from squadd.state.textstyle import plain, restyle

MEMBERS_TABLE_HEAD = "| Name | Role | Charter | Status |\n|------|------|---------|--------|"
TEAM_SKELETON = f"# Team\n\n{MEMBERS_HEADING}\n\n{MEMBERS_TABLE_HEAD}\n"
ACTIVE_STATUS = "✅ Active"
"""The status Squad counts as active; a new row copies the file's own form of it if it has one."""
MAX_ROLE_CHARS = 120
__all__ = ["MEMBERS_HEADING", "AddedAgent", "add_agent", "add_member_row", "check_role",
           "member_names", "render_template"]


@dataclass(frozen=True)
class AddedAgent:
    """What `add_agent` did."""

    name: str
    role: str
    charter: Path
    history: Path
    created: list[Path]
    team_updated: bool
    casting: list[Path] = field(default_factory=list)
    """Squad's casting files updated (registry.json, history.json), where the team has them."""


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


def _escape_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _display_case(members: list[Member], name: str) -> str:
    """`name` in the case the table's names use: `EECOM`, `Apollo` (Squad's default) or `lead`."""
    letters = [m.display_name for m in members if any(c.isalpha() for c in m.display_name)]
    if letters and sum(n.isupper() for n in letters) * 2 > len(letters):
        return name.upper()
    if letters and sum(n == n.lower() for n in letters) * 2 > len(letters):
        return name
    return name[:1].upper() + name[1:]


def _charter_cell(members: list[Member], name: str, squad_dirname: str) -> str:
    """The charter cell in the style of the table's other rows (path form, link, backticks)."""
    for member in members:
        pattern = re.compile(rf"agents/{re.escape(member.folder)}/charter\.md", re.IGNORECASE)
        if pattern.search(member.charter_cell):
            return pattern.sub(f"agents/{name}/charter.md", member.charter_cell, count=1)
    return f"`{squad_dirname}/agents/{name}/charter.md`"


def _active_status(members: list[Member]) -> str:
    return next((m.status for m in members if m.status and m.status_kind == "active"),
                ACTIVE_STATUS)


def member_row(table: MembersTable, *, name: str, role: str, squad_dirname: str = ".squad") -> str:
    """A Members row for agent folder `name`, in the conventions the table already uses."""
    values = {
        "name": _display_case(table.members, name),
        "role": _escape_cell(role),
        "charter": _charter_cell(table.members, name, squad_dirname),
        "status": _active_status(table.members),
    }
    header = table.header
    if not any(key in column for column in header for key in values):
        header = list(values)  # no table, or one without known columns: Squad's four columns
    row = []
    for column in header:
        key = next((k for k in values if k in column), None)
        row.append(values.pop(key) if key is not None else "")
    return "| " + " | ".join(row) + " |"


def add_member_row(team_md: str, *, name: str, role: str, squad_dirname: str = ".squad") -> str:
    """Return team.md with a row for `name` at the end of the Members table.

    The row copies the table's conventions (display-name case, charter path style, the form
    of the active status); a missing `## Members` section (or table) is created in Squad's style.
    """
    if not team_md.strip():
        team_md = TEAM_SKELETON
    table = parse_members(team_md)
    row = member_row(table, name=name, role=role, squad_dirname=squad_dirname)
    lines = team_md.replace("\r\n", "\n").split("\n")
    data = data_lines(team_md)
    span = members_span(data)
    if span is None:
        body = team_md.rstrip("\n")
        return f"{body}\n\n{MEMBERS_HEADING}\n\n{MEMBERS_TABLE_HEAD}\n{row}\n"
    start, end = span
    table_rows = [i for i in range(start + 1, end) if data[i].strip().startswith("|")]
    if table_rows:
        at = table_rows[-1] + 1
        new_lines = [*lines[:at], row, *lines[at:]]
    else:
        block = ["", *MEMBERS_TABLE_HEAD.split("\n"), row]
        new_lines = [*lines[:start + 1], *block, *lines[start + 1:]]
    return "\n".join(new_lines)  # the end of the file is untouched, final newline or none


def _read_exact(path: Path) -> str:
    """team.md as its bytes say (no newline translation); "" when it is missing."""
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return ""
    except UnicodeDecodeError as exc:
        raise StateError(f"{path} is not valid UTF-8 (byte {exc.start}): re-save it as UTF-8, "
                         "then add the agent again") from None


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
        if not create_exclusive(charter_path, charter, mode=TEAM_FILE):
            raise StateError(f"agent {name!r} already exists: its charter is {charter_path}")
        created.append(charter_path)
        if create_exclusive(history_path, history, mode=TEAM_FILE):
            created.append(history_path)
        with file_lock(layout.lock_for(team_path)):
            team = _read_exact(team_path)
            team_updated = name not in member_names(team)
            if team_updated:
                # Only the new row differs: the file keeps its line endings, BOM and bytes.
                row_added = add_member_row(plain(team), name=name, role=role,
                                           squad_dirname=layout.root.name)
                atomic_write(team_path, restyle(team, row_added), new_mode=TEAM_FILE)
    except BaseException:
        for path in created:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if made_dir:
            with contextlib.suppress(OSError):
                agent_dir.rmdir()
        raise
    display = next((m.display_name for m in parse_members(read_text(team_path)).members
                    if m.folder == name), name)
    casting = register_agent(layout, name, display)
    return AddedAgent(name=name, role=role, charter=charter_path, history=history_path,
                      created=created, team_updated=team_updated, casting=casting)
