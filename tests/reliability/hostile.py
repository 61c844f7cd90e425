"""The hostile values of `test_hostile_input.py`, and what feeds them in: a raw JSON-RPC client for
`squadd mcp` (the SDK's client would refuse to send most of them) and a snapshot of the files
around a repo, to prove nothing outside `.squad/` was written.

Each value is JSON text as bytes, spliced into a request as it is: that is the only way to send
NaN, 100,000 levels of nesting, a lone surrogate escape or bytes that are not UTF-8.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIG = 10_000_000
"""A 10 MB string."""
DEEP = 100_000
"""Levels of `[[[...]]]`: far past any recursion limit."""
DEEPISH = 150
"""Levels of nesting that Python's json still parses, but squadd refuses (its limit is 100)."""
ARGV_MAX = 131_071
"""The longest single command-line argument Linux passes (MAX_ARG_STRLEN, less its NUL)."""
TRAVERSALS = ("../../etc/passwd", "..", "a/b", "../../../../hostile-escape")
ESCAPE_NAME = "hostile-escape"
"""What a traversal would create if it escaped: checked for in every folder above the repo."""


@dataclass(frozen=True)
class Value:
    """One hostile value as JSON text, and the problem squadd must name when it refuses it."""

    label: str
    json: bytes
    problem: str | None = None
    """A fragment of the error wherever the value enters (None: it depends on where)."""
    text: str | None = None
    """The value as a Python string, when it is one."""


def _string(label: str, text: str) -> Value:
    return Value(label, json.dumps(text).encode(), text=text)


def values(absolute: Path) -> list[Value]:
    """Every hostile value; `absolute` is an absolute path outside the repo (checked after)."""
    return [
        *(_string(f"traversal {t}", t) for t in TRAVERSALS),
        _string("absolute path", str(absolute)),
        _string("NUL byte", "lead\x00evil"),
        Value("10 MB string", b'"' + b"x" * BIG + b'"', "limit"),
        Value("invalid UTF-8", b'"\xff\xfe\xc3\x28"', "UTF-8"),
        Value("lone surrogate", b'"\\ud800"', "unpaired surrogate"),
        Value("number for a string", b"5"),
        Value("list for an object", b"[1, 2]"),
        Value("object for a string", b'{"a": 1}'),
        Value("null", b"null"),
        Value("boolean", b"true"),
        Value("100,000 levels of nesting", b"[" * DEEP + b"]" * DEEP, "nested"),
        Value("150 levels of nesting", b"[" * DEEPISH + b"]" * DEEPISH, "nested deeper than"),
        Value("negative number", b"-1"),
        Value("huge float", b"1e308"),
        Value("2**64", str(2**64).encode()),
        Value("1e400 (infinite as a float)", b"1e400", "too large"),
        Value("NaN", b"NaN", "not a JSON number"),
        Value("Infinity", b"Infinity", "not a JSON number"),
        Value("-Infinity", b"-Infinity", "not a JSON number"),
        Value("5000-digit integer", b"7" * 5000, "digits"),
    ]


def splice(template: str, value: Value) -> bytes:
    """`template` (JSON with one `@V@`) with the value's JSON text in its place."""
    head, tail = template.split("@V@")
    return head.encode() + value.json + tail.encode()


# Files around the repo -----------------------------------------------------------------------
Snapshot = dict[Path, tuple[int, int, int]]


def snapshot(root: Path, skip: Callable[[Path], bool]) -> Snapshot:
    """Every file and folder under `root` but those `skip` names: (kind, size, mtime_ns)."""
    found: Snapshot = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not skip(Path(folder) / d)]
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if skip(path):
                continue
            info = path.lstat()
            found[path] = (info.st_mode >> 12, info.st_size, info.st_mtime_ns)
    return found


def differences(before: Snapshot, after: Snapshot) -> list[str]:
    """What was created, changed or removed between two snapshots (file names shown as text)."""
    return [f"{str(path)!a}: {'created' if path not in before else 'changed or removed'}"
            for path in sorted(set(before) | set(after)) if before.get(path) != after.get(path)]


# A raw JSON-RPC client for `squadd mcp` -------------------------------------------------------
class RawMcp:
    """`python -m squadd mcp` on pipes: write any bytes as a line, read answers by id."""

    def __init__(self, repo: Path, env: dict[str, str], errlog: Path):
        self._err = errlog.open("ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "squadd", "mcp"], cwd=repo, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err)
        self._answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.pending: dict[Any, dict[str, Any]] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                message = json.loads(line)
                if isinstance(message, dict) and ("result" in message or "error" in message):
                    self._answers.put(message)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def answer(self, request_id: Any, timeout: float = 30.0) -> dict[str, Any]:
        """The answer to `request_id` (an id of None waits for a parse-error answer)."""
        deadline = time.monotonic() + timeout
        while request_id not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"squadd mcp never answered request {request_id!r}")
            try:
                message = self._answers.get(timeout=left)
            except queue.Empty:
                continue
            self.pending[message.get("id")] = message
        return self.pending.pop(request_id)

    def request(self, request_id: int, method: str, params: bytes) -> dict[str, Any]:
        self.send(b'{"jsonrpc": "2.0", "id": %d, "method": "%s", "params": %s}'
                  % (request_id, method.encode(), params))
        return self.answer(request_id)

    def initialize(self) -> None:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {},
                 "clientInfo": {"name": "hostile-test", "version": "1"}}
        assert "result" in self.request(0, "initialize", json.dumps(hello).encode())
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def close(self) -> int:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=5)
        self._err.close()
        return code


def mcp_text(answer: dict[str, Any]) -> str:
    """The text of an MCP tools/call answer: its content, or its JSON-RPC error message."""
    if "error" in answer:
        return str(answer["error"].get("message", ""))
    return "\n".join(block.get("text", "") for block in answer["result"].get("content", []))
