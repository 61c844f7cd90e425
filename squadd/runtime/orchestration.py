"""The orchestration log: `.squad/orchestration-log/{ts}-{agent}.md`, one file per routed task.

Entries follow Squad's orchestration-log template: a `### {timestamp} — {task summary}` heading
and a `| Field | Value |` table. When the task's session is spawned its file is written
with the rows known then (Agent routed, Why chosen, Mode, Why this mode, Requested by, Priority,
Model, Session, Spawned at, Task). When the task ends the rows Completed at, Duration, Tokens
and Outcome are appended to the same table; a file without an Outcome row is a task still
running (or cut off by a crash). A writer task does this disk work off the route's path,
gathering entries for a moment; a task whose spawn and end are both still pending is written
once, whole. The backlog is bounded: past it, a route writes its own entry.

With the runtime's group commit (`squadd.state.journal`) an entry is written straight to its
file and made durable by the journal's one sync for the batch, beside the transcripts' records
(a journal replay puts back what a power cut took). Without it, each batch is its own group
commit: new files written atomically (temp file, fsync, rename), outcomes appended and fsynced.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import anyio
import structlog
from anyio.abc import TaskStatus

from squadd.errors import StateError
from squadd.fsio import TEAM_FILE, fsync_dir, write_all
from squadd.state.journal import GroupCommit
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Appended, SpareFiles, open_new

log = structlog.get_logger("squadd.orchestration")

_TASK_LIMIT = 4000
Key = tuple[str, str]


@dataclass(frozen=True)
class OrchestrationEntry:
    stamp: str
    """The `{ts}` of the file name: unique and growing within a process."""
    agent: str
    session_id: str
    task: str
    requested_by: str
    priority: str
    model: str
    started_at: dt.datetime
    role: str = ""
    routed_by: str = ""
    """How the agent was chosen: explicit, mention, rules or session."""
    mode: str = "sync"
    """`sync` when the caller waits for the answer, `background` when it collects it later."""
    outcome: str = "running"
    error: str | None = None
    duration_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def key(self) -> Key:
        return (self.stamp, self.agent)

    @property
    def has_ended(self) -> bool:
        return self.outcome != "running"

    def ended(self, outcome: str, *, error: str | None, duration_s: float,
              input_tokens: int, output_tokens: int) -> OrchestrationEntry:
        return replace(self, outcome=outcome, error=error, duration_s=duration_s,
                       input_tokens=input_tokens, output_tokens=output_tokens)


_WHY_CHOSEN = {
    "explicit": "named by the caller",
    "mention": "an @mention in the task",
    "rules": "matched a row of routing.md",
    "session": "continues its own session",
}
_WHY_MODE = {
    "sync": "the caller waits for the answer",
    "background": "the caller collects the answer later (squad_status)",
}
_OUTCOMES = {"completed": "Completed", "error": "Failed", "interrupted": "Interrupted",
             "cancelled": "Cancelled"}


def cell(text: str) -> str:
    """`text` as one table cell: pipes escaped, line breaks as `<br>`."""
    lines = text.strip().replace("\r\n", "\n").replace("|", "\\|").split("\n")
    return "<br>".join(line.rstrip() for line in lines) or "-"


def _row(field: str, value: str) -> str:
    return f"| **{field}** | {value} |\n"


def render_spawn(entry: OrchestrationEntry) -> str:
    """What is known at spawn: the heading and the table's first rows, the task in full
    (bounded). The text ends with a table row, so the outcome rows continue the table."""
    summary = " ".join(entry.task.split())[:120] or "(no task)"
    task = entry.task.strip()
    if len(task) > _TASK_LIMIT:
        task = task[:_TASK_LIMIT] + f"\n[{len(task) - _TASK_LIMIT} more characters cut]"
    agent = f"{entry.agent} ({cell(entry.role)})" if entry.role else entry.agent
    return (
        f"### {entry.started_at.isoformat(timespec='milliseconds')} — {cell(summary)}\n\n"
        "| Field | Value |\n|-------|-------|\n"
        + _row("Agent routed", agent)
        + _row("Why chosen", _WHY_CHOSEN.get(entry.routed_by, entry.routed_by or "-"))
        + _row("Mode", f"`{entry.mode}`")
        + _row("Why this mode", _WHY_MODE.get(entry.mode, "-"))
        + _row("Requested by", cell(entry.requested_by))
        + _row("Priority", entry.priority)
        + _row("Model", cell(entry.model or "provider default"))
        + _row("Session", entry.session_id)
        + _row("Spawned at", entry.started_at.isoformat(timespec="milliseconds"))
        + _row("Task", cell(task))
    )


def render_outcome(entry: OrchestrationEntry) -> str:
    """The rows appended to the table when the task ends."""
    outcome = _OUTCOMES.get(entry.outcome, entry.outcome)
    if entry.error is not None:
        outcome = f"{outcome}: {cell(entry.error)}"
    if entry.duration_s is None:
        completed = duration_min = duration_s = "-"
    else:
        done = entry.started_at + dt.timedelta(seconds=entry.duration_s)
        completed = done.isoformat(timespec="milliseconds")
        duration_min = f"{entry.duration_s / 60:.1f}"
        duration_s = f"{entry.duration_s:.3f}"
    return (
        _row("Completed at", completed)
        + _row("Duration (min)", duration_min)
        + _row("Duration (s)", duration_s)
        + _row("Tokens", f"{entry.input_tokens} in, {entry.output_tokens} out")
        + _row("Outcome", outcome)
    )


def render(entry: OrchestrationEntry) -> str:
    """The whole file as it reads once the entry is written (and, if ended, completed)."""
    return render_spawn(entry) + (render_outcome(entry) if entry.has_ended else "")


class _Batch:
    """One group commit: files staged and appended first, then every fd synced."""

    def __init__(self, layout: SquadLayout):
        self.layout = layout
        self.renames: list[tuple[int, Path, Path, OrchestrationEntry]] = []
        self.appends: list[tuple[int, OrchestrationEntry]] = []

    def stage(self, entry: OrchestrationEntry) -> None:
        """Write the whole entry to a temp file beside its target."""
        try:
            target = self.layout.orchestration_log(entry.stamp, entry.agent)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=target.parent)
        except (OSError, StateError) as exc:
            _lost(entry, exc)
            return
        try:
            write_all(fd, render(entry).encode("utf-8"))
            os.fchmod(fd, TEAM_FILE)
        except OSError as exc:
            os.close(fd)
            Path(name).unlink(missing_ok=True)
            _lost(entry, exc)
            return
        self.renames.append((fd, Path(name), target, entry))

    def append(self, entry: OrchestrationEntry) -> None:
        """Append the outcome to a file written at spawn (or write it whole if it is gone)."""
        try:
            target = self.layout.orchestration_log(entry.stamp, entry.agent)
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        except FileNotFoundError:
            self.stage(entry)
            return
        except (OSError, StateError) as exc:
            _lost(entry, exc)
            return
        try:
            write_all(fd, render_outcome(entry).encode("utf-8"))
        except OSError as exc:
            os.close(fd)
            _lost(entry, exc)
            return
        self.appends.append((fd, entry))

    def commit(self) -> None:
        folders: set[Path] = set()
        for fd, entry in self.appends:
            try:
                os.fsync(fd)
            except OSError as exc:
                _lost(entry, exc)
            finally:
                os.close(fd)
        for fd, tmp, target, entry in self.renames:
            try:
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, target)
                folders.add(target.parent)
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                _lost(entry, exc)
        for folder in folders:
            try:
                fsync_dir(folder)
            except OSError as exc:
                log.warning("orchestration log folder not synced", folder=str(folder),
                            error=str(exc))


def _write(layout: SquadLayout, whole: list[OrchestrationEntry],
           outcomes: list[OrchestrationEntry]) -> None:
    """Write `whole` entries atomically and append the `outcomes`, as one group commit.

    Blocking (paths are checked on disk): call it in a worker thread.
    """
    batch = _Batch(layout)
    for entry in whole:
        batch.stage(entry)
    for entry in outcomes:
        batch.append(entry)
    batch.commit()


class _EntryFile:
    """One entry for the group commit: a new file written whole, or an outcome appended to
    the file written at spawn (whole if that file is gone). The journal's sync makes it
    durable; `flush` (a group commit that is not running) writes it by itself, as `_write`."""

    def __init__(self, layout: SquadLayout, entry: OrchestrationEntry, *, whole: bool,
                 spares: SpareFiles | None = None):
        self.layout = layout
        self.entry = entry
        self.whole = whole
        self.spares = spares
        """Empty files made ahead: a new entry's file is one of them, moved into place."""
        self._done = False

    @property
    def pending(self) -> int:
        return 0 if self._done else 1

    def flush(self) -> None:
        self._done = True
        _write(self.layout, [self.entry] if self.whole else [],
               [] if self.whole else [self.entry])

    def append_unsynced(self) -> Appended | None:
        self._done = True
        target = self.layout.orchestration_entry(self.entry.stamp, self.entry.agent)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC  # the name itself was not checked
        fd: int | None = None
        if not self.whole:
            with contextlib.suppress(FileNotFoundError):
                fd = os.open(target, flags | os.O_APPEND)
        text = render_outcome(self.entry) if fd is not None else render(self.entry)
        if fd is None:  # a stamp is this process's own: the file is new
            fd = open_new(target, flags, self.spares, mode=TEAM_FILE)
            created = True
        else:
            created = False
        data = text.encode("utf-8")
        try:
            write_all(fd, data)
            end = len(data) if created else os.lseek(fd, 0, os.SEEK_CUR)  # a new file: empty
        except OSError:
            if created:  # never leave half an entry in a new file
                target.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return Appended(target, end, data, created)


def _lost(entry: OrchestrationEntry, exc: Exception) -> None:
    # a full disk must not take a route down with it: the transcript still has everything
    log.warning("orchestration log not written", stamp=entry.stamp, agent=entry.agent,
                error=str(exc))


class OrchestrationLog:
    """Writes orchestration entries; run `run()` in a task group and `close()` to drain it."""

    def __init__(self, layout: SquadLayout, *, commits: GroupCommit | None = None,
                 spares: SpareFiles | None = None, backlog: int = 1024, linger_s: float = 0.05):
        self.layout = layout
        self.commits = commits
        """The runtime's group commit, when it has one (entries then share its journal)."""
        self.spares = spares
        """Files made ahead, which new entries written through `commits` are moved into."""
        self.backlog = backlog
        self.linger_s = linger_s
        """How long the writer gathers entries before a batch (unless it is closing)."""
        self._pending: dict[Key, OrchestrationEntry] = {}
        self._spawned: set[Key] = set()
        """Entries whose spawn is on disk and whose outcome is still to be appended."""
        self._in_flight: set[Key] = set()
        """Entries of the batch being written: a later version of one always waits for it
        (written inline past the backlog, it could race it to the same file)."""
        self._work: anyio.Event | None = None
        self._idle: anyio.Event | None = None
        self._closing: anyio.Event | None = None
        self._closed = False
        self._last_stamp_us = 0

    def new_entry(self, *, agent: str, session_id: str, task: str, requested_by: str,
                  priority: str, model: str, role: str = "", routed_by: str = "",
                  mode: str = "sync") -> OrchestrationEntry:
        """An entry with a fresh file name: stamps are unique and grow within a process."""
        stamp_us = max(time.time_ns() // 1000, self._last_stamp_us + 1)
        self._last_stamp_us = stamp_us
        started = dt.datetime.fromtimestamp(stamp_us / 1e6, dt.UTC)
        return OrchestrationEntry(
            stamp=started.strftime("%Y%m%dT%H%M%S.%fZ"), agent=agent,
            session_id=session_id, task=task, requested_by=requested_by, priority=priority,
            model=model, started_at=started, role=role, routed_by=routed_by, mode=mode,
        )

    async def submit(self, entry: OrchestrationEntry) -> None:
        """Queue `entry` for writing (the latest version of an entry wins)."""
        key = entry.key
        if (self._work is None or self._idle is None
                or (len(self._pending) >= self.backlog and key not in self._pending
                    and key not in self._in_flight)):
            with anyio.CancelScope(shield=True):
                await self._write([entry])
            return
        self._pending[key] = entry
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._work.set()

    async def _write(self, entries: list[OrchestrationEntry]) -> None:
        whole = [e for e in entries if e.key not in self._spawned]
        outcomes = [e for e in entries if e.key in self._spawned and e.has_ended]
        if self.commits is not None and self.commits.running:
            files = [*(_EntryFile(self.layout, e, whole=True, spares=self.spares)
                       for e in whole),
                     *(_EntryFile(self.layout, e, whole=False, spares=self.spares)
                       for e in outcomes)]
            # In the background: sessions' records never wait behind a burst of new files.
            errors = await self.commits.commit_all(list(files), background=True)
            for file, error in zip(files, errors, strict=True):
                if error is not None:
                    _lost(file.entry, error)
        else:
            await anyio.to_thread.run_sync(_write, self.layout, whole, outcomes)
        for entry in outcomes:
            self._spawned.discard(entry.key)
        for entry in whole:
            if not entry.has_ended:
                self._spawned.add(entry.key)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
                  ) -> None:
        """Write pending entries until `close()`; what is pending then is written first."""
        self._work = work = anyio.Event()
        self._idle = anyio.Event()
        self._closing = anyio.Event()
        self._closed = False
        task_status.started()
        try:
            while True:
                if not self._pending:
                    self._idle.set()
                    if self._closed:
                        return
                    self._work = work = anyio.Event()
                    await work.wait()
                    if not self._closed:
                        with anyio.move_on_after(self.linger_s):
                            await self._closing.wait()
                    continue
                batch = list(self._pending.values())
                self._pending.clear()
                self._in_flight = {entry.key for entry in batch}
                with anyio.CancelScope(shield=True):
                    await self._write(batch)
                self._in_flight = set()
        finally:
            self._idle.set()
            self._work = None

    async def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until everything submitted so far is on disk."""
        with anyio.fail_after(timeout_s):
            while self._idle is not None and (self._pending or not self._idle.is_set()):
                await self._idle.wait()

    def path_of(self, entry: OrchestrationEntry) -> Path:
        """Where `entry` is written (blocking: the path is checked on disk)."""
        return self.layout.orchestration_log(entry.stamp, entry.agent)

    def close(self) -> None:
        """Write what is pending now, then let `run()` return."""
        self._closed = True
        if self._work is not None:
            self._work.set()
        if self._closing is not None:
            self._closing.set()
