"""What the commands that talk to the daemon share: the client for `--dir`, and how sessions,
durations and events are shown. Imports stay light (no pydantic, no runtime): `squadd status`
must start fast.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from squadd.cli._output import print_table
from squadd.cli._squad import find_layout
from squadd.daemon.client import DaemonClient

SESSION_HEADERS = ("agent", "state", "session", "age", "idle", "tokens", "task")
_STATE_COLORS = {"active": "green", "creating": "green", "queued": "yellow", "waiting": "cyan",
                 "idle": "bright_black", "error": "red", "interrupted": "magenta",
                 "destroyed": "bright_black"}


def client_for(directory: Path | None, **options: Any) -> DaemonClient:
    """A client for the daemon of the squad dir at or above `directory`."""
    return DaemonClient(find_layout(directory), **options)


def duration(seconds: float | None) -> str:
    """`42s`, `3m05s`, `2h10m`, `3d4h`: short enough for a table column."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def tokens(count: int) -> str:
    if count < 10_000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def one_line(text: str | None, limit: int) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def session_rows(sessions: Sequence[Mapping[str, Any]], task_width: int = 50
                 ) -> list[list[str]]:
    return [[
        str(s.get("agent", "?")), str(s.get("state", "?")), str(s.get("session_id", "")),
        duration(s.get("age_s")), duration(s.get("idle_s")),
        tokens(int(s.get("input_tokens") or 0) + int(s.get("output_tokens") or 0)),
        one_line(s.get("task"), task_width),
    ] for s in sessions]


def print_sessions(report: Mapping[str, Any]) -> None:
    """The sessions table and a line of pool totals."""
    sessions = report.get("sessions") or []
    if sessions:
        print_table(SESSION_HEADERS, session_rows(sessions))
    else:
        click.echo("no sessions")
    spaces = [s for s in sessions if s.get("workspace")]
    if spaces:
        click.echo("\nworktrees:")
    for session in spaces:
        space = session["workspace"]
        commits = len(space.get("commits") or [])
        click.echo(f"  {session.get('session_id')}  {space.get('branch')}  "
                   f"{space.get('state')}  {commits} commit{'s' if commits != 1 else ''}"
                   + (f"  ({space['diffstat'].strip()})" if space.get("diffstat") else ""))
    pool = report.get("pool") or {}
    if pool:
        click.echo(
            f"\npool: {pool.get('running', 0)}/{pool.get('max_concurrent', 0)} running, "
            f"{pool.get('queued', 0)}/{pool.get('max_queued', 0)} queued, "
            f"{pool.get('waiting', 0)} waiting on a route, {pool.get('idle', 0)} at rest")
    cluster = report.get("cluster")
    if isinstance(cluster, Mapping):
        print_cluster(cluster)


def print_cluster(cluster: Mapping[str, Any]) -> None:
    """Cluster mode's lines of `squadd status`: Redis, then one line per worker."""
    redis = "up" if cluster.get("redis_up") else "UNREACHABLE"
    workers = cluster.get("workers") or []
    click.echo(f"cluster: redis {redis} ({cluster.get('url')}, "
               f"{cluster.get('redis_outages', 0)} outages), {len(workers)} workers, "
               f"{cluster.get('busy', 0)}/{cluster.get('slots', 0)} slots busy, "
               f"{cluster.get('local_slots', 0)} local slots")
    for worker in workers:
        click.echo(f"  {worker.get('name')}: {worker.get('busy')}/{worker.get('slots')} slots "
                   f"busy, {worker.get('host')} pid {worker.get('pid')}, "
                   f"squadd {worker.get('version')}")


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
    details = {k: v for k, v in event.items()
               if k not in ("type", "ts", "agent", "seq") and v not in (None, "", [], {})}
    shown = " ".join(f"{k}={one_line(v if isinstance(v, str) else json.dumps(v), 80)}"
                     for k, v in details.items())
    return prefix + shown
