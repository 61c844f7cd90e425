"""Run one command of a shell tool through the process-group runner (`squadd.procs`).

stdout and stderr go, merged, into the tool's `OutputSink`; a command that cannot be started is
reported in that output with exit code 127, as a shell would. The group lifecycle (its own
session, TERM then KILL, nothing left behind) is the runner's.
"""

from __future__ import annotations

from dataclasses import dataclass

from squadd.procs import DRAIN_S, KILL_GRACE_S, Command, run_group
from squadd.tools.base import CancelSignal
from squadd.tools.custom.shell_output import OutputSink

__all__ = ["CANNOT_START", "DRAIN_S", "KILL_GRACE_S", "Command", "CommandOutcome",
           "run_command"]

CANNOT_START = 127
"""The exit code reported when a command cannot be started (as a shell reports it)."""


@dataclass(frozen=True)
class CommandOutcome:
    exit_code: int | None
    """The exit status; negative when a signal ended it (as subprocess reports it)."""
    timed_out: bool = False
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


async def run_command(command: Command, sink: OutputSink, *, deadline: float,
                      cancel: CancelSignal) -> CommandOutcome:
    """Run `command` with stdout and stderr streamed into `sink`, until `deadline`
    (`anyio.current_time()` clock) or `cancel`; nothing of its process group survives it."""
    try:
        outcome = await run_group(command, sink, deadline=deadline, cancel=cancel,
                                  kill_grace_s=KILL_GRACE_S, drain_s=DRAIN_S)
    except OSError as exc:  # no such program, not executable, bad working directory
        await sink.note(f"[cannot start {command.argv[0]}: {exc.strerror or exc}]")
        return CommandOutcome(CANNOT_START)
    return CommandOutcome(outcome.exit_code, timed_out=outcome.timed_out,
                          cancelled=outcome.cancelled)
