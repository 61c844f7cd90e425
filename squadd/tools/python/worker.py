"""The worker process a Python tool call runs in:
`python -m squadd.tools.python.worker FD DAEMON_PID`.

It does its imports, then waits on the socket FD for one call: loads the tool file, runs the
tool with a `ToolContext` whose `progress` and `confirm` travel back over the socket, sends the
result as JSON and exits. A thread watches its event loop and reports when a tool blocks it.
The tool's prints go to stderr, like the daemon's own. The parent kills the whole process
group when the call ends, times out or is cancelled.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import structlog

from squadd.loop_watch import LoopWatch
from squadd.tools.base import ToolContext, ToolResult
from squadd.tools.python.files import load_python_file
from squadd.tools.python.tool import PythonTool, tool

MAX_REQUEST_BYTES = 64 * 1024 * 1024


class Channel:
    """The worker's end of the socket: JSON lines out (from any thread), replies in."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = sock.makefile("rb")
        self._send_lock = threading.Lock()
        self._ask_lock = threading.Lock()
        self._ids = itertools.count(1)

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message, default=str, ensure_ascii=False) + "\n").encode("utf-8")
        with self._send_lock:
            self.sock.sendall(data)

    def receive(self) -> dict[str, Any] | None:
        line = self.reader.readline(MAX_REQUEST_BYTES)
        if not line:
            return None
        message = json.loads(line)
        return message if isinstance(message, dict) else None

    def progress(self, message: str, fraction: float | None) -> None:
        self.send({"op": "progress", "message": str(message), "fraction": fraction})

    async def confirm(self, question: str) -> bool:
        def ask() -> bool:
            with self._ask_lock:
                ask_id = next(self._ids)
                self.send({"op": "confirm", "id": ask_id, "question": str(question)})
                reply = self.receive()
            return bool(reply and reply.get("op") == "confirmed" and reply.get("answer"))

        return await anyio.to_thread.run_sync(ask)


class ForwardLogs(logging.Handler):
    """Every log line of the tool goes to the parent, which logs it as its own (so it lands
    in the daemon's log, its secrets redacted there)."""

    def __init__(self, channel: Channel):
        super().__init__(logging.DEBUG)
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, dict):  # a structlog event
            fields = {str(k): v for k, v in record.msg.items() if not str(k).startswith("_")}
        else:
            fields = {"event": record.getMessage()}
        with contextlib.suppress(OSError):  # the parent has gone: nobody to tell
            self.channel.send({"op": "log", "logger": record.name, "level": record.levelno,
                               "fields": fields})


def forward_logs(channel: Channel) -> None:
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger, cache_logger_on_first_use=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(ForwardLogs(channel))
    root.setLevel(logging.DEBUG)
    logging.getLogger("asyncio").setLevel(logging.WARNING)


def _encode(output: Any) -> dict[str, Any]:
    if isinstance(output, ToolResult):
        return {"op": "result", "kind": "tool_result", "result": output.model_dump(mode="json")}
    if isinstance(output, dict):
        return {"op": "result", "kind": "dict",
                "data": json.loads(json.dumps(output, default=str))}
    return {"op": "result", "kind": "text", "text": str(output)}


def _find(request: dict[str, Any]) -> PythonTool:
    path = Path(request["file"])
    found = load_python_file(path, request.get("source") or "project")
    for candidate in found:
        if candidate.name == request["tool"]:
            return candidate
    raise LookupError(f"{path} has no tool {request['tool']!r} any more (changed since it "
                      "was loaded?)")


async def run_call(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Load and run the tool `request` names; the message that answers it."""
    try:
        tool = _find(request)
        args = tool.args_model.model_validate(request.get("arguments") or {})
    except Exception as exc:  # a tool file may raise anything while loading
        return {"op": "error", "error": f"cannot load it: {type(exc).__name__}: {exc}"}
    given = request.get("ctx") or {}
    # Other tools' scoped variables leave this process's environment (and its children's)
    # before the tool's code runs: a worker serves this one call only.
    for name in given.get("hidden") or ():
        os.environ.pop(str(name), None)
    ctx = ToolContext(
        session_id=str(given.get("session_id", "")), call_id=str(given.get("call_id", "")),
        agent=str(given.get("agent", "")), repo_dir=Path(given.get("repo_dir") or "."),
        squad_dir=Path(given.get("squad_dir") or "."),
        variables=dict(given.get("variables") or {}), depth=int(given.get("depth") or 0),
        lineage=tuple(given.get("lineage") or ()))
    ctx._progress = channel.progress
    ctx._confirm = channel.confirm
    watch = LoopWatch(lambda seconds: channel.send({"op": "blocked", "seconds": seconds}),
                      float(request.get("blocked_after_s") or 1.0))
    async with anyio.create_task_group() as group:
        await group.start(watch.beat)  # watching before the tool can block
        answer = await _run(tool, args, ctx)
        group.cancel_scope.cancel()
    return answer


async def _run(tool: PythonTool, args: Any, ctx: ToolContext) -> dict[str, Any]:
    try:
        return _encode(await tool.run_here(args, ctx))
    except Exception as exc:  # the tool's own failure: the model reads it
        return {"op": "error", "error": f"{type(exc).__name__}: {exc}"}


PARENT_CHECK_S = 0.25


def _die_with_parent(parent: int) -> None:
    """A worker whose daemon died (kill -9) takes its group down, tool and all: nobody is
    left to stop it. `parent` comes from the daemon itself, so a daemon that died while this
    process was still starting is noticed too."""
    while True:
        if os.getppid() != parent:
            os.killpg(os.getpgrp(), signal.SIGKILL)
        time.sleep(PARENT_CHECK_S)


def _warm_up() -> None:
    """What every first call would pay for, paid while the worker waits as a spare: the event
    loop's backend, and pydantic's first model and validation."""
    async def nothing() -> None:
        return None

    def sample(text: str, count: int = 1) -> str:
        return text * count

    anyio.run(nothing)
    spare = tool(sample)
    spare.args_model.model_validate({"text": "x"})
    spare.spec()


def main(argv: list[str]) -> int:
    parent = int(argv[2]) if len(argv) > 2 and argv[2] != "0" else os.getppid()
    threading.Thread(target=_die_with_parent, args=(parent,), name="parent-watch",
                     daemon=True).start()
    sock = socket.socket(fileno=int(argv[1]))
    os.dup2(2, 1)  # a tool's prints go where the daemon's own output goes
    channel = Channel(sock)
    forward_logs(channel)
    _warm_up()
    request = channel.receive()  # a spare waits here, its imports done
    if request is None or request.get("op") != "call":
        return 0
    answer = anyio.run(run_call, request, channel)
    channel.send(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
