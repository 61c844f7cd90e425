"""Making the files a journal covers durable, and telling a live runtime's journal from an
ended one's (by its lock), for the commit loop and the replay alike. All blocking."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from squadd.fsio import fsync_dir, sync_file_system


def sync_file(path: Path, created: bool) -> None:
    """Make `path` durable (and, when it was `created`, the folder entry naming it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def sync_all(paths: set[Path], journal_fd: int | None = None) -> None:
    """Make each file durable, and the folder entries naming them (a file gone meanwhile is
    skipped). Those on the journal's file system take one `sync_file_system` of it (the disk
    flushes its cache once, not once a file); the others, and all of them where the system has
    no `syncfs`, an fsync each and one of each folder."""
    apart = paths
    if journal_fd is not None and paths:
        device = os.fstat(journal_fd).st_dev
        parents = {path.parent for path in paths}
        elsewhere = {folder for folder in parents if _device(folder) != device}
        if len(elsewhere) < len(parents) and sync_file_system(journal_fd):
            apart = {path for path in paths if path.parent in elsewhere}
    folders: set[Path] = set()
    for path in apart:
        with contextlib.suppress(FileNotFoundError):
            sync_file(path, created=False)
        folders.add(path.parent)
    for folder in folders:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(folder)


def _device(folder: Path) -> int | None:
    try:
        return folder.stat().st_dev
    except FileNotFoundError:  # gone, and its files with it
        return None


def lock_if_still_at(fd: int, path: Path) -> bool:
    """Lock `fd`'s file if nobody holds it and `path` still names it (True), else False."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a replay holds it, and will remove it
        return False
    try:
        named = path.stat()
    except FileNotFoundError:  # a replay removed it before the lock
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def lock_ended(path: Path) -> int | None:
    """`path` opened and locked if it is a journal no live runtime holds (None when one does,
    or it is gone). An `OSError` when it cannot be opened (a link, never ours: left alone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its runtime is alive
        os.close(fd)
        return None
    return fd
