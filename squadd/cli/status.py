"""`squadd status`: the daemon's sessions and pool, as a table, JSON, or a live view."""

from __future__ import annotations

import time
from pathlib import Path

import click

from squadd.cli._daemon import client_for, print_sessions
from squadd.cli._output import print_json
from squadd.cli._squad import TEXT, FiniteFloatRange, dir_option


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--watch", is_flag=True, help="Redraw the table until Ctrl-C.")
@click.option("--interval", type=FiniteFloatRange(0.2, 3600), default=1.0, show_default=True,
              help="Seconds between redraws with --watch.")
@click.option("--all", "include_ended", is_flag=True,
              help="Also show sessions that ended and were put away.")
@click.option("--agent", type=TEXT, default=None, help="Only this agent's sessions.")
@dir_option
def status(as_json: bool, watch: bool, interval: float, include_ended: bool, agent: str | None,
           directory: Path | None) -> None:
    """Show the daemon's sessions (agent, state, session, age, idle, tokens, task) and pool.

    \b
    Examples:
      squadd status
      squadd status --watch
      squadd status --json
    """
    with client_for(directory) as client:
        while True:
            report = client.status(agent=agent, include_ended=include_ended)
            if as_json:
                print_json(report)
            else:
                if watch:
                    click.clear()
                    click.echo(time.strftime("%H:%M:%S") + f"  squadd status ({interval:g}s; "
                               "Ctrl-C to stop)\n")
                print_sessions(report)
            if not watch:
                return
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                return
