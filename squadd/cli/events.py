"""`squadd events`: the daemon's recent events, or (`--follow`) its live event stream."""

from __future__ import annotations

import json
from pathlib import Path

import click

from squadd.cli._daemon import client_for, event_line
from squadd.cli._squad import TEXT, dir_option
from squadd.daemon.wire import RECENT_EVENTS_MAX


@click.command("events")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events until Ctrl-C.")
@click.option("--type", "types", type=TEXT, multiple=True, metavar="TYPE",
              help="Only these event types ('tool.*' globs work; repeat or comma-separate).")
@click.option("--session", "session_id", type=TEXT, default=None,
              help="Only this session's events.")
@click.option("-n", "--recent", type=click.IntRange(0, RECENT_EVENTS_MAX), default=None,
              help="How many past events to show first (default: 50, or 0 with --follow).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@dir_option
def events(follow: bool, types: tuple[str, ...], session_id: str | None, recent: int | None,
           as_json: bool, directory: Path | None) -> None:
    """Show the daemon's events: what its sessions, tools, pool and Scribe did.

    \b
    Examples:
      squadd events                      the last 50 events
      squadd events --follow --type 'tool.*' --type agent.completed
      squadd events -f --json | jq .type
    """
    wanted = [part.strip() for item in types for part in item.split(",") if part.strip()]
    count = recent if recent is not None else (0 if follow else 50)
    with client_for(directory) as client:
        try:
            for event in client.events(types=wanted or None, session_id=session_id,
                                       recent=count, follow=follow):
                if as_json:
                    click.echo(json.dumps(event, ensure_ascii=False))
                else:
                    click.echo(event_line(event))
        except KeyboardInterrupt:
            return
