"""Process groups: run one command in its own group, stream its output, and leave nothing behind.

The one runner for every external command squadd starts (shell tools, git, the `command`
provider). The command starts in a new session, so a new process group whose id is the
leader's pid, through `subprocess.Popen` (vfork on Linux) with its pipes read and written as
non-blocking descriptors on the event loop: under uvloop, `anyio.open_process` starts a child
through libuv, which forks the whole daemon, at a cost that grows with its memory (see
`scripts/bench/spawn.py`). When the leader exits, what it left running is killed at once; when the
deadline passes, a cancel signal fires or the caller is cancelled, the group gets SIGTERM, then
SIGKILL after a grace. The leader's exit is awaited through a pidfd (no polling where Linux has
one), and the leader is always reaped. The killed group's processes are awaited too
(`kill_group`): when the call returns, none of them is still dying, so a sweep that runs next
(processes that left the group, a cgroup) finds only those that got away.

A squadd killed with SIGKILL cannot stop its groups. So every command carries its squadd's
identity in its environment (`SQUADD_OWNER=pid:start`, inherited by its descendants), and the
next squadd to start stops the groups whose owner is gone (`stop_orphans`). A process that
clears its environment, or belongs to another user, is not found. With tracing on, a command
also gets the `TRACEPARENT` of the span it was started in.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import anyio
import anyio.abc

from squadd import telemetry

KILL_GRACE_S = 2.0
"""Default seconds between SIGTERM and SIGKILL for a command that timed out or was cancelled."""
DRAIN_S = 2.0
"""Default seconds to read what is left in the pipes once the command's group is gone (a
process that left the group with `setsid` may hold them open for ever)."""
READ_CHUNK = 1 << 20
FEED_CHUNK = 65536
POLL_S = 0.02
"""Only where pidfds are missing: how often the leader's exit is polled (without reaping)."""
REAP_S = 5.0
"""At most how long the processes of a killed group are waited for to exit (one stuck in the
kernel is left to die on its own)."""

Ending = Literal["exited", "timeout", "cancelled"]

OWNER_VAR = "SQUADD_OWNER"
"""In every command's environment: `pid:start` of the squadd process that started it."""
PROC = Path("/proc")
_ENVIRON_BYTES = 1 << 20


def process_start(pid: int, proc: Path = PROC) -> str | None:
    """The start time of process `pid` in clock ticks since boot, or None when it is gone
    (or the system has no /proc). With the pid it names one process for good: a pid the
    system gives again belongs to a process with another start time."""
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
        return None
    fields = stat.rpartition(")")[2].split()
    # After "pid (comm)": state is field 3, so starttime (field 22) is the 20th here.
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields[19]


@functools.cache
def _mark_of(pid: int) -> str:
    return f"{pid}:{process_start(pid) or ''}"


def owner_mark() -> str:
    """This process's `SQUADD_OWNER` value (keyed by pid: a forked child is its own owner)."""
    return _mark_of(os.getpid())


def _owner_in(environ: bytes) -> tuple[int, str] | None:
    for entry in environ.split(b"\0"):
        if entry.startswith(OWNER_VAR.encode() + b"="):
            pid, _, start = entry[len(OWNER_VAR) + 1:].decode("ascii", "replace").partition(":")
            return (int(pid), start) if pid.isdigit() and start else None
    return None


def stop_orphans(proc: Path = PROC) -> list[int]:
    """SIGKILL the process groups of commands whose squadd is gone (killed before it could stop
    them), and return the pids found. Commands of a squadd that still runs are left alone."""
    if not proc.is_dir():
        return []
    found: list[int] = []
    own, own_group = os.getpid(), os.getpgrp()
    # Started by a command of a squadd now gone (an agent's `squadd serve` elsewhere): this
    # process carries that mark too, and so may its own children. They are not orphans.
    inherited = _owner_in(f"{OWNER_VAR}={os.environ.get(OWNER_VAR, '')}".encode())
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            with open(entry / "environ", "rb") as handle:
                owner = _owner_in(handle.read(_ENVIRON_BYTES))
        except OSError:  # gone meanwhile, or another user's
            continue
        if owner is None or owner == inherited or process_start(owner[0], proc) == owner[1]:
            continue
        found.append(int(entry.name))
    # Killed only once all are found: a group killed mid-scan would hide its other members
    # (a killed process's environ reads empty) from the list.
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own_group:
                signal_group(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)  # one that left its group, or shares ours
    return found


class ByteSink(Protocol):
    """Where a stream of the command's output goes."""

    async def write(self, data: bytes) -> None: ...


class Waitable(Protocol):
    """A cancel signal: something whose `wait()` returns once the command must stop."""

    async def wait(self) -> object: ...


@dataclass(frozen=True)
class Command:
    argv: Sequence[str]
    cwd: Path | None
    env: dict[str, str] | None
    stdin: bytes | None = None
    """Fed to the command's stdin, which is then closed; None: stdin is /dev/null."""


@dataclass(frozen=True)
class GroupOutcome:
    exit_code: int | None
    """The leader's exit status; negative when a signal ended it (as subprocess reports it)."""
    ending: Ending = "exited"

    @property
    def timed_out(self) -> bool:
        return self.ending == "timeout"

    @property
    def cancelled(self) -> bool:
        return self.ending == "cancelled"


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def group_members(pgid: int, proc: Path = PROC) -> list[int]:
    """The pids of the processes of group `pgid` that have not exited (zombies are not counted),
    read from /proc (none where there is no /proc). Blocking."""
    try:
        entries = [entry.name for entry in proc.iterdir()]
    except OSError:
        return []
    wanted = str(pgid).encode()
    found = []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(proc / name / "stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:  # gone meanwhile
            continue
        # After "pid (comm)": state is field 3, pgrp field 5.
        if len(fields) > 2 and fields[2] == wanted and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


def exit_fd(pid: int) -> int | None:
    """A pidfd for process `pid`, readable once it has exited (the caller closes it); None
    when it has exited already. Opened while the process is known to run, it never names
    another process that takes its PID later. `OSError` where there are no pidfds (not Linux
    5.3+), or when no more files can be opened."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except AttributeError as exc:
        raise OSError(f"no pidfd here: {exc}") from exc


async def leader_exited(pid: int) -> None:
    """Return once process `pid` has exited (reaped or not), without reaping it."""
    try:
        fd = exit_fd(pid)
    except OSError:
        await _poll_exit(pid)
        return
    await _readable_then_closed(fd)


async def kill_group(pgid: int, within: float = REAP_S) -> None:
    """SIGKILL process group `pgid` and return once each of its processes has exited, so that
    what looks after it (the sweep for processes that left the group, a cgroup's removal) does
    not find them still dying and take them for escapees. At most `within` seconds."""
    with anyio.move_on_after(within):
        # Fails at once when nothing is left of the group (the common end: a reaped leader).
        while signal_group(pgid, signal.SIGKILL):
            members = await anyio.to_thread.run_sync(group_members, pgid)
            if not members:
                return  # zombies only: they have exited
            for pid in members:
                await _exited(pid)


async def _exited(pid: int) -> None:
    """Return once process `pid` (not necessarily a child of ours) has exited."""
    try:
        fd = exit_fd(pid)
    except OSError:  # no pidfds here: poll
        while True:
            if process_start(pid) is None:
                return
            await anyio.sleep(POLL_S)
    await _readable_then_closed(fd)


async def _readable_then_closed(fd: int | None) -> None:
    """Wait for a process's pidfd `fd` to say it exited, then close it (None: gone already)."""
    if fd is None:
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


async def _wait_leader(pid: int, deadline: float, cancel: Waitable | None) -> Ending:
    """Whichever comes first: the leader's exit, the deadline, the cancel signal."""
    result: list[Ending] = ["timeout"]
    async with anyio.create_task_group() as group:
        async def leader() -> None:
            await leader_exited(pid)
            result[0] = "exited"
            group.cancel_scope.cancel()

        async def cancelled(signal_: Waitable) -> None:
            await signal_.wait()
            result[0] = "cancelled"
            group.cancel_scope.cancel()

        group.start_soon(leader)
        if cancel is not None:
            group.start_soon(cancelled, cancel)
        await anyio.sleep_until(deadline)
        group.cancel_scope.cancel()
    return result[0]


async def _pump(stream: anyio.abc.ByteReceiveStream, sink: ByteSink, done: anyio.Event) -> None:
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
        for start in range(0, len(view), FEED_CHUNK):
            await stream.send(bytes(view[start:start + FEED_CHUNK]))
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the command stopped reading: what it did not read is its business
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()


class _Pipe:
    """One end of a pipe to or from the command, used on the event loop (non-blocking)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    def _open_fd(self) -> int:
        if self._fd is None:
            raise anyio.ClosedResourceError
        return self._fd

    async def aclose(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            anyio.notify_closing(fd)  # a task waiting on it hears it is closed
            os.close(fd)


class _PipeReceive(_Pipe, anyio.abc.ByteReceiveStream):
    """The command's stdout or stderr."""

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        while True:
            fd = self._open_fd()
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data


class _PipeSend(_Pipe, anyio.abc.ByteSendStream):
    """The command's stdin."""

    async def send(self, item: bytes) -> None:
        view = memoryview(item)
        while view:
            fd = self._open_fd()
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                await anyio.wait_writable(fd)
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError from exc


@dataclass
class _Started:
    """A command started by `_start`: its process and the loop's ends of its pipes."""

    popen: subprocess.Popen[bytes]
    stdin: _PipeSend | None
    stdout: _PipeReceive
    stderr: _PipeReceive | None

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    async def wait(self) -> int:
        """Its exit status, once it has exited (it is reaped here)."""
        while (code := self.popen.poll()) is None:
            await leader_exited(self.popen.pid)
        return code


def _start(command: Command, *, merged: bool) -> _Started:
    """Start `command` in a new session, its output (and stderr, unless `merged`) on pipes,
    its stdin a pipe when it has input, else /dev/null. Blocking for as long as a vfork and
    exec take, as asyncio's own `Popen` call is."""
    pipes: list[tuple[int, int]] = []  # (read, write) of each, all closed on failure

    def pipe() -> tuple[int, int]:
        ends = os.pipe()
        pipes.append(ends)
        return ends

    try:
        out_r, out_w = pipe()
        err_r, err_w = (None, None) if merged else pipe()
        in_r, in_w = (None, None) if command.stdin is None else pipe()
        popen = subprocess.Popen(
            list(command.argv), stdin=subprocess.DEVNULL if in_r is None else in_r,
            stdout=out_w, stderr=subprocess.STDOUT if err_w is None else err_w,
            cwd=command.cwd, start_new_session=True,
            env={**(command.env if command.env is not None else os.environ),
                 OWNER_VAR: owner_mark(), **telemetry.environment()})
    except BaseException:
        for ends in pipes:
            for fd in ends:
                os.close(fd)
        raise
    for end in (out_w, err_w, in_r):  # the child's ends: its copies are its own now
        if end is not None:
            os.close(end)
    return _Started(popen, None if in_w is None else _PipeSend(in_w), _PipeReceive(out_r),
                    None if err_r is None else _PipeReceive(err_r))


async def _stop_group(process: _Started, grace_s: float) -> None:
    """SIGTERM the group, wait for the leader at most `grace_s`, then SIGKILL the group."""
    signal_group(process.pid, signal.SIGTERM)
    with anyio.move_on_after(grace_s):
        await leader_exited(process.pid)
    await kill_group(process.pid)


async def run_group(
    command: Command,
    stdout: ByteSink,
    stderr: ByteSink | None = None,
    *,
    deadline: float,
    cancel: Waitable | None = None,
    kill_grace_s: float = KILL_GRACE_S,
    drain_s: float = DRAIN_S,
) -> GroupOutcome:
    """Run `command` in its own process group until it exits, `deadline` passes
    (`anyio.current_time()` clock) or `cancel` fires; nothing of its group survives the call.

    Output goes to `stdout`, and stderr to `stderr` (None: merged into `stdout`). Raises
    `OSError` when the command cannot be started (no such program, a bad working directory,
    arguments too long for the system). A cancelled caller stops the group too (shielded).
    """
    if anyio.current_time() >= deadline:
        return GroupOutcome(None, "timeout")
    process = _start(command, merged=stderr is None)
    pgid = process.pid  # start_new_session: the leader's pid is the group id
    ending: Ending = "exited"
    finished = False
    try:
        async with anyio.create_task_group() as group:
            pumped: list[anyio.Event] = []
            for stream, sink in ((process.stdout, stdout), (process.stderr, stderr)):
                if stream is not None and sink is not None:
                    done = anyio.Event()
                    pumped.append(done)
                    group.start_soon(_pump, stream, sink, done)
            if command.stdin is not None and process.stdin is not None:
                group.start_soon(_feed, process.stdin, command.stdin)
            ending = await _wait_leader(process.pid, deadline, cancel)
            if ending == "exited":
                await process.wait()  # reaped first: an empty group then needs no search
                await kill_group(pgid)  # what it left running in the background
            else:
                await _stop_group(process, kill_grace_s)
            with anyio.move_on_after(drain_s):
                for done in pumped:
                    await done.wait()
            group.cancel_scope.cancel()
        finished = True
    finally:
        with anyio.CancelScope(shield=True):
            if not finished:  # the caller was cancelled while the command ran
                await _stop_group(process, kill_grace_s)
            # Finished, the group was killed and its processes awaited: none can join it now.
            # Bounded: a process outside the group (it called setsid) may still hold a pipe.
            with anyio.move_on_after(drain_s):
                for pipe in (process.stdin, process.stdout, process.stderr):
                    if pipe is not None:
                        with contextlib.suppress(Exception):
                            await pipe.aclose()
                await process.wait()
    return GroupOutcome(process.returncode, ending)
