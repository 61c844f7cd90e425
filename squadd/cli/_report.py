"""How the commands show things as text, without click: JSON for scripts, the bold of a table's
header, and the lines of `squadd status` (the sessions table, the worktrees, the pool and
cluster totals, and the short forms of durations, token counts and tasks).

Nothing here imports click (or `typing`): `squadd.cli.quick` prints these for a plain
`squadd status` without loading the click group, and the click commands print the same through
`click.echo`, so both give the same output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

TYPE_CHECKING = False  # no `typing` at run time: see the docstring
if TYPE_CHECKING:
    from typing import Any

SESSION_HEADERS = ("agent", "state", "session", "age", "idle", "tokens", "cost", "task")


def json_text(data: Any) -> str:
    """`data` as indented JSON, as every command's `--json` prints it (paths become strings)."""
    return json.dumps(data, indent=2, ensure_ascii=False, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def bold(text: str) -> str:
    """`text` in bold on a terminal (what `click.style(text, bold=True)` makes)."""
    return f"\x1b[1m{text}\x1b[0m"


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


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Lines of a plain-text table with columns padded to their widest cell."""
    widths = [len(header) for header in headers]
    for row in rows:
        for index, cell in enumerate(row):
            widths[index] = max(widths[index], len(cell))

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))

    return [line(headers).rstrip(), *(line(row).rstrip() for row in rows)]


def session_rows(sessions: Sequence[Mapping[str, Any]], task_width: int = 50
                 ) -> list[list[str]]:
    return [[
        str(s.get("agent", "?")), str(s.get("state", "?")), str(s.get("session_id", "")),
        duration(s.get("age_s")), duration(s.get("idle_s")),
        tokens(int(s.get("input_tokens") or 0) + int(s.get("output_tokens") or 0)),
        cost(s.get("cost_usd")), one_line(s.get("task"), task_width),
    ] for s in sessions]


def cost(usd: Any) -> str:
    """`$0.0123`, `$12.40`, or `unknown` (a model without a price: never shown as 0)."""
    if not isinstance(usd, (int, float)) or isinstance(usd, bool):
        return "unknown"
    return f"${usd:.4f}" if usd < 1 else f"${usd:,.2f}"


def spending_lines(spending: Any) -> list[str]:
    """Today's spending: the squad's, then each agent's."""
    if not isinstance(spending, Mapping):
        return []
    agents = spending.get("agents") or {}
    shown = ", ".join(f"{name} {cost(a.get('cost_usd'))}" for name, a in sorted(agents.items())
                      if isinstance(a, Mapping))
    return [f"spent today ({spending.get('day')} UTC): {cost(spending.get('cost_usd'))}, "
            f"{tokens(int(spending.get('tokens') or 0))} tokens"
            + (f" ({shown})" if shown else "")]


def worker_place(session: Mapping[str, Any]) -> str:
    """Where a session runs: `worker@host` on the cluster, `-` on the coordinator itself."""
    worker = session.get("worker")
    if not worker:
        return "-"
    host = session.get("worker_host")
    return f"{worker}@{host}" if host else str(worker)


def status_lines(report: Mapping[str, Any], header: Callable[[str], str] = str) -> list[str]:
    """The lines of `squadd status` for a `StatusReport`: the sessions table (its header line
    passed through `header`, which may make it bold), the worktrees, then the pool and cluster
    totals."""
    sessions = report.get("sessions") or []
    lines: list[str] = []
    if sessions:
        headers, rows = [name.upper() for name in SESSION_HEADERS], session_rows(sessions)
        if any(s.get("worker") for s in sessions):  # cluster mode: where each one runs
            headers.insert(3, "WORKER")
            for row, session in zip(rows, sessions, strict=True):
                row.insert(3, worker_place(session))
        table = format_table(headers, rows)
        lines += [header(table[0]), *table[1:]]
    else:
        lines.append("no sessions")
    spaces = [s for s in sessions if s.get("workspace")]
    if spaces:
        lines.append("\nworktrees:")
    for session in spaces:
        space = session["workspace"]
        commits = len(space.get("commits") or [])
        lines.append(f"  {session.get('session_id')}  {space.get('branch')}  "
                     f"{space.get('state')}  {commits} commit{'s' if commits != 1 else ''}"
                     + (f"  ({space['diffstat'].strip()})" if space.get("diffstat") else ""))
    pool = report.get("pool") or {}
    if pool:
        lines.append(
            f"\npool: {pool.get('running', 0)}/{pool.get('max_concurrent', 0)} running, "
            f"{pool.get('queued', 0)}/{pool.get('max_queued', 0)} queued, "
            f"{pool.get('waiting', 0)} waiting on a route, {pool.get('idle', 0)} at rest"
            + (f", {pool['parked']} parked in the inbox" if pool.get("parked") else ""))
    lines += spending_lines(report.get("spending"))
    cluster = report.get("cluster")
    if isinstance(cluster, Mapping):
        lines += cluster_lines(cluster)
    settings = report.get("settings")
    if isinstance(settings, Mapping):
        if settings.get("error"):
            lines.append(f"\nsettings: {settings['error']}")
        lines += [f"settings: {line}" for line in settings.get("restart_needed") or ()]
    return lines


def cluster_lines(cluster: Mapping[str, Any]) -> list[str]:
    """Cluster mode's lines of `squadd status`: Redis, then one line per worker."""
    redis = "up" if cluster.get("redis_up") else "UNREACHABLE"
    workers = cluster.get("workers") or []
    lines = [f"cluster: redis {redis} ({cluster.get('url')}, "
             f"{cluster.get('redis_outages', 0)} outages), {len(workers)} "
             f"worker{'' if len(workers) == 1 else 's'}, "
             f"{cluster.get('busy', 0)}/{cluster.get('slots', 0)} slots busy, "
             f"{cluster.get('local_slots', 0)} local slots"]
    owner = cluster.get("owner")
    if isinstance(owner, Mapping):
        lines.append(f"  coordinator: {owner.get('host')} pid {owner.get('pid')}, since "
                     f"{owner.get('since')} (fencing token {owner.get('token')})")
    held = cluster.get("pending_per_worker") or {}
    for worker in workers:
        lines.append(f"  {worker.get('name')}: {worker.get('busy')}/{worker.get('slots')} slots "
                     f"busy, {held.get(worker.get('name'), 0)} jobs held, {worker.get('host')} "
                     f"pid {worker.get('pid')}, squadd {worker.get('version')}")
    gone = sorted(set(held) - {w.get("name") for w in workers})
    for name in gone:
        lines.append(f"  {name}: gone, {held[name]} jobs held (reclaimed after cluster.lease_s)")
    for stream, numbers in sorted((cluster.get("streams") or {}).items()):
        oldest = numbers.get("oldest_unclaimed_s")
        waited = "" if oldest is None else f", oldest waiting {duration(float(oldest))}"
        lines.append(f"  {stream} jobs: {numbers.get('queued', 0)} queued, "
                     f"{numbers.get('pending', 0)} running{waited}")
    for session_id, why in sorted((cluster.get("resubmitting") or {}).items()):
        lines.append(f"  submitted again: {session_id} ({why})")
    return lines
