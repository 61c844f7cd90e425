"""`squadd agent add` and `squadd agent list`: the team's roster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from squadd.cli._output import print_json, print_table
from squadd.cli._squad import TEXT, dir_option, find_layout, show_path
from squadd.contracts.names import NAME_RULE

if TYPE_CHECKING:
    from squadd.state.charters import RosterEntry


@click.group()
def agent() -> None:
    """Add agents to the squad and list them."""


ADD_HELP = f"""Add agent NAME: its charter, its history, and a row in team.md (and, in a team
Squad's CLI made, an entry in casting/registry.json and casting/history.json).

NAME must match {NAME_RULE} (lower-case letters, digits, '.', '_' and '-'). Edit the new
charter afterwards to say what the agent owns and how it works.

\b
Examples:
  squadd agent add lead --role "Lead"
  squadd agent add backend --role "Backend Developer"
"""


@agent.command("add", help=ADD_HELP)
@click.argument("name", type=TEXT)
@click.option("--role", type=TEXT, required=True,
              help="What the agent does, e.g. \"Backend Developer\".")
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def add(name: str, role: str, directory: Path | None, as_json: bool) -> None:
    from squadd.state.scaffold import templates_dir
    from squadd.state.team import add_agent

    layout = find_layout(directory)
    added = add_agent(layout, name, role, templates=templates_dir())
    if as_json:
        print_json({
            "name": added.name, "role": added.role, "charter": added.charter,
            "history": added.history, "created": added.created,
            "team_updated": added.team_updated, "casting": added.casting,
        })
        return
    click.echo(f"Added {added.name} ({added.role}):")
    for path in added.created:
        click.echo(f"  {show_path(path)}")
    if added.team_updated:
        click.echo(f"  {show_path(layout.team_md)} (new row in Members)")
    for path in added.casting:
        click.echo(f"  {show_path(path)} (Squad's casting)")
    click.echo(f"Next: edit {show_path(added.charter)} to describe what {added.name} owns.")


def _learning_count(entry: RosterEntry) -> int | None:
    from squadd.state.history import learnings

    if not entry.has_history:
        return None
    # Counted even in a file with bad bytes: they never change where an entry starts.
    try:
        raw = (entry.charter.parent / "history.md").read_bytes()
    except FileNotFoundError:
        return None
    return len(learnings(raw.decode("utf-8", errors="replace")))


def _as_dict(entry: RosterEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "display_name": entry.display_name,
        "status": entry.status,
        "status_kind": entry.status_kind,
        "role": entry.role,
        "model": entry.model,
        "tools": list(entry.tools) if entry.tools is not None else None,
        "charter": entry.charter,
        "history": entry.has_history,
        "learnings": _learning_count(entry),
    }


@agent.command("list")
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the roster as JSON.")
def list_agents(directory: Path | None, as_json: bool) -> None:
    """List the squad's agents: name, status, role, model, tools and history.

    NAME is team.md's display name (routes take it in any case; --json also gives the folder).
    STATUS is team.md's, as written: routing rules pick only active members.
    MODEL "auto" means squadd chooses (see the charter's ## Model); TOOLS "all" means the
    charter has no ## Tools section.

    \b
    Examples:
      squadd agent list
      squadd agent list --json
    """
    layout = find_layout(directory)
    from squadd.state.charters import roster

    entries = roster(layout)
    if as_json:
        print_json({"squad_dir": layout.root, "agents": [_as_dict(e) for e in entries]})
        return
    if not entries:
        click.echo("No agents yet: add one with 'squadd agent add NAME --role ROLE'.")
        return
    rows = []
    for entry in entries:
        count = _learning_count(entry)
        history = "missing" if count is None else f"{count} learning{'' if count == 1 else 's'}"
        tools = "all" if entry.tools is None else (", ".join(entry.tools) or "none")
        name = entry.display_name or entry.name
        status = entry.status or "not in team.md"
        rows.append([name, status, entry.role or "-", entry.model or "auto", tools, history])
    print_table(["name", "status", "role", "model", "tools", "history"], rows)
