"""Run one command of a shell tool through the process-group runner (`squadd.procs`).

stdout and stderr go, merged, into the tool's `OutputSink`; a command that cannot be started is
reported in that output with exit code 127, as a shell would. The group lifecycle (its own
session, TERM then KILL, nothing left behind) is the runner's. Processes that left the group
(`setsid`, a new session) are found by the mark in their environment and stopped too, and
named in the output (`leftovers`).

With a `sandbox` policy the command runs confined (`squadd.sandbox.confine`): whatever of it
is still running when it ends (in its PID namespace, its cgroup, or under the launcher's
reaper, `env -i` included) is killed with it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import structlog

from squadd.procs import DRAIN_S, KILL_GRACE_S, Command, run_group
from squadd.sandbox import Confined, SandboxPolicy, confine
from squadd.tools.base import CancelSignal
from squadd.tools.commands.leftovers import MARK_VAR, new_mark, stop_leftovers
from squadd.tools.commands.output import OutputSink

__all__ = ["CANNOT_START", "DRAIN_S", "KILL_GRACE_S", "Command", "CommandOutcome",
           "run_command"]

log = structlog.get_logger("squadd.tools")

CANNOT_START = 127
"""The exit code reported when a command cannot be started (as a shell reports it)."""


@dataclass(frozen=True)
class CommandOutcome:
    exit_code: int | None
    """The exit status; negative when a signal ended it (as subprocess reports it)."""
    timed_out: bool = False
    cancelled: bool = False
    leftovers: tuple[str, ...] = ()
    """Processes the command left running outside its group, which were stopped."""
    sandbox: dict[str, Any] | None = None
    """The sandbox it ran under (`SandboxPolicy.describe`), None when it ran unconfined."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


def _missing(command: Command) -> bool:
    """Whether the program is not there (checked before a sandbox wraps it, so the error
    names the program, not the sandbox's launcher)."""
    program = command.argv[0] if command.argv else ""
    if "/" in program:
        return not (command.cwd / program if command.cwd else Path(program)).exists()
    path = (command.env or os.environ).get("PATH", os.defpath)
    return shutil.which(program, path=path) is None


async def run_command(command: Command, sink: OutputSink, *, deadline: float,
                      cancel: CancelSignal, sandbox: SandboxPolicy | None = None
                      ) -> CommandOutcome:
    """Run `command` with stdout and stderr streamed into `sink`, until `deadline`
    (`anyio.current_time()` clock) or `cancel`; nothing of its process group survives it.
    With `sandbox`, it runs confined by that policy (`SandboxError` when no mechanism the
    policy allows can run here)."""
    mark = new_mark()
    base = command.env if command.env is not None else dict(os.environ)
    marked = dataclasses.replace(command, env={**base, MARK_VAR: mark})
    confined: Confined | None = None
    if sandbox is not None and _missing(command):
        await sink.note(f"[cannot start {command.argv[0]}: No such file or directory]")
        return CommandOutcome(CANNOT_START)
    if sandbox is not None:
        confined = await anyio.to_thread.run_sync(confine, sandbox, command.argv,
                                                  marked.env or {})
        marked = dataclasses.replace(marked, argv=confined.argv, env=confined.env)
    leftovers: list[str] = []
    try:
        outcome = await run_group(marked, sink, deadline=deadline, cancel=cancel,
                                  kill_grace_s=KILL_GRACE_S, drain_s=DRAIN_S)
    except OSError as exc:  # no such program, not executable, bad working directory
        await sink.note(f"[cannot start {command.argv[0]}: {exc.strerror or exc}]")
        return CommandOutcome(CANNOT_START, sandbox=confined.record if confined else None)
    finally:
        with anyio.CancelScope(shield=True):
            if confined is not None:
                leftovers = await anyio.to_thread.run_sync(confined.close)
            leftovers += await anyio.to_thread.run_sync(stop_leftovers, mark, -1)
    if leftovers:
        log.warning("tool.leftovers_stopped", processes=leftovers)
        await sink.note(f"[squadd stopped {len(leftovers)} process"
                        f"{'es' if len(leftovers) != 1 else ''} the command left "
                        f"running outside its process group: {', '.join(leftovers)}]")
    return CommandOutcome(outcome.exit_code, timed_out=outcome.timed_out,
                          cancelled=outcome.cancelled, leftovers=tuple(leftovers),
                          sandbox=confined.record if confined else None)
