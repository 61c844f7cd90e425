"""Group commit for the route path: many sessions' appends made durable by one fsync.

A runtime's sessions hand their pending transcript records to `GroupCommit.commit` and wait;
the orchestration log hands its entries the same way (`commit_all`, in the background: while
the thread is idle they are written a few at a time without a sync, and the sessions' next
batch makes them durable). The commit thread (`writer.py`) takes every append waiting as one
batch, appends each to its file, frames it in the runtime's journal and syncs the journal
once. Only then is anyone woken: no session advances, and no caller hears of an accepted
route, before its records are durable. Records a caller can go on without for a moment
(`begin`: the messages a model request carries, whose reply waits for them) ride the next
batch instead of making one.

The loop's side is one explicit state machine (`CommitState`):

    stopped → idle ⇄ gathering → syncing / writing ahead → idle | lingering → … → closed

A thread with nothing to do waits at a doorbell (a queue), where the loop puts the next batch;
a batch sent while the thread lands the one before goes through a bounded anyio memory object
stream. The thread lands a batch back on the loop through `anyio.from_thread`, and the same
call hands it the next batch when one waits: a commit costs one trip to that thread and back,
with no task between (a `from_thread.run` of the stream's `receive` would cost the loop a task
for each wait: about twice the CPU of the whole hand-over, measured with
`scripts/bench/group_commit.py`).
`flushed()` waits until everything submitted so far is durable; `reached()` until the machine
has been in a given state. After a crash, `replay.replay_journals` puts back what a journal
holds and its files lack.
"""

from __future__ import annotations

import concurrent.futures
import errno
import queue
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.lowlevel
import structlog
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from squadd.state.journal.states import AT_THREAD, RUNNING, CommitState, Pending
from squadd.state.journal.writer import Appender, Batch, Job, JournalWriter
from squadd.state.layout import SquadLayout

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


class GroupCommit:
    """One runtime's group-commit writer: `run()` it in a task group, `commit()` from sessions,
    `close()` to drain it. Without a running writer, `commit` syncs the writer by itself."""

    def __init__(self, layout: SquadLayout, *, checkpoint_bytes: int = CHECKPOINT_BYTES,
                 ahead_bytes: int = AHEAD_BYTES, timeout_s: float = COMMIT_TIMEOUT_S):
        self.layout = layout
        self.timeout_s = timeout_s
        """How long `commit`, `commit_all`, `finish` and `flushed` wait (`COMMIT_TIMEOUT_S`)."""
        self.journal = JournalWriter(layout, checkpoint_bytes=checkpoint_bytes,
                                     ahead_bytes=ahead_bytes)
        self.state = CommitState.STOPPED
        self._closing = False
        """`close()` was asked (or `run()` cancelled): what waits goes, nothing lingers."""
        self._queue: list[Job] = []
        """Waiting appends. Bounded by the callers: each session (and each route being
        accepted) waits for its commit before it queues another."""
        self._later: list[Job] = []
        """Waiting appends nobody's next step waits for (`commit_all(background=True)`): a
        batch takes at most `BACKGROUND_PER_BATCH` of them, so a burst of them never holds
        up sessions' records."""
        self._written: list[Job] = []
        """Background appends a batch without a sync wrote: the next sync makes them durable
        (and only then are they done)."""
        self._batch: Batch | None = None
        """The batch at the commit thread."""
        self._send: MemoryObjectSendStream[Batch] | None = None
        self._receive: MemoryObjectReceiveStream[Batch] | None = None
        self._doorbell: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        """Where a batch goes (on the loop) to a thread that waits for one: it takes the
        batch from here, with no trip to the loop (None: the writer is closed)."""
        self._thread_waits = True
        """The commit thread waits at the doorbell (not in a landing: that takes the next
        batch from the stream itself)."""
        self._nudge: anyio.Event | None = None
        """Wakes `run()`: a linger to time, a full journal to retire, a drain to finish."""
        self._watchers: list[tuple[tuple[CommitState, ...] | None, anyio.Event]] = []
        """Events set at the next change of state (or of a retirement), or when one of the
        states named is entered: `flushed`, `reached`, `retired`."""
        self._retiring = False

    @property
    def running(self) -> bool:
        return self.state in RUNNING

    @property
    def path(self) -> Path | None:
        """The journal being written (None before `run()` and after close)."""
        return self.journal.path

    @property
    def batches(self) -> int:
        """Batches committed (one journal sync each): for tests and benchmarks."""
        return self.journal.batches

    @property
    def unsynced_batches(self) -> int:
        """Batches of background appends written ahead of a sync: for tests and benchmarks."""
        return self.journal.unsynced_batches

    @property
    def checkpoint_bytes(self) -> int:
        return self.journal.checkpoint_bytes

    @checkpoint_bytes.setter
    def checkpoint_bytes(self, value: int) -> None:
        self.journal.checkpoint_bytes = value

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
        jobs = [Job(writer) if writer.pending else None for writer in writers]
        waiting = [job for job in jobs if job is not None]
        if not self.running:
            for job in waiting:
                await _flush_alone(job)
        elif waiting and background:  # they ride the next batch a session makes
            self._later.extend(waiting)
            self._send_or_linger()
        elif waiting:
            self._queue.extend(waiting)
            if self.state in (CommitState.IDLE, CommitState.LINGERING):
                # The commits that other tasks ready now make go along: they run before this
                # one is back from the checkpoint (one pass of the loop; nothing to wait for
                # when nobody else is ready).
                self._enter(CommitState.GATHERING)
                await anyio.lowlevel.cancel_shielded_checkpoint()
                if self.state in (CommitState.GATHERING,):  # (else a batch took it along)
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
        job = Job(writer, on_error=on_error, begun=True)
        if self.running:
            self._queue.append(job)
            if self.state is CommitState.IDLE:
                self._linger()
        return Pending(job)

    async def finish(self, pending: Pending) -> None:
        """Wait until the records `begin` took are durable (what writing them raised, when
        they could not be). Callers shield it from cancellation."""
        job = pending._job
        if job is None:
            return
        if not job.sent:
            job.begun = False  # asked for now: the landing of a batch in flight sends it
            if not self.running:  # begun after the writer stopped: sync them here
                await _flush_alone(job)
            elif self.state not in AT_THREAD:
                self._dispatch()
        error = await self._outcome(job, anyio.current_time() + self.timeout_s)
        if error is not None:
            raise error

    async def flushed(self, timeout_s: float | None = None) -> None:
        """Wait until everything submitted so far is durable (or has failed: its own caller
        hears why). It sends nothing itself: begun and written-ahead records still ride the
        batch they would have (at the latest `LINGER_S` on). A `TimeoutError` after
        `timeout_s` (default: `timeout_s` of the writer)."""
        batch = self._batch
        jobs = [*self._queue, *self._later, *self._written,
                *((*batch.jobs, *batch.covers) if batch is not None else ())]
        await self._wait(lambda: all(job.done.is_set() for job in jobs), timeout_s,
                         "records submitted not all durable")

    async def reached(self, *states: CommitState, timeout_s: float | None = None) -> None:
        """Wait until the machine is, or has been since this call, in one of `states`."""
        if self.state not in states:
            await self._wait(None, timeout_s, f"not {'/'.join(s.value for s in states)}",
                             states)

    async def retired(self, timeout_s: float | None = None) -> None:
        """Wait until no full journal is being retired or due to be (one that failed stays
        for the next journal to fill, or for the close)."""
        await self._wait(lambda: not (self._retiring or self.journal.retire_due), timeout_s,
                         "full journals not retired")

    async def _wait(self, done: Callable[[], bool] | None, timeout_s: float | None, what: str,
                    states: tuple[CommitState, ...] | None = None) -> None:
        """Wait until `done()` holds, checked at each change of state (with `states`: until
        the machine enters one of them)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        with anyio.move_on_after(timeout):
            while done is None or not done():
                changed = anyio.Event()
                self._watchers.append((states, changed))
                await changed.wait()
                if done is None:
                    return
            return
        raise TimeoutError(errno.ETIMEDOUT, f"{what} within {timeout:g} s under "
                                            f"{self.layout.root}")

    def _enter(self, state: CommitState) -> None:
        self.state = state
        if self._watchers:
            self._wake_watchers(state)

    def _wake_watchers(self, state: CommitState | None = None) -> None:
        """Wake those waiting for any change, and those waiting for `state`."""
        waiting, self._watchers = self._watchers, []
        for states, event in waiting:
            if states is None or state in states:
                event.set()
            else:
                self._watchers.append((states, event))

    def _send_or_linger(self) -> None:
        """With no batch at the thread: send what waits when a session's commit does (or
        the writer is closing: nobody lingers then); else write a few background appends
        ahead of their sync, while the thread is idle; else let what is begun or written
        wait for a ride."""
        if self.state in AT_THREAD:
            return
        if any(not job.begun for job in self._queue) or (self._closing and not self._drained):
            self._dispatch()
        elif self._later:
            self._dispatch(sync=False)
        elif self._queue or self._written:
            self._linger()
        elif self.state is not CommitState.GATHERING:
            self._enter(CommitState.IDLE)

    def _linger(self) -> None:
        """Have `run()` send what waits after `LINGER_S`, unless a batch takes it first."""
        if self.state is not CommitState.LINGERING:
            self._enter(CommitState.LINGERING)
            self._poke()

    def _poke(self) -> None:
        if self._nudge is not None:
            self._nudge.set()

    async def _outcome(self, job: Job, deadline: float) -> Exception | None:
        """What writing `job` raised (None: it is durable), once it is done; an `ETIMEDOUT`
        error of its own when it is not done by `deadline`."""
        if job.done.is_set():  # most begun records are durable by the time they are asked for
            return job.error
        with anyio.CancelScope(deadline=deadline):
            await job.done.wait()
            return job.error
        return OSError(errno.ETIMEDOUT, f"records not made durable within {self.timeout_s:g} s: "
                       f"the disk under {self.layout.root} does not answer")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the commit thread until `close()`; what is queued then is committed first. Full
        journals are retired from here, in worker threads, off the commit path."""
        await anyio.to_thread.run_sync(self.journal.open)
        self._send, self._receive = anyio.create_memory_object_stream[Batch](1)
        thread = threading.Thread(target=self._serve, name=COMMIT_THREAD, daemon=True,
                                  args=(anyio.lowlevel.current_token(),))
        self._nudge = nudge = anyio.Event()
        thread.start()
        self._enter(CommitState.IDLE)
        task_status.started()
        try:
            async with anyio.create_task_group() as retirements:
                while not (self._closing and self._drained):
                    await nudge.wait()
                    self._nudge = nudge = anyio.Event()
                    if self.journal.retire_due and not self._retiring:
                        self.journal.retire_due, self._retiring = False, True
                        retirements.start_soon(self._retire_full)
                    if self.state is CommitState.LINGERING and not self._closing:
                        await anyio.sleep(LINGER_S)
                        if self.state is CommitState.LINGERING:
                            self._dispatch()
        finally:
            with anyio.CancelScope(shield=True):
                # Cancelled or closed, what is queued still goes (records a linger held
                # too): the thread is sound.
                self._closing = True
                while not self._drained:
                    if self.state not in AT_THREAD:
                        self._dispatch()
                    await nudge.wait()
                    self._nudge = nudge = anyio.Event()
                self._enter(CommitState.CLOSED)  # from here, a commit syncs by itself
                self._send.close()
                self._doorbell.put(None)  # the thread waits there (drained): it ends
                await anyio.to_thread.run_sync(thread.join)
                self._nudge = None
                await anyio.to_thread.run_sync(self.journal.close)
                self._wake_watchers()

    @property
    def _drained(self) -> bool:
        return self.state not in AT_THREAD and not (self._queue or self._later or self._written)

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
        self._batch = batch = Batch(jobs, covers, sync)
        if self._thread_waits:
            self._thread_waits = False
            self._doorbell.put(batch)
        else:  # in a landing: it takes the batch from the stream as it returns
            assert self._send is not None
            self._send.send_nowait(batch)  # room for one: the one before has landed
        self._enter(CommitState.SYNCING if sync else CommitState.WRITING_AHEAD)

    def _landed(self, batch: Batch) -> Batch | None:
        """A batch is durable, or failed (on the loop): wake its callers, hand over the next
        (returned to the thread when one went out meanwhile). The jobs of a batch without a
        sync wait for the next one (unless they failed)."""
        for job in (*batch.jobs, *batch.covers):
            if not batch.sync and job.error is None:
                self._written.append(job)
                continue
            job.done.set()
            if job.error is not None and job.on_error is not None:
                job.on_error()
        self._batch = None
        self._enter(CommitState.IDLE)
        self._send_or_linger()
        if self.journal.retire_due or (self._closing and self._drained):
            self._poke()
        return self._next_batch()

    def _next_batch(self) -> Batch | None:
        """The batch sent to the thread, if one was (on the loop); else None, and the thread
        goes to wait at the doorbell."""
        assert self._receive is not None
        try:
            return self._receive.receive_nowait()
        except (anyio.WouldBlock, anyio.EndOfStream):  # (closed: the doorbell's None ends it)
            self._thread_waits = True
            return None

    def _serve(self, token: anyio.lowlevel.EventLoopToken) -> None:
        """The commit thread: commit each batch handed over, then land it on the loop."""
        batch: Batch | None = None
        while True:
            try:
                if batch is None:
                    batch = self._doorbell.get()
                    if batch is None:  # closed
                        return
                self._commit(batch)
                batch = anyio.from_thread.run_sync(self._landed, batch, token=token)
            except (anyio.RunFinishedError, concurrent.futures.CancelledError):
                return  # the loop is gone (and its waiters with it)
            except Exception:  # a bug on the loop's side: said, and the thread goes on
                log.exception("a committed batch could not be landed")
                try:
                    batch = anyio.from_thread.run_sync(self._next_batch, token=token)
                except anyio.RunFinishedError:
                    return

    def _commit(self, batch: Batch) -> None:
        try:
            self.journal.commit(batch)
        except BaseException as exc:  # a bug: its sessions hear it, the writer goes on
            # (nobody would hear a BaseException that ended this thread, and every later
            # commit would wait for it forever)
            log.exception("group commit failed")
            error = exc if isinstance(exc, Exception) else RuntimeError(
                f"the group commit failed: {exc!r}")
            for job in _all_jobs(batch):
                job.error = job.error or error

    async def _retire_full(self) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.journal.retire)
        finally:
            self._retiring = False
            if self.journal.retire_due:  # another filled meanwhile: its turn now
                self._poke()
            self._wake_watchers()

    def close(self) -> None:
        """Commit what is queued now, then let `run()` end (and remove the journal)."""
        self._closing = True
        self._poke()


def _all_jobs(batch: Batch) -> Iterable[Job]:
    return (*batch.jobs, *batch.covers)


async def _flush_alone(job: Job) -> None:
    job.sent = True
    try:
        await anyio.to_thread.run_sync(job.writer.flush)
    except Exception as exc:  # its session hears it
        job.error = exc
    job.done.set()
