"""`squadd var set NAME [VALUE]`: give a tool's variable a value, e.g. one a call waits for.

The value goes to the user's secrets file (0600, never `.squad/`) through the daemon, which
then wakes the calls waiting for it (`variable.requested`). It is never echoed: leave VALUE out
to type it hidden, or pipe it in on stdin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from squadd.cli._daemon import client_for
from squadd.cli._squad import TEXT, dir_option, find_layout
from squadd.errors import DaemonNotRunningError


@click.group("var")
def var() -> None:
    """Set the values of the variables tools declare."""


@var.command("set")
@click.argument("name", type=TEXT)
@click.argument("value", type=TEXT, required=False)
@dir_option
def set_(name: str, value: str | None, directory: Path | None) -> None:
    """Store NAME's value in the secrets file and resume the calls waiting for it.

    Without VALUE it is read hidden from the terminal, or as one line from stdin.
    """
    if value is None:
        if sys.stdin.isatty():
            value = str(click.prompt(f"Value of {name}", hide_input=True))
        else:
            value = sys.stdin.readline().rstrip("\r\n")
    try:
        with client_for(directory) as client:
            answer = client.set_variable(name, value)
    except DaemonNotRunningError:
        from squadd.config import load_settings
        from squadd.errors import VariableValueError
        from squadd.tools.variables import secrets_file_path, store_variable

        layout = find_layout(directory)
        path = secrets_file_path(load_settings(layout.root))
        try:
            store_variable(path, name, value)
        except VariableValueError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"{name} stored in {path} (no daemon is running: no call was waiting)")
        return
    waiting = int(answer.get("waiting_calls", 0))
    resumed = f"; {waiting} waiting call{'s' if waiting != 1 else ''} resumed" if waiting else ""
    click.echo(f"{name} stored in {answer.get('stored_in')}{resumed}")
