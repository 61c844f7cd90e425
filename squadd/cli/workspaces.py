"""`squadd land SESSION` and `squadd workspaces`: land a session's worktree branch, list the
worktrees, prune or remove them.

With a daemon running, `squadd land` asks it to land (its one landing queue, with the settings
it runs with) and waits for the outcome; without one it lands in this process. Either way the
landing takes the repository-wide landing lock, so two never overlap. `squadd workspaces` works
on the repository directly. Imports stay light until a command needs the landing code: a land
through the daemon loads neither pydantic nor the settings.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from squadd.cli._landing import EXIT_LANDING_PENDING, EXIT_LANDING_REFUSED, exit_code, lines
from squadd.cli._squad import TEXT, dir_option, find_layout
from squadd.state.layout import SquadLayout

if TYPE_CHECKING:
    from squadd.contracts.workspaces import WorkspaceView
    from squadd.workspaces import Workspaces


def _workspaces(layout: SquadLayout) -> Workspaces:
    from squadd.config import load_settings
    from squadd.contracts.events import NullSink
    from squadd.workspaces import Workspaces

    return Workspaces(layout, load_settings(layout.root), NullSink())


def _land_through_daemon(layout: SquadLayout, session: str) -> dict[str, Any] | None:
    """The daemon's landing of `session` (its LandResult and `landing`); None when no daemon
    runs for this repository."""
    from squadd.daemon.client import DaemonClient, DaemonNotRunningError

    with DaemonClient(layout) as client:
        try:
            return client.land(session)
        except DaemonNotRunningError:
            return None


def _land_here(layout: SquadLayout, session: str) -> dict[str, Any]:
    import anyio

    result = anyio.run(_workspaces(layout).land, session)
    return {**result.model_dump(mode="json"), "landing": result.outcome().model_dump(mode="json")}


@click.command("land", epilog=(
    f"Exit status: 0 landed, or nothing to land; {EXIT_LANDING_REFUSED} refused (check_failed "
    f"or conflict: the target is unchanged); {EXIT_LANDING_PENDING} not finished (pending: "
    "the landing waits for a repair or a person; `next` says what to do); 1 any other error "
    "(no such session, no worktree)."))
@click.argument("session", type=TEXT)
@click.option("--json", "as_json", is_flag=True,
              help="Print the outcome as JSON: the landing result and `landing` {state, "
                   "commit, fixed, broke, detail, next}, as `squadd route --json` has it.")
@dir_option
def land(session: str, as_json: bool, directory: Path | None) -> None:
    """Land SESSION's worktree branch: rebase it onto its target branch's tip, run
    workspace.land_check, and fast-forward the target. Never pushes, never forces.

    With a daemon running, the daemon lands it (in turn with its own landings, with the
    settings it runs with, `squadd reload` to change them) and this waits for the outcome;
    without one, it lands in this process.

    A refused landing leaves the target unchanged and says what to do next. For a conflict:
    rebase the branch in the session's worktree (`git -C WORKTREE rebase TARGET`, fix the
    conflicting files, `git rebase --continue`), then run `squadd land SESSION` again. For a
    failed check: fix the failure in the worktree and commit it there, then land again.

    \b
    Example:
      squadd land 20260101-120000-1a2b3c4d
      squadd land 20260101-120000-1a2b3c4d --json | jq .landing.state
    """
    layout = find_layout(directory)
    result = _land_through_daemon(layout, session)
    if result is None:
        result = _land_here(layout, session)
    landing = result.get("landing") or {}
    code = exit_code(landing) or (0 if result.get("ok") else 1)
    if as_json:
        click.echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        message = str(result.get("message") or "")
        click.echo(message, err=code != 0)
        if result.get("conflict_paths"):
            click.echo("paths: " + ", ".join(result["conflict_paths"]), err=True)
        shown = {**landing, "detail": ""} if landing.get("detail") == message else landing
        for line in lines(shown):
            click.echo(line, err=code != 0)
    if code:
        sys.exit(code)


def _age(view: WorkspaceView, now: dt.datetime) -> str:
    from squadd.workspaces import records

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
    from squadd.workspaces.worktrees import own_folder

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
    import anyio

    spaces = _workspaces(find_layout(directory))
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
    from squadd.workspaces.records import next_step

    now = dt.datetime.now(dt.UTC)
    click.echo(f"{'BRANCH':<32} {'SESSION':<30} {'STATE':<15} {'AGE':>5} {'DISK':>8}")
    for view in views:
        click.echo(f"{view.branch or '(spare)':<32} {view.session_id:<30} {view.state:<15} "
                   f"{_age(view, now):>5} {_disk(spaces.layout, view):>8}")
        if view.message:
            click.echo(f"  {view.message}")
        step = next_step(view)
        if step:
            click.echo(f"  next: {step}")
