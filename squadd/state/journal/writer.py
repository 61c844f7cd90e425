"""The commit thread's side of the group commit: one runtime's journal file and the batches
written to it. Everything here blocks, and runs in the commit thread (or, for a full
journal's retirement, a worker thread).

A batch's appends go to their files (no fsync there) and, as frames (`format.encode`), to
the journal (`run/transcripts/.journal/{pid}-{token}.log`), which is then synced once. The
frames go over zeros the journal already holds (`ahead_bytes` of them), so that the sync
flushes data only, not a new file size. Past `checkpoint_bytes` the journal is rotated: the
next batch goes to a new one, and the full one is retired off the commit path (the files it
covers synced, with one `syncfs` where the system has it, then it is removed).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import structlog

from squadd.fsio import PRIVATE_FILE, fsync_dir, private_dir
from squadd.state.journal import files
from squadd.state.journal.format import encode, where_in
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Appended

log = structlog.get_logger("squadd.journal")

_OPEN_ATTEMPTS = 5
_datasync = getattr(os, "fdatasync", os.fsync)


class Appender(Protocol):
    """Bytes waiting to be appended to one file in the squad (a `TranscriptWriter`, an
    orchestration-log entry)."""

    @property
    def pending(self) -> int:
        """How many records wait (0: nothing to commit)."""
        ...

    def append_unsynced(self) -> Appended | None:
        """Append them without a sync (blocking); what was written, or None."""
        ...

    def flush(self) -> None:
        """Append them and make them durable by themselves (blocking)."""
        ...


@dataclass(eq=False)
class Job:
    """One caller's appends on their way to being durable."""

    writer: Appender
    done: anyio.Event = field(default_factory=anyio.Event)
    error: Exception | None = None
    sent: bool = False
    """Handed to the commit thread (or synced alone)."""
    on_error: Callable[[], None] | None = None
    """Called on the loop when the batch lands with this job failed (`begin`)."""
    appended: Appended | None = None
    """What the commit thread appended (kept for a job written before its sync)."""
    begun: bool = False
    """Queued by `begin`: it rides the next batch another commit makes (or `finish` sends)."""


@dataclass(eq=False)
class Batch:
    """What the commit thread is handed: jobs to append and frame in the journal, and (unless
    `sync` is False) one journal sync, which also makes the `covers` durable: jobs a batch
    without a sync wrote before."""

    jobs: list[Job]
    covers: list[Job] = field(default_factory=list)
    sync: bool = True


def frame(root: str, done: Appended) -> bytes:
    """One append as the journal holds it (`root`: the squad's, ending with a separator)."""
    return encode(where_in(root, done.path), done.end, done.data)


@dataclass(frozen=True)
class _Full:
    """A journal past `checkpoint_bytes`, left to be retired: its fd (holding its lock), its
    path, and the files its frames cover."""

    fd: int | None
    path: Path | None
    touched: set[Path]


class JournalWriter:
    """One runtime's journal: opened (and locked: never replayed while this runtime lives)
    by `open`, written a batch at a time by `commit`, emptied at close."""

    def __init__(self, layout: SquadLayout, *, checkpoint_bytes: int, ahead_bytes: int):
        self.layout = layout
        self.checkpoint_bytes = checkpoint_bytes
        self.ahead_bytes = ahead_bytes
        self._root = str(layout.root) + os.sep
        self.fd: int | None = None
        self.path: Path | None = None
        self._size = 0
        """Bytes of frames in the journal: where the next batch's frames go."""
        self._ahead = 0
        """Bytes the journal holds, frames and the zeros past them (`_grow`)."""
        self._torn = False
        """A write failed part way: the journal may end inside a line, so the next write
        starts a new one (else replay could not parse its first line)."""
        self._touched: set[Path] = set()
        self._full: deque[_Full] = deque()
        """Full journals to retire (appended by the commit thread, retired by another)."""
        self.retire_due = False
        """A journal filled since the last retirement began: the next one is due. One that
        failed is tried again only then (or at close), not after every batch."""
        self.batches = 0
        """Batches committed (one journal sync each)."""
        self.unsynced_batches = 0
        """Batches of background appends written ahead of a sync."""

    def open(self) -> None:
        folder = private_dir(self.layout.transcript_journals_dir)
        for _attempt in range(_OPEN_ATTEMPTS):
            path = self.layout.transcript_journal(os.getpid(), secrets.token_hex(4))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         PRIVATE_FILE)
            # Until it is locked, a replay in another process may take the new file for an
            # ended runtime's and remove it: then this one is not the journal, and another is
            # made. Once locked (held while this runtime lives) it is never replayed.
            try:
                locked = files.lock_if_still_at(fd, path)
                if locked:
                    fsync_dir(folder)
            except BaseException:
                os.close(fd)
                raise
            if locked:
                self.fd, self.path = fd, path
                return
            os.close(fd)
        raise OSError(f"no transcript journal could be made in {folder}: each new one was "
                      "removed by a replay before it was locked")

    def commit(self, batch: Batch) -> None:
        """Append each job's records to its file and frame them in the journal, then (unless
        the batch has no sync) sync the journal once. A job whose append fails holds its
        error; when the journal fails, each file is synced by itself instead."""
        lines: list[bytes] = []
        appended: list[Job] = []
        for job in batch.jobs:
            try:
                job.appended = job.writer.append_unsynced()
            except Exception as exc:  # its session hears it (as a flush of its own would raise)
                job.error = exc
                continue
            if job.appended is not None:
                appended.append(job)
                lines.append(frame(self._root, job.appended))
        if not lines and not batch.covers:
            return
        try:
            self.write(b"".join(lines), sync=batch.sync)
        except OSError as exc:  # the journal failed: sync each file instead
            log.warning("journal not written; syncing transcripts one by one", error=str(exc))
            for job in (*appended, *batch.covers):
                try:
                    if job.appended is not None:
                        files.sync_file(job.appended.path, job.appended.created)
                except OSError as sync_error:
                    job.error = sync_error
            if not batch.sync:  # durable now: a sync to come need not cover them
                for job in appended:
                    job.appended = None
            return
        self._touched.update(job.appended.path for job in appended if job.appended is not None)
        if not batch.sync:  # the next batch's sync makes them durable, and may rotate then
            self.unsynced_batches += 1
            return
        self.batches += 1
        if self._size >= self.checkpoint_bytes:
            self._rotate()

    def write(self, data: bytes, *, sync: bool = True) -> None:
        """Append `data`'s frames to the journal, then (with `sync`) sync it: that makes every
        frame written before durable too."""
        if self.fd is None:
            raise OSError("the journal is closed")
        if self._torn:
            data = b"\n" + data
        if self._size + len(data) > self._ahead:
            self._grow(self.fd, self._size + len(data))
        self._torn = True
        written = 0
        try:
            while written < len(data):
                written += os.pwrite(self.fd, data[written:], self._size + written)
        finally:
            self._size += written
        self._torn = False
        if sync:
            _datasync(self.fd)

    def _grow(self, fd: int, end: int) -> None:
        """Write zeros from the journal's end to `ahead_bytes` past `end`, for the batches to
        come to write over (the sync of the batch that grows it makes the new size durable)."""
        target = end + self.ahead_bytes
        zeros = bytes(min(target - self._ahead, 1024 * 1024))
        while self._ahead < target:
            self._ahead += os.pwrite(fd, zeros[:target - self._ahead], self._ahead)

    def checkpoint(self) -> None:
        """Sync every file written since the last checkpoint, then empty the journal."""
        files.sync_all(self._touched, self.fd)
        self._touched.clear()
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.fsync(self.fd)
        self._size = self._ahead = 0

    def _rotate(self) -> None:
        """Carry on in a new journal and leave the full one to `retire`, off the commit
        path: syncing every file it covers takes long, and no session should wait for it.
        Without a new journal, the full one is checkpointed here."""
        full = _Full(self.fd, self.path, self._touched)
        self.fd = None
        try:
            self.open()
        except OSError as exc:
            log.warning("no new journal; checkpointing the full one in place", error=str(exc))
            self.fd, self.path = full.fd, full.path
            try:
                self.checkpoint()
            except OSError as checkpoint_error:  # it still holds it all: next batch tries again
                log.warning("journal checkpoint failed", error=str(checkpoint_error))
            return
        self._size, self._ahead, self._touched, self._torn = 0, 0, set(), False
        self._full.append(full)
        self.retire_due = True

    def retire(self) -> None:
        """Sync the files each full journal covers, then remove it. One that fails stays,
        locked, for the next try: when the next journal fills, or at close."""
        while self._full:
            full = self._full[0]
            try:
                files.sync_all(full.touched, full.fd)
                if full.path is not None:
                    full.path.unlink(missing_ok=True)
                    fsync_dir(full.path.parent)
            except OSError as exc:
                log.warning("full journal not retired; trying again later", error=str(exc))
                return
            self._full.popleft()
            if full.fd is not None:
                os.close(full.fd)  # after the unlink: its lock kept replays off it until then

    def close(self) -> None:
        """Retire the full journals, checkpoint this one and remove it. What fails is left
        (unlocked) for the next start to replay."""
        self.retire()
        while self._full:
            full = self._full.popleft()
            if full.fd is not None:
                os.close(full.fd)
        if self.fd is None:
            return
        try:
            self.checkpoint()
        except OSError as exc:  # left in place: the next start replays it
            log.warning("journal not checkpointed at close", error=str(exc))
            os.close(self.fd)
            self.fd = None
            return
        os.close(self.fd)
        self.fd = None
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
