"""`squadd stop`, `squadd approve ID` and `squadd deny ID`: steering the running daemon."""

from __future__ import annotations

import os
import select
import sys
import time
from pathlib import Path

import click

from squadd.cli._daemon import client_for
from squadd.cli._squad import TEXT, FiniteFloatRange, dir_option, show_path
from squadd.errors import DaemonError, DaemonNotRunningError

STOP_POLL_S = 0.1
UNFINISHED_EXIT = 75
"""`stop`'s status when the daemon is gone but did not finish its stop (its own status then:
`squadd.daemon.deadline.EXIT_CODE`; not imported from there: `stop` loads no daemon code)."""


@click.command("stop")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0), default=60.0,
              show_default=True, help="Seconds to wait for the daemon to be gone.")
@click.option("--no-wait", is_flag=True, help="Ask it to stop and return at once.")
@dir_option
def stop(timeout_s: float, no_wait: bool, directory: Path | None) -> None:
    """Stop the daemon gracefully: running sessions get daemon.grace_s, then are interrupted.

    Exits 0 once the daemon is gone with its stop finished. Exits 75 when it is gone but its
    stop did not finish (it ran past daemon.stop_timeout_s, or the process ended early): its
    journal is left for the next start to replay, and its log says what it waited for.
    """
    with client_for(directory) as client:
        # Its exit is watched from before it is asked to stop, while it surely runs: a PID
        # another process takes once it is gone is then never waited on in its place.
        running = None if no_wait else client.health().get("pid")
        exited = _exit_watch(running) if isinstance(running, int) else None
        try:
            answer = client.shutdown()
            pid = answer.get("pid")
            if no_wait:
                click.echo(f"squadd (PID {pid}) is stopping")
                return
            if exited is not None and pid != exited.pid:  # another daemon took its place
                exited.close()
                exited = _exit_watch(pid) if isinstance(pid, int) else None
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    client.health()
                except DaemonNotRunningError:
                    break
                except DaemonError:
                    pass  # the connection broke as it went away; ask again
                if time.monotonic() > deadline:
                    raise _still_stopping(pid, timeout_s)
                time.sleep(STOP_POLL_S)
            # Its API closes before it has closed its journal and the Scribe's last merge:
            # it is gone when its process is.
            if exited is not None and not exited(deadline):
                raise _still_stopping(pid, timeout_s)
        finally:
            if exited is not None:
                exited.close()
        # Known gone (through its pidfd): a journal of its own left means the stop did not
        # finish. Without a pidfd it may still be closing its journal: nothing to tell.
        left = client.layout.transcript_journals_of(exited.pid) if exited is not None else []
    if left:
        click.echo(f"squadd (PID {pid}) is gone, but its stop did not finish: its journal "
                   f"{show_path(left[0])} is left for the next start to replay (what callers "
                   "were told of is durable). Its log says what the stop waited for.", err=True)
        sys.exit(UNFINISHED_EXIT)
    click.echo(f"squadd (PID {pid}) stopped")


def _still_stopping(pid: object, timeout_s: float) -> DaemonError:
    return DaemonError(f"squadd (PID {pid}) is still stopping after {timeout_s:g}s; its "
                       "sessions may still be finishing ('squadd status')")


class _ExitWatch:
    """Waits for one process to exit, through a pidfd opened while it ran (so a PID used
    again meanwhile is never taken for it, and a zombie counts as exited)."""

    def __init__(self, pid: int, fd: int | None):
        self.pid = pid
        self._fd = fd
        """None: the process had exited already."""

    def __call__(self, deadline: float) -> bool:
        """Wait until the process has exited (True), or `deadline` (False)."""
        if self._fd is None:
            return True
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        return bool(poller.poll(max(0.0, deadline - time.monotonic()) * 1000))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _exit_watch(pid: int) -> _ExitWatch | None:
    """A watch on process `pid`; None where this system has no pidfd (the API's closing is
    all `stop` can wait for then)."""
    from squadd.procs import exit_fd  # here: `squadd status` loads this module, not anyio

    try:
        return _ExitWatch(pid, exit_fd(pid))
    except OSError:
        return None


def _resolver(name: str, approved: bool, doc: str) -> click.Command:
    """`squadd approve` or `squadd deny`: the same command but for the answer it gives."""

    @click.command(name, help=doc)
    @click.argument("approval_id", type=TEXT)
    @click.option("--reason", type=TEXT, default="", help="Why (the agent sees it).")
    @dir_option
    def resolve(approval_id: str, reason: str, directory: Path | None) -> None:
        with client_for(directory) as client:
            client.resolve_approval(approval_id, approved, reason)
        click.echo(f"{'approved' if approved else 'denied'} {approval_id}")

    return resolve


approve = _resolver("approve", True, "Let a tool call that waits for approval run (its ID is in "
                                     "the approval.requested event).")
deny = _resolver("deny", False, "Refuse a tool call that waits for approval; the agent is told, "
                                "with your reason.")


@click.command("reload")
@click.option("--json", "as_json", is_flag=True, help="Print what the reload did as JSON.")
@dir_option
def reload(as_json: bool, directory: Path | None) -> None:
    """Make the running daemon read its settings files again now (as SIGHUP does; it also
    reads them whenever .squad/config.toml or the user config changes).

    What can change live is applied at once: [workspace] (the next landing runs the new
    land_check), [tools], [scribe] and the [pool] limits. A change anywhere else is logged and
    shown by `squadd status` until the daemon restarts ("provider.kind changed on disk:
    restart to apply"). A file that does not load is refused, naming the file and the key;
    the daemon keeps running with the settings it had, and this exits 1.

    \b
    Example:
      $EDITOR .squad/config.toml && squadd reload
    """
    import json

    with client_for(directory) as client:
        answer = client.reload()
    if as_json:
        click.echo(json.dumps(answer, indent=2, ensure_ascii=False))
    elif not answer.get("ok"):
        click.echo(f"Error: settings not reloaded: {answer.get('error')}", err=True)
    else:
        applied = answer.get("applied") or []
        click.echo("applied: " + ", ".join(applied) if applied else "no live setting changed")
        for line in answer.get("restart_needed") or ():
            click.echo(line)
    if not answer.get("ok"):
        sys.exit(1)
