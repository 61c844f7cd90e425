"""`squadd top`: the squad at work, live in the terminal (the dashboard's picture, in Textual)."""

from __future__ import annotations

from pathlib import Path

import click

from squadd.cli._squad import dir_option, find_layout


@click.command("top")
@dir_option
def top(directory: Path | None) -> None:
    """Watch the squad live: pool, sessions as a tree of routes, tools, approvals.

    \b
    Keys: f filter by agent (again for the next one), Esc all agents,
          Enter open the selected session's transcript (Esc back),
          a / d approve or deny the selected approval, Tab switch tables, q quit.
    """
    from squadd.cli._top_app import TopApp
    from squadd.daemon.client import AsyncDaemonClient, DaemonClient

    layout = find_layout(directory)
    with DaemonClient(layout) as client:
        client.health()  # no daemon: say so plainly, before the screen is taken over
    TopApp(AsyncDaemonClient(layout)).run()
