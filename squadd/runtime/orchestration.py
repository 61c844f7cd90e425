"""The orchestration log: `.squad/orchestration-log/{ts}-{agent}.md`, one file per routed task.

When the task's session is spawned its file is written atomically (temp file, fsync, rename):
agent, requested by, task, priority, model, session. When the task ends an `## Outcome` section
(outcome, duration, tokens) is appended and fsynced; a file without one is a task still running
(or cut off by a crash). A writer task does this disk work off the route's path, gathering
entries for a moment and writing each batch as one group commit; a task whose spawn and end are
both still pending is written once, whole. The backlog is bounded: past it, a route writes its
own entry.
"""

from __future__ import annotations

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
from squadd.fsio import fsync_dir
from squadd.state.layout import SquadLayout

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


def render_spawn(entry: OrchestrationEntry) -> str:
    """What is known at spawn: a field list, then the task in full (bounded)."""
    first_line = entry.task.strip().split("\n", 1)[0][:120]
    task = entry.task.strip()
    if len(task) > _TASK_LIMIT:
        task = task[:_TASK_LIMIT] + f"\n\n[{len(task) - _TASK_LIMIT} more characters cut]"
    return (
        f"# Orchestration: {entry.agent}\n\n"
        f"- **Agent:** {entry.agent}\n"
        f"- **Requested by:** {entry.requested_by}\n"
        f"- **Task:** {first_line}\n"
        f"- **Priority:** {entry.priority}\n"
        f"- **Model:** {entry.model or 'provider default'}\n"
        f"- **Session:** {entry.session_id}\n"
        f"- **Started:** {entry.started_at.isoformat(timespec='milliseconds')}\n"
        f"\n## Task\n\n{task}\n"
    )


def render_outcome(entry: OrchestrationEntry) -> str:
    """The section appended when the task ends."""
    outcome = entry.outcome if entry.error is None else f"{entry.outcome}: {entry.error}"
    duration = "-" if entry.duration_s is None else f"{entry.duration_s:.3f} s"
    return (
        f"\n## Outcome\n\n"
        f"- **Outcome:** {outcome}\n"
        f"- **Duration:** {duration}\n"
        f"- **Tokens:** {entry.input_tokens} in, {entry.output_tokens} out\n"
    )


def render(entry: OrchestrationEntry) -> str:
    """The whole file as it reads once the entry is written (and, if ended, completed)."""
    return render_spawn(entry) + (render_outcome(entry) if entry.has_ended else "")


def _write_all(fd: int, text: str) -> None:
    data = text.encode("utf-8")
    written = 0
    while written < len(data):
        written += os.write(fd, data[written:])


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
            _write_all(fd, render(entry))
            os.fchmod(fd, 0o644)
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
            _write_all(fd, render_outcome(entry))
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


def _lost(entry: OrchestrationEntry, exc: Exception) -> None:
    # a full disk must not take a route down with it: the transcript still has everything
    log.warning("orchestration log not written", stamp=entry.stamp, agent=entry.agent,
                error=str(exc))


class OrchestrationLog:
    """Writes orchestration entries; run `run()` in a task group and `close()` to drain it."""

    def __init__(self, layout: SquadLayout, *, backlog: int = 1024, linger_s: float = 0.05):
        self.layout = layout
        self.backlog = backlog
        self.linger_s = linger_s
        """How long the writer gathers entries before a batch (unless it is closing)."""
        self._pending: dict[Key, OrchestrationEntry] = {}
        self._spawned: set[Key] = set()
        """Entries whose spawn is on disk and whose outcome is still to be appended."""
        self._work: anyio.Event | None = None
        self._idle: anyio.Event | None = None
        self._closing: anyio.Event | None = None
        self._closed = False
        self._last_stamp_us = 0

    def new_entry(self, *, agent: str, session_id: str, task: str, requested_by: str,
                  priority: str, model: str) -> OrchestrationEntry:
        """An entry with a fresh file name: stamps are unique and grow within a process."""
        stamp_us = max(time.time_ns() // 1000, self._last_stamp_us + 1)
        self._last_stamp_us = stamp_us
        started = dt.datetime.fromtimestamp(stamp_us / 1e6, dt.UTC)
        return OrchestrationEntry(
            stamp=started.strftime("%Y%m%dT%H%M%S.%fZ"), agent=agent,
            session_id=session_id, task=task, requested_by=requested_by, priority=priority,
            model=model, started_at=started,
        )

    async def submit(self, entry: OrchestrationEntry) -> None:
        """Queue `entry` for writing (the latest version of an entry wins)."""
        key = entry.key
        if (self._work is None or self._idle is None
                or (len(self._pending) >= self.backlog and key not in self._pending)):
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
                with anyio.CancelScope(shield=True):
                    await self._write(batch)
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
