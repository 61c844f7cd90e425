"""`squadd stop`, `squadd approve ID` and `squadd deny ID`: steering the running daemon."""

from __future__ import annotations

import time
from pathlib import Path

import click

from squadd.cli._daemon import client_for
from squadd.cli._squad import TEXT, FiniteFloatRange, dir_option
from squadd.errors import DaemonError, DaemonNotRunningError

STOP_POLL_S = 0.1


@click.command("stop")
@click.option("--timeout", "timeout_s", type=FiniteFloatRange(min=0), default=60.0,
              show_default=True, help="Seconds to wait for the daemon to be gone.")
@click.option("--no-wait", is_flag=True, help="Ask it to stop and return at once.")
@dir_option
def stop(timeout_s: float, no_wait: bool, directory: Path | None) -> None:
    """Stop the daemon gracefully: running sessions get daemon.grace_s, then are interrupted."""
    with client_for(directory) as client:
        answer = client.shutdown()
        pid = answer.get("pid")
        if no_wait:
            click.echo(f"squadd (PID {pid}) is stopping")
            return
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                client.health()
            except DaemonNotRunningError:
                break
            except DaemonError:
                pass  # the connection broke as it went away; ask again
            if time.monotonic() > deadline:
                raise DaemonError(f"squadd (PID {pid}) is still stopping after {timeout_s:g}s; "
                                  "its sessions may still be finishing ('squadd status')")
            time.sleep(STOP_POLL_S)
    click.echo(f"squadd (PID {pid}) stopped")


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
