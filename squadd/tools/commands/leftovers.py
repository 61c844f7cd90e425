"""Processes a shell tool left running outside its process group (`setsid`, a double fork,
`nohup ... & disown` in a new session), found and stopped when the command ends.

Each command runs with a mark in its environment (`SQUADD_TOOL_RUN=<random>`), which its
descendants inherit; at the end `/proc/*/environ` is searched for the mark. The limit: a
process that clears or replaces its environment (`env -i`, a daemon that scrubs it) is not
found; nor is one owned by another user (its environ cannot be read). Linux only (no /proc:
nothing is found).
"""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path

MARK_VAR = "SQUADD_TOOL_RUN"
_ENVIRON_BYTES = 1 << 20
_PASSES = 3
"""Searches after the kill: a process caught mid-fork can leave a child the first pass missed."""


def new_mark() -> str:
    return secrets.token_hex(16)


def _marked(mark: bytes, group: int) -> list[tuple[int, str]]:
    own = {os.getpid(), os.getppid()}
    found: list[tuple[int, str]] = []
    try:
        entries = [path.name for path in Path("/proc").iterdir()]
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit() or int(entry) in own:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read(_ENVIRON_BYTES)
        except OSError:  # gone, or another user's
            continue
        if mark in environ.split(b"\0"):
            try:
                if os.getpgid(int(entry)) == group:
                    continue  # still in the command's group: the group kill has it
            except OSError:
                continue
            try:
                name = Path(f"/proc/{entry}/comm").read_text(errors="replace").strip()
            except OSError:
                name = "?"
            found.append((int(entry), name))
    return found


def stop_leftovers(mark: str, group: int) -> list[str]:
    """SIGKILL every process carrying `mark` outside process group `group` (which the caller
    has killed); `["PID (name)", ...]` of those stopped. Blocking (reads /proc): call it from
    a worker thread."""
    needle = f"{MARK_VAR}={mark}".encode()
    stopped: dict[int, str] = {}
    for _ in range(_PASSES):
        found = [(pid, name) for pid, name in _marked(needle, group) if pid not in stopped]
        if not found:
            break
        for pid, name in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            stopped[pid] = name
    return [f"{pid} ({name})" for pid, name in sorted(stopped.items())]
