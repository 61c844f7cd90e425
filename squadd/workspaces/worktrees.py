"""A session's worktree: made on its own branch, its changes committed, and removed.

Each step writes the session's record first (`creating`, `committing`), then does the git work,
then records the outcome, so a crash at any point leaves a record that says what to finish or
undo (see `reconcile`). The worktree's own copy of the squad dir is never committed: squad
state lives in the main repository's squad dir only.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog

from squadd.contracts.workspaces import WorkspaceView
from squadd.errors import SquaddError, WorkspaceError
from squadd.fsio import TEAM_FILE, append_fsync, file_lock, private_dir, read_text
from squadd.state.layout import SQUAD_DIRNAMES, SquadLayout
from squadd.workspaces import records
from squadd.workspaces.git import Git

log = structlog.get_logger("squadd.workspaces")

OUTSIDE_SQUAD = ("--", ".", *(f":(exclude){name}" for name in SQUAD_DIRNAMES))
"""Pathspec of everything in a worktree but its copy of the squad dir."""
_SHORT_RE = re.compile(r"[0-9a-f]{8}$")


@dataclass(frozen=True)
class RepoBase:
    """Where new worktrees start: the repository, its HEAD branch (None: detached) and commit."""

    repo: Path
    branch: str | None
    commit: str


async def repo_base(git: Git, layout: SquadLayout) -> RepoBase | str:
    """The repository's HEAD, or why worktrees cannot be used there (not a git repository,
    no commit yet, or the squad dir is not in the repository's top folder)."""
    repo = layout.repo
    # One git call answers all three in the usual case; the slow path below says what failed.
    both = await git.ran(repo, "rev-parse", "--show-toplevel", "HEAD", "--symbolic-full-name",
                         "HEAD")
    lines = both.output.strip().splitlines()
    if both.ok and len(lines) == 3 and _real(lines[0]) == repo:
        ref = lines[2].strip()
        return RepoBase(repo, ref.removeprefix("refs/heads/")
                        if ref.startswith("refs/heads/") else None, lines[1].strip())
    top = await git.ran(repo, "rev-parse", "--show-toplevel")
    if not top.ok:
        return f"{repo} is not a git repository"
    if _real(top.output.strip()) != repo:
        return f"the squad dir is not at the top of the git repository {top.output.strip()}"
    commit = await git.rev(repo, "HEAD")
    if commit is None:
        return f"the git repository {repo} has no commit yet"
    branch = await git.ran(repo, "symbolic-ref", "--quiet", "--short", "HEAD")
    return RepoBase(repo, branch.output.strip() if branch.ok else None, commit)


def _real(path: str) -> Path:
    return Path(os.path.realpath(path))


def branch_name(agent: str, session_id: str, *, short: bool = True) -> str:
    """`squad/{agent}/{session-short}` (the whole session id without `short`)."""
    found = _SHORT_RE.search(session_id) if short else None
    return f"squad/{_ref_part(agent)}/{found.group() if found else _ref_part(session_id)}"


def _ref_part(name: str) -> str:
    """`name` as a part of a branch name: agent and session ids are valid ones, except that
    git refuses a part ending in `.lock` (`build.lock` becomes `build-lock`)."""
    return name[:-len(".lock")] + "-lock" if name.endswith(".lock") else name


def ensure_ignored(layout: SquadLayout) -> None:
    """Make sure the squad dir's .gitignore ignores `worktrees/` (squads made before it did)."""
    path = layout.root / ".gitignore"
    with file_lock(layout.lock_for(path)):
        text = read_text(path)
        if "worktrees/" not in text.split():
            append_fsync(path, ("" if not text or text.endswith("\n") else "\n") +
                         "worktrees/\n", mode=TEAM_FILE)


async def new_record(layout: SquadLayout, git: Git, base: RepoBase, *, session_id: str,
                     agent: str) -> WorkspaceView:
    """The `creating` record of a session's worktree (not written yet), on a branch name no
    branch has."""
    await anyio.to_thread.run_sync(ensure_ignored, layout)
    branch = branch_name(agent, session_id)
    if await git.rev(base.repo, f"refs/heads/{branch}") is not None:
        branch = branch_name(agent, session_id, short=False)
    return WorkspaceView(session_id=session_id, agent=agent, branch=branch, target=base.branch,
                         base_commit=base.commit, path=str(layout.worktree(session_id)),
                         created=records.now_iso())


async def create(layout: SquadLayout, git: Git, base: RepoBase, *, session_id: str,
                 agent: str) -> WorkspaceView:
    """Add a worktree for the session on a new branch from `base`, and record it `active`."""
    record = await new_record(layout, git, base, session_id=session_id, agent=agent)
    path, branch = Path(record.path), record.branch
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("create.before_add")
    await anyio.to_thread.run_sync(lambda: path.parent.mkdir(parents=True, exist_ok=True))
    try:
        await git.out(base.repo, "worktree", "add", "--quiet", "--lock", "-b", branch,
                      str(path), base.commit, what=f"cannot make the worktree of session "
                                                    f"{session_id}")
    except WorkspaceError:
        # It may have been made before git failed (a failing post-checkout hook): undone
        # now, not left `creating` (counted in max_worktrees) until the next start-up.
        with anyio.CancelScope(shield=True):
            await undo_create(layout, git, record)
        raise
    records.kill_point("create.after_add")
    record.state = "active"
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("create.after_record")
    return record


async def undo_create(layout: SquadLayout, git: Git, record: WorkspaceView) -> None:
    """Remove a worktree whose making was cut short (no session worked in it yet), its branch
    if nothing was committed on it, and its record."""
    repo, path = layout.repo, Path(record.path)
    await git.ran(repo, "worktree", "unlock", record.path)
    await git.ran(repo, "worktree", "remove", "--force", record.path)
    if await anyio.to_thread.run_sync(own_folder, layout, record):
        # Moved in but not yet known to git under this path (a cut-short `worktree move`):
        # the folder is ours and holds no work.
        await anyio.to_thread.run_sync(shutil.rmtree, path)
    await git.ran(repo, "worktree", "prune")
    if record.branch:
        tip = await git.rev(repo, f"refs/heads/{record.branch}")
        if tip == record.base_commit:  # nothing was ever committed on it
            await git.ran(repo, "update-ref", "-d", f"refs/heads/{record.branch}", tip)
    await anyio.to_thread.run_sync(records.drop, layout, record.session_id)


def own_folder(layout: SquadLayout, record: WorkspaceView) -> bool:
    """Whether the record's path is a worktree (a real folder with git's `.git` file) at the
    very place squadd makes this session's: a record edited by hand (`worktrees/../../src`, a
    symlink there) or a folder someone else put there never gets deleted."""
    path = Path(record.path)
    try:
        own = path == layout.worktree(record.session_id)
    except SquaddError:  # not a session id squadd would have made
        return False
    dotgit = path / ".git"
    return own and path.is_dir() and not path.is_symlink() and dotgit.is_file() and \
        not dotgit.is_symlink()


def move_aside(layout: SquadLayout, record: WorkspaceView) -> bool:
    """Move the session's worktree out of its place and of git's sight in one rename, into
    `run/removed-worktrees/`, where `empty_removed` deletes its files later (off the path of
    a landing that waits: deleting ten thousand files in place took half a second). False
    when it is not squadd's own folder (`own_folder`) or cannot be moved there (another file
    system): `git worktree remove` deletes it in place, as before."""
    if not own_folder(layout, record):
        return False
    path = Path(record.path)
    aside = layout.removed_worktrees_dir
    try:
        path.rename(private_dir(aside) / f"{path.name}.{secrets.token_hex(4)}")
    except OSError as exc:
        log.info("worktree not moved aside; removed in place", session_id=record.session_id,
                 error=str(exc))
        return False
    return True


def empty_removed(layout: SquadLayout) -> int:
    """Delete the worktrees moved aside (blocking); how many went. One that cannot be deleted
    now is logged and left for the next time."""
    aside = layout.removed_worktrees_dir
    try:
        entries = list(os.scandir(aside))
    except FileNotFoundError:
        return 0
    gone = 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            gone += 1
        except FileNotFoundError:  # another squadd process deleted it meanwhile
            continue
        except OSError as exc:
            log.warning("removed worktree not deleted yet", path=entry.path, error=str(exc))
    return gone


async def changes(git: Git, tree: Path) -> list[str]:
    """The worktree's uncommitted paths outside its copy of the squad dir (an untracked folder
    counts as one). Read as the whole status, filtered here: git reads a status narrowed by
    an exclude pathspec several times slower on a large tree. Untracked files are asked for:
    a user's `status.showUntrackedFiles = no` would hide a session's new files."""
    ran = await git.ran(tree, "status", "--porcelain", "-z", "--untracked-files=normal")
    if not ran.ok:
        raise ran.error("cannot read the worktree's changes")
    return [p for p in status_paths(ran.output) if p.split("/", 1)[0] not in SQUAD_DIRNAMES]


def status_paths(status: str) -> list[str]:
    """The paths named by `git status --porcelain -z` output (not stripped: each entry starts
    with its two status letters); a rename or copy names its source too."""
    found: list[str] = []
    entries = iter(status.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        found += [p for p in ([entry[3:], next(entries, "")] if entry[0] in "RC"
                              else [entry[3:]]) if p]
    return found


async def branch_tips(git: Git, repo: Path, *branches: str) -> dict[str, str]:
    """The commits the named branches point at (a missing branch is left out), in one call."""
    refs = [f"refs/heads/{b}" for b in branches if b]
    if not refs:
        return {}
    listed = await git.out(repo, "for-each-ref", "--format=%(refname) %(objectname)", *refs,
                           what="cannot read the branches")
    found = dict(line.split(" ", 1) for line in listed.splitlines() if " " in line)
    return {ref.removeprefix("refs/heads/"): found[ref] for ref in refs if ref in found}


async def describe(git: Git, repo: Path, record: WorkspaceView) -> None:
    """Fill in the branch's commits not on the target, and their diffstat."""
    tips = await branch_tips(git, repo, record.branch, record.target or "")
    if record.branch not in tips:
        record.commits, record.diffstat = [], ""
        return
    upto = tips[record.branch]
    since = tips.get(record.target or "", record.base_commit)
    if upto == since:  # nothing done on the branch yet (an empty session)
        record.commits, record.diffstat = [], ""
        return
    listed = await git.out(repo, "log", "--reverse", "--format=%h %s", f"{since}..{upto}")
    record.commits = [line for line in listed.splitlines() if line]
    record.diffstat = (await git.out(repo, "diff", "--shortstat", f"{since}...{upto}")
                       if record.commits else "")


async def commit(layout: SquadLayout, git: Git, record: WorkspaceView, *, author: str,
                 email: str, message: str, committer: Mapping[str, str] | None = None) -> bool:
    """Commit every change in the worktree (outside its squad dir) on the session's branch;
    False when there was nothing to commit."""
    tree = Path(record.path)
    if not await changes(git, tree):
        await describe(git, layout.repo, record)
        record.state = "committed" if record.commits else "active"
        await anyio.to_thread.run_sync(records.save, layout, record)
        return False
    record.state = "committing"
    await anyio.to_thread.run_sync(records.save, layout, record)
    records.kill_point("commit.before")
    await git.out(tree, "add", "--all", *OUTSIDE_SQUAD, what="cannot stage the changes")
    identity = {"GIT_AUTHOR_NAME": author, "GIT_AUTHOR_EMAIL": email,
                "GIT_COMMITTER_NAME": author, "GIT_COMMITTER_EMAIL": email, **(committer or {})}
    await git.out(tree, "-c", "maintenance.auto=false", "commit", "--quiet", "--no-verify",
                  "-m", message, env=identity,
                  what=f"cannot commit the work of session {record.session_id}")
    records.kill_point("commit.after")
    await describe(git, layout.repo, record)
    record.state = "committed"
    await anyio.to_thread.run_sync(records.save, layout, record)
    return True


async def unlanded(git: Git, repo: Path, record: WorkspaceView) -> list[str]:
    """The branch's commits that the target (or, detached, the base) does not hold."""
    tips = await branch_tips(git, repo, record.branch, record.target or "")
    if record.branch not in tips:
        return []
    since = tips.get(record.target or "", record.base_commit)
    listed = await git.out(repo, "rev-list", f"{since}..{tips[record.branch]}")
    return listed.split()


async def remove(layout: SquadLayout, git: Git, record: WorkspaceView, *,
                 landed: bool = False) -> bool:
    """Remove the worktree; delete its branch only when it holds no unlanded commit.
    Returns whether the branch was kept. With `landed` (just landed), a record whose branch
    went stays, `landed`, saying so: it keeps the landing's outcome."""
    repo = layout.repo
    path = Path(record.path)
    await git.ran(repo, "worktree", "unlock", str(path))
    if await anyio.Path(path).exists() and \
            not await anyio.to_thread.run_sync(move_aside, layout, record):
        gone = await git.ran(repo, "worktree", "remove", "--force", str(path))
        if not gone.ok:
            raise gone.error(f"cannot remove the worktree of session {record.session_id}")
    await git.ran(repo, "worktree", "prune")  # forgets a worktree moved aside
    kept = bool(await unlanded(git, repo, record))
    if not kept:
        tip = await git.rev(repo, f"refs/heads/{record.branch}")
        if tip is not None:
            # Compare-and-delete: a branch that moved since it was read is left alone.
            await git.ran(repo, "update-ref", "-d", f"refs/heads/{record.branch}", tip)
    if landed and not kept:
        record.message += "; its worktree and branch were removed (workspace.keep_landed)"
        await anyio.to_thread.run_sync(records.save, layout, record)
        return kept
    record.state = "removed"
    await anyio.to_thread.run_sync(records.save, layout, record)
    if not kept:
        await anyio.to_thread.run_sync(records.drop, layout, record.session_id)
    return kept


def require_worktree(record: WorkspaceView) -> Path:
    tree = Path(record.path)
    if not tree.is_dir():
        raise WorkspaceError(f"the worktree of session {record.session_id} ({tree}) is gone")
    return tree
