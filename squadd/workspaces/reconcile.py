"""Start-up reconciliation: finish or undo the workspace step a crash cut short.

A worktree being made is removed (its session never started in it; a spare being made or
taken is undone the same way); a ready spare is kept, its record dropped if a session took its
folder; a commit under way is
read back from git; a landing is rolled forward from its intent when the target may still move
to the new tip, else rolled back. Worktrees git knows under the squad dir with no record are
reported as orphans, and records whose worktree vanished are marked removed. A repair turn's
rebase cut short is undone; a session stopped mid-task (its record `active`) is marked
`interrupted`, its worktree kept for `squadd sessions resume`. A record git
cannot bring back is reported and left for the next start; it never stops this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import anyio
import structlog

from squadd.contracts.workspaces import LandingOutcome, WorkspaceView
from squadd.errors import SquaddError
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript
from squadd.workspaces import records, spares
from squadd.workspaces.git import Git
from squadd.workspaces.landing import advance, roll_back
from squadd.workspaces.messages import commit_message
from squadd.workspaces.repair import abandon, rebasing
from squadd.workspaces.worktrees import changes, commit, describe, undo_create, unlanded

_ROLLED_BACK = "a landing was interrupted and rolled back"

log = structlog.get_logger("squadd.workspaces")


def real_path(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


async def registered_worktrees(git: Git, repo: Path) -> list[Path]:
    """The worktrees git has registered, the main one left out."""
    listed = await git.ran(repo, "worktree", "list", "--porcelain")
    paths = [Path(line[len("worktree "):]) for line in listed.output.splitlines()
             if line.startswith("worktree ")]
    return [p for p in paths if real_path(p) != repo]


async def _recover_landing(layout: SquadLayout, git: Git, record: WorkspaceView,
                           retry: set[str]) -> str:
    intent = record.landing
    sid = record.session_id
    record.landing = None
    if intent is None:
        await describe(git, layout.repo, record)
        record.state = "committed" if await unlanded(git, layout.repo, record) else "landed"
        await anyio.to_thread.run_sync(records.save, layout, record)
        return f"{sid}: landing had not begun; {record.state}"
    old_tip, branch_tip, new_tip = intent.old_tip, intent.branch_tip, intent.new_tip
    if intent.phase == "advance" and new_tip is not None:
        tip = await git.rev(layout.repo, f"refs/heads/{record.target}")
        if tip in (old_tip, new_tip):
            result = await advance(layout, git, record, old_tip=old_tip, new_tip=new_tip,
                                   branch_tip=branch_tip)
            if not result.ok:
                retry.add(sid)
            return f"{sid}: landing resumed: {result.message}"
    await roll_back(git, record, branch_tip)
    retry.add(sid)
    record.state, record.message = "committed", _ROLLED_BACK
    record.outcome = LandingOutcome(state="pending", detail=_ROLLED_BACK,
                                    next=f"squadd land {sid}")
    await describe(git, layout.repo, record)
    await anyio.to_thread.run_sync(records.save, layout, record)
    return f"{sid}: landing rolled back; {record.branch} is at {branch_tip[:12]}"


Identity = Callable[[str], dict[str, str]]
"""An agent's commit identity: `GIT_AUTHOR_*` and `GIT_COMMITTER_*` variables."""


async def _reconcile_one(layout: SquadLayout, git: Git, record: WorkspaceView,
                         known: set[Path], retry: set[str],
                         author: Identity | None = None) -> list[str]:
    """Finish or undo what `record` says was under way; adds its worktree to `known`."""
    tree, sid = Path(record.path), record.session_id
    if record.state == "spare":
        if await anyio.Path(tree).is_dir():
            known.add(real_path(tree))
            return []
        # Taken by a session a crash cut short: the session's record says the rest.
        await spares.forget_missing(layout, git, record)
        return [f"{sid}: spare worktree gone, its record dropped"]
    if record.state == "creating":
        await undo_create(layout, git, record)
        return [f"{sid}: unfinished worktree removed"]
    notes = []
    if record.state == "landing":
        notes.append(await _recover_landing(layout, git, record, retry))
    elif record.state == "committing":
        # Its session had ended: what it left uncommitted is committed now, as it would have
        # been, and lands like the rest of its work.
        if await anyio.Path(tree).is_dir() and await changes(git, tree) and author is not None:
            who = author(record.agent)
            await commit(layout, git, record, author=who["GIT_AUTHOR_NAME"],
                         email=who["GIT_AUTHOR_EMAIL"], committer=who,
                         message=record.commit_message or f"work of session {sid}\n\n"
                                                          f"Squad-Session: {sid}\n")
        await describe(git, layout.repo, record)
        record.state = "committed" if record.commits else "active"
        await anyio.to_thread.run_sync(records.save, layout, record)
        if record.commits:
            retry.add(sid)
        notes.append(f"{sid}: commit checked: {record.state}")
    elif record.state not in ("removed", "landed") and await anyio.Path(tree).is_dir() and \
            await rebasing(git, tree):
        # A repair turn cut short: squadd's rebase is undone, the agent's work before it kept.
        await abandon(git, tree)
        await describe(git, layout.repo, record)
        retry.add(sid)
        record.state, record.message = "committed", "a repair turn was interrupted; its " \
                                                    "rebase was undone"
        record.outcome = LandingOutcome(state="pending", detail=record.message,
                                        next=f"squadd land {sid}")
        await anyio.to_thread.run_sync(records.save, layout, record)
        notes.append(f"{sid}: {record.message}")
    if record.state == "active" and await anyio.Path(tree).is_dir():
        # No session runs before start-up ends: its task had ended (the commit was cut short)
        # or it was stopped mid-task.
        ended = await anyio.to_thread.run_sync(_ended_task, layout, sid)
        if ended is not None and author is not None:
            task, answer, completed = ended
            who = author(record.agent)
            record.commit_message = commit_message(task=task, answer=answer, session_id=sid,
                                                   agent=record.agent)
            await commit(layout, git, record, author=who["GIT_AUTHOR_NAME"],
                         email=who["GIT_AUTHOR_EMAIL"], committer=who,
                         message=record.commit_message)
            if record.commits and completed:
                retry.add(sid)
            notes.append(f"{sid}: its task had ended: its work is {record.state}")
            return notes
        pending = await changes(git, tree)
        record.state = "interrupted"
        record.message = (f"its session was stopped before its work was committed "
                          f"({len(pending)} uncommitted path{'s' * (len(pending) != 1)} kept "
                          f"in {tree}); continue it with squadd sessions resume {sid}")
        record.outcome = LandingOutcome(state="pending", detail=record.message,
                                        next=f"squadd sessions resume {sid}")
        await anyio.to_thread.run_sync(records.save, layout, record)
        notes.append(f"{sid}: interrupted: {record.message}")
    if record.state not in ("removed", "landed") and not await anyio.Path(tree).is_dir():
        await git.ran(layout.repo, "worktree", "prune")
        record.state, record.message = "removed", "its worktree was gone at start-up"
        await anyio.to_thread.run_sync(records.save, layout, record)
        notes.append(f"{sid}: worktree missing, marked removed")
    known.add(real_path(tree))
    return notes


def _ended_task(layout: SquadLayout, session_id: str) -> tuple[str, str, bool] | None:
    """The task and answer of a session whose transcript says its task ended (completed or
    failed: its work is committed as a session's end commits it), and whether it completed;
    None when it was stopped mid-task or has no transcript (blocking)."""
    path = layout.transcript(session_id)
    if not path.is_file():
        return None
    transcript = read_transcript(path)
    if transcript.last_state not in ("completed", "error"):
        return None
    tasks = [str(m.get("content") or "") for m in transcript.messages if m.get("role") == "user"]
    return (tasks[-1] if tasks else "", transcript.final_answer or "",
            transcript.last_state == "completed")


async def reconcile(layout: SquadLayout, git: Git, retry: set[str] | None = None,
                    author: Identity | None = None) -> list[str]:
    """Bring every workspace record and git's worktree list back in line; returns what was
    done, one line per workspace, and adds to `retry` the sessions whose landing was rolled
    back (to land again). The caller holds the landing lock."""
    retry = set() if retry is None else retry
    notes: list[str] = []
    known: set[Path] = set()
    for record in await anyio.to_thread.run_sync(records.load_all, layout):
        try:
            notes += await _reconcile_one(layout, git, record, known, retry, author)
        except (SquaddError, OSError) as exc:
            # One record git cannot bring back (a tip edited by hand, a stuck git) is left
            # as it is, said, and tried again at the next start: it never stops the start.
            known.add(real_path(record.path))
            notes.append(f"{record.session_id}: not reconciled, left {record.state}: {exc}")
    base = real_path(layout.root / "worktrees")
    for path in await registered_worktrees(git, layout.repo):
        real = real_path(path)
        if base in real.parents and real not in known:
            notes.append(f"orphan worktree {path}: no session record; remove it with "
                         f"git worktree remove {path}")
    for note in notes:
        log.warning("workspace reconciled", note=note)
    return notes
