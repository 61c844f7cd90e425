"""Run one command of a shell tool: its own process group, streamed output, a hard deadline.

The command runs through `anyio.open_process` in a new session (so a new process group).
When it ends, times out or is cancelled, the whole group is signalled (TERM, then KILL), so
no child or grandchild is left behind, and the leader is reaped. Processes that left the group
(`setsid`, a new session) are found by the mark in their environment and stopped too, and
named in the output (`leftovers`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import structlog

from squadd.tools.base import CancelSignal
from squadd.tools.custom.leftovers import MARK_VAR, new_mark, stop_leftovers
from squadd.tools.custom.shell_output import OutputSink

log = structlog.get_logger("squadd.tools")

KILL_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL for a command that timed out or was cancelled."""
DRAIN_S = 2.0
"""Seconds to read what is left in the pipe once the command's processes are gone."""
READ_CHUNK = 1 << 20
CANNOT_START = 127
"""The exit code reported when a command cannot be started (as a shell reports it)."""
POLL_S = 0.02


@dataclass(frozen=True)
class Command:
    argv: Sequence[str]
    cwd: Path
    env: dict[str, str]
    stdin: bytes | None = None


@dataclass(frozen=True)
class CommandOutcome:
    exit_code: int | None
    """The exit status; negative when a signal ended it (as subprocess reports it)."""
    timed_out: bool = False
    cancelled: bool = False
    leftovers: tuple[str, ...] = ()
    """Processes that had left the command's group and were stopped at its end."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _leader_exited(pid: int) -> None:
    """Return once process `pid` has exited (reaped or not), without reaping it."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:
        await _poll_exit(pid)
        return
    try:
        await anyio.wait_readable(fd)
    finally:
        os.close(fd)


async def _poll_exit(pid: int) -> None:
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
    while True:
        try:
            if os.waitid(os.P_PID, pid, flags) is not None:  # noqa: ASYNC222 (WNOHANG)
                return
        except ChildProcessError:
            return
        await anyio.sleep(POLL_S)


async def _wait_leader(pid: int, deadline: float, cancel: CancelSignal) -> str:
    """"exited", "timeout" or "cancelled", whichever comes first."""
    result = ["timeout"]
    async with anyio.create_task_group() as group:
        async def leader() -> None:
            await _leader_exited(pid)
            result[0] = "exited"
            group.cancel_scope.cancel()

        async def cancelled() -> None:
            await cancel.wait()
            result[0] = "cancelled"
            group.cancel_scope.cancel()

        group.start_soon(leader)
        group.start_soon(cancelled)
        await anyio.sleep_until(deadline)
        group.cancel_scope.cancel()
    return result[0]


async def _pump(stream: anyio.abc.ByteReceiveStream, sink: OutputSink,
                done: anyio.Event) -> None:
    try:
        while True:
            try:
                data = await stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                return
            await sink.write(data)
    finally:
        done.set()


async def _feed(stream: anyio.abc.ByteSendStream, data: bytes) -> None:
    try:
        view = memoryview(data)
        for start in range(0, len(view), 65536):
            await stream.send(bytes(view[start:start + 65536]))
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the command stopped reading: what it did not read is its business
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()


async def run_command(command: Command, sink: OutputSink, *, deadline: float,
                      cancel: CancelSignal) -> CommandOutcome:
    """Run `command` with stdout and stderr streamed into `sink`, until `deadline`
    (`anyio.current_time()` clock) or `cancel`; nothing of its process group survives it."""
    if anyio.current_time() >= deadline:
        return CommandOutcome(None, timed_out=True)
    mark = new_mark()
    try:
        process = await anyio.open_process(
            list(command.argv), stdin=subprocess.PIPE if command.stdin is not None else
            subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=command.cwd, env={**command.env, MARK_VAR: mark}, start_new_session=True)
    except OSError as exc:  # no such program, not executable, bad working directory
        await sink.note(f"[cannot start {command.argv[0]}: {exc.strerror or exc}]")
        return CommandOutcome(CANNOT_START)
    pgid = process.pid
    how = "exited"
    leftovers: list[str] | None = None
    try:
        async with anyio.create_task_group() as group:
            pumped = anyio.Event()
            assert process.stdout is not None
            group.start_soon(_pump, process.stdout, sink, pumped)
            if command.stdin is not None and process.stdin is not None:
                group.start_soon(_feed, process.stdin, command.stdin)
            how = await _wait_leader(process.pid, deadline, cancel)
            if how == "exited":
                signal_group(pgid, signal.SIGKILL)  # what it left running in the background
            else:
                signal_group(pgid, signal.SIGTERM)
                with anyio.move_on_after(KILL_GRACE_S):
                    await _leader_exited(process.pid)
                signal_group(pgid, signal.SIGKILL)
            leftovers = await _stop_leftovers(mark, pgid)  # before the drain: they hold the pipe
            with anyio.move_on_after(DRAIN_S):
                await pumped.wait()
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            signal_group(pgid, signal.SIGKILL)
            # Bounded: a process outside the group (it called setsid) may still hold the pipe.
            with anyio.move_on_after(DRAIN_S):
                for stream in (process.stdin, process.stdout):
                    if stream is not None:
                        with contextlib.suppress(Exception):
                            await stream.aclose()
                await process.wait()
            if leftovers is None:  # cancelled, or failed, before the sweep
                leftovers = await _stop_leftovers(mark, pgid)
            if leftovers:
                log.warning("tool.leftovers_stopped", processes=leftovers)
                await sink.note(f"[squadd stopped {len(leftovers)} process"
                                f"{'es' if len(leftovers) != 1 else ''} the command left "
                                f"running outside its process group: {', '.join(leftovers)}]")
    return CommandOutcome(process.returncode, timed_out=how == "timeout",
                          cancelled=how == "cancelled", leftovers=tuple(leftovers or ()))


async def _stop_leftovers(mark: str, pgid: int) -> list[str]:
    """Stop what escaped the group (bounded: /proc is read in a worker thread)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_S):
        return await anyio.to_thread.run_sync(stop_leftovers, mark, pgid)
    return []
