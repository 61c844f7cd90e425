"""A worktree session on a cluster worker: the session works in a git worktree of the worker's
clone, started from the newest commit the coordinator holds for it, and its work goes back
to the coordinator's repository as a ref per lease epoch (`refs/squad/sessions/ID/EPOCH`):
pushed at the end, and as a checkpoint every half lease while it runs, so that a worker
killed mid-session leaves its work (at most that old) for the next one. The coordinator
moves the session's own branch to that commit, and its landing queue lands it as a local one.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from squadd.cluster.wire import session_ref
from squadd.errors import WorkspaceError
from squadd.state.layout import SquadLayout
from squadd.workspaces.git import Git

log = structlog.get_logger("squadd.worker")

@dataclass
class RemoteWorktree:
    """One session's worktree on this worker."""

    session_id: str
    agent: str
    epoch: int
    path: Path
    clone: Path
    author_email: str
    pushed: str | None = None
    """The commit last pushed as this epoch's ref."""


async def open_worktree(git: Git, layout: SquadLayout, *, session_id: str, agent: str,
                        epoch: int, start_ref: str, author_email: str) -> RemoteWorktree:
    """Fetch `start_ref` from the coordinator's repository (the clone's origin) and make a
    worktree of the clone at it, detached (`WorkspaceError` when git fails)."""
    clone = layout.repo
    await git.out(clone, "fetch", "--quiet", "--no-tags", "origin", f"+{start_ref}:{start_ref}",
                  what=f"could not fetch {start_ref} from the coordinator's repository")
    path = layout.worktrees_dir / session_id
    if path.exists():  # an earlier claim of this session on this worker: start afresh
        await git.ran(clone, "worktree", "remove", "--force", str(path))
        if path.exists():
            await anyio.to_thread.run_sync(shutil.rmtree, path)
        await git.ran(clone, "worktree", "prune")
    path.parent.mkdir(parents=True, exist_ok=True)
    await git.out(clone, "worktree", "add", "--quiet", "--detach", str(path), start_ref,
                  what=f"could not make a worktree for session {session_id}")
    log.info("session worktree ready", session_id=session_id, path=str(path), start=start_ref)
    return RemoteWorktree(session_id, agent, epoch, path, clone, author_email)


async def push(git: Git, tree: RemoteWorktree, *, message: str) -> str | None:
    """Commit every change in the worktree (the agent as author) and push the commit as this
    epoch's ref to the coordinator's repository; the commit pushed (None: nothing new)."""
    status = await git.out(tree.path, "status", "--porcelain", what="git status failed")
    if status:
        email = tree.author_email.replace("{agent}", tree.agent)
        identity = {"GIT_AUTHOR_NAME": tree.agent.title(), "GIT_AUTHOR_EMAIL": email,
                    "GIT_COMMITTER_NAME": tree.agent.title(), "GIT_COMMITTER_EMAIL": email}
        await git.out(tree.path, "add", "-A", "--", ".", ":(exclude).squad",
                      what="git add failed")
        await git.out(tree.path, "commit", "--quiet", "--no-verify", "-m",
                      f"{message}\n\nSquad-Session: {tree.session_id}\n", env=identity,
                      what="git commit failed")
    head = await git.rev(tree.path, "HEAD")
    if head is None or head == tree.pushed:
        return None
    await git.out(tree.path, "push", "--quiet", "--no-verify", "origin",
                  f"+{head}:{session_ref(tree.session_id, tree.epoch)}",
                  what="could not push the session's work to the coordinator's repository")
    tree.pushed = head
    return head


async def checkpoints(git: Git, tree: RemoteWorktree, *, every_s: float) -> None:
    """Push the session's work every `every_s` while it runs (until cancelled)."""
    while True:
        await anyio.sleep(every_s)
        try:
            await push(git, tree, message="work in progress")
        except WorkspaceError as exc:  # the next checkpoint, or the end, tries again
            log.warning("checkpoint not pushed", session_id=tree.session_id, error=str(exc))


async def close_worktree(git: Git, tree: RemoteWorktree) -> None:
    """Remove the worktree from the clone (its work is in the coordinator's repository)."""
    await git.ran(tree.clone, "worktree", "remove", "--force", str(tree.path))
    await git.ran(tree.clone, "worktree", "prune")
