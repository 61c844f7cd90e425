"""What the commands that talk to the daemon share: the client for `--dir`, and how sessions
and events are shown through click (the lines themselves come from `_report`). Imports stay
light: no pydantic, no runtime, and the client (`http.client`) only once one is made.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from squadd.cli._report import bold, one_line, status_lines
from squadd.cli._squad import find_layout

if TYPE_CHECKING:
    from squadd.daemon.client import DaemonClient

_STATE_COLORS = {"active": "green", "creating": "green", "queued": "yellow", "waiting": "cyan",
                 "idle": "bright_black", "error": "red", "interrupted": "magenta",
                 "destroyed": "bright_black"}


def client_for(directory: Path | None, **options: Any) -> DaemonClient:
    """A client for the daemon of the squad dir at or above `directory`."""
    from squadd.daemon.client import DaemonClient

    return DaemonClient(find_layout(directory), **options)


def print_sessions(report: Mapping[str, Any]) -> None:
    """The sessions table (its header bold on a terminal), the worktrees and the totals."""
    for line in status_lines(report, header=bold):
        click.echo(line)


def state_style(state: str) -> str:
    return click.style(state, fg=_STATE_COLORS.get(state))


def event_line(event: Mapping[str, Any]) -> str:
    """One readable line for an event (`squadd events`, `squadd route`'s progress)."""
    kind = str(event.get("type", "?"))
    who = event.get("agent") or ""
    stamp = str(event.get("ts", ""))[11:19]
    prefix = f"{stamp} {kind:<18} {who + ' ' if who else ''}"
    if kind == "tool.started":
        args = ", ".join(f"{k}={one_line(json.dumps(v, ensure_ascii=False), 40)}"
                         for k, v in (event.get("arguments") or {}).items())
        return prefix + f"→ {event.get('tool')}({args})"
    if kind == "tool.completed":
        mark = "✓" if event.get("result_type") == "success" else "✗"
        return prefix + f"{mark} {event.get('tool')}: {one_line(event.get('summary'), 100)}"
    outcome = event.get("outcome")
    if kind in ("workspace.landed", "workspace.land_failed") and isinstance(outcome, Mapping):
        state, commit = outcome.get("state"), str(outcome.get("commit") or "")[:12]
        line = prefix + f"{event.get('session_id')} {event.get('branch')} landing: {state}"
        line += f" {commit}" if commit else f": {one_line(str(outcome.get('detail')), 100)}"
        return line + (f" next: {outcome['next']}" if outcome.get("next") else "")
    details = {k: v for k, v in event.items()
               if k not in ("type", "ts", "agent", "seq") and v not in (None, "", [], {})}
    shown = " ".join(f"{k}={one_line(v if isinstance(v, str) else json.dumps(v), 80)}"
                     for k, v in details.items())
    return prefix + shown
