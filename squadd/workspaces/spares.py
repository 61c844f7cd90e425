"""Spare worktrees: made ahead of any session, detached at the target branch's tip, and taken
by a new session so that it does not wait for a checkout of the whole tree.

A spare has a record of its own (state `spare`, an id starting `spare-`, no agent, no branch).
Taking one writes the session's `creating` record first, then moves the spare's folder to the
session's (`git worktree move`), drops the spare's record and makes the session's branch at
the base commit in it (only the files that differ are rewritten), then marks it `active`. A
crash at any point leaves a `creating` session record, which start-up undoes, and at most a
spare record whose folder is gone, which start-up drops.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import anyio

from squadd.contracts.workspaces import WorkspaceView
from squadd.state.layout import SquadLayout
from squadd.workspaces import records
from squadd.workspaces.git import Git
from squadd.workspaces.worktrees import RepoBase, ensure_ignored, new_record, own_folder

SPARE_PREFIX = "spare-"
INDEX_SETTLE_S = 1.05
"""How long after its checkout a spare's index is refreshed: files written in the same second
as the index are "racily clean" to git, which would read every one of them again at each
`git status` of the session; refreshed a second later, the index holds their stat data."""


def is_spare(record: WorkspaceView) -> bool:
    return record.session_id.startswith(SPARE_PREFIX)


def spare_id() -> str:
    return f"{SPARE_PREFIX}{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-" \
           f"{secrets.token_hex(4)}"


def ready(layout: SquadLayout) -> list[WorkspaceView]:
    """The spares ready to be taken, oldest first (only at their own folder: a record edited
    to name another session's worktree never hands that worktree to a new session). Only the
    spares' records are read, not every session's, on the path of a session's opening."""
    return [r for r in records.load_all(layout, prefix=SPARE_PREFIX) if r.state == "spare"
            and own_folder(layout, r)]


async def make(layout: SquadLayout, git: Git, base: RepoBase) -> WorkspaceView:
    """Add a spare worktree detached at `base.commit`, without its files yet (`settle`
    checks them out): the caller holds the lock under which worktrees are added, which a
    session that opens waits for, only while git makes the worktree's administrative files."""
    await anyio.to_thread.run_sync(ensure_ignored, layout)
    sid = spare_id()
    path = layout.worktree(sid)
    record = WorkspaceView(session_id=sid, agent="", branch="", target=base.branch,
                           base_commit=base.commit, path=str(path), created=records.now_iso())
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("spare.before_add")
    await anyio.to_thread.run_sync(lambda: path.parent.mkdir(parents=True, exist_ok=True))
    await git.out(base.repo, "worktree", "add", "--quiet", "--lock", "--detach",
                  "--no-checkout", str(path), base.commit, what="cannot make a spare worktree")
    records.kill_point("spare.after_add")
    return record


async def settle(layout: SquadLayout, git: Git, record: WorkspaceView) -> WorkspaceView:
    """Check out the new spare's files, refresh its index (see `INDEX_SETTLE_S`) and mark it
    ready to be taken. Only the spare's own folder and index are written: no lock is held."""
    await git.out(Path(record.path), "checkout", "--quiet", "--force",
                  what="cannot check out a spare worktree")
    records.kill_point("spare.after_checkout")
    await anyio.sleep(INDEX_SETTLE_S)
    # update-index takes the index lock whatever GIT_OPTIONAL_LOCKS says: it must write.
    await git.out(Path(record.path), "update-index", "-q", "--refresh",
                  what="cannot refresh a spare worktree's index")
    record.state = "spare"
    await anyio.to_thread.run_sync(records.save, layout, record)
    return record


async def take(layout: SquadLayout, git: Git, base: RepoBase, spare: WorkspaceView, *,
               session_id: str, agent: str) -> WorkspaceView:
    """Make `spare` the session's worktree, on a new branch at `base.commit`, and record it
    `active`. The caller holds the lock under which worktrees are added and moved; on a
    `WorkspaceError` it undoes the session's `creating` record (`worktrees.undo_create`)."""
    record = await new_record(layout, git, base, session_id=session_id, agent=agent)
    path = Path(record.path)
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("spare.before_move")
    # A spare is locked like every worktree squadd makes: moving a locked one takes two -f.
    await git.out(base.repo, "worktree", "move", "--force", "--force", spare.path, str(path),
                  what=f"cannot move spare worktree {spare.path} to session {session_id}")
    records.kill_point("spare.after_move")
    await anyio.to_thread.run_sync(records.drop, layout, spare.session_id)
    what = f"cannot make branch {record.branch} in a spare worktree"
    if spare.base_commit == base.commit:
        # The tree is already right: make the branch (only if no branch has that name) and
        # point HEAD at it, without `checkout` reading every file's status.
        await git.out(base.repo, "update-ref", "-m", f"squad: session {session_id}",
                      f"refs/heads/{record.branch}", base.commit, "", what=what)
        await git.out(path, "symbolic-ref", "HEAD", f"refs/heads/{record.branch}", what=what)
    else:  # the target moved since: only the files that differ are rewritten
        await git.out(path, "checkout", "--quiet", "-b", record.branch, base.commit, what=what)
    records.kill_point("spare.after_branch")
    record.state = "active"
    await anyio.to_thread.run_sync(records.save, layout, record)
    return record


async def forget_missing(layout: SquadLayout, git: Git, record: WorkspaceView) -> None:
    """Drop a spare's record whose folder is gone (taken by a session that a crash cut short),
    and whatever git still has registered at its old path."""
    await git.ran(layout.repo, "worktree", "unlock", record.path)
    await git.ran(layout.repo, "worktree", "prune")
    await anyio.to_thread.run_sync(records.drop, layout, record.session_id)
