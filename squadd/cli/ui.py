"""`squadd ui`: the URL of the running daemon's live dashboard (with its token), printed or
opened in a browser. The daemon serves it when started with `squadd serve --ui`."""

from __future__ import annotations

import html
import json
import webbrowser
from pathlib import Path

import click

from squadd.cli._daemon import client_for
from squadd.cli._output import print_json
from squadd.cli._squad import dir_option, find_layout
from squadd.errors import DaemonError, DaemonRequestError
from squadd.fsio import PRIVATE_FILE, atomic_write, private_dir
from squadd.state.layout import SquadLayout


@click.command("ui")
@click.option("--open", "open_browser", is_flag=True, help="Open it in the default browser.")
@click.option("--json", "as_json", is_flag=True, help="Print {url, link} as JSON.")
@dir_option
def ui(open_browser: bool, as_json: bool, directory: Path | None) -> None:
    """Print the dashboard's URL, with its token (keep it to yourself: it is the key).

    --open hands the URL to the browser through a page only you can read
    (.squad/run/ui-open.html), never on the browser's command line.

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
    if open_browser:
        page = handoff_page(find_layout(directory), answer["link"])
        if not webbrowser.open(page.as_uri()):
            raise DaemonError("no browser could be opened here: open the URL above yourself")


def handoff_page(layout: SquadLayout, link: str) -> Path:
    """A page that sends the browser on to `link`, written 0600 in run/ (0700): the browser is
    given this file's path, so the token never appears on any process's command line, where
    every local user could read it."""
    quoted = html.escape(link, quote=True)
    page = (f'<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
            f'<meta http-equiv="refresh" content="0;url={quoted}"><title>squadd</title>'
            f"<script>location.replace({json.dumps(link)})</script>"
            f'<a href="{quoted}">Open the squadd dashboard</a>\n')
    private_dir(layout.run_dir)
    atomic_write(layout.ui_handoff, page, mode=PRIVATE_FILE)
    return layout.ui_handoff
