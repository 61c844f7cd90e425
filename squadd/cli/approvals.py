"""`squadd approvals`: the tool calls waiting for an answer, each with its arguments whole (what
Approve would run, every byte of it) and their size, for `squadd approve` or `squadd deny`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from squadd.cli._daemon import client_for
from squadd.cli._output import print_json
from squadd.cli._squad import dir_option


@click.command("approvals")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list: approval_id, agent, tool, question, arguments, "
                   "arguments_text, arguments_bytes, session_id, created.")
@dir_option
def approvals(as_json: bool, directory: Path | None) -> None:
    """List the tool calls waiting for approval, with their whole arguments.

    Nothing is cut: the arguments shown are exactly those Approve runs, as JSON with every
    character outside ASCII escaped (so no control or right-to-left character can hide a part),
    and their size in bytes.

    \b
    Examples:
      squadd approvals
      squadd approve 3f9a1c2e      # or: squadd deny 3f9a1c2e --reason "not that file"
    """
    with client_for(directory) as client:
        waiting: list[dict[str, Any]] = client.dashboard().get("approvals", [])
    if as_json:
        print_json(waiting)
        return
    if not waiting:
        click.echo("no approvals waiting")
        return
    for index, item in enumerate(waiting):
        if index:
            click.echo("")
        click.echo(f"{item['approval_id']}  {item['agent']} asks to run {item['tool']}: "
                   f"{item.get('question') or ''}")
        click.echo(f"  arguments, whole ({item['arguments_bytes']} bytes):")
        for line in str(item["arguments_text"]).splitlines():
            click.echo(f"    {line}")
        click.echo(f"  answer: squadd approve {item['approval_id']}  |  "
                   f"squadd deny {item['approval_id']} --reason ...")
