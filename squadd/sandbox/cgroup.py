"""A pids cgroup per confined call: the process limit that holds, and a list of what to kill.

`RLIMIT_NPROC` counts a user's processes across the whole system, and the kernel does not apply
it to root at all, so the limit on a call's processes is a cgroup's `pids.max` where squadd may
make one: the cgroup v1 `pids` hierarchy, or a delegated cgroup v2 folder of its own. Every
process of the call is in it (the call's first process joins before it execs), so when the call
ends each one still there is killed, whatever session or environment it gave itself.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
KILL_ROUNDS = 200
KILL_PAUSE_S = 0.005
_counter = itertools.count(1)


def _own_path(controller: str) -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(",") or (controller == "" and controllers == ""):
            return path
    return None


def _usable(folder: Path) -> bool:
    probe = folder / f"squadd-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "pids.max").exists() and os.access(probe / "cgroup.procs", os.W_OK)
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


@functools.cache
def parent() -> Path | None:
    """The cgroup folder squadd makes its per-call cgroups in, or None where it may not."""
    v1 = _own_path("pids")
    if v1 is not None and (CGROUP_ROOT / "pids").is_dir():
        folder = CGROUP_ROOT / "pids" / v1.lstrip("/")
        if _usable(folder):
            return folder
    v2 = _own_path("")
    for base in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if v2 is not None and (base / "cgroup.subtree_control").exists():
            folder = base / v2.lstrip("/")
            try:
                enabled = (folder / "cgroup.subtree_control").read_text(encoding="ascii")
            except OSError:
                continue
            if "pids" in enabled.split() and _usable(folder):
                return folder
    return None


def create(max_processes: int) -> Path | None:
    """A new cgroup limited to `max_processes` (None where squadd cannot make one)."""
    base = parent()
    if base is None:
        return None
    folder = base / f"squadd-{os.getpid()}-{next(_counter)}"
    try:
        folder.mkdir()
        (folder / "pids.max").write_text(str(max_processes), encoding="ascii")
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None
    return folder


def members(folder: Path) -> list[int]:
    try:
        text = (folder / "cgroup.procs").read_text(encoding="ascii")
    except OSError:
        return []
    return [int(line) for line in text.split()]


def _named(pid: int) -> str:
    try:
        name = Path(f"/proc/{pid}/comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return str(pid)
    return f"{pid} ({name})"


def destroy(folder: Path) -> list[str]:
    """SIGKILL every process still in `folder` and remove it; those killed, as "pid (name)"."""
    killed: list[str] = []
    seen: set[int] = set()
    kill_file = folder / "cgroup.kill"
    for _ in range(KILL_ROUNDS):
        pids = members(folder)
        if not pids:
            break
        killed.extend(_named(pid) for pid in pids if pid not in seen)
        seen.update(pids)
        if kill_file.exists():
            with contextlib.suppress(OSError):
                kill_file.write_text("1", encoding="ascii")
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(KILL_PAUSE_S)
    for _ in range(KILL_ROUNDS):
        try:
            folder.rmdir()
            break
        except FileNotFoundError:
            break
        except OSError:
            time.sleep(KILL_PAUSE_S)  # the last members are still being reaped
    return killed


def remove_stale() -> list[str]:
    """Destroy the cgroups of squadd processes that are gone (killed before they could clean
    up): each one's processes are killed, whatever environment they gave themselves. Those
    killed, as "pid (name)"."""
    base = parent()
    if base is None:
        return []
    killed: list[str] = []
    with contextlib.suppress(OSError):
        for folder in base.iterdir():
            owner = folder.name.split("-")
            if len(owner) != 3 or owner[0] != "squadd" or not owner[1].isdigit():
                continue
            if Path(f"/proc/{owner[1]}").exists():
                continue  # its squadd runs: its calls are its own business
            killed += destroy(folder)
    return killed
