"""Running a Python tool file's tool in a worker process of its own, one process per call.

A timeout or a cancellation kills the worker's whole process group (SIGKILL), so a tool that
blocks, sleeps or spins never outlives its call, and never keeps the daemon alive or its event
loop stalled. The call's arguments go to the worker and its result comes back as JSON lines
over a socket pair; `ctx.progress(...)`, `ctx.confirm(...)` and reports of a blocked event loop
come back the same way, so events and the approval flow work as for any tool.

One worker is kept started ahead (its imports done), so a call usually skips the start-up;
each worker serves one call only, so no state leaks from one call to the next. The spares are
their owner's (`SpareWorkers`, one per `ToolDiscoverer`, so one per runtime): two runtimes in one
process share none. A worker starts inside the call's sandbox (`squadd.sandbox`); a spare serves
only a call whose policy is the one it was started under.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import structlog
from anyio.abc import UNIXSocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from squadd.config import Settings
from squadd.errors import SandboxError
from squadd.sandbox import Confined, SandboxPolicy, confine, mechanism_for
from squadd.tools.base import ToolContext, ToolOutput, ToolResult, ToolSource
from squadd.tools.sandboxing import call_policy

if TYPE_CHECKING:
    from pydantic import BaseModel

log = structlog.get_logger("squadd.tools")

WORKER_MODULE = "squadd.tools.python.worker"
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""The largest message a worker may send (a result bigger than this is a failure)."""
LOOP_BLOCKED_AFTER_S = 1.0
"""A worker whose event loop has not run for this long reports it (an async tool blocking)."""
SPARE_WORKERS = 1
"""Workers kept started ahead of the next call."""
_REAP_WITHIN_S = 5.0


class WorkerTool(Protocol):
    """What a call in a worker needs of a Python tool (`python.tool.PythonTool`)."""

    @property
    def name(self) -> str: ...

    @property
    def file(self) -> Path | None: ...

    @property
    def source(self) -> ToolSource: ...

    @property
    def settings(self) -> Settings | None: ...


@dataclass
class Worker:
    """One started worker process (its own process group) and our end of its socket."""

    process: subprocess.Popen[bytes]
    sock: socket.socket
    policy: SandboxPolicy | None = None
    confined: Confined | None = None


def confined_policy(policy: SandboxPolicy | None) -> SandboxPolicy | None:
    """`policy`, or None when it confines nothing (`mode = "off"`: the worker's process group
    is all there is, as before)."""
    if policy is None or mechanism_for(policy.mode) == "off":
        return None
    return policy


def spawn_worker(policy: SandboxPolicy | None = None) -> Worker:
    """Start a worker process (blocking; quick: its imports happen on its own time), inside
    `policy`'s sandbox when there is one (`SandboxError` when it cannot run here)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    confined: Confined | None = None
    try:
        # In the sandbox's PID namespace the daemon's pid means nothing: the worker watches
        # the parent it starts with (0), which dies with the daemon (--die-with-parent).
        argv = [sys.executable, "-m", WORKER_MODULE, str(theirs.fileno()),
                str(os.getpid()) if policy is None else "0"]
        env = dict(os.environ)
        if policy is not None:
            confined = confine(policy, argv, env)
            argv, env = confined.argv, confined.env
        process = subprocess.Popen(
            argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True, env=env,
            cwd=policy.cwd if policy is not None else None)
    except BaseException:
        ours.close()
        if confined is not None:
            confined.close()
        raise
    finally:
        theirs.close()
    return Worker(process, ours, policy, confined)


def kill_group(worker: Worker) -> None:
    """SIGKILL the worker's process group (the worker and whatever it started), and what is
    left of its sandbox."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker.process.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        worker.sock.close()
    if worker.confined is not None:
        worker.confined.close()


class SpareWorkers:
    """Workers started ahead of time for one owner's Python tools (any of its event loops and
    threads may take one). Those still waiting are killed by `close()`, else when the pool is
    dropped or the process exits."""

    def __init__(self, keep: int = SPARE_WORKERS):
        self.keep = keep
        self._spares: list[Worker] = []
        self._ended: list[Worker] = []
        self.policy: SandboxPolicy | None = None
        """The sandbox the spares start in: the last call's."""
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _kill_all, self._spares, self._ended)

    def bury(self, worker: Worker) -> None:
        """A killed worker, reaped now if it has gone, else at the next `take` (no call waits
        for its exit status)."""
        if worker.process.poll() is None:
            with self._lock:
                self._ended.append(worker)

    def take(self, policy: SandboxPolicy | None = None) -> Worker | None:
        """A started worker still waiting for its call under `policy`, or None (spares of
        another policy are let go: the next ones start under this one)."""
        stale: list[Worker] = []
        found: Worker | None = None
        with self._lock:
            self.policy = policy
            self._ended[:] = [w for w in self._ended if w.process.poll() is None]
            while self._spares:
                worker = self._spares.pop()
                if worker.process.poll() is None and worker.policy == policy:
                    found = worker
                    break
                stale.append(worker)
        for worker in stale:
            kill_group(worker)
        return found

    def refill(self) -> None:
        """Start workers until `keep` are waiting (blocking)."""
        while True:
            with self._lock:
                if len(self._spares) >= self.keep:
                    return
                policy = self.policy
            worker = spawn_worker(policy)
            with self._lock:
                self._spares.append(worker)

    def ready(self) -> bool:
        """Whether `warm_up` has nothing to start."""
        with self._lock:
            return len(self._spares) >= self.keep

    def warm_up(self) -> None:
        """Have a worker ready for the first call (blocking; discovery calls it)."""
        if self.keep:
            with contextlib.suppress(OSError):  # no process to spare now: calls start their own
                self.refill()

    def waiting(self) -> list[int]:
        """The pids of the workers waiting for a call."""
        with self._lock:
            return [worker.process.pid for worker in self._spares]

    def close(self) -> None:
        with self._lock:
            workers = [*self._spares, *self._ended]
            self._spares.clear()
            self._ended.clear()
        _kill_all(workers, [], reap_within_s=_REAP_WITHIN_S)


def _kill_all(spares: list[Worker], ended: list[Worker], reap_within_s: float = 0.0) -> None:
    """Kill (and reap, waiting up to `reap_within_s` each) every worker in both lists, and
    empty them."""
    workers = [*spares, *ended]
    spares.clear()
    ended.clear()
    for worker in workers:
        kill_group(worker)
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(reap_within_s)


async def call_in_worker(tool: WorkerTool, args: BaseModel, ctx: ToolContext,
                         spares: SpareWorkers | None) -> ToolOutput:
    """Run `tool` (from `tool.file`) in a worker process, a spare one when `spares` has one;
    kill it when the call ends."""
    assert tool.file is not None
    try:
        policy = confined_policy(call_policy(tool.settings, ctx)) if tool.settings else None
        if policy is not None:  # the worker loads the tool's file: its folder stays readable
            policy = dataclasses.replace(policy, visible=(*policy.visible, tool.file.parent))
        worker = spares.take(policy) if spares is not None else None
        if worker is None:
            worker = await anyio.to_thread.run_sync(spawn_worker, policy)
    except SandboxError as exc:
        return ToolResult.failure(f"{tool.name} refused: {exc}")
    request = {
        "op": "call", "file": str(tool.file), "source": tool.source, "tool": tool.name,
        "arguments": args.model_dump(mode="json", by_alias=True),
        "blocked_after_s": LOOP_BLOCKED_AFTER_S,
        "ctx": {"session_id": ctx.session_id, "call_id": ctx.call_id, "agent": ctx.agent,
                "repo_dir": str(ctx.repo_dir), "squad_dir": str(ctx.squad_dir),
                "variables": dict(ctx.variables), "depth": ctx.depth,
                "lineage": list(ctx.lineage), "hidden": sorted(ctx.hidden_variables)},
    }
    try:
        stream = await UNIXSocketStream.from_socket(worker.sock)
        async with stream, anyio.create_task_group() as group:
            if spares is not None and spares.keep:  # the next call's starts meanwhile
                group.start_soon(_refill, spares)
            output = await _converse(tool, stream, request, ctx, worker)
        return output
    finally:
        kill_group(worker)
        if spares is not None:
            spares.bury(worker)


async def _converse(tool: WorkerTool, stream: UNIXSocketStream, request: dict[str, Any],
                    ctx: ToolContext, worker: Worker) -> ToolOutput:
    await stream.send(_line(request))
    incoming = BufferedByteReceiveStream(stream)
    while True:
        try:
            raw = await incoming.receive_until(b"\n", MAX_MESSAGE_BYTES)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
            code = await _reap(worker)
            how = f"was killed by signal {-code}" if code is not None and code < 0 else \
                f"exited with status {code}"
            return ToolResult.failure(f"{tool.name} failed: its worker process {how} before "
                                      "it gave a result")
        except anyio.DelimiterNotFound:
            return ToolResult.failure(f"{tool.name} failed: its result is larger than "
                                      f"{MAX_MESSAGE_BYTES} bytes")
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            return ToolResult.failure(f"{tool.name} failed: its worker sent something that is "
                                      "not a message (did the tool write to the worker's "
                                      "socket?)")
        op = message.get("op")
        if op == "progress":
            fraction = message.get("fraction")
            ctx.progress(str(message.get("message", "")),
                         float(fraction) if isinstance(fraction, int | float) else None)
        elif op == "confirm":
            answer = await ctx.confirm(str(message.get("question", "")))
            await stream.send(_line({"op": "confirmed", "id": message.get("id"),
                                     "answer": bool(answer)}))
        elif op == "blocked":
            seconds = float(message.get("seconds") or 0.0)
            log.warning("tool.loop_blocked", tool=tool.name, file=str(tool.file),
                        seconds=round(seconds, 3))
            ctx.progress(f"{tool.name} has blocked its event loop for {seconds:.1f}s: an async "
                         "tool must not call blocking code such as time.sleep (use "
                         "anyio.sleep, or make the tool a plain function)", None)
        elif op == "log":
            _relog(tool, message)
        elif op == "error":
            return ToolResult.failure(f"{tool.name} failed: {message.get('error')}")
        elif op == "result":
            return _output(message)
        else:
            return ToolResult.failure(f"{tool.name} failed: its worker sent {op!r}")


def _relog(tool: WorkerTool, message: dict[str, Any]) -> None:
    fields = message.get("fields")
    fields = dict(fields) if isinstance(fields, dict) else {}
    event = str(fields.pop("event", ""))
    for reserved in ("level", "logger", "timestamp"):
        fields.pop(reserved, None)
    fields["tool"] = tool.name  # squadd's name for it, over any `tool` field of the tool's own
    level = message.get("level")
    logger = structlog.get_logger(str(message.get("logger") or "squadd.tools"))
    logger.log(level if isinstance(level, int) else 20, event, **fields)


async def _refill(spares: SpareWorkers) -> None:
    with contextlib.suppress(OSError):  # no process to spare now: the next call starts one
        await anyio.to_thread.run_sync(spares.refill)


def _output(message: dict[str, Any]) -> ToolOutput:
    kind = message.get("kind")
    if kind == "tool_result":
        return ToolResult.model_validate(message.get("result"))
    if kind == "dict" and isinstance(message.get("data"), dict):
        data: dict[str, Any] = message["data"]
        return data
    return str(message.get("text", ""))


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message, default=str, ensure_ascii=False) + "\n").encode("utf-8")


async def _reap(worker: Worker) -> int | None:
    """Collect the worker's exit status (it was killed or has ended); None if it lingers."""
    if worker.process.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            await anyio.to_thread.run_sync(worker.process.wait, _REAP_WITHIN_S)
    return worker.process.returncode
