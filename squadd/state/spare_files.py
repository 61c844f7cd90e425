"""Spare files: empty files made ahead of time, so that a new transcript's (or orchestration-log
entry's) first write is an append, and `open_new`, which opens a new file through one of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import os
import secrets
import threading
from collections import deque
from pathlib import Path

from squadd.fsio import PRIVATE_FILE, fsync_dir, libc_function, private_dir

SPARES_DIRNAME = ".spares"


class SpareFiles:
    """Empty files made ahead of time, so a new session's first write is an append.

    Creating and syncing a new file is the costliest step of a session's first write (on a
    long-used ext4, creating one can take a millisecond of the kernel's time). A background
    task (`refill`) creates spares in `run/transcripts/.spares/` and makes them durable with
    one folder sync; a writer that needs a new transcript, or a new orchestration-log entry,
    moves one into place instead (made durable by the same folder sync the write needs
    anyway). Several processes may
    share the folder. A spare moves to its target with one `renameat2(RENAME_NOREPLACE)`, which
    never replaces a transcript another writer made; where that call is missing, a spare is
    claimed by a rename within `.spares/` (one taker wins), then hard-linked to its target.
    """

    def __init__(self, sessions_dir: Path):
        self.folder = sessions_dir / SPARES_DIRNAME
        self._names: deque[str] = deque()
        self._lock = threading.Lock()
        self._counter = itertools.count()
        self._adopted = False
        self.usable = True
        """False once the file system refused a hard link: `refill` then makes none."""

    def __len__(self) -> int:
        return len(self._names)

    def refill(self, target: int) -> int:
        """Create spares until `target` are known (blocking); return how many were made."""
        if not self.usable:
            return 0
        private_dir(self.folder)
        if not self._adopted:  # spares an earlier process made and never used
            self._adopted = True
            with self._lock:
                self._names.extend(entry.name for entry in os.scandir(self.folder)
                                   if _is_spare(entry))
        made: list[str] = []
        stem = f"{os.getpid()}-{secrets.token_hex(4)}"
        while len(self._names) + len(made) < target:
            name = f"{stem}-{next(self._counter)}"
            fd = os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            os.close(fd)
            made.append(name)
        if made:
            fsync_dir(self.folder)  # the new (empty) files are durable before anyone takes one
            with self._lock:
                self._names.extend(made)
        return len(made)

    def take_into(self, target: Path) -> bool:
        """Make a spare the new file `target`; False when none is left, `target` exists (an
        existing file is never replaced), or its folder is missing or on another file
        system."""
        while True:
            with self._lock:
                if not self._names:
                    return False
                name = self._names.popleft()
            spare = self.folder / name
            moved = _rename_noreplace(spare, target)
            if moved is True:
                return True
            if moved == "taken" and not os.path.lexists(spare):
                continue  # another process took it
            if moved in ("taken", "exists", "elsewhere"):  # the spare stays for another file
                with self._lock:
                    self._names.appendleft(name)
                return False
            claimed = self.folder / (name + _TAKEN)
            try:
                spare.rename(claimed)
            except FileNotFoundError:
                continue  # another process took it
            try:
                os.link(claimed, target)
            except (FileExistsError, FileNotFoundError):
                return False
            except OSError as exc:
                if exc.errno == errno.EXDEV:  # another file system: this target only
                    return False
                # a file system without hard links: spares cannot help here
                self.usable = False
                with self._lock:
                    self._names.clear()
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(claimed)
            return True


def open_new(target: Path, flags: int, spares: SpareFiles | None, *,
             mode: int = PRIVATE_FILE) -> int:
    """Open `target` as a new file with `flags` and `mode`: a spare moved into place when one
    is left, else one created here (and its folder, private for a private file, if missing).
    `FileExistsError` when `target` exists: a new file never replaces one."""
    if spares is not None and spares.take_into(target):
        fd = os.open(target, flags)
        if mode != PRIVATE_FILE:  # spares are made private
            os.fchmod(fd, mode)
        return fd
    try:
        return os.open(target, flags | os.O_CREAT | os.O_EXCL, mode)
    except FileNotFoundError:
        if mode & 0o077:
            target.parent.mkdir(parents=True, exist_ok=True)
        else:
            private_dir(target.parent)
        return os.open(target, flags | os.O_CREAT | os.O_EXCL, mode)


_RENAMEAT2 = libc_function("renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_uint)
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _rename_noreplace(source: Path, target: Path) -> bool | str:
    """Move `source` to `target` in one step unless `target` exists (Linux renameat2).

    True when moved; "taken" when `source` (or `target`'s folder) is missing; "exists" when
    `target` exists; "elsewhere" when `target` is on another file system; False when the
    system cannot do it (no renameat2, or a file system without RENAME_NOREPLACE).
    """
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target),
                  _RENAME_NOREPLACE) == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.ENOENT:
        return "taken"
    if code == errno.EEXIST:
        return "exists"
    if code == errno.EXDEV:
        return "elsewhere"
    return False


_TAKEN = ".taken"
"""Suffix of a spare claimed by a writer; one left by a crash mid-take is never adopted."""


def _is_spare(entry: os.DirEntry[str]) -> bool:
    if entry.name.endswith(_TAKEN) or not entry.is_file(follow_symlinks=False):
        return False
    st = entry.stat(follow_symlinks=False)
    return st.st_size == 0 and st.st_nlink == 1
