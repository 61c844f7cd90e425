"""A cache of values made from files, each kept with the file's stat signature.

A hit costs one `stat`; a file whose signature (mtime, ctime, size, inode) changed is loaded
again. It is bounded (the oldest entry goes first) and thread-safe, because the event loop and
worker threads share it. `peek` never loads: the event loop answers a hit itself and takes only
a miss (`NotCached`) to a worker thread. Each owner (a `SquadRuntime`) makes its own: nothing
is shared between two runtimes in one process.

`Absences` is the other half: paths found missing, taken as missing for a second before they
are looked for again (the optional files and folders every session start asks about).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from squadd.errors import NotCached as NotCached

T = TypeVar("T")

Signature = tuple[int, int, int, int]

ABSENT_RECHECK_S = 1.0
"""Seconds a path found missing is taken as missing before it is looked for again."""


def signature(st: os.stat_result) -> Signature:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


class StatCache(Generic[T]):
    """`load(path)`'s value for each path, reloaded when the file changes.

        texts = StatCache(lambda path: path.read_text(encoding="utf-8"))
        texts.get(path)  # read once; later calls cost a stat while the file is unchanged
    """

    def __init__(self, load: Callable[[Path], T], *, limit: int = 256):
        if limit < 1:
            raise ValueError(f"a StatCache holds at least one entry, not {limit}")
        self._load = load
        self._limit = limit
        self._entries: dict[Path, tuple[Signature, T]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> T:
        """The value for `path`; `OSError` (e.g. `FileNotFoundError`) when it cannot be read.

        The file is stat'ed before it is loaded, so a change during the load is seen next time.
        """
        key, hit = self._lookup(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = self._load(path)
        self.store(path, key, value)
        return value

    def stamp(self, path: Path) -> Signature:
        """`path`'s stat signature now, to `store` a value read after it (`OSError` when it
        cannot be stat'ed)."""
        return self._lookup(path)[0]

    def store(self, path: Path, key: Signature, value: T) -> None:
        """Keep `value`, read from `path` when its signature was `key` (`stamp`): a caller that
        reads the file itself (`peek` missed) keeps what it read."""
        with self._lock:
            self._entries.pop(path, None)
            while len(self._entries) >= self._limit:
                self._entries.pop(next(iter(self._entries)))
            self._entries[path] = (key, value)

    def peek(self, path: Path) -> T:
        """The value for `path` if it is cached and its file unchanged: one `stat`, never a
        read, so the event loop may call it. `NotCached` when `get` would load the file;
        `OSError` (e.g. `FileNotFoundError`) when it cannot be stat'ed."""
        key, hit = self._lookup(path)
        if hit is None or hit[0] != key:
            raise NotCached(str(path))
        return hit[1]

    def _lookup(self, path: Path) -> tuple[Signature, tuple[Signature, T] | None]:
        try:
            key = signature(path.stat())
        except OSError:
            self.discard(path)
            raise
        with self._lock:
            return key, self._entries.get(path)

    def discard(self, path: Path) -> None:
        with self._lock:
            self._entries.pop(path, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def read_text(path: Path) -> str:
    """A small text file, decoding errors replaced (prompt parts, routing.md)."""
    with path.open(encoding="utf-8", errors="replace") as handle:
        return handle.read()


def text_cache(limit: int = 256) -> StatCache[str]:
    """A cache of small text files, as the prompt and the router read them."""
    return StatCache(read_text, limit=limit)


class Absences:
    """Paths found missing, each taken as missing for `ABSENT_RECHECK_S` before it is looked
    for again: most squads lack the optional files and folders (a hooks file, two or three of
    the skill folders) that every session start and tool call ask about, and each look is a
    system call on the event loop. A path that appears is seen within the recheck time. Two
    threads racing on one path cost one look more, never a wrong answer for longer."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._until: dict[Path, float] = {}

    def known_missing(self, path: Path) -> bool:
        """Whether `path` was found missing less than `ABSENT_RECHECK_S` ago."""
        return self.clock() < self._until.get(path, 0.0)

    def missing(self, path: Path) -> None:
        """Note `path` as found missing now."""
        self._until[path] = self.clock() + ABSENT_RECHECK_S
