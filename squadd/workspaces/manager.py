"""`Workspaces`: what the runtime and the CLI use: choose a session's isolation, open its
worktree (or reuse it), commit at its end, land it through the one landing queue, reconcile at
start, and list and prune.

The landing queue is an in-process lock plus the repository's ``run/landing.lock`` flock, so
landings from the daemon and from `squadd land` never overlap; adding, moving and removing
worktrees is likewise serialised by ``run/worktrees.lock``.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import structlog

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.events import (
    EventSink,
    WorkspaceCommitted,
    WorkspaceCreated,
    WorkspaceLanded,
    WorkspaceLandFailed,
)
from squadd.contracts.workspaces import Isolation, LandingOutcome, LandResult, WorkspaceView
from squadd.errors import LockTimeoutError, SquaddError, WorkspaceError
from squadd.sandbox import SandboxPolicy
from squadd.state.layout import SquadLayout
from squadd.tools.sandboxing import policy_for
from squadd.workspaces import records, spares, worktrees
from squadd.workspaces.checks import LandCheck
from squadd.workspaces.git import Git, run
from squadd.workspaces.housekeeping import Housekeeping
from squadd.workspaces.landing import land
from squadd.workspaces.messages import commit_message, parse_identity
from squadd.workspaces.reconcile import reconcile
from squadd.workspaces.repair import RepairTurns
from squadd.workspaces.turns import turn

log = structlog.get_logger("squadd.workspaces")
LANDING_LOCK_TIMEOUT_S = 3600.0
"""Longest wait for another process's landing (a land check may run the test suite)."""
ADMIN_LOCK_TIMEOUT_S = 300.0
"""Longest wait to add, move or remove a worktree while another process does (each git
command has its own `workspace.git_timeout_s`)."""
RECONCILE_WAIT_S = 10.0
"""Longest wait at start-up for a landing another process is doing."""


def charter_isolation(sections: Mapping[str, str] | None) -> Isolation | None:
    """`## Workspace` in a charter: a line naming `worktree` or `shared` (e.g.
    ``isolation: worktree``); None when the charter has no such section."""
    text = (sections or {}).get("workspace", "").lower()
    for word in ("worktree", "shared"):
        if word in text:
            return "worktree" if word == "worktree" else "shared"
    return None


class Workspaces(RepairTurns, Housekeeping):
    """The workspaces of one repository."""

    def __init__(self, layout: SquadLayout, settings: Settings, sink: EventSink):
        self.layout = layout
        self.settings = settings.workspace
        self.all_settings = settings
        self.sink = sink
        self.git = Git(self.settings.git_timeout_s)
        self._queue = anyio.Lock()
        self._admin = anyio.Lock()
        self._refilling = anyio.Lock()
        self._spares_wanted = anyio.Event()
        self._committer: dict[str, str] | None = None
        self._retry: set[str] = set()
        """Sessions whose landing start-up rolled back: `retry_landings` lands them again."""
        self._agents: dict[str, Isolation] = {
            name: agent.isolation for name, agent in settings.agents.items()
            if agent.isolation is not None}

    def apply_settings(self, settings: Settings) -> None:
        """Take changed `[workspace]` settings while running: each landing reads them when
        it starts (`land_check`, `land`, timeouts), so the next one uses them."""
        self.settings, self.all_settings = settings.workspace, settings
        self.git = Git(self.settings.git_timeout_s)
        self.want_spares()

    def isolation_for(self, agent: str, charter_sections: Mapping[str, str] | None,
                      requested: Isolation | None) -> Isolation:
        """route `isolation` > `[agents.NAME] isolation` > charter `## Workspace` > settings."""
        if requested is not None:
            return requested
        configured = self.agent_setting(agent)
        if configured is not None:
            return configured
        return charter_isolation(charter_sections) or self.settings.isolation

    def agent_setting(self, agent: str) -> Isolation | None:
        return self._agents.get(agent)

    def identity(self, agent: str, display_name: str | None = None) -> dict[str, str]:
        name = display_name or agent
        email = self.settings.author_email.replace("{agent}", agent)
        return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}

    async def committer(self) -> dict[str, str]:
        """The committer of every commit squadd makes: `workspace.committer`, else the
        repository's own `user.name` / `user.email` (read once), else "Squad"."""
        given = parse_identity(self.settings.committer)
        if given is None and self._committer is not None:
            return self._committer
        if given is None:
            name = await self.git.ran(self.layout.repo, "config", "--get", "user.name")
            email = await self.git.ran(self.layout.repo, "config", "--get", "user.email")
            given = (name.output.strip() if name.ok and name.output.strip() else "Squad",
                     email.output.strip() if email.ok and email.output.strip()
                     else "squad@squad.local")
            self._committer = {"GIT_COMMITTER_NAME": given[0], "GIT_COMMITTER_EMAIL": given[1]}
            return self._committer
        return {"GIT_COMMITTER_NAME": given[0], "GIT_COMMITTER_EMAIL": given[1]}

    def land_check(self, record: WorkspaceView) -> LandCheck:
        """The land check of `record`'s branch, as the settings say now, in its sandbox."""
        return LandCheck(self.settings.land_check, self.settings.land_check_timeout_s,
                         self.settings.land_check_report, self.settings.policy,
                         self.check_sandbox(record))

    # A session's worktree.
    async def open(self, session_id: str, agent: str) -> WorkspaceView | None:
        """The session's worktree: its existing one (a continued session), or a new one.
        None (with a warning) when worktrees cannot be used here: the session works shared."""
        existing = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if existing is not None and existing.state != "removed":
            reopened = await self._reopen(session_id)
            if reopened is not None:
                return reopened
        base = await worktrees.repo_base(self.git, self.layout)
        record = None if isinstance(base, str) else await self._take_spare(base, session_id,
                                                                           agent)
        if record is None:
            why = base if isinstance(base, str) else await self._no_room()
            if why or isinstance(base, str):
                log.warning("session works in the shared tree", session_id=session_id, why=why)
                return None
            async with self.admin():
                record = await worktrees.create(self.layout, self.git, base,
                                                session_id=session_id, agent=agent)
        self.want_spares()
        self.sink.publish(WorkspaceCreated(session_id=session_id, agent=agent,
                                           branch=record.branch, path=record.path,
                                           target=record.target))
        try:
            await self._setup(record)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.remove(session_id)
            raise
        return record

    async def _reopen(self, session_id: str) -> WorkspaceView | None:
        """A continued session's worktree, made active again; None when it is gone. Read and
        written (its `updated` time too: in use, not idle) under the worktrees lock: a prune
        beside it either removed it first or sees it active and fresh."""
        async with self.admin():
            record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
            if record is None or record.state == "removed" or \
                    not await anyio.Path(record.path).is_dir():
                return None
            if record.state in ("committed", "landed", "conflict", "needs_attention",
                                "interrupted"):
                record.state = "active"
            record.outcome = None  # the last landing's: this session's next one is its own
            await anyio.to_thread.run_sync(records.save, self.layout, record)
            return record

    async def _take_spare(self, base: worktrees.RepoBase, session_id: str,
                          agent: str) -> WorkspaceView | None:
        """The session's worktree made from a ready spare; None when none is ready (or the
        one found could not be used: it is removed, and the session gets a new worktree)."""
        if self.settings.spares <= 0:
            return None
        # Shielded: a route cancelled mid-way would leave a half-taken spare until restart.
        with anyio.CancelScope(shield=True):
            async with self.admin():
                found = await anyio.to_thread.run_sync(spares.ready, self.layout)
                if not found:
                    return None
                try:
                    return await spares.take(self.layout, self.git, base, found[0],
                                             session_id=session_id, agent=agent)
                except WorkspaceError as exc:
                    log.warning("spare worktree not usable", spare=found[0].session_id,
                                error=str(exc))
                    await self._undo_take(session_id, found[0])
        return None

    async def _undo_take(self, session_id: str, spare: WorkspaceView) -> None:
        taken = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if taken is not None:
            await worktrees.undo_create(self.layout, self.git, taken)
        if await anyio.to_thread.run_sync(records.load, self.layout, spare.session_id):
            await worktrees.undo_create(self.layout, self.git, spare)

    # Spare worktrees, made ahead in the background.
    def want_spares(self) -> None:
        """Ask the spare maker (`keep_spares`) to make up the spares (no-op without one)."""
        self._spares_wanted.set()

    async def keep_spares(self) -> None:
        """Keep `workspace.spares` spare worktrees ready, made one at a time whenever a
        worktree session opened (and at once when worktrees are the setting), until
        cancelled. A failure is logged, never raised (this runs in the runtime's task group,
        which an escaping error would end): sessions then make their own."""
        if self.settings.spares <= 0:
            return
        if self.settings.isolation == "worktree" or "worktree" in self._agents.values():
            self.want_spares()
        while True:
            await self._spares_wanted.wait()
            self._spares_wanted = anyio.Event()
            try:
                await self.refill_spares()
            except (SquaddError, OSError) as exc:
                log.warning("spare worktree not made", error=str(exc))
            except Exception:
                log.exception("spare worktree not made: unexpected error")

    async def refill_spares(self) -> int:
        """Make spares until `workspace.spares` are ready, one at a time (none where worktrees
        cannot be used or `max_worktrees` or the disk leaves no room); returns how many are
        ready. A spare cut short by cancellation is removed."""
        async with self._refilling:
            while True:
                count = len(await anyio.to_thread.run_sync(spares.ready, self.layout))
                if count >= self.settings.spares or await self._no_room():
                    return count
                base = await worktrees.repo_base(self.git, self.layout)
                if isinstance(base, str):
                    return count
                try:
                    async with self.admin():
                        record = await spares.make(self.layout, self.git, base)
                    await spares.settle(self.layout, self.git, record)
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await self._forget_unready_spares()
                    raise

    async def _forget_unready_spares(self) -> None:
        for record in await anyio.to_thread.run_sync(
                lambda: records.load_all(self.layout, prefix=spares.SPARE_PREFIX)):
            if record.state == "creating":
                async with self.admin():
                    await worktrees.undo_create(self.layout, self.git, record)

    async def _no_room(self) -> str:
        live = [r for r in await anyio.to_thread.run_sync(records.load_all, self.layout)
                if r.state != "removed"]
        if len(live) >= self.settings.max_worktrees:
            return (f"{len(live)} worktrees exist (workspace.max_worktrees = "
                    f"{self.settings.max_worktrees}): land or prune some (squadd workspaces)")
        free_mb = shutil.disk_usage(self.layout.repo).free // (1 << 20)
        if free_mb < self.settings.min_free_mb:
            return (f"only {free_mb} MB free (workspace.min_free_mb = "
                    f"{self.settings.min_free_mb})")
        return ""

    def check_sandbox(self, record: WorkspaceView) -> SandboxPolicy:
        """The sandbox the land check of `record`'s branch runs in: its worktree writable, its
        agent's network."""
        return policy_for(self.all_settings, agent=record.agent, workspace=Path(record.path),
                          repo=self.layout.repo, squad_dir=self.layout.root)

    async def _setup(self, record: WorkspaceView) -> None:
        for command in self.settings.setup:
            ran = await run(["bash", "-c", command], Path(record.path),
                            timeout_s=self.settings.setup_timeout_s,
                            spill=self.layout.workspace_output(record.session_id, "setup"))
            if not ran.ok:
                how = "timed out" if ran.timed_out else f"exited {ran.exit_code}"
                raise WorkspaceError(f"workspace setup `{command}` {how} in {record.path}: "
                                     f"{ran.tail.strip()[-1500:]}")

    async def close(self, record: WorkspaceView, *, title: str,
                    display_name: str | None = None, answer: str = "",
                    repair: bool = False) -> WorkspaceView:
        """Commit the session's changes on its branch (author: the agent; committer: the one
        `committer`), with a message written from its task (`title`) and `answer`; that
        message is kept as the one its work lands with, except after a repair turn, whose
        commit only completes the work it repairs."""
        identity = self.identity(record.agent, display_name)
        # Squad-Trace: from the commit on main to the session's spans.
        message = commit_message(task=title, answer=answer, session_id=record.session_id,
                                 agent=record.agent, trace=telemetry.trace_id())
        if not repair:
            record.commit_message = message
        committed = await worktrees.commit(
            self.layout, self.git, record, author=identity["GIT_AUTHOR_NAME"],
            email=identity["GIT_AUTHOR_EMAIL"], message=message,
            committer=await self.committer())
        if committed:
            self.sink.publish(WorkspaceCommitted(
                session_id=record.session_id, agent=record.agent, branch=record.branch,
                commits=record.commits, diffstat=record.diffstat))
        return record

    # The landing queue.
    @asynccontextmanager
    async def landing_queue(self, timeout_s: float = LANDING_LOCK_TIMEOUT_S
                            ) -> AsyncIterator[None]:
        """Wait for the repository's turn to land (`TimeoutError` after `timeout_s`, whether
        the landing ahead is this process's or another's)."""
        async with turn(self._queue, self.layout.landing_lock, timeout_s):
            yield

    @asynccontextmanager
    async def admin(self, timeout_s: float = ADMIN_LOCK_TIMEOUT_S) -> AsyncIterator[None]:
        """Hold the right to add, move or remove worktrees, in this process and in any other
        (`squadd workspaces --prune` beside the daemon): two git worktree commands at once can
        read each other's half-made administrative folders, and a spare being taken must not
        be removed under it. `WorkspaceError` after `timeout_s`."""
        try:
            async with turn(self._admin, self.layout.worktrees_lock, timeout_s):
                yield
        except TimeoutError:
            raise WorkspaceError(
                f"worktrees are busy: another squadd has held {self.layout.worktrees_lock} for "
                f"{timeout_s:g}s (a git command stuck?)") from None

    async def land(self, session_id: str) -> LandResult:
        """Land the session's branch (its pending changes committed first), in turn."""
        record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if record is None or record.state == "removed":
            return LandResult(ok=False, session_id=session_id, reason="invalid",
                              message=f"session {session_id} has no worktree to land")
        if record.state == "landed" and not await anyio.Path(record.path).is_dir():
            return LandResult(ok=True, session_id=session_id, reason="nothing",
                              target=record.target, new_tip=record.landed_tip,
                              workspace=record, message=f"session {session_id} already "
                              f"landed on {record.target} at {(record.landed_tip or '')[:12]}")
        try:
            async with self.landing_queue():
                record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
                assert record is not None
                # What a person (or an interrupted session) left in the worktree is
                # committed first: `squadd land` after fixing a conflict or a check by hand.
                closed = record.state in ("active", "committing", "committed", "conflict",
                                          "needs_attention", "interrupted") and \
                    await anyio.Path(record.path).is_dir()
                if closed:
                    await self.close(record, title=f"work of session {session_id}",
                                     repair=bool(record.commit_message))
                result = await land(self.layout, self.git, record, check=self.land_check(record),
                                    identity=await self.committer(), checked_clean=closed,
                                    style=self.settings.land_style)
                await self._keep_outcome(result)
        except (WorkspaceError, LockTimeoutError, TimeoutError, OSError) as exc:
            return LandResult(ok=False, session_id=session_id, reason="failed",
                              message=f"landing failed: {exc}")
        self._announce(result)
        if result.ok and result.reason == "landed" and not self.settings.keep_landed:
            result = await self._tidy_landed(result)
        return result

    async def not_landed(self, record: WorkspaceView, *, why: str) -> WorkspaceView:
        """Record that a session's work was committed and not landed (`why`), and what lands
        it; an outcome `skipped` either way."""
        sid = record.session_id
        if record.commits:
            record.outcome = LandingOutcome(
                state="skipped", next=f"squadd land {sid}",
                detail=f"not landed: {why}; its work is on branch {record.branch}")
        else:
            record.outcome = LandingOutcome(state="skipped", detail="the session changed nothing")
        await anyio.to_thread.run_sync(records.save, self.layout, record)
        return record

    async def _tidy_landed(self, result: LandResult) -> LandResult:
        """Remove a landed session's worktree and branch (`workspace.keep_landed` off); its
        record stays, `landed`, with the outcome. A failure is logged: the landing stands."""
        sid = result.session_id
        try:
            removed = await self._remove(sid, lambda r: r.state == "landed", landed=True)
        except (SquaddError, OSError) as exc:
            log.warning("landed worktree not removed", session_id=sid, error=str(exc))
            return result
        if removed is None:
            return result
        return result.model_copy(update={"workspace": removed[0]})

    async def _keep_outcome(self, result: LandResult) -> None:
        """Write the landing's outcome on the session's record (what `squadd sessions show`,
        the dashboard and a `--no-wait` caller read back)."""
        record = result.workspace
        if record is not None:
            record.outcome = result.outcome()
            await anyio.to_thread.run_sync(records.save, self.layout, record)

    def _announce(self, result: LandResult) -> None:
        """`workspace.landed` or `workspace.land_failed`, each with the outcome a route's
        result carries: a caller that did not wait learns it from the event."""
        record = result.workspace
        if record is None:
            return
        outcome = result.outcome()
        if result.ok and result.reason == "landed":
            self.sink.publish(WorkspaceLanded(
                session_id=record.session_id, agent=record.agent, branch=record.branch,
                target=result.target or "", old_tip=result.old_tip or "",
                new_tip=result.new_tip or "", outcome=outcome))
        elif not result.ok and result.reason != "invalid":
            self.sink.publish(WorkspaceLandFailed(
                session_id=record.session_id, agent=record.agent, branch=record.branch,
                target=result.target, reason=result.reason, paths=result.conflict_paths,
                message=result.message[:2000], outcome=outcome))

    async def reconcile(self) -> list[str]:
        """Finish or undo what a crash cut short (see `squadd.workspaces.reconcile`)."""
        if not (self.layout.workspaces_dir.is_dir() or self.layout.worktrees_dir.is_dir()):
            return []
        try:
            async with self.landing_queue(RECONCILE_WAIT_S), \
                    turn(self._admin, self.layout.worktrees_lock, RECONCILE_WAIT_S):
                committer = await self.committer()
                return await reconcile(self.layout, self.git, self._retry,
                                       lambda agent: {**self.identity(agent), **committer})
        except TimeoutError:
            # A `squadd land` or `squadd workspaces` is at work: its work is its own to finish.
            return [f"not reconciled: another process was landing or changing worktrees for "
                    f"{RECONCILE_WAIT_S:g}s; run the daemon again once it is done"]

    async def retry_landings(self) -> None:
        """Land again what start-up rolled back (with `workspace.land = "auto"`), in turn; a
        refusal waits for a person (`needs_attention`). Logged, never raised."""
        if self.settings.land != "auto":
            return
        while self._retry:
            session_id = min(self._retry)
            self._retry.discard(session_id)
            try:
                # Not shielded: a stop cuts it short as a crash would; the next start-up
                # finishes or undoes it from its intent.
                result = await self.land(session_id)
                if not result.ok and result.reason in ("conflict", "check_failed"):
                    with anyio.CancelScope(shield=True):
                        await self.hold_for_person(session_id, result)
            except (SquaddError, OSError) as exc:
                log.warning("rolled-back landing not retried", session_id=session_id,
                            error=str(exc))
                continue
            log.info("rolled-back landing retried", session_id=session_id,
                     outcome=result.reason, message=result.message)

