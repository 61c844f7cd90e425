"""A session's workspace as squadd records and reports it: its worktree, branch and landing.

`WorkspaceView` is both the record kept under ``run/workspaces/`` and what `RouteResult`,
`squadd status` and `squadd workspaces` show.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

WorkspaceState = Literal[
    "spare",       # made ahead, detached at the target's tip: a new session takes it
    "creating",    # the worktree is being added (a crash here is undone at start-up)
    "active",      # the session works in it
    "committing",  # its changes are being committed
    "committed",   # its changes are on its branch, not on the target yet
    "landing",     # its branch is being rebased, checked and fast-forwarded onto the target
    "landed",      # the target branch holds its commits
    "conflict",    # the last landing stopped: a rebase conflict, a failed check, a dirty tree
    "needs_attention",  # repairs ran out: a person continues it (the record says how)
    "interrupted",  # the session was killed before its work was committed; worktree kept
    "removed",     # its worktree is gone (its branch stays while it has unlanded commits)
]
Isolation = Literal["shared", "worktree"]


class LandingIntent(BaseModel):
    """A landing under way, written ahead in the session's record: the target's tip and the
    branch's tip before it began, and (phase `advance`) the rebased tip the target moves to."""

    model_config = ConfigDict(extra="ignore")

    phase: Literal["rebase", "advance"]
    old_tip: str
    branch_tip: str
    new_tip: str | None = None


LandingState = Literal[
    "landed",        # the target branch holds the session's work
    "check_failed",  # land_check refused the candidate (with a report: it broke a test)
    "conflict",      # the rebase onto the target's tip stopped on conflicting paths
    "pending",       # the landing is queued, running, or waiting on a repair turn or a person
    "skipped",       # nothing to land (no commits, no worktree, or landing not asked for)
]


class LandingOutcome(BaseModel):
    """How a session's landing ended, as every caller receives it: the route's result (CLI,
    MCP, nested routes), the `workspace.landed` / `workspace.land_failed` events, `squadd
    sessions show` and the dashboard. `next` is one concrete command or action for a person."""

    model_config = ConfigDict(extra="ignore")

    state: LandingState
    commit: str | None = None
    """The target's new tip when landed."""
    fixed: list[str] = Field(default_factory=list)
    """Test ids failing on the target's tip that pass with the candidate (with a report)."""
    broke: list[str] = Field(default_factory=list)
    """Test ids passing on the target's tip that fail with the candidate (with a report)."""
    detail: str = ""
    """What happened, in a sentence or the check's output tail."""
    next: str | None = None
    """What to do next: one command (`squadd land SESSION`) or action; None when landed."""


class WorkspaceView(BaseModel):
    """One session's worktree: where it is, its branch, its commits and how its landing went.
    A spare worktree (state `spare`) has an id of its own in `session_id`, no agent and no
    branch: it belongs to no session until one takes it."""

    model_config = ConfigDict(extra="ignore")

    session_id: str
    agent: str
    branch: str
    """The session's branch, `squad/{agent}/{session-short}`."""
    target: str | None
    """The branch it lands on (the repository's HEAD branch when it was made; None: detached)."""
    base_commit: str
    path: str
    state: WorkspaceState = "creating"
    created: str = ""
    """When the worktree was made (ISO 8601, UTC)."""
    updated: str = ""
    commits: list[str] = Field(default_factory=list)
    """The branch's commits not on the target, oldest first, as `sha subject`."""
    diffstat: str = ""
    landed_tip: str | None = None
    conflict_paths: list[str] = Field(default_factory=list)
    message: str = ""
    """What the last step said: why a landing stopped, or what it did."""
    landing: LandingIntent | None = None
    """Set while the state is `landing`: what start-up needs to finish or undo it."""
    outcome: LandingOutcome | None = None
    """How the last landing asked for ended (what the route's result and events carry)."""
    commit_message: str = ""
    """The message its work lands with (`land_style = "squash"`), written when its task ended
    from the agent's answer (or the `commit_message:` line it gave) and the task."""
    repairs: int = 0
    """Repair turns the agent had for the landing under way (reset when it lands)."""


class LandResult(BaseModel):
    """What `squadd land` did. `ok` is True only when the target now holds the branch's work."""

    ok: bool
    session_id: str
    message: str
    reason: Literal["landed", "nothing", "conflict", "check_failed", "dirty", "moved",
                    "invalid", "failed"] = "landed"
    target: str | None = None
    old_tip: str | None = None
    new_tip: str | None = None
    conflict_paths: list[str] = Field(default_factory=list)
    check_tail: str = ""
    fixed: list[str] = Field(default_factory=list)
    """With a report: tests failing on the target's tip that pass with the candidate."""
    broke: list[str] = Field(default_factory=list)
    """With a report: tests passing on the target's tip that fail with the candidate."""
    next: str | None = None
    """What to do next, when the landing knows better than its reason's usual advice."""
    workspace: WorkspaceView | None = None

    def outcome(self) -> LandingOutcome:
        """This result as every caller receives it."""
        land_command = f"squadd land {self.session_id}"
        where = self.workspace.path if self.workspace is not None else "the session's worktree"
        target = self.target or "the target branch"
        if self.ok:
            if self.reason == "nothing":
                return LandingOutcome(state="skipped", detail=self.message)
            return LandingOutcome(state="landed", commit=self.new_tip, fixed=self.fixed,
                                  broke=self.broke, detail=self.message)
        if self.reason == "conflict":
            paths = ", ".join(self.conflict_paths) or "the conflicting files"
            return LandingOutcome(
                state="conflict", detail=self.message,
                next=f"resolve {paths} in the session's worktree (cd {where} && git rebase "
                     f"{target}, fix the files, git add them, git rebase --continue), then "
                     f"`{land_command}`")
        if self.reason == "check_failed":
            detail = self.message + (f"\n{self.check_tail.strip()}" if self.check_tail else "")
            return LandingOutcome(state="check_failed", fixed=self.fixed, broke=self.broke,
                                  detail=detail,
                                  next=self.next or f"fix the failing check in the "
                                                    f"worktree {where} (uncommitted changes "
                                                    f"are committed first), then "
                                                    f"`{land_command}`")
        if self.reason == "invalid":
            return LandingOutcome(state="skipped", detail=self.message)
        return LandingOutcome(state="pending", detail=self.message, next=land_command)
