"""Landing a session's branch: rebase onto the target's tip, check, fast-forward the target.

The rebase and the check run in the session's worktree, so the target branch and the user's
working tree are untouched until the one step that moves the target: a `git merge --ff-only`
where the target is checked out, else a compare-and-swap `git update-ref`. Nothing is pushed and
no branch is force-updated. The session's record is the write-ahead intent: written (fsynced)
in state `landing` with the old tip and the branch's tip before the rebase, and with the new
tip before the target moves, so start-up can finish or undo a landing that a crash cut short:
the target ends at its old tip or at the new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import anyio

from squadd.contracts.workspaces import LandingIntent, LandResult, WorkspaceView
from squadd.errors import SandboxError
from squadd.state.layout import SquadLayout
from squadd.workspaces import records
from squadd.workspaces.checks import (
    CheckResult,
    LandCheck,
    cached_tip,
    judge,
    needs_tip,
    remember_tip,
    run_check,
)
from squadd.workspaces.git import Git
from squadd.workspaces.worktrees import branch_tips, changes, describe, status_paths

__all__ = ["LandCheck", "advance", "checked_out_at", "land", "roll_back"]
LandStyle = Literal["squash", "rebase"]

LIST_ATTEMPTS = 5
MAX_PATHSPEC_BYTES = 256 << 10
"""Most bytes of landed paths named to `git status` (a command line is bounded: ARG_MAX);
past that the whole tree's status is read."""


async def checked_out_at(git: Git, repo: Path, branch: str) -> Path | None:
    """The working tree that has `branch` checked out, if any."""
    listed = await git.ran(repo, "worktree", "list", "--porcelain")
    for _ in range(LIST_ATTEMPTS):
        if listed.ok:
            break
        # A worktree being added at this moment can be read half-made: read the list again.
        await anyio.sleep(0.05)
        listed = await git.ran(repo, "worktree", "list", "--porcelain")
    if not listed.ok:
        raise listed.error("cannot list the worktrees")
    listing = listed.output
    current: Path | None = None
    for line in listing.splitlines():
        if line.startswith("worktree "):
            current = Path(line[len("worktree "):])
        elif line == f"branch refs/heads/{branch}" and current is not None:
            return current
    return None


async def _dirty_paths(git: Git, tree: Path, among: list[str]) -> set[str]:
    """The uncommitted paths of `tree`, read among `among` only (a landing touches a few
    files: the status of the whole tree would read every file of a large repository)."""
    if not among:
        return set()
    spec = [f":(literal){p}" for p in among]
    if sum(len(p.encode()) + 1 for p in spec) > MAX_PATHSPEC_BYTES:
        spec = []
    ran = await git.ran(tree, "status", "--porcelain", "-z", "--untracked-files=all", "--",
                        *spec)
    if not ran.ok:
        raise ran.error("cannot read the working tree's status")
    return set(status_paths(ran.output))


async def roll_back(git: Git, record: WorkspaceView, branch_tip: str) -> None:
    """Put the session's branch back at its tip from before the landing (its worktree is
    clean: the landing began from committed work)."""
    tree = Path(record.path)
    for stop in ("--abort", "--quit"):
        await git.ran(tree, "rebase", stop)
    # A tip check cut short leaves the worktree detached at the target's tip.
    await git.ran(tree, "checkout", "--quiet", "--force", record.branch)
    await git.out(tree, "reset", "--quiet", "--hard", branch_tip,
                  what="cannot put the branch back")


async def _stopped(layout: SquadLayout, git: Git, record: WorkspaceView, branch_tip: str,
                   result: LandResult) -> LandResult:
    await roll_back(git, record, branch_tip)
    record.state, record.landing = "conflict", None
    record.conflict_paths = result.conflict_paths
    record.message = result.message
    await describe(git, layout.repo, record)
    await anyio.to_thread.run_sync(records.save, layout, record)
    return result.model_copy(update={"workspace": record})


async def squash(git: Git, tree: Path, record: WorkspaceView, *, onto: str,
                 branch_tip: str, committer: dict[str, str]) -> None:
    """Make the branch one commit on its fork point from `onto`: the branch's tree, authored
    by its first commit's author, with the session's message (`commit_message`, else the last
    commit's), committed by `committer`. Plumbing only: no hook runs."""
    base = await git.out(tree, "merge-base", onto, branch_tip, what="cannot find the fork point")
    # The author of the session's first commit: later ones may be a person's fix-up.
    authors = await git.out(tree, "log", "--reverse", "--format=%an%x00%ae",
                            f"{base}..{branch_tip}", what="cannot read the branch's author")
    author = (authors.splitlines() or ["Squad\0squad@squad.local"])[0].split("\0")
    message = record.commit_message or await git.out(
        tree, "log", "-1", "--format=%B", branch_tip, what="cannot read the branch's message")
    env = dict(committer, GIT_AUTHOR_NAME=author[0], GIT_AUTHOR_EMAIL=author[-1])
    one = await git.out(tree, "commit-tree", f"{branch_tip}^{{tree}}", "-p", base,
                        "-m", message.strip(), env=env, what="cannot squash the branch")
    await git.out(tree, "reset", "--quiet", "--soft", one, what="cannot squash the branch")


async def land(layout: SquadLayout, git: Git, record: WorkspaceView, *, check: LandCheck,
               identity: dict[str, str], checked_clean: bool = False,
               style: LandStyle = "rebase") -> LandResult:
    """Land `record`'s branch on its target. The caller holds the landing lock; with
    `checked_clean` it has just committed the worktree's changes (so its status is not read
    again). `identity` is the committer's (`GIT_COMMITTER_NAME` / `_EMAIL`); with `squash` the
    branch becomes one commit first."""
    sid, repo = record.session_id, layout.repo

    def refuse(reason: Any, message: str) -> LandResult:
        return LandResult(ok=False, session_id=sid, reason=reason, message=message,
                          target=record.target, workspace=record)

    if record.target is None:
        return refuse("invalid", f"session {sid} started from a detached HEAD: there is no "
                                 "branch to land on")
    tree = Path(record.path)
    if not await anyio.Path(tree).is_dir():
        return refuse("invalid", f"the worktree of session {sid} is gone")
    tips = await branch_tips(git, repo, record.target, record.branch)
    old_tip, branch_tip = tips.get(record.target), tips.get(record.branch)
    if old_tip is None or branch_tip is None:
        return refuse("invalid", f"branch {record.target if old_tip is None else record.branch}"
                                 " no longer exists")
    if not checked_clean and await changes(git, tree):
        return refuse("invalid", f"the worktree of session {sid} has uncommitted changes")
    if not await git.out(repo, "rev-list", "-n", "1", f"{old_tip}..{branch_tip}"):
        return LandResult(ok=True, session_id=sid, reason="nothing", target=record.target,
                          old_tip=old_tip, new_tip=old_tip, workspace=record,
                          message=f"{record.target} already holds every commit of "
                                  f"{record.branch}")
    record.state = "landing"
    record.landing = LandingIntent(phase="rebase", old_tip=old_tip, branch_tip=branch_tip)
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("land.before_rebase")
    if style == "squash":
        await squash(git, tree, record, onto=old_tip, branch_tip=branch_tip,
                     committer=identity)
        records.kill_point("land.after_squash")
    rebased = await git.ran(tree, "rebase", "--quiet", old_tip, env=identity)
    if not rebased.ok:
        conflicted = await git.ran(tree, "diff", "--name-only", "--diff-filter=U", "-z")
        paths = sorted(p for p in conflicted.output.split("\0") if p)
        why = f"conflicts in {', '.join(paths)}" if paths else rebased.tail.strip()
        return await _stopped(layout, git, record, branch_tip, refuse(
            "conflict", f"{record.branch} does not rebase cleanly onto {record.target}: "
                        f"{why}; {record.target} is unchanged").model_copy(
            update={"conflict_paths": paths}))
    records.kill_point("land.after_rebase")
    new_tip = await git.out(tree, "rev-parse", "HEAD")
    candidate: CheckResult | None = None
    fixed: list[str] = []
    broke: list[str] = []
    passed = ""
    if check.command:
        try:
            candidate = await run_check(layout, check, tree, session_id=sid, commit=new_tip,
                                        step="land-check")
            tip = await _tip_result(layout, git, record, check, old_tip) \
                if needs_tip(check, candidate) else None
        except SandboxError as exc:
            return await _stopped(layout, git, record, branch_tip, refuse(
                "check_failed", f"the land check `{check.command}` cannot run: {exc}; "
                                f"{record.target} is unchanged"))
        verdict = judge(check, record.target, candidate, tip)
        if not verdict.ok:
            red = tip is not None and not tip.passed and check.policy == "green"
            how = ("set land_policy = \"no-new-failures\"" if check.report else
                   "configure a JUnit report (land_check = \"pytest -q --junitxml={report}\", "
                   "land_check_report = \"{report}\")")
            advice = None if not red else (
                f"{how} under [workspace] in .squad/config.toml, or make {record.target} pass "
                f"`{check.command}`; then `squadd land {sid}`")
            return await _stopped(layout, git, record, branch_tip, refuse(
                "check_failed", f"not landed: {verdict.detail}; {record.target} is "
                                f"unchanged").model_copy(update={
                    "check_tail": candidate.tail, "fixed": verdict.fixed,
                    "broke": verdict.broke, "next": advice}))
        fixed, broke, passed = verdict.fixed, verdict.broke, verdict.detail
    records.kill_point("land.after_check")
    record.landing = LandingIntent(phase="advance", old_tip=old_tip, branch_tip=branch_tip,
                                   new_tip=new_tip)
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("land.before_advance")
    result = await advance(layout, git, record, old_tip=old_tip, new_tip=new_tip,
                           branch_tip=branch_tip, fixed=fixed, broke=broke, checked=passed)
    if result.ok and candidate is not None:
        # The candidate is the target's tip now: the next landing need not check it again.
        await anyio.to_thread.run_sync(remember_tip, layout, candidate)
    return result


async def _tip_result(layout: SquadLayout, git: Git, record: WorkspaceView, check: LandCheck,
                      old_tip: str) -> CheckResult:
    """The check's result on the target's tip: remembered, or run now in the session's
    worktree checked out (detached) at the tip, then put back on the session's branch."""
    cached = await anyio.to_thread.run_sync(cached_tip, layout, old_tip, check.command)
    if cached is not None:
        return cached
    tree = Path(record.path)
    await git.out(tree, "checkout", "--quiet", "--force", "--detach", old_tip,
                  what="cannot check out the target's tip to check it")
    records.kill_point("land.tip_check")
    try:
        result = await run_check(layout, check, tree, session_id=record.session_id,
                                 commit=old_tip, step="land-check-tip")
    finally:
        with anyio.CancelScope(shield=True):
            await git.out(tree, "checkout", "--quiet", "--force", record.branch,
                          what="cannot put the worktree back on its branch")
    await anyio.to_thread.run_sync(remember_tip, layout, result)
    return result


async def advance(layout: SquadLayout, git: Git, record: WorkspaceView, *, old_tip: str,
                  new_tip: str, branch_tip: str, fixed: list[str] | None = None,
                  broke: list[str] | None = None, checked: str = "") -> LandResult:
    """Move the target from `old_tip` to `new_tip` by fast-forward only, then record it (with
    its outcome: the tests it `fixed` and `broke`, and what the check said)."""
    sid, repo, target = record.session_id, layout.repo, record.target or ""
    checkout = await checked_out_at(git, repo, target)
    if checkout is not None:
        # --no-renames: a renamed file's old path is changed too; -z, not stripped: names as
        # they are (as the status reads them), not quoted.
        diff = await git.ran(repo, "diff", "--name-only", "--no-renames", "-z", old_tip, new_tip)
        if not diff.ok:
            raise diff.error("cannot read the landed paths")
        changed = [p for p in diff.output.split("\0") if p]
        dirty = sorted(set(changed) & await _dirty_paths(git, checkout, changed))
        if dirty:
            return await _stopped(layout, git, record, branch_tip, LandResult(
                ok=False, session_id=sid, reason="dirty", target=target, conflict_paths=dirty,
                message=f"not landed: your working tree {checkout} has uncommitted changes in "
                        f"{', '.join(dirty)}, which the landing would change; commit or stash "
                        f"them, then run squadd land {sid} again"))
        # No auto maintenance spawned on the landing's path: the user's own git runs it.
        moved = await git.ran(checkout, "-c", "maintenance.auto=false", "merge", "--ff-only",
                              "--quiet", new_tip)
    else:
        moved = await git.ran(repo, "update-ref", f"refs/heads/{target}", new_tip, old_tip)
    # A compare-and-swap that succeeded moved the target to new_tip; a merge can succeed
    # without doing so ("already up to date" when the target moved past it), so read it.
    tip = new_tip if checkout is None and moved.ok else \
        await git.rev(repo, f"refs/heads/{target}")
    if tip != new_tip:
        why = moved.tail.strip() if not moved.ok else f"{target} is at {tip}"
        return await _stopped(layout, git, record, branch_tip, LandResult(
            ok=False, session_id=sid, reason="moved", target=target,
            message=f"{target} could not be fast-forwarded: {why}; it is unchanged"))
    records.kill_point("land.after_advance")
    record.state, record.landed_tip, record.conflict_paths = "landed", new_tip, []
    record.landing, record.repairs = None, 0
    record.message = f"landed on {target} at {new_tip[:12]}"
    fixed = fixed or []
    message = f"{record.branch} landed on {target}: {old_tip[:12]}..{new_tip[:12]}" + (
        f"; {checked}" if checked else "") + (f": fixed {', '.join(fixed[:10])}" if fixed else "")
    result = LandResult(ok=True, session_id=sid, target=target, old_tip=old_tip,
                        new_tip=new_tip, message=message, fixed=fixed, broke=broke or [],
                        workspace=record)
    record.outcome = result.outcome()
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("land.after_record")
    return result
