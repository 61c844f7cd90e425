"""What `Workspaces` does to look after the worktrees it made (mixed into it): reading
their records, removing one, and pruning the landed, the long idle and the spares."""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import anyio
import structlog

from squadd.config import WorkspaceSettings
from squadd.contracts.events import EventSink, WorkspaceRemoved
from squadd.contracts.workspaces import WorkspaceView
from squadd.errors import SquaddError
from squadd.state.layout import SquadLayout
from squadd.workspaces import records, spares, worktrees
from squadd.workspaces.git import Git

log = structlog.get_logger("squadd.workspaces")


class Housekeeping(ABC):
    """`view`, `listing`, `remove` and `prune` of `Workspaces`, which provides `admin`."""

    layout: SquadLayout
    git: Git
    settings: WorkspaceSettings
    sink: EventSink

    _emptier: anyio.Event | None = None
    """While `keep_emptied` runs: rung when a worktree was moved aside to be deleted."""

    @abstractmethod
    def admin(self, timeout_s: float = ...) -> AbstractAsyncContextManager[None]: ...

    async def keep_emptied(self) -> None:
        """Delete the worktrees moved aside (`worktrees.move_aside`) at once (what a crash or
        a command left) and whenever one more is, until cancelled (a deletion under way is
        left to finish on its own; the next start deletes the rest). Errors are logged."""
        self._emptier = anyio.Event()
        self._emptier.set()
        try:
            while True:
                await self._emptier.wait()
                self._emptier = anyio.Event()
                try:
                    await anyio.to_thread.run_sync(worktrees.empty_removed, self.layout,
                                                   abandon_on_cancel=True)
                except Exception:
                    log.exception("removed worktrees not deleted")
        finally:
            self._emptier = None

    async def _empty_removed(self) -> None:
        """The worktrees moved aside deleted: by `keep_emptied` when it runs (a daemon's), so
        that nobody waits for it; else now (a command that removes one and exits)."""
        if self._emptier is not None:
            self._emptier.set()
        else:
            await anyio.to_thread.run_sync(worktrees.empty_removed, self.layout)

    async def view(self, session_id: str) -> WorkspaceView | None:
        """The session's workspace record, if it has one."""
        try:
            return await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        except SquaddError:  # not a valid session id: it has no workspace
            return None

    async def listing(self) -> list[WorkspaceView]:
        return await anyio.to_thread.run_sync(records.load_all, self.layout)

    async def remove(self, session_id: str) -> bool | None:
        """Remove a session's worktree (its branch kept while it has unlanded commits);
        None when it has none."""
        removed = await self._remove(session_id, lambda _: True)
        return None if removed is None else removed[1]

    async def _remove(self, session_id: str, wanted: Callable[[WorkspaceView], bool], *,
                      landed: bool = False) -> tuple[WorkspaceView, bool] | None:
        """Remove the worktree if its record, read under the worktrees lock, is still
        `wanted`; the record and whether its branch was kept, or None."""
        async with self.admin():
            record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
            if record is None or not wanted(record):
                return None
            if record.state == "creating":  # cut short: no session ever worked in it
                await worktrees.undo_create(self.layout, self.git, record)
                kept = False
            else:
                kept = await worktrees.remove(self.layout, self.git, record, landed=landed)
        await self._empty_removed()
        self.sink.publish(WorkspaceRemoved(session_id=session_id, agent=record.agent,
                                           branch=record.branch, branch_kept=kept))
        return record, kept

    async def prune(self, *, now: dt.datetime | None = None) -> list[str]:
        """Remove landed worktrees, unlanded ones idle past `workspace.keep_days`, and the
        spares (a running daemon makes its spares again when a worktree session next opens).
        Each is judged again under the worktrees lock: one a session continued (or a spare
        it took) since the listing is left alone."""
        now = now or dt.datetime.now(dt.UTC)
        keep = dt.timedelta(days=self.settings.keep_days)
        # Making a spare is three git commands, each allowed `git_timeout_s`.
        making_grace = max(SPARE_MAKING_GRACE, dt.timedelta(
            seconds=3 * self.settings.git_timeout_s + spares.INDEX_SETTLE_S + 60))

        def prunable(record: WorkspaceView) -> bool:
            if spares.is_spare(record) and record.state == "creating":
                # Being made (here, or by a daemon beside this command): its checkout would
                # fail, and race the removal. One a crash left is removed when it is old.
                age = _age(record, now)
                return age is not None and age >= making_grace
            if record.state == "landed" or spares.is_spare(record):
                return True
            age = _age(record, now) if record.state in ("committed", "conflict", "active") \
                else None
            return age is not None and age >= keep

        done = []
        for listed in await self.listing():
            removed = await self._remove(listed.session_id, prunable) \
                if prunable(listed) else None
            if removed is not None:
                record, kept = removed
                done.append(f"{record.session_id} {record.branch or '(spare)'}: removed"
                            + (" (branch kept: it has unlanded commits)" if kept else ""))
        return done


SPARE_MAKING_GRACE = dt.timedelta(minutes=10)
"""How long at the least a spare may stay `creating` (its files being checked out) before a
prune takes it for one a crash left (longer when `workspace.git_timeout_s` allows its three
git commands more)."""


def _age(record: WorkspaceView, now: dt.datetime) -> dt.timedelta | None:
    """How long since `record` last changed; None (never stale) for a time squadd cannot read,
    e.g. one edited by hand, which is logged rather than allowed to stop the prune."""
    stamp = record.updated or record.created
    moment = records.parse_time(stamp)
    if moment is None:
        log.warning("workspace record has an unreadable time; not pruned for age",
                    session_id=record.session_id, time=stamp[:64])
        return None
    return now - moment
