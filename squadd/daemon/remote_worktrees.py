"""The coordinator's half of worktree sessions on cluster workers: where a session's work
starts (the newest ref a holder pushed, `refs/squad/sessions/ID/EPOCH`, or the worktree's base
commit as epoch 0), and, when the session ends, its own branch moved to the work its last
holder pushed, so that the landing queue lands it as it lands a local session's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import structlog

from squadd.cluster.wire import SESSION_REFS, session_ref
from squadd.config import Settings
from squadd.contracts.workspaces import WorkspaceView
from squadd.errors import WorkspaceError
from squadd.state.layout import SquadLayout
from squadd.workspaces import records
from squadd.workspaces.git import Git

log = structlog.get_logger("squadd.coordinator")
GONE = ("removed", "landed", "spare")
"""Workspace states with no worktree for a worker to work on."""


async def pushed(git: Git, repo: Path, session_id: str) -> dict[int, str]:
    """The session's refs in the coordinator's repository: epoch -> commit."""
    listing = await git.out(repo, "for-each-ref", "--format=%(refname) %(objectname)",
                            f"{SESSION_REFS}/{session_id}/", what="git for-each-ref failed")
    found: dict[int, str] = {}
    for line in listing.splitlines():
        name, _, commit = line.partition(" ")
        tail = name.rsplit("/", 1)[-1]
        if tail.isdigit():
            found[int(tail)] = commit
    return found


async def start_ref(git: Git, repo: Path, workspace: WorkspaceView) -> str:
    """The ref a worker starts the session from: the newest one pushed, else epoch 0, made at
    the worktree's current commit."""
    found = await pushed(git, repo, workspace.session_id)
    if found:
        return session_ref(workspace.session_id, max(found))
    head = await git.rev(Path(workspace.path), "HEAD") or workspace.base_commit
    first = session_ref(workspace.session_id, 0)
    await git.out(repo, "update-ref", first, head, what="git update-ref failed")
    return first


async def take_back(git: Git, repo: Path, workspace: WorkspaceView) -> str | None:
    """Move the session's worktree (and so its branch) to the newest work pushed for it; the
    commit it moved to, None when nothing newer was pushed. `WorkspaceError` when the pushed
    work does not descend from the branch (someone moved the branch meanwhile)."""
    found = await pushed(git, repo, workspace.session_id)
    if not found:
        return None
    newest = found[max(found)]
    tree = Path(workspace.path)
    head = await git.rev(tree, "HEAD")
    if head == newest:
        return None
    if head is not None:
        related = await git.ran(repo, "merge-base", "--is-ancestor", head, newest)
        if not related.ok:
            raise WorkspaceError(
                f"the work pushed for session {workspace.session_id} ({newest[:12]}) does not "
                f"descend from its branch {workspace.branch} ({head[:12]}): it stays at "
                f"{session_ref(workspace.session_id, max(found))} for a person to look at")
    await git.out(tree, "reset", "--quiet", "--hard", newest,
                  what="could not move the session's branch to its pushed work")
    return newest


async def forget(git: Git, repo: Path, session_id: str) -> None:
    """Delete the session's refs once its branch holds their work."""
    for epoch in await pushed(git, repo, session_id):
        await git.ran(repo, "update-ref", "-d", session_ref(session_id, epoch))


async def hand_out(git: Git, layout: SquadLayout, settings: Settings,
                   session_id: str) -> dict[str, Any] | None:
    """What a worker needs to work on the session's own worktree in its clone: the ref to
    start from and the authors' email (None: the session works shared)."""
    workspace = await worktree_of(layout, session_id)
    if workspace is None:
        return None
    return {"start_ref": await start_ref(git, layout.repo, workspace),
            "author_email": settings.workspace.author_email}


async def bring_back(git: Git, layout: SquadLayout, session_id: str) -> None:
    """The session's branch moved to the work its workers pushed (before the runner commits
    and lands it as a local session's); a failure is logged, and the refs kept."""
    workspace = await _record(layout, session_id)
    if workspace is None or workspace.state in GONE:
        return
    try:
        moved = await take_back(git, layout.repo, workspace)
    except WorkspaceError as exc:
        log.error("session work not brought back", session_id=session_id, error=str(exc))
        return
    if moved is not None:
        await forget(git, layout.repo, session_id)
        log.info("session work brought back from its worker", session_id=session_id,
                 commit=moved)


async def worktree_of(layout: SquadLayout, session_id: str) -> WorkspaceView | None:
    """The session's worktree, unless it is gone or the session works shared (no git call:
    whether a session's job can be handed over asks only this)."""
    workspace = await _record(layout, session_id)
    return None if workspace is None or workspace.state in GONE else workspace


async def _record(layout: SquadLayout, session_id: str) -> WorkspaceView | None:
    """The session's workspace record; a session that works shared has none, which one
    `stat` tells without a trip to a worker thread (twice a route on the coordinator)."""
    if not layout.may_have_workspace(session_id):
        return None
    return await anyio.to_thread.run_sync(records.load, layout, session_id)
