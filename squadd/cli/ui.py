"""`squadd ui`: the URL of the running daemon's live dashboard (with its token), printed or
opened in a browser. The daemon serves it when started with `squadd serve --ui`."""

from __future__ import annotations

import webbrowser
from pathlib import Path

import click

from squadd.cli._daemon import client_for
from squadd.cli._output import print_json
from squadd.cli._squad import dir_option
from squadd.daemon.client import DaemonRequestError
from squadd.errors import DaemonError


@click.command("ui")
@click.option("--open", "open_browser", is_flag=True, help="Open it in the default browser.")
@click.option("--json", "as_json", is_flag=True, help="Print {url, link} as JSON.")
@dir_option
def ui(open_browser: bool, as_json: bool, directory: Path | None) -> None:
    """Print the dashboard's URL, with its token (keep it to yourself: it is the key).

    The dashboard shows the pool, the sessions as a tree of routes, live tool progress,
    transcripts, approvals with buttons, the decisions and tokens per agent.

    \b
    Examples:
      squadd serve --ui --detach
      squadd ui --open
    """
    with client_for(directory) as client:
        try:
            answer = client.ui()
        except DaemonRequestError as exc:
            if exc.status == 404:
                raise DaemonError("this daemon serves no dashboard: stop it ('squadd stop') and "
                                  "start it with 'squadd serve --ui'") from None
            raise
    if as_json:
        print_json(answer)
    else:
        click.echo(answer["link"])
    if open_browser and not webbrowser.open(answer["link"]):
        raise DaemonError("no browser could be opened here: open the URL above yourself")
