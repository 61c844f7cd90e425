"""A repair turn's worktree: before it, the session's branch rebased onto the target's tip by
squadd (a conflict left in the files as conflict markers, for the agent's file tools); after
it, the resolution staged and the rebase continued. And the prompt the agent is given.

The agent never runs git: squadd starts the rebase, and continues or abandons it. A crash
mid-repair leaves a rebase in progress, which start-up abandons (`abandon`), putting the
branch back where it was.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import anyio
import structlog

from squadd.config import WorkspaceSettings
from squadd.contracts.workspaces import LandResult, WorkspaceView
from squadd.errors import SquaddError, WorkspaceError
from squadd.state.layout import SquadLayout
from squadd.workspaces import records
from squadd.workspaces.git import Git
from squadd.workspaces.landing import LandStyle, squash
from squadd.workspaces.worktrees import OUTSIDE_SQUAD, describe

log = structlog.get_logger("squadd.workspaces")
HUNK_CHARS = 8000
"""Most characters of conflict hunks or check output put in the repair prompt."""
MARKERS = ("<<<<<<< ", ">>>>>>> ")


async def rebasing(git: Git, tree: Path) -> bool:
    """Whether a rebase is under way in the worktree."""
    found = await git.ran(tree, "rev-parse", "--absolute-git-dir")
    if not found.ok:
        return False
    gitdir = anyio.Path(found.output.strip())
    return await (gitdir / "rebase-merge").exists() or await (gitdir / "rebase-apply").exists()


async def abandon(git: Git, tree: Path) -> None:
    """Give up a rebase under way (the branch goes back to where it was before it)."""
    for stop in ("--abort", "--quit"):
        if await rebasing(git, tree):
            await git.ran(tree, "rebase", stop)


async def _conflicted(git: Git, tree: Path) -> list[str]:
    ran = await git.ran(tree, "diff", "--name-only", "--diff-filter=U", "-z")
    return sorted(p for p in ran.output.split("\0") if p)


async def start(layout: SquadLayout, git: Git, record: WorkspaceView, failed: LandResult, *,
                committer: dict[str, str], style: LandStyle, attempts: int) -> str:
    """Rebase the session's branch onto its target's tip (squashed first), leaving a conflict
    in its files, and return the repair turn's prompt. The record says a repair is under way."""
    tree, target = Path(record.path), record.target or ""
    tip = await git.rev(layout.repo, f"refs/heads/{target}")
    branch_tip = await git.rev(layout.repo, f"refs/heads/{record.branch}")
    if tip is None or branch_tip is None:
        raise WorkspaceError(f"cannot repair session {record.session_id}: its branch or "
                             f"{target} is gone")
    record.repairs += 1
    record.state = "conflict"
    record.message = (f"repair turn {record.repairs} of {attempts}: the agent is fixing "
                      f"{'the conflict' if failed.reason == 'conflict' else 'the land check'}")
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("repair.before_rebase")
    if style == "squash":
        await squash(git, tree, record, onto=tip, branch_tip=branch_tip, committer=committer)
    rebased = await git.ran(tree, "rebase", "--quiet", tip, env=committer)
    intro = (f"squadd could not land your work on {target}: {failed.message}\n\n"
             f"This is repair turn {record.repairs} of {attempts}. Work only with your file "
             f"tools (read, edit, write); do not run git: squadd ")
    if not rebased.ok:
        paths = await _conflicted(git, tree)
        if not paths:
            await abandon(git, tree)
            raise WorkspaceError(f"rebasing {record.branch} onto {target} failed: "
                                 f"{rebased.tail.strip()}")
        hunks = await git.ran(tree, "diff", "--", *paths)
        return (intro + f"has started rebasing your branch onto {target}'s tip "
                f"{tip[:12]}, and it stopped on conflicts in: {', '.join(paths)}.\n"
                f"Those files in your worktree now hold conflict markers (<<<<<<<, =======, "
                f">>>>>>>). Edit each so that it keeps both {target}'s change and yours, and "
                f"remove every marker; squadd then continues the rebase and lands the result."
                f"\n\nThe conflicting hunks:\n```diff\n{_cut(hunks.output)}\n```\n")
    output = failed.check_tail.strip() or "(no output)"
    broke = (f"\nTests it breaks: {', '.join(failed.broke)}" if failed.broke else "")
    return (intro + f"has rebased your branch onto {target}'s tip {tip[:12]} (the candidate "
            f"that was checked).{broke}\nFix the code so that the check passes; squadd "
            f"commits your changes and lands the result.\n\nThe check's output:\n```\n"
            f"{_cut(output)}\n```\n")


def _cut(text: str) -> str:
    return text if len(text) <= HUNK_CHARS else "…\n" + text[-HUNK_CHARS:]


async def finish(layout: SquadLayout, git: Git, record: WorkspaceView, *,
                 committer: dict[str, str]) -> str:
    """Stage the agent's resolution and continue the rebase under way (none: nothing to do).
    Returns "" when the branch is whole again, else why not (the rebase is then abandoned)."""
    tree = Path(record.path)
    if not await rebasing(git, tree):
        return ""
    paths = await _conflicted(git, tree)
    marked = [p for p in paths if await _has_markers(tree / p)]
    if marked:
        await abandon(git, tree)
        return f"conflict markers are still in {', '.join(marked)}"
    await git.out(tree, "add", "--all", *OUTSIDE_SQUAD, what="cannot stage the resolution")
    went = await git.ran(tree, "-c", "core.editor=true", "rebase", "--continue",
                         env=committer)
    if not went.ok or await rebasing(git, tree):
        left = await _conflicted(git, tree)
        await abandon(git, tree)
        return (f"the rebase stopped again, on {', '.join(left)}" if left else
                f"the rebase could not continue: {went.tail.strip()[-500:]}")
    await describe(git, layout.repo, record)
    return ""


async def _has_markers(path: Path) -> bool:
    try:
        text = await anyio.Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith(MARKERS) for line in text.splitlines())


class RepairTurns(ABC):
    """What `Workspaces` does around a repair turn (mixed into it): the worktree prepared
    before the agent's turn, its resolution continued after it, and the hand-over to a
    person when the attempts are spent. `Workspaces` provides the two abstract methods."""

    layout: SquadLayout
    git: Git
    settings: WorkspaceSettings

    @abstractmethod
    async def committer(self) -> dict[str, str]: ...

    @abstractmethod
    async def close(self, record: WorkspaceView, *, title: str,
                    display_name: str | None = None, answer: str = "",
                    repair: bool = False) -> WorkspaceView: ...

    async def start_repair(self, session_id: str, failed: LandResult) -> str | None:
        """Put the session's worktree where its agent repairs `failed` (see
        `squadd.workspaces.repair`) and return the repair turn's prompt; None when the
        repair attempts are spent or the worktree cannot be prepared (said in the log)."""
        record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if record is None or record.repairs >= self.settings.repair_attempts or \
                failed.reason not in ("conflict", "check_failed"):
            return None
        if failed.next is not None:
            # The landing knows the fix is not the agent's (the target itself fails the check
            # and no report tells its failures apart): a repair turn would not help.
            return None
        prompt = None
        try:
            with anyio.CancelScope(shield=True):
                prompt = await start(
                    self.layout, self.git, record, failed, committer=await self.committer(),
                    style=self.settings.land_style, attempts=self.settings.repair_attempts)
        except (SquaddError, OSError) as exc:
            log.warning("repair turn not started", session_id=session_id, error=str(exc))
            await self.abandon_repair(session_id, str(exc))
        return prompt

    async def finish_repair(self, session_id: str, *, answer: str) -> str:
        """After a repair turn: continue the rebase with the agent's resolution and commit
        what else it changed. "" when the work is ready to land again, else why not."""
        record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if record is None:
            return f"session {session_id} has no worktree"
        with anyio.CancelScope(shield=True):
            try:
                why = await finish(self.layout, self.git, record,
                                          committer=await self.committer())
                if not why:
                    await self.close(record, title="repair of the landing", answer=answer,
                                     repair=True)
            except (SquaddError, OSError) as exc:
                await abandon(self.git, Path(record.path))
                why = str(exc)
            if why:
                record.state, record.message = "committed", f"repair turn failed: {why}"
                await anyio.to_thread.run_sync(records.save, self.layout, record)
        return why

    async def abandon_repair(self, session_id: str, why: str) -> None:
        """A repair turn that did not complete: its rebase is undone, the work is kept."""
        record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if record is None:
            return
        with anyio.CancelScope(shield=True):
            await abandon(self.git, Path(record.path))
            await describe(self.git, self.layout.repo, record)
            record.state, record.message = "committed", f"repair turn did not finish: {why}"
            await anyio.to_thread.run_sync(records.save, self.layout, record)

    async def hold_for_person(self, session_id: str, failed: LandResult) -> WorkspaceView | None:
        """Repairs ran out: the session waits for a person (`needs_attention`), its record
        saying what failed and the exact command to continue."""
        record = await anyio.to_thread.run_sync(records.load, self.layout, session_id)
        if record is None or record.state in ("landed", "removed"):
            return record
        outcome = failed.model_copy(update={"workspace": record}).outcome()
        tried = f" after {record.repairs} repair turn{'s' * (record.repairs != 1)}" \
            if record.repairs else ""
        outcome.detail = f"not landed{tried}: {outcome.detail.removeprefix('not landed: ')}"
        record.state, record.outcome = "needs_attention", outcome
        record.message = outcome.detail.splitlines()[0][:500]
        await anyio.to_thread.run_sync(records.save, self.layout, record)
        return record
