"""The Landlock mechanism: a `SandboxPolicy` as the allow-lists the launcher applies.

Landlock only ever allows, beneath a path. So "everything but `~/.ssh`" becomes a rule on each
sibling along the way down to `~/.ssh` (`cover`), and "the worktree but not its `.git`" the same.
What it cannot express (a folder above a denied path cannot be listed; with isolation none, new
files at the repository's top level cannot be written) is in docs/sandbox.md.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from squadd.sandbox import launcher
from squadd.sandbox.policy import SandboxPolicy

MAX_RULES = 4096
"""Most path rules one call's ruleset gets (a huge home folder split around a denied path)."""


@functools.cache
def abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    return launcher.abi()


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def cover(top: Path, holes: Sequence[Path], limit: int = MAX_RULES) -> list[tuple[str, bool]]:
    """Paths (and whether each is a file) whose union is `top` without `holes`."""
    out: list[tuple[str, bool]] = []
    stack = [top]
    while stack:
        path = stack.pop()
        if path.is_symlink() and path != top:
            # A rule follows a link to its target: that target is reached (and split around
            # the holes) by its own path, so a link is never a rule of its own.
            continue
        inside = [hole for hole in holes if hole == path or hole.is_relative_to(path)]
        if path in inside:
            continue
        is_dir = path.is_dir() and not path.is_symlink()
        if not inside or not is_dir:
            if path.exists():
                out.append((str(path), not path.is_dir()))
        else:
            try:
                stack.extend(sorted(path.iterdir(), reverse=True))
            except OSError:
                continue
        if len(out) > limit:
            raise OSError(f"the sandbox needs more than {limit} Landlock rules to leave out "
                          f"{', '.join(map(str, holes))}")
    return out


def landlock_spec(policy: SandboxPolicy, private_tmp: Path) -> dict[str, Any]:
    """The rules `launcher.restrict` applies for `policy`, with `private_tmp` writable."""
    denied = [_real(path) for path in policy.deny_read if path.exists()]
    # Only folders can be left out of a writable folder: a rule for every other entry would
    # leave the folder itself unwritable (no new file at its top). A worktree's `.git` file
    # stays writable; the folder it names is not (docs/sandbox.md).
    protected = [_real(path) for path in policy.read_only if path.is_dir()]
    write: list[tuple[str, bool]] = [(str(private_tmp), False)]
    for root in _existing(policy.writable):
        write += cover(_real(root), [*protected, *denied])
    return {"read": cover(Path("/"), denied), "write": write,
            "devices": [("/dev", False)] if Path("/dev").is_dir() else [],
            "network": policy.network}


def _existing(paths: Iterable[Path]) -> list[Path]:
    return [path for path in paths if path.is_dir()]


def user_processes() -> int:
    """How many processes this user runs now (the base of a per-user process limit)."""
    uid, count = os.getuid(), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count
