"""The rules that keep a path inside the squad: ids safe as file names, files opened only
where they really lie inside the repository, and finding the squad dir.

Every file squadd reads from the squad (charters, routing, team, skills, tools, histories,
decisions) is opened through `open_inside`: the file actually opened must lie inside the
repository, so a symlink such as `SKILL.md -> ~/.netrc` is refused before a byte of it is read.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from squadd.errors import InvalidNameError, PathEscapeError, SquadNotFoundError, StateError

SQUAD_DIRNAMES = (".squad", ".ai-team")
"""Squad dir names in order of preference; `.ai-team` is the legacy name, used in place."""

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def safe_id(value: str, *, kind: str = "session id") -> str:
    """Check an opaque id (session, tool call) used as a file name."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or ".." in value:
        raise InvalidNameError(
            f"invalid {kind} {value!r}: ids must match {_ID_RE.pattern}"
        )
    return value


def _opened_path(fd: int, path: Path) -> Path:
    """The real path of the file open on `fd` (from /proc where there is one)."""
    try:
        return Path(f"/proc/self/fd/{fd}").readlink()
    except OSError:
        return Path(os.path.realpath(path))


def open_inside(path: Path, base: Path) -> int:
    """Open `path` for reading and return the descriptor, only if the file opened (after every
    symlink) lies inside `base` and is a regular file; else `PathEscapeError` or `StateError`,
    and nothing is read. Checked on the open descriptor, so a swapped link cannot slip past.
    FIFOs do not block the open (O_NONBLOCK) and are refused as not regular."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        real = _opened_path(fd, path)
        real_base = Path(os.path.realpath(base))
        if real != real_base and real_base not in real.parents:
            raise PathEscapeError(f"{path} leads to {real}, outside {real_base}: squadd does not "
                                  "read files outside the repository (replace the symlink "
                                  "with the file itself)")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"{path} is not a regular file: not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_inside(path: Path, base: Path, *, max_bytes: int | None = None) -> bytes:
    """The bytes of `path`, opened through `open_inside` (at most `max_bytes` + 1 of them)."""
    with os.fdopen(open_inside(path, base), "rb") as handle:
        return handle.read() if max_bytes is None else handle.read(max_bytes + 1)


def find_squad_dir(start: Path | None = None) -> Path:
    """Walk up from `start` (default: the working directory) to the first squad dir."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        for dirname in SQUAD_DIRNAMES:
            candidate = folder / dirname
            if candidate.is_dir():
                return candidate
    raise SquadNotFoundError(
        f"no .squad/ folder found in {here} or any folder above it: "
        "run 'squadd init' in your repository first"
    )
