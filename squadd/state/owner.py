"""Which process owns a session's transcript, and whether that process still runs.

An owner is the pid plus the kernel's start time of that process (`/proc/PID/stat`, field 22),
so a pid the system has since given to another process is not mistaken for the owner.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from squadd.procs import PROC, process_start


@functools.cache
def _start_of(pid: int) -> str | None:
    return process_start(pid)


def current_owner() -> dict[str, Any]:
    """This process, as written in a transcript's `meta` record (keyed by pid: a forked
    child is its own owner)."""
    pid = os.getpid()
    return {"pid": pid, "start": _start_of(pid)}


def is_current(owner: object) -> bool:
    """Whether `owner` is this very process."""
    if not isinstance(owner, Mapping):
        return False
    return owner.get("pid") == os.getpid() and owner.get("start") == current_owner()["start"]


def owner_alive(owner: object) -> bool:
    """Whether the process `owner` names still runs. An unknown owner (an older transcript, a
    malformed record) counts as gone."""
    if not isinstance(owner, Mapping):
        return False
    pid, start = owner.get("pid"), owner.get("start")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if PROC.is_dir():
        return start is not None and process_start(pid) == start
    try:  # no /proc: the pid alone is all there is to go on
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
