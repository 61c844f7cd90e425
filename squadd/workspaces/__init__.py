"""Workspaces: a git worktree per isolated session, its commit, and one crash-safe landing queue.

Below the runtime (which opens, closes and lands workspaces) and above state (whose layout says
where worktrees and their records live). Git does the work, through the one process runner.
"""

from squadd.contracts.workspaces import LandResult, WorkspaceView
from squadd.workspaces.manager import Workspaces, charter_isolation

__all__ = ["LandResult", "WorkspaceView", "Workspaces", "charter_isolation"]
