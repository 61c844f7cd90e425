"""`squadd land SESSION` and `squadd workspaces`: land a session's worktree branch, list the
worktrees, prune or remove them.

Both work on the repository directly (the daemon need not run): landings take the same
repository-wide landing lock as the daemon's landing queue, so they never overlap.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import stat
import sys
from pathlib import Path

import anyio
import click

from squadd.cli._squad import TEXT, dir_option, find_layout
from squadd.config import load_settings
from squadd.contracts.events import NullSink
from squadd.contracts.workspaces import WorkspaceView
from squadd.state.layout import SquadLayout
from squadd.workspaces import Workspaces, records
from squadd.workspaces.worktrees import own_folder


def _workspaces(directory: Path | None) -> Workspaces:
    layout = find_layout(directory)
    return Workspaces(layout, load_settings(layout.root), NullSink())


@click.command("land")
@click.argument("session", type=TEXT)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@dir_option
def land(session: str, as_json: bool, directory: Path | None) -> None:
    """Land SESSION's worktree branch: rebase it onto its target branch's tip, run
    workspace.land_check, and fast-forward the target. Never pushes, never forces.

    \b
    Example:
      squadd land 20260101-120000-1a2b3c4d
    """
    result = anyio.run(_workspaces(directory).land, session)
    if as_json:
        click.echo(result.model_dump_json(indent=2))
    else:
        click.echo(result.message, err=not result.ok)
        if result.conflict_paths:
            click.echo("paths: " + ", ".join(result.conflict_paths), err=True)
        if result.check_tail:
            click.echo(result.check_tail.rstrip(), err=True)
    if not result.ok:
        sys.exit(1)


def _age(view: WorkspaceView, now: dt.datetime) -> str:
    created = records.parse_time(view.created)
    if created is None:
        return "?"
    seconds = (now - created).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _disk(layout: SquadLayout, view: WorkspaceView) -> str:
    """The bytes of the worktree's regular files (symlinks not followed), one lstat each;
    "-" for a record whose path is not its own worktree (edited by hand: never walk `/`)."""
    if not own_folder(layout, view):
        return "-"
    total = 0
    for item in Path(view.path).rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            info = item.lstat()
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return f"{total / (1 << 20):.1f}M"


@click.command("workspaces")
@click.option("--prune", is_flag=True,
              help="Remove landed worktrees, unlanded ones idle past workspace.keep_days "
                   "(a branch with unlanded commits is kept), and the spare worktrees.")
@click.option("--remove", "remove_session", type=TEXT, default=None,
              help="Remove this session's worktree (its branch is kept if it has unlanded "
                   "commits).")
@click.option("--json", "as_json", is_flag=True, help="Print the worktrees as JSON.")
@dir_option
def workspaces(prune: bool, remove_session: str | None, as_json: bool,
               directory: Path | None) -> None:
    """List the sessions' worktrees: branch, session, state, age and disk use. Spare
    worktrees (made ahead for new sessions, workspace.spares) show as state `spare`; --prune
    removes them too."""
    spaces = _workspaces(directory)
    if prune:
        for line in anyio.run(spaces.prune):
            click.echo(line)
    if remove_session is not None:
        kept = anyio.run(spaces.remove, remove_session)
        if kept is None:
            raise click.ClickException(f"session {remove_session} has no worktree")
        click.echo(f"removed the worktree of {remove_session}"
                   + (" (its branch is kept: it has unlanded commits)" if kept else ""))
    views = anyio.run(spaces.listing)
    if as_json:
        click.echo(json.dumps([v.model_dump(mode="json") for v in views], indent=2))
        return
    if not views:
        click.echo("no worktrees", err=True)
        return
    now = dt.datetime.now(dt.UTC)
    click.echo(f"{'BRANCH':<32} {'SESSION':<30} {'STATE':<15} {'AGE':>5} {'DISK':>8}")
    for view in views:
        click.echo(f"{view.branch or '(spare)':<32} {view.session_id:<30} {view.state:<15} "
                   f"{_age(view, now):>5} {_disk(spaces.layout, view):>8}")
        if view.message:
            click.echo(f"  {view.message}")
        step = records.next_step(view)
        if step:
            click.echo(f"  next: {step}")
