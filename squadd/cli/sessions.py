"""`squadd sessions`: list the daemon's sessions, show one's transcript, resume or cancel one."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from squadd.cli._daemon import client_for, print_sessions, state_style
from squadd.cli._landing import exit_code
from squadd.cli._landing import lines as landing_lines
from squadd.cli._output import print_json
from squadd.cli._report import cost, duration, one_line, tokens, worker_place
from squadd.cli._squad import TEXT, dir_option

_ROLE_COLORS = {"system": "bright_black", "user": "blue", "assistant": "green", "tool": "cyan"}
SYSTEM_PREVIEW = 200
TOOL_PREVIEW = 600


@click.group("sessions")
def sessions() -> None:
    """List, show, resume and cancel the daemon's agent sessions."""


@sessions.command("list")
@click.option("--all", "include_ended", is_flag=True,
              help="Also sessions that ended and were put away.")
@click.option("--agent", type=TEXT, default=None, help="Only this agent's sessions.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@dir_option
def list_sessions(include_ended: bool, agent: str | None, as_json: bool,
                  directory: Path | None) -> None:
    """List sessions: running, queued, at rest and interrupted (with --all: ended too)."""
    with client_for(directory) as client:
        report = client.status(agent=agent, include_ended=include_ended)
    if as_json:
        print_json(report)
    else:
        print_sessions(report)


@sessions.command("show")
@click.argument("session_id", type=TEXT)
@click.option("--tail", type=click.IntRange(min=1), default=None,
              help="Only the last N transcript records.")
@click.option("--json", "as_json", is_flag=True, help="The session and its records as JSON.")
@dir_option
def show(session_id: str, tail: int | None, as_json: bool, directory: Path | None) -> None:
    """Show SESSION_ID: who, what, its state, its worktree and how its landing went (state,
    detail, next step), and its transcript in readable form."""
    with client_for(directory) as client:
        data = client.session(session_id, tail=tail)
    if as_json:
        print_json(data)
        return
    view = data["session"]
    click.echo(click.style(f"session {view['session_id']}", bold=True)
               + f"  agent {view.get('agent')}  state {state_style(str(view.get('state')))}")
    click.echo(f"model {view.get('model') or '-'}  age {duration(view.get('age_s'))}  tokens "
               f"{tokens(int(view.get('input_tokens') or 0) + int(view.get('output_tokens') or 0))}"
               f"  requested by {view.get('requested_by') or '-'}")
    route = view.get("route")
    click.echo(f"cost {cost(view.get('cost_usd'))}"
               + (f"  route {route} cost {cost(view.get('route_cost_usd'))}" if route else "")
               + (f"  parked: {view['parked_reason']}" if view.get("parked_reason") else ""))
    click.echo(f"task: {view.get('task')}")
    if view.get("worker"):
        click.echo(f"worker: {worker_place(view)}")
    if view.get("error"):
        click.echo(click.style(f"error: {view['error']}", fg="red"))
    space = view.get("workspace") or {}
    if space:
        click.echo(f"worktree: {space.get('branch') or '-'}  {space.get('state')}  "
                   f"{len(space.get('commits') or [])} commit(s)  {space.get('path')}")
    if space.get("outcome"):
        refused = exit_code(space["outcome"]) != 0
        for line in landing_lines(space["outcome"]):
            click.echo(click.style(line, fg="red" if refused else None))
    click.echo()
    for record in data.get("transcript") or []:
        for line in transcript_lines(record):
            click.echo(line)


def transcript_lines(record: Mapping[str, Any]) -> list[str]:
    """A transcript record as readable lines."""
    stamp = str(record.get("ts", ""))[11:19]
    kind = record.get("kind")
    if kind == "state":
        extra = record.get("error") or record.get("reason") or ""
        return [click.style(f"{stamp} — {record.get('state')}{_placed(record)}"
                            + (f": {one_line(str(extra), 200)}" if extra else ""),
                            fg="magenta")]
    if kind != "message":
        return []
    message = record.get("message") or {}
    role = str(message.get("role", "?"))
    content = str(message.get("content") or "")
    head = click.style(f"{stamp} {role}", fg=_ROLE_COLORS.get(role), bold=True)
    if role == "system":
        return [f"{head} ({len(content)} chars) {one_line(content, SYSTEM_PREVIEW)}"]
    if role == "tool":
        mark = "✗" if message.get("is_error") else "✓"
        body = content if len(content) <= TOOL_PREVIEW else content[:TOOL_PREVIEW] + " …"
        return [f"{head} {mark} {message.get('name')}", *_indent(body)]
    lines = [head, *_indent(content)] if content else [head]
    for call in message.get("tool_calls") or []:
        arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
        lines.append(click.style(f"    → {call.get('name')}({one_line(arguments, 200)})",
                                 fg="cyan"))
    return lines


def _placed(record: Mapping[str, Any]) -> str:
    """Where a cluster state record puts the session: handed to the workers' stream, or on
    the worker that took it, with the lease epoch ("" for one daemon's own records)."""
    epoch = f", epoch {record['epoch']}" if record.get("epoch") else ""
    if record.get("worker"):
        host = f"@{one_line(str(record['host']), 60)}" if record.get("host") else ""
        return f" on {one_line(str(record['worker']), 60)}{host}{epoch}"
    if record.get("handed"):
        return f", handed to the workers{epoch}"
    return ""


def _indent(text: str) -> list[str]:
    return ["    " + line for line in text.splitlines()] or ["    "]


@sessions.command("resume")
@click.argument("session_id", type=TEXT)
@click.option("--no-wait", is_flag=True, help="Start it and return at once.")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress lines, just the answer.")
@dir_option
def resume(session_id: str, no_wait: bool, as_json: bool, quiet: bool,
           directory: Path | None) -> None:
    """Continue an interrupted session from its transcript, and print its answer."""
    from squadd.cli.route import finish, run_following

    if no_wait:
        with client_for(directory) as client:
            result = client.resume(session_id, wait=False)
        if as_json:
            print_json(result)
        elif result.get("ok"):
            click.echo(f"resumed {session_id}")
        else:
            click.echo(f"Error: {result.get('message')}", err=True)
        if not result.get("ok"):
            raise click.exceptions.Exit(1)
        return

    async def start(client: Any) -> dict[str, Any]:
        result: dict[str, Any] = await client.resume(session_id, wait=True, view=True)
        return result

    finish(run_following(directory, start, quiet or as_json, session=session_id), as_json)


@sessions.command("cancel")
@click.argument("session_id", type=TEXT)
@dir_option
def cancel(session_id: str, directory: Path | None) -> None:
    """Cancel a queued or running session (it is marked interrupted and can be resumed)."""
    with client_for(directory) as client:
        client.cancel(session_id)
    click.echo(f"cancelled {session_id}")
