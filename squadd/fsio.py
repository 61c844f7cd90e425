"""Durable file primitives: atomic replace, append-and-fsync, exclusive create, file locks, and
one sync of a whole file system.

Every write that matters in squadd goes through here. Locks are `flock` locks on a separate
lock file, so they work between processes and between threads of one process alike.

What squadd creates is private unless said otherwise: files 0600 and the folders made for them
0700 (transcripts, prompts, logs, tool output, journals, run/). The team's committed files
(decisions, histories, charters, skills, team.md, routing.md) are written with `TEAM_FILE`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

from squadd.errors import LockTimeoutError, StateError

DEFAULT_LOCK_TIMEOUT_S = 30.0
PRIVATE_FILE = 0o600
"""The mode of a file squadd creates for itself (transcripts, logs, spills, journals)."""
PRIVATE_DIR = 0o700
"""The mode of a folder squadd creates for its own files."""
TEAM_FILE = 0o644
"""The mode of a file the team commits (decisions, histories, charters, skills, team.md)."""


def private_dir(path: Path) -> Path:
    """Make `path` (and any missing folder above it) a folder only its owner can enter: 0700,
    also when it exists already with a looser mode (made by an older squadd)."""
    missing = []
    folder = path
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            folder.mkdir(PRIVATE_DIR)
    info = path.stat()
    if info.st_mode & 0o077 and info.st_uid == os.getuid():
        path.chmod(PRIVATE_DIR)
    return path


def open_private(path: Path, how: str = "ab") -> BinaryIO:
    """`path` opened for writing (`"ab"` appends, `"wb"` truncates), created 0600 in a private
    folder when new: squadd's own logs and outputs."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if how == "ab" else
                                                       os.O_TRUNC)
    _parent_for(path, PRIVATE_FILE)
    return cast(BinaryIO, os.fdopen(os.open(path, flags, PRIVATE_FILE), how))


def _parent_for(path: Path, mode: int) -> None:
    """Create the folder of `path` when missing: private (0700) for a private file."""
    if path.parent.is_dir():
        return
    if mode & 0o077:
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        private_dir(path.parent)


def _to_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (`os.write` may write only part of it)."""
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])


def fsync_dir(path: Path) -> None:
    """fsync a directory so that a rename or create inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def libc_function(name: str, *argtypes: Any) -> Any:
    """The C library's function `name` taking `argtypes` and returning an int, which sets
    `errno` for `ctypes.get_errno`; None where this system's C library has none (not Linux)."""
    try:
        function = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


_SYNCFS = libc_function("syncfs", ctypes.c_int)
HAS_SYNCFS = _SYNCFS is not None
"""`sync_file_system` can sync a whole file system here (Linux)."""


def sync_file_system(fd: int) -> bool:
    """Make everything written to the file system that holds `fd`'s file durable, its files'
    data and its folders alike, with one `syncfs` (blocking): True; False where the system has
    no `syncfs` (the caller syncs its files one by one).

    One call, where an fsync per file would have the disk flush its cache once a file. It also
    writes what other processes left unwritten on that file system. An error writing back
    raises `OSError`; kernels before Linux 5.8 do not report one.
    """
    if _SYNCFS is None:
        return False
    if _SYNCFS(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"syncfs: {os.strerror(code)}")
    return True


def _synced_temp(path: Path, data: str | bytes, mode: int) -> str:
    """A hidden temp file beside `path` holding `data`, given `mode` and fsynced; its name."""
    _parent_for(path, mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(_to_bytes(data))
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write(path: Path, data: str | bytes, *, mode: int | None = None,
                 new_mode: int = PRIVATE_FILE) -> None:
    """Replace `path` with `data`: write a temp file, fsync it, rename it, fsync the dir.

    A reader sees either the old file or the new one, never a partial one. `mode` None keeps
    the mode of the file replaced, or gives a new file `new_mode` (private unless the caller
    writes a team file).
    """
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = new_mode
    tmp = _synced_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def append_fsync(path: Path, data: str | bytes, *, mode: int = PRIVATE_FILE) -> None:
    """Append `data` to `path` in one write and fsync it before returning (a new file gets
    `mode`)."""
    _parent_for(path, mode)
    existed = path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        payload = _to_bytes(data)
        write_all(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    if not existed:
        fsync_dir(path.parent)


def create_exclusive(path: Path, data: str | bytes, *, mode: int = PRIVATE_FILE) -> bool:
    """Create `path` holding `data`, given `mode`, only if it does not exist yet (O_EXCL);
    fsync it.

    Returns False when the name is already taken, so callers can try the next name.
    """
    _parent_for(path, mode)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return False
    try:
        payload = _to_bytes(data)
        write_all(fd, payload)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    os.close(fd)
    fsync_dir(path.parent)
    return True


def publish_exclusive(path: Path, data: str | bytes, *, mode: int = 0o444) -> bool:
    """Put a complete `path` holding `data` in place only if the name is free; fsync it.

    The bytes go to a hidden temp file first (fsynced, given `mode`), which is then hard-linked
    to `path`: a reader never sees a partial file, and the link fails when the name is taken
    (as O_EXCL would). Returns False when the name is taken, so callers can try the next one.
    """
    tmp = _synced_temp(path, data, mode)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return True


def read_text(path: Path, default: str = "") -> str:
    """Read a UTF-8 file, or return `default` when it does not exist; a file that is not UTF-8
    is a `StateError` naming it and the first bad byte (the `UnicodeDecodeError` is its cause)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return default
    except UnicodeDecodeError as exc:
        raise StateError(f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}): fix or "
                         "remove the bad bytes") from exc


@contextlib.contextmanager
def file_lock(
    lock_path: Path, *, timeout: float = DEFAULT_LOCK_TIMEOUT_S, shared: bool = False
) -> Iterator[None]:
    """Hold an exclusive (or shared) `flock` on `lock_path` for the `with` block.

    Waits at most `timeout` seconds, then raises `LockTimeoutError` naming the lock.
    """
    _parent_for(lock_path, PRIVATE_FILE)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        _acquire(fd, lock_path, timeout, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, lock_path: Path, timeout: float, kind: int) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            raise LockTimeoutError(
                f"could not lock {lock_path} within {timeout:g}s: another squadd process "
                "holds it; if none is running, the lock is free and this is a bug"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def try_lock(lock_path: Path) -> int | None:
    """Take an exclusive lock without waiting; return the open fd that holds it, or None.

    The caller keeps the fd open for as long as it wants the lock (the daemon's lock).
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def atomic_write_at(folder: int, name: str, data: str | bytes, *, mode: int = 0o644) -> None:
    """`atomic_write` of file `name` in the folder open as descriptor `folder`.

    Every step goes through the descriptor (temp file, fsync, rename, folder fsync), so the file
    lands in the folder that was opened, whatever happens to the names above it meanwhile.
    """
    payload = _to_bytes(data)
    for _ in range(100):
        tmp = f".{name[:200]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600, dir_fd=folder)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name for {name}")
    try:
        try:
            write_all(fd, payload)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=folder)
        raise
    os.fsync(folder)
