"""Where everything in a squad dir lives, and the rules that keep paths inside it.

Every path squadd reads or writes under ``.squad/`` comes from a method of `SquadLayout`, which
checks names against the naming rule and resolves each path to be sure it stays inside.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import safe_name
from squadd.errors import InvalidNameError, PathEscapeError, SquadNotFoundError

SQUAD_DIRNAMES = (".squad", ".ai-team")
"""Squad dir names in order of preference; `.ai-team` is the legacy name, used in place."""

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def safe_id(value: str, *, kind: str = "session id") -> str:
    """Check an opaque id (session, tool call) used as a file name."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or ".." in value:
        raise InvalidNameError(
            f"invalid {kind} {value!r}: ids must match {_ID_RE.pattern}"
        )
    return value


def find_squad_dir(start: Path | None = None) -> Path:
    """Walk up from `start` (default: the working directory) to the first squad dir."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        for dirname in SQUAD_DIRNAMES:
            candidate = folder / dirname
            if candidate.is_dir():
                return candidate
    raise SquadNotFoundError(
        f"no .squad/ folder found in {here} or any folder above it: "
        "run 'squadd init' in your repository first"
    )


@dataclass(frozen=True)
class SquadLayout:
    """The paths of one squad dir. Build it with `SquadLayout.find` or `SquadLayout.at`."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(os.path.realpath(self.root)))

    @classmethod
    def find(cls, start: Path | None = None) -> SquadLayout:
        return cls(find_squad_dir(start))

    @classmethod
    def at(cls, root: Path) -> SquadLayout:
        return cls(root.resolve())

    @classmethod
    def for_repo(cls, repo: Path) -> SquadLayout:
        """The layout for `repo`: its existing squad dir, or a new `.squad/` there."""
        repo = repo.resolve()
        for dirname in SQUAD_DIRNAMES:
            if (repo / dirname).is_dir():
                return cls(repo / dirname)
        return cls(repo / ".squad")

    @property
    def repo(self) -> Path:
        return self.root.parent

    def inside(self, path: Path) -> Path:
        """Resolve `path` and refuse it unless it stays inside the squad dir.

        Paths below the root are checked component by component with `lstat`; any symlink on
        the way (or a `..`) sends the path through a full `realpath` check.
        """
        if ".." not in Path(path).parts:
            absolute = Path(path).absolute()
            if absolute == self.root:
                return absolute
            if self.root in absolute.parents and not self._has_link(absolute):
                return absolute
        resolved = Path(os.path.realpath(path))
        if resolved != self.root and self.root not in resolved.parents:
            raise PathEscapeError(f"{path} resolves to {resolved}, outside {self.root}")
        return resolved

    def _has_link(self, absolute: Path) -> bool:
        current = self.root
        for part in absolute.relative_to(self.root).parts:
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return False
            if stat.S_ISLNK(mode):
                return True
        return False

    def _p(self, *parts: str) -> Path:
        return self.inside(self.root.joinpath(*parts))

    # Team-wide files.
    @property
    def team_md(self) -> Path:
        return self._p("team.md")

    @property
    def routing_md(self) -> Path:
        return self._p("routing.md")

    @property
    def decisions_md(self) -> Path:
        return self._p("decisions.md")

    @property
    def decisions_archive(self) -> Path:
        return self._p("decisions-archive.md")

    @property
    def decisions_index(self) -> Path:
        """The Scribe's index of entry hashes beside decisions.md (rebuilt when stale)."""
        return self._p("run", "decisions.index")

    @property
    def config_toml(self) -> Path:
        return self._p("config.toml")

    @property
    def inbox_dir(self) -> Path:
        return self._p("decisions", "inbox")

    @property
    def rejected_dir(self) -> Path:
        return self._p("decisions", "inbox", ".rejected")

    # Agents.
    @property
    def agents_dir(self) -> Path:
        return self._p("agents")

    def agent_dir(self, agent: str) -> Path:
        return self._p("agents", safe_name(agent))

    def charter(self, agent: str) -> Path:
        return self._p("agents", safe_name(agent), "charter.md")

    def history(self, agent: str) -> Path:
        return self._p("agents", safe_name(agent), "history.md")

    def history_archive(self, agent: str) -> Path:
        return self._p("agents", safe_name(agent), "history-archive.md")

    # Skills and tools.
    @property
    def skills_dir(self) -> Path:
        return self._p("skills")

    def skill_file(self, skill: str) -> Path:
        return self._p("skills", safe_name(skill, kind="skill"), "SKILL.md")

    def github_skill_file(self, skill: str) -> Path:
        """`.github/skills/{name}/SKILL.md` in the repo: read-only, outside the squad dir."""
        path = self.repo / ".github" / "skills" / safe_name(skill, kind="skill") / "SKILL.md"
        resolved = Path(os.path.realpath(path))
        base = Path(os.path.realpath(self.repo / ".github" / "skills"))
        if base not in resolved.parents:
            raise PathEscapeError(f"{path} resolves outside {base}")
        return resolved

    @property
    def github_skills_dir(self) -> Path:
        return self.repo / ".github" / "skills"

    @property
    def tools_dir(self) -> Path:
        return self._p("tools")

    @property
    def cycod_tools_dir(self) -> Path:
        """`.cycod/tools/` in the repo: CYCOD's project tool folder, read-only to squadd."""
        return self.repo / ".cycod" / "tools"

    # Sessions and their output.
    @property
    def sessions_dir(self) -> Path:
        return self._p("sessions")

    def transcript(self, session_id: str) -> Path:
        return self._p("sessions", safe_id(session_id) + ".jsonl")

    def tool_output(self, session_id: str, call_id: str) -> Path:
        return self._p(
            "tool-output", safe_id(session_id), safe_id(call_id, kind="tool call id") + ".txt"
        )

    def tool_output_part(self, session_id: str, call_id: str, part: str) -> Path:
        """A piece of a call's output being streamed (one command's), before it is assembled."""
        return self._p(
            "tool-output", safe_id(session_id),
            f"{safe_id(call_id, kind='tool call id')}.{safe_id(part, kind='output part')}.part",
        )

    @property
    def orchestration_dir(self) -> Path:
        return self._p("orchestration-log")

    def orchestration_log(self, stamp: str, agent: str) -> Path:
        return self._p("orchestration-log", f"{safe_id(stamp, kind='timestamp')}-"
                                            f"{safe_name(agent)}.md")

    # Workspaces: one git worktree per isolated session (git-ignored).
    @property
    def worktrees_dir(self) -> Path:
        return self._p("worktrees")

    def worktree(self, session_id: str) -> Path:
        return self._p("worktrees", safe_id(session_id))

    @property
    def workspaces_dir(self) -> Path:
        """The workspace records (one JSON file per session that has a worktree)."""
        return self._p("run", "workspaces")

    def workspace_record(self, session_id: str) -> Path:
        return self._p("run", "workspaces", safe_id(session_id) + ".json")

    def workspace_intent(self, session_id: str) -> Path:
        """The write-ahead intent of a landing under way (cleared when it is done or undone)."""
        return self._p("run", "journal", "land-" + safe_id(session_id) + ".json")

    def workspace_output(self, session_id: str, step: str) -> Path:
        """The full output of a workspace command (setup, land check) of a session."""
        return self._p("run", "workspaces", f"{safe_id(session_id)}.{safe_id(step)}.txt")

    @property
    def landing_lock(self) -> Path:
        """Held while a branch lands: one landing at a time per repository."""
        return self._p("run", "landing.lock")

    # Daemon runtime files (git-ignored).
    @property
    def log_dir(self) -> Path:
        return self._p("log")

    @property
    def log_file(self) -> Path:
        return self._p("log", "squadd.log")

    @property
    def run_dir(self) -> Path:
        return self._p("run")

    @property
    def socket(self) -> Path:
        return self._p("run", "squadd.sock")

    @property
    def pid_file(self) -> Path:
        return self._p("run", "squadd.pid")

    @property
    def daemon_lock(self) -> Path:
        return self._p("run", "squadd.lock")

    @property
    def token_file(self) -> Path:
        return self._p("run", "token")

    @property
    def scribe_lock(self) -> Path:
        return self._p("run", "scribe.lock")

    def lock_for(self, path: Path) -> Path:
        """The lock file that guards `path`: kept under run/locks/ so git never sees it."""
        relative = self.inside(path).relative_to(self.root)
        flat = "__".join(relative.parts)
        return self._p("run", "locks", flat + ".lock")
