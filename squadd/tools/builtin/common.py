"""What the workspace tools share: their base class, the per-file locks, text decoding, writing.

Writes go through `squadd.fsio.atomic_write_at`, addressed by the parent folder's descriptor,
so the file lands in the folder that was checked, whatever happens to the names around it
meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import ClassVar

import anyio

from squadd.config import Settings
from squadd.fsio import atomic_write_at
from squadd.tools.base import ArgsT, Tool, ToolContext
from squadd.tools.builtin.confine import Parts, PathRefused, Workspace, read_fd, shown
from squadd.tools.builtin.protected import protected_places

BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this much of a file's head makes it binary (as git and grep tell)."""


class WorkspaceTool(Tool[ArgsT]):
    """A built-in tool confined to the calling session's workspace."""

    kind: ClassVar[str] = "builtin"
    on_checked: Callable[[Parts], None] | None = None
    """Test seam: called between a path's check and its opening."""

    def __init__(self, settings: Settings, locks: FileLocks | None = None):
        """`locks` are shared by the tools of one set (`workspace_tools` makes them), so that
        its write and edit calls on one file run one after the other."""
        self.settings = settings
        self.limits = settings.workspace_tools
        self.locks = locks if locks is not None else FileLocks()

    def workspace(self, ctx: ToolContext) -> Workspace:
        return Workspace(ctx.workspace, on_checked=self.on_checked)

    async def protected_reason(self, path: str, ctx: ToolContext) -> str | None:
        """Why writing `path` needs approval (a file squadd, git or a later session will
        execute: `protected`), or None (also when the path is refused: the run says why)."""
        return await anyio.to_thread.run_sync(self._protected_reason, path, ctx)

    def _protected_reason(self, path: str, ctx: ToolContext) -> str | None:
        try:
            workspace = self.workspace(ctx)
            parts = workspace.writable(path, self.limits)
            lexical = workspace.lexical_parts(path)
        except PathRefused:
            return None
        places = protected_places(workspace.root, ctx.squad_dir, self.settings)
        return places.reason(workspace.root, parts, lexical)


class FileLocks:
    """One lock per file: write and edit calls on the same file run one after the other."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, workspace: Workspace, parts: Parts) -> AsyncIterator[None]:
        key = str(workspace.root.joinpath(*parts))
        lock, users = self._locks.get(key, (anyio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)



def is_binary(head: bytes) -> bool:
    return b"\0" in head[:BINARY_SNIFF_BYTES]


def read_regular(workspace: Workspace, parts: Parts, max_bytes: int) -> tuple[bytes, int]:
    """The bytes of regular file `parts` and its mode; refused past `max_bytes`."""
    fd, info = workspace.open_file(parts)
    try:
        if info.st_size > max_bytes:
            raise PathRefused(
                f"{shown(parts)} is {info.st_size} bytes, over the limit of {max_bytes} "
                "(workspace_tools.max_read_bytes): search it with grep, or page it with "
                "bash (sed -n '100,200p')")
        return read_fd(fd, max_bytes + 1)[:max_bytes], info.st_mode
    finally:
        os.close(fd)


def write_regular(workspace: Workspace, parts: Parts, data: bytes, *,
                  mode: int | None = None) -> bool:
    """Replace (or create) regular file `parts` atomically, making missing folders; True when
    the file is new. `mode` keeps an existing file's permissions."""
    if workspace.on_checked is not None:
        workspace.on_checked(parts)
    parent = workspace.open_dir(parts[:-1], create=True)
    try:
        existing = workspace.existing(parent, parts)
        if mode is None:
            mode = existing.st_mode if existing is not None else 0o644
        atomic_write_at(parent, parts[-1], data, mode=mode & 0o7777)
    finally:
        os.close(parent)
    return existing is None
