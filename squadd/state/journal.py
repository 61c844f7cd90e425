"""Group commit for the route path: many sessions' appends made durable by one fsync.

A runtime's sessions hand their pending transcript records to `GroupCommit.commit` and wait;
the orchestration log hands its entries the same way (`commit_all`, in the background: while
the thread is idle they are written a few at a time without a sync, and the sessions' next
batch makes them durable). The writer's own thread takes every append waiting as one batch,
appends each to its file (no fsync there), writes the same bytes to this runtime's journal
(`run/transcripts/.journal/{pid}-{token}.log`, one frame per append, see `_frame`) and syncs
the journal once. The frames go over zeros the journal already holds (`AHEAD_BYTES` of them),
so that the sync flushes data only, not a new file size. Only then is anyone woken: no session
advances, and no caller hears of an accepted route, before its records are durable. Appends
that arrive while a batch is being written form the next batch, handed to the thread as the
batch before it lands: a commit costs one trip to that thread and back, with no task between.
Records a caller can go on without for a moment (`begin`: the messages a model request
carries, whose reply waits for them) ride the next batch instead of making one.

The files stay where and as they were (readers see the appended bytes at once: the journal
only makes them durable). A checkpoint (when the journal passes `CHECKPOINT_BYTES`, and at
close) makes every file written since the last one durable, and their folders (with one
`syncfs` where the system has it), then empties the journal; a clean close removes it. After
a crash, `replay_journals` (run before the sessions are recovered) appends to each transcript
or orchestration-log entry whatever tail of a journaled append it lacks (a power cut can lose
unsynced file data, a SIGKILL cannot), then syncs and deletes the journal. A journal is
replayed only when no process holds its lock: its owner is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import queue
import secrets
import stat
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskStatus

from squadd.errors import InvalidNameError, StateError
from squadd.fsio import PRIVATE_FILE, fsync_dir, private_dir, sync_file_system, write_all
from squadd.state.layout import JOURNAL_SUFFIX, SquadLayout, safe_id
from squadd.state.transcripts import Appended

log = structlog.get_logger("squadd.journal")

CHECKPOINT_BYTES = 8 * 1024 * 1024
"""Journal size past which the transcripts are synced and the journal emptied."""
AHEAD_BYTES = 1024 * 1024
"""Zeros a journal holds past its last frame. A batch writes its frames over bytes the file
already has, so its sync (`fdatasync`) flushes only data: the file's size, and with it a
commit of the file system's own journal, changes once per this many bytes, not per batch."""
BACKGROUND_PER_BATCH = 8
"""Background appends (orchestration-log entries) a batch takes at most."""
COMMIT_TIMEOUT_S = 120.0
"""How long a caller waits for its records to be made durable before it hears an error
(`ETIMEDOUT`): a disk that stops answering fails the sessions that wait on it, it does not
hang them. Records that land later are durable all the same, with nobody waiting."""
LINGER_S = 0.01
"""How long records begun with `begin` wait for another commit's batch to go with, before
they go by themselves (when nobody has asked for them with `finish` first)."""
COMMIT_THREAD = "squadd-commit"
"""The commit thread's name (profilers and benchmarks find it by it)."""
_OPEN_ATTEMPTS = 5
_FOLDERS = (("run", "transcripts"), ("sessions",))
"""Where a journaled transcript may live, relative to the squad root."""
_ORCHESTRATION = ("orchestration-log",)
"""Where a journaled orchestration-log entry lives, relative to the squad root."""

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


@dataclass
class _Job:
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


@dataclass
class _Batch:
    """What the commit thread is handed: jobs to append and frame in the journal, and (unless
    `sync` is False) one journal sync, which also makes the `covers` durable: jobs a batch
    without a sync wrote before."""

    jobs: list[_Job]
    covers: list[_Job] = field(default_factory=list)
    sync: bool = True


class Pending:
    """Records on their way to being durable (`GroupCommit.begin`): `GroupCommit.finish`
    waits for them."""

    __slots__ = ("_job",)

    def __init__(self, job: _Job | None):
        self._job = job


class GroupCommit:
    """One runtime's group-commit writer: `run()` it in a task group, `commit()` from sessions,
    `close()` to drain it. Without a running writer, `commit` syncs the writer by itself."""

    def __init__(self, layout: SquadLayout, *, checkpoint_bytes: int = CHECKPOINT_BYTES,
                 ahead_bytes: int = AHEAD_BYTES, timeout_s: float = COMMIT_TIMEOUT_S):
        self.layout = layout
        self.timeout_s = timeout_s
        """How long `commit`, `commit_all` and `finish` wait (see `COMMIT_TIMEOUT_S`)."""
        self._root = str(layout.root) + os.sep
        self.checkpoint_bytes = checkpoint_bytes
        self.ahead_bytes = ahead_bytes
        self._queue: list[_Job] = []
        """Waiting appends. Bounded by the callers: each session (and each route being
        accepted) waits for its commit before it queues another."""
        self._later: list[_Job] = []
        """Waiting appends nobody's next step waits for (`commit_all(background=True)`): a
        batch takes at most `BACKGROUND_PER_BATCH` of them, so a burst of them never holds
        up sessions' records."""
        self._inbox: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        """Batches for the commit thread (one at a time: the next is handed over when the one
        before lands); None ends it."""
        self._in_flight = False
        """A batch is with the commit thread, not landed yet."""
        self._written: list[_Job] = []
        """Background appends written to their files and framed in the journal by a batch
        without a sync, while the thread had nothing else to do: the next sync makes them
        durable (and only then are they done)."""
        self._gathering = False
        """A commit is letting the other ready tasks add theirs before it hands the batch
        over."""
        self._linger = False
        """Records from `begin` wait for a batch to go with: `run()` sends them after
        `LINGER_S` if none has."""
        self._accepting = False
        """The commit thread takes batches (from `run()`'s start until it is drained)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop a committed batch is handed back to, from the commit thread, without
        waiting: the thread goes back to its queue at once (squadd runs on asyncio, or on
        uvloop, which is asyncio's)."""
        self._nudge: anyio.Event | None = None
        """Wakes `run()`: a full journal to retire, or a close with nothing left in flight."""
        self._closing = False
        self._fd: int | None = None
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
        self._rotated = False
        """A journal filled since the last retirement began: the next one is due. One that
        failed is tried again only then (or at close), not after every batch."""
        self._retiring = False
        self.batches = 0
        """Batches committed (one journal sync each): for tests and benchmarks."""
        self.unsynced_batches = 0
        """Batches of background appends written ahead of a sync: for tests and benchmarks."""

    @property
    def running(self) -> bool:
        return self._accepting

    async def commit(self, writer: Appender) -> None:
        """Make `writer`'s pending records durable, batched with other sessions' (what writing
        them raised, e.g. `OSError`, when they could not be). Callers shield it from
        cancellation."""
        [error] = await self.commit_all([writer])
        if error is not None:
            raise error

    async def commit_all(self, writers: list[Appender], *,
                         background: bool = False) -> list[Exception | None]:
        """Make each writer's pending records durable, in one batch (handed to the commit
        thread at once when it is idle, else when the batch in hand lands); what writing each
        raised (None: it is durable). Callers shield it from cancellation, and bound how many
        they hand over at once. `background` appends (the orchestration log's, which nobody's
        next step waits for) ride the next batch a session makes, at the latest `LINGER_S`
        from now, after every session's and a few a batch."""
        jobs = [_Job(writer) if writer.pending else None for writer in writers]
        waiting = [job for job in jobs if job is not None]
        if not self._accepting:
            for job in waiting:
                await _flush_alone(job)
        elif waiting and background:  # they ride the next batch a session makes
            self._later.extend(waiting)
            self._send_or_linger()
        elif waiting:
            self._queue.extend(waiting)
            if not (self._in_flight or self._gathering):
                # The commits that other tasks ready now make go along: they run before this
                # one is back from the checkpoint (one pass of the loop; nothing to wait for
                # when nobody else is ready).
                self._gathering = True
                try:
                    await anyio.lowlevel.cancel_shielded_checkpoint()
                finally:
                    self._gathering = False
                if not self._in_flight and (self._queue or self._later):
                    self._dispatch()
        deadline = anyio.current_time() + self.timeout_s
        return [None if job is None else await self._outcome(job, deadline) for job in jobs]

    def begin(self, writer: Appender, *,
              on_error: Callable[[], None] | None = None) -> Pending:
        """Queue `writer`'s pending records without waiting for them: they go with the next
        batch another commit makes, at the latest `LINGER_S` from now, or at once when
        `finish` asks for them. For records a caller may go on without for a moment (the
        messages a model request carries: the reply waits for them), so that they cost no
        batch of their own. `on_error` is called (on the loop) as soon as writing them has
        failed, e.g. to cancel what was started meanwhile."""
        if not writer.pending:
            return Pending(None)
        job = _Job(writer, on_error=on_error, begun=True)
        if self._accepting:
            self._queue.append(job)
            self._start_linger()
        return Pending(job)

    def _send_or_linger(self) -> None:
        """With no batch in hand: send what waits when a session's commit does (or the writer
        is closing: nobody lingers then); else write a few background appends ahead of their
        sync, while the thread is idle; else let what is begun or written wait for a ride."""
        if self._in_flight:
            return
        if any(not job.begun for job in self._queue) or (self._closing and not self._idle):
            self._dispatch()
        elif self._later:
            self._dispatch(sync=False)
        elif self._queue or self._written:
            self._start_linger()

    def _start_linger(self) -> None:
        """Have `run()` send what waits after `LINGER_S`, unless a batch takes it first."""
        if not self._in_flight and not self._linger and self._nudge is not None:
            self._linger = True
            self._nudge.set()

    async def finish(self, pending: Pending) -> None:
        """Wait until the records `begin` took are durable (what writing them raised, when
        they could not be). Callers shield it from cancellation."""
        job = pending._job
        if job is None:
            return
        if not job.sent:
            job.begun = False  # asked for now: the landing of a batch in flight sends it
            if not self._accepting:  # begun after the writer stopped: sync them here
                await _flush_alone(job)
            elif not self._in_flight:
                self._dispatch()
        error = await self._outcome(job, anyio.current_time() + self.timeout_s)
        if error is not None:
            raise error

    async def _outcome(self, job: _Job, deadline: float) -> Exception | None:
        """What writing `job` raised (None: it is durable), once it is done; an `ETIMEDOUT`
        error of its own when it is not done by `deadline`."""
        with anyio.CancelScope(deadline=deadline):
            await job.done.wait()
            return job.error
        return OSError(errno.ETIMEDOUT, f"records not made durable within {self.timeout_s:g} s: "
                       f"the disk under {self.layout.root} does not answer")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the commit thread until `close()`; what is queued then is committed first. Full
        journals are retired from here, in worker threads, off the commit path."""
        await anyio.to_thread.run_sync(self._open)
        self._loop = asyncio.get_running_loop()
        self._nudge = nudge = anyio.Event()
        thread = threading.Thread(target=self._serve, name=COMMIT_THREAD, daemon=True)
        thread.start()
        self._accepting = True
        task_status.started()
        try:
            async with anyio.create_task_group() as retirements:
                while not (self._closing and self._idle):
                    await nudge.wait()
                    self._nudge = nudge = anyio.Event()
                    if self._rotated and not self._retiring:
                        self._rotated, self._retiring = False, True
                        retirements.start_soon(self._retire_full)
                    if self._linger:
                        await anyio.sleep(LINGER_S)
                        self._linger = False
                        if not self._in_flight and not self._idle:
                            self._dispatch()
        finally:
            with anyio.CancelScope(shield=True):
                # Cancelled or closed, what is queued still goes (records a linger held
                # too): the thread is sound.
                self._closing = True
                while not self._idle:
                    if not self._in_flight:
                        self._dispatch()
                    await nudge.wait()
                    self._nudge = nudge = anyio.Event()
                self._accepting = False  # from here, a commit syncs its writer by itself
                self._inbox.put(None)
                await anyio.to_thread.run_sync(thread.join)
                self._nudge = None
                await anyio.to_thread.run_sync(self._close_journal)

    @property
    def _idle(self) -> bool:
        return not (self._in_flight or self._queue or self._later or self._written)

    def _dispatch(self, *, sync: bool = True) -> None:
        """Hand what waits to the commit thread as one batch (on the loop): the sessions'
        records and a few background appends, with a sync that also covers the appends
        written before; or (`sync=False`) only a few background appends, written ahead."""
        jobs = [*self._queue, *self._later[:BACKGROUND_PER_BATCH]] if sync \
            else self._later[:BACKGROUND_PER_BATCH]
        if sync:
            self._queue = []
        self._later = self._later[BACKGROUND_PER_BATCH:]
        for job in jobs:
            job.sent = True
        covers, self._written = (self._written, []) if sync else ([], self._written)
        self._in_flight = True
        self._inbox.put(_Batch(jobs, covers, sync))

    def _landed(self, batch: _Batch) -> None:
        """A batch is durable, or failed (on the loop): wake its callers, hand over the next.
        The jobs of a batch without a sync wait for the next one (unless they failed)."""
        for job in (*batch.jobs, *batch.covers):
            if not batch.sync and job.error is None:
                self._written.append(job)
                continue
            job.done.set()
            if job.error is not None and job.on_error is not None:
                job.on_error()
        self._in_flight = False
        self._send_or_linger()
        if self._nudge is not None and (self._rotated or (self._closing and self._idle)):
            self._nudge.set()

    def _serve(self) -> None:
        """The commit thread: commit each batch handed over, then land it on the loop."""
        while (batch := self._inbox.get()) is not None:
            try:
                self._commit(batch)
            except BaseException as exc:  # a bug: its sessions hear it, the writer goes on
                # (nobody would hear a BaseException that ended this thread, and every later
                # commit would wait for it forever)
                log.exception("group commit failed")
                error = exc if isinstance(exc, Exception) else RuntimeError(
                    f"the group commit failed: {exc!r}")
                for job in (*batch.jobs, *batch.covers):
                    job.error = job.error or error
            try:
                if self._loop is not None:
                    self._loop.call_soon_threadsafe(self._landed, batch)
            except RuntimeError:  # the loop is gone, and its waiters with it
                return

    async def _retire_full(self) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._retire)
        finally:
            self._retiring = False

    def close(self) -> None:
        """Commit what is queued now, then let `run()` end (and remove the journal)."""
        self._closing = True
        if self._nudge is not None:
            self._nudge.set()

    # Blocking parts, in worker threads.
    def _open(self) -> None:
        folder = private_dir(self.layout.transcript_journals_dir)
        for _attempt in range(_OPEN_ATTEMPTS):
            path = self.layout.transcript_journal(os.getpid(), secrets.token_hex(4))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                         PRIVATE_FILE)
            # Until it is locked, a replay in another process may take the new file for an
            # ended runtime's and remove it: then this one is not the journal, and another is
            # made. Once locked (held while this runtime lives) it is never replayed.
            try:
                locked = _lock_if_still_at(fd, path)
                if locked:
                    fsync_dir(folder)
            except BaseException:
                os.close(fd)
                raise
            if locked:
                self._fd, self.path = fd, path
                return
            os.close(fd)
        raise OSError(f"no transcript journal could be made in {folder}: each new one was "
                      "removed by a replay before it was locked")

    def _commit(self, batch: _Batch) -> None:
        lines: list[bytes] = []
        appended: list[_Job] = []
        for job in batch.jobs:
            try:
                job.appended = job.writer.append_unsynced()
            except Exception as exc:  # its session hears it (as a flush of its own would raise)
                job.error = exc
                continue
            if job.appended is not None:
                appended.append(job)
                lines.append(_frame(self._root, job.appended))
        if not lines and not batch.covers:
            return
        try:
            self._journal(b"".join(lines), sync=batch.sync)
        except OSError as exc:  # the journal failed: sync each file instead
            log.warning("journal not written; syncing transcripts one by one", error=str(exc))
            for job in (*appended, *batch.covers):
                try:
                    if job.appended is not None:
                        _sync_file(job.appended.path, job.appended.created)
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

    def _rotate(self) -> None:
        """Carry on in a new journal and leave the full one to `_retire`, off the commit
        path: syncing every file it covers takes long, and no session should wait for it.
        Without a new journal, the full one is checkpointed here."""
        full = _Full(self._fd, self.path, self._touched)
        self._fd = None
        try:
            self._open()
        except OSError as exc:
            log.warning("no new journal; checkpointing the full one in place", error=str(exc))
            self._fd, self.path = full.fd, full.path
            try:
                self._checkpoint()
            except OSError as checkpoint_error:  # it still holds it all: next batch tries again
                log.warning("journal checkpoint failed", error=str(checkpoint_error))
            return
        self._size, self._ahead, self._touched, self._torn = 0, 0, set(), False
        self._full.append(full)
        self._rotated = True

    def _retire(self) -> None:
        """Sync the files each full journal covers, then remove it (blocking). One that fails
        stays, locked, for the next try: when the next journal fills, or at close."""
        while self._full:
            full = self._full[0]
            try:
                _sync_all(full.touched, full.fd)
                if full.path is not None:
                    full.path.unlink(missing_ok=True)
                    fsync_dir(full.path.parent)
            except OSError as exc:
                log.warning("full journal not retired; trying again later", error=str(exc))
                return
            self._full.popleft()
            if full.fd is not None:
                os.close(full.fd)  # after the unlink: its lock kept replays off it until then

    def _journal(self, data: bytes, *, sync: bool = True) -> None:
        """Append `data`'s frames to the journal, then (with `sync`) sync it: that makes every
        frame written before durable too."""
        if self._fd is None:
            raise OSError("the journal is closed")
        if self._torn:
            data = b"\n" + data
        if self._size + len(data) > self._ahead:
            self._grow(self._fd, self._size + len(data))
        self._torn = True
        written = 0
        try:
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], self._size + written)
        finally:
            self._size += written
        self._torn = False
        if sync:
            _datasync(self._fd)

    def _grow(self, fd: int, end: int) -> None:
        """Write zeros from the journal's end to `ahead_bytes` past `end`, for the batches to
        come to write over (the sync of the batch that grows it makes the new size durable)."""
        target = end + self.ahead_bytes
        zeros = bytes(min(target - self._ahead, 1024 * 1024))
        while self._ahead < target:
            self._ahead += os.pwrite(fd, zeros[:target - self._ahead], self._ahead)

    def _checkpoint(self) -> None:
        """Sync every file written since the last checkpoint, then empty the journal."""
        _sync_all(self._touched, self._fd)
        self._touched.clear()
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.fsync(self._fd)
        self._size = self._ahead = 0

    def _close_journal(self) -> None:
        self._retire()
        while self._full:  # not retired: left (unlocked) for the next start to replay
            full = self._full.popleft()
            if full.fd is not None:
                os.close(full.fd)
        if self._fd is None:
            return
        try:
            self._checkpoint()
        except OSError as exc:  # left in place: the next start replays it
            log.warning("journal not checkpointed at close", error=str(exc))
            os.close(self._fd)
            self._fd = None
            return
        os.close(self._fd)
        self._fd = None
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


@dataclass(frozen=True)
class _Full:
    """A journal past `checkpoint_bytes`, left to be retired: its fd (holding its lock), its
    path, and the files its lines cover."""

    fd: int | None
    path: Path | None
    touched: set[Path]


def _sync_all(paths: set[Path], journal_fd: int | None = None) -> None:
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
            _sync_file(path, created=False)
        folders.add(path.parent)
    for folder in folders:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(folder)


def _device(folder: Path) -> int | None:
    try:
        return folder.stat().st_dev
    except FileNotFoundError:  # gone, and its files with it
        return None


def _lock_if_still_at(fd: int, path: Path) -> bool:
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


async def _flush_alone(job: _Job) -> None:
    job.sent = True
    try:
        await anyio.to_thread.run_sync(job.writer.flush)
    except Exception as exc:  # its session hears it
        job.error = exc
    job.done.set()


def _sync_file(path: Path, created: bool) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def _frame(root: str, done: Appended) -> bytes:
    """One append as the journal holds it: a JSON header line naming the file (its path in
    the squad), the offset the bytes end at, their length and their CRC-32, then the bytes
    themselves and a newline. The bytes go in as they are (a JSON string would escape them
    all a second time); the length and the checksum let a replay tell a whole frame from a
    torn one, and find the next header after it."""
    path = str(done.path)
    where = path[len(root):] if path.startswith(root) else os.path.relpath(path, root[:-1])
    header = (f'{{"t":{json.dumps(where, ensure_ascii=False)},"end":{done.end},'
              f'"n":{len(done.data)},"crc":{zlib.crc32(done.data)}}}\n')
    return b"".join((header.encode("utf-8"), done.data, b"\n"))


def _frames(blob: bytes) -> Iterator[tuple[object, object, bytes]]:
    """The (file, end offset, bytes) of each whole append in a journal's bytes.

    A frame whose bytes are short or fail their checksum (a torn write, with the fence the
    next write put after it) is skipped, and reading goes on at the next line. A line of the
    form older versions wrote, ``{"t": ..., "end": ..., "data": "<the bytes as text>"}``, is
    read too, so a journal such a version left is still replayed."""
    position = 0
    while position < len(blob):
        newline = blob.find(b"\n", position)
        if newline < 0:
            newline = len(blob)
        try:
            header = json.loads(blob[position:newline])
        except (ValueError, UnicodeDecodeError):
            header = None
        position = newline + 1
        if not isinstance(header, dict) or "t" not in header or "end" not in header:
            continue  # a torn header, or a line of a torn frame's bytes
        if "data" in header:
            if isinstance(header["data"], str):
                yield header["t"], header["end"], header["data"].encode("utf-8")
            continue
        length, crc = header.get("n"), header.get("crc")
        if not isinstance(length, int) or not isinstance(crc, int) or length < 0:
            continue
        data = blob[position:position + length]
        if len(data) == length and blob[position + length:position + length + 1] == b"\n" \
                and zlib.crc32(data) == crc:
            yield header["t"], header["end"], data
            position += length + 1


@dataclass
class Replayed:
    journals: int = 0
    """Journals of ended runtimes read (and removed)."""
    restored: list[str] = field(default_factory=list)
    """Transcripts (paths in the squad) that lacked journaled bytes and got them back."""


def replay_journals(layout: SquadLayout) -> Replayed:
    """Restore what ended runtimes' journals hold and their transcripts lack (blocking).

    All their lines are applied together, each transcript's in the order of its offsets: a
    transcript one runtime wrote and another continued has its appends in two journals, and
    the later one's cannot be put back before the earlier one's."""
    replayed = Replayed()
    folder = layout.transcript_journals_dir
    try:
        names = sorted(entry.name for entry in os.scandir(folder)
                       if entry.name.endswith(JOURNAL_SUFFIX))
    except FileNotFoundError:
        return replayed
    held: list[tuple[str, int]] = []
    """Journals of ended runtimes, locked until they are replayed and removed."""
    try:
        frames: list[tuple[object, object, bytes]] = []
        for name in names:
            fd = _ended_journal(folder / name)
            if fd is None:
                continue
            try:
                with os.fdopen(os.dup(fd), "rb") as handle:
                    # the zeros past the last frame are room its runtime never used
                    frames.extend(_frames(handle.read().rstrip(b"\0")))
            except OSError as exc:  # left in place; the daemon still starts
                log.warning("transcript journal not replayed", journal=name, error=str(exc))
                os.close(fd)
                continue
            held.append((name, fd))
        if not held:
            return replayed
        try:
            replayed.restored = _replay(layout, frames)
            for name, _fd in held:
                (folder / name).unlink()
        except OSError as exc:  # what is left is replayed at the next start
            log.warning("transcript journals not replayed", journals=[n for n, _ in held],
                        error=str(exc))
            return replayed
    finally:
        for _name, fd in held:
            os.close(fd)
    replayed.journals = len(held)
    fsync_dir(folder)
    log.info("transcript journals replayed", journals=replayed.journals,
             restored=len(replayed.restored))
    return replayed


def _ended_journal(path: Path) -> int | None:
    """`path` opened and locked if it is a journal no live runtime holds; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # e.g. a link (never ours): left alone
        log.warning("transcript journal not replayed", journal=path.name, error=str(exc))
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # its runtime is alive
        os.close(fd)
        return None
    return fd


@dataclass(frozen=True)
class _Line:
    where: str
    target: Path
    start: int
    data: bytes


def _replay(layout: SquadLayout, frames: list[tuple[object, object, bytes]]) -> list[str]:
    lines: list[_Line] = []
    for where, end, data in frames:
        if not isinstance(end, int) or isinstance(end, bool) or not isinstance(where, str):
            continue  # not one of ours
        target = _journaled_at(layout, where)
        if target is not None and end >= len(data):  # else not one of ours
            lines.append(_Line(where, target, end - len(data), data))
    lines.sort(key=lambda line: (line.where, line.start))
    restored: dict[str, Path] = {}
    failed: dict[str, OSError] = {}
    """Files a line could not be put back into: their later lines wait for the next replay,
    and the other files go on (an orchestration-log folder that became a file must not keep
    every transcript from being restored)."""
    try:
        for line in lines:
            if line.where in failed:
                continue
            try:
                if _restore(line):
                    restored[line.where] = line.target
            except OSError as exc:
                failed[line.where] = exc
    finally:  # what was put back is durable even when a later line fails: a replay next time
        for target in restored.values():  # finds it whole, and so neither writes nor syncs it
            _sync_file(target, created=True)
    if failed:  # the journals stay for the next start
        where, error = next(iter(failed.items()))
        raise OSError(error.errno, f"{where} not restored: {error.strerror or error}") from error
    return list(restored)


def _restore(line: _Line) -> bool:
    """Append the part of `line` its transcript lacks; False when it lacks none (or cannot
    take it: it is not a file, it lacks more than this line, or what it holds of the line's
    place is not the line)."""
    end = line.start + len(line.data)
    try:
        found = os.lstat(line.target)
    except FileNotFoundError:
        size = 0
    else:
        if not stat.S_ISREG(found.st_mode):  # a link or a folder: never written through
            log.warning("journaled transcript is not a file; left alone", path=line.where)
            return False
        size = found.st_size
    if size >= end:  # the transcript has it all
        return False
    if size < line.start:
        log.warning("transcript shorter than its journal says; left alone", path=line.where,
                    size=size, journaled_from=line.start)
        return False
    if not line.target.parent.is_dir():
        private_dir(line.target.parent)
    fd = os.open(line.target, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW,
                 PRIVATE_FILE)
    try:
        # The part it holds must be this line's: after a replay that failed, recovery may
        # have appended its own record where the lost bytes were.
        held = line.data[:size - line.start]
        if held and os.pread(fd, len(held), line.start) != held:
            log.warning("transcript was written past its journaled bytes; left alone",
                        path=line.where)
            return False
        write_all(fd, line.data[size - line.start:])
    finally:
        os.close(fd)
    return True


def _journaled_at(layout: SquadLayout, where: object) -> Path | None:
    """The file a journal line names, if it is one the journal writes: a transcript (a
    `{id}.jsonl` directly inside `run/transcripts/` or `sessions/`) or an orchestration-log
    entry (`orchestration-log/{stamp}-{agent}.md`). Nothing else is ever written from a
    journal."""
    if not isinstance(where, str):
        return None
    *folder, name = Path(where).parts or ("",)
    if tuple(folder) == _ORCHESTRATION and name.endswith(".md"):
        stamp, _, agent = name.removesuffix(".md").partition("-")
        try:
            target = layout.orchestration_log(stamp, agent)
        except StateError:  # not a name squadd writes there, or the folder leads outside
            return None
        return target if target.name == name else None
    if tuple(folder) not in _FOLDERS or not name.endswith(".jsonl"):
        return None
    try:
        safe_id(name.removesuffix(".jsonl"))
    except InvalidNameError:
        return None
    base = layout.transcripts_dir if tuple(folder) == _FOLDERS[0] \
        else layout.legacy_transcripts_dir
    return base / name
