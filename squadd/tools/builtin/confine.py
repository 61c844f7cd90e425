"""Confinement of the workspace tools: every path they touch stays inside the session's workspace.

A path is checked twice. First by name: lexically (`..`, absolute paths) and through its
symlinks (`os.path.realpath`), so a refusal names the rule that was broken. Then on the way in:
each folder is opened from the workspace's own descriptor with O_NOFOLLOW (an openat walk), and
the file itself too, so a symlink swapped in after the name check makes the open fail instead of
escaping. Files are opened with O_NONBLOCK and checked with `fstat`: FIFOs, sockets and devices
are refused without ever blocking on them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from squadd.config import WorkspaceToolsSettings
from squadd.errors import PathRefused as PathRefused

Parts = tuple[str, ...]
"""A path inside the workspace as its components, symlinks resolved ("()" is the root)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SQUAD_WRITERS = "squad_decide, squad_memory and squad_skill"


def shown(parts: Parts) -> str:
    """A workspace path as the model should write it."""
    return "/".join(parts) or "."


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _parts(path: str, root: str) -> Parts:
    relative = os.path.relpath(path, root)
    return () if relative == "." else tuple(relative.split("/"))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass
class Workspace:
    """The folder a call's paths are confined to."""

    given: Path
    """The workspace as the context names it (absolute paths may use this spelling)."""
    root: Path = field(init=False)
    """Its real path: every check compares against this."""
    on_checked: Callable[[Parts], None] | None = None
    """Called between the name check and the opening (tests swap a symlink in here)."""

    def __post_init__(self) -> None:
        self.given = Path(os.path.normpath(Path(self.given).absolute()))
        self.root = Path(os.path.realpath(self.given))
        if not self.root.is_dir():
            raise PathRefused(f"the workspace {self.given} is not a folder")

    def resolve(self, path: str) -> Parts:
        """The components of `path` inside the workspace, or `PathRefused` naming the rule."""
        lexical = self._lexical(path)
        root = str(self.root)
        real = os.path.realpath(lexical)
        if not _inside(real, root):
            raise PathRefused(
                f"{path} leads out of the workspace through a symlink (to {real}): "
                "symlinks may only point inside the workspace")
        return _parts(real, root)

    def _lexical(self, path: str) -> str:
        """`path` made absolute under the root, without following symlinks (refused when it
        leaves the workspace by its letters alone)."""
        if not path or "\0" in path:
            raise PathRefused(f"{path!r} is not a path: give a path inside the workspace")
        root = str(self.root)
        if Path(path).is_absolute():
            lexical = os.path.normpath(path)
            given = str(self.given)
            if _inside(lexical, given):
                lexical = str(Path(root, os.path.relpath(lexical, given)))
            elif not _inside(lexical, root):
                raise PathRefused(
                    f"{path} is outside the workspace: absolute paths must lie inside "
                    f"{self.given}; give a path relative to it")
        else:
            lexical = os.path.normpath(Path(root, path))
            if not _inside(lexical, root):
                raise PathRefused(
                    f"{path} leads out of the workspace through '..': paths must stay inside it")
        return lexical

    def lexical_parts(self, path: str) -> Parts:
        """`path`'s components under the root by its letters alone (symlinks not followed)."""
        return _parts(self._lexical(path), str(self.root))

    def writable(self, path: str, settings: WorkspaceToolsSettings) -> Parts:
        """`resolve`, then the rules for write and edit (`.git/`, `.squad/run/`, `.squad/`)."""
        parts = self.resolve(path)
        lexical = _parts(self._lexical(path), str(self.root))
        for candidate in (parts, lexical):
            if ".git" in candidate:
                raise PathRefused(f"{path} is inside .git/: git's internals are off-limits to "
                                  "write and edit (use bash with git commands)")
            if candidate[:2] == (".squad", "run"):
                raise PathRefused(f"{path} is inside .squad/run/, the daemon's own files: "
                                  "off-limits to write and edit")
            if candidate[:1] == (".squad",) and not settings.allow_squad_writes:
                raise PathRefused(
                    f"{path} is inside .squad/, which changes only through the squad tools "
                    f"({SQUAD_WRITERS}); set workspace_tools.allow_squad_writes = true to allow it")
        if not parts:
            raise PathRefused(f"{path} is the workspace itself, not a file")
        return parts

    def open_dir(self, parts: Parts, *, create: bool = False) -> int:
        """A descriptor of folder `parts`, walked from the root without following symlinks
        (`create`: make the missing folders). The caller closes it."""
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for depth, name in enumerate(parts):
                fd = self._step(fd, name, parts[:depth + 1], create)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _step(self, fd: int, name: str, where: Parts, create: bool) -> int:
        try:
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise PathRefused(f"{shown(where)} does not exist") from None
                # Made by someone else meanwhile: it is opened below, with the same checks.
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=fd)
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _refusal(exc, where, fd) from None
        os.close(fd)
        return child

    def open_file(self, parts: Parts) -> tuple[int, os.stat_result]:
        """A read-only descriptor of regular file `parts` and its `fstat` (never blocks)."""
        if not parts:
            raise PathRefused(". is the workspace itself, a folder: give a file")
        if self.on_checked is not None:
            self.on_checked(parts)
        parent = self.open_dir(parts[:-1])
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            fd = os.open(parts[-1], flags, dir_fd=parent)
        except FileNotFoundError:
            raise PathRefused(f"{shown(parts)} does not exist") from None
        except OSError as exc:
            raise _refusal(exc, parts, parent) from None
        finally:
            os.close(parent)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise PathRefused(f"{shown(parts)} is {_kind(info.st_mode)}: only regular files "
                              "can be read or changed")
        return fd, info

    def existing(self, parent: int, parts: Parts) -> os.stat_result | None:
        """The `lstat` of `parts[-1]` in folder descriptor `parent`: None when absent, refused
        when it is anything but a regular file."""
        try:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(info.st_mode):
            raise PathRefused(f"{shown(parts)} is {_kind(info.st_mode)}: only regular files "
                              "can be written")
        return info


def _is_symlink(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _refusal(exc: OSError, where: Parts, folder: int) -> PathRefused:
    """The refusal for an open that failed (`folder`: the descriptor it was opened from)."""
    if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and
                                    _is_symlink(folder, where[-1])):
        return PathRefused(f"{shown(where)} became a symlink while it was being opened: "
                           "refused, since it could lead out of the workspace")
    if exc.errno == errno.ENOTDIR:
        return PathRefused(f"{shown(where)} is not a folder")
    if exc.errno == errno.ENXIO:
        return PathRefused(f"{shown(where)} is not a regular file")
    return PathRefused(f"{shown(where)}: {exc.strerror or exc}")


def read_fd(fd: int, size: int) -> bytes:
    """Up to `size` bytes from `fd` (a regular file), in chunks."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
