"""Where everything in a squad dir lives.

Every path squadd reads or writes under ``.squad/`` comes from a method of `SquadLayout`, which
checks names against the naming rule and resolves each path to be sure it stays inside (the
rules themselves are `squadd.state.inside`'s). The team's files are named here; squadd's own
files (transcripts, workspaces, run/) in `squadd.state.run_layout`, which `SquadLayout` takes in.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from squadd.contracts.names import is_safe_name, safe_name
from squadd.errors import PathEscapeError
from squadd.state.inside import (
    SQUAD_DIRNAMES,
    find_squad_dir,
    open_inside,
    read_inside,
    safe_id,
)
from squadd.state.run_layout import JOURNAL_SUFFIX, RunPaths

TYPE_CHECKING = False  # `squadd status` finds the squad dir here: no `typing` at run time
if TYPE_CHECKING:
    from typing import Literal

    SkillSource = Literal["github", "squad", "copilot"]
    """Where a skill lives: `.github/skills/`, `.squad/skills/` or `.copilot/skills/`."""

_PROMPT_PATHS_KEPT = 4096
"""Unchecked prompt-file paths a layout keeps (past that it starts over): three an agent."""
FOLDER_RECHECK_S = 1.0
"""How long a folder squadd uses at every route (the transcripts, the orchestration log, the
workspace records) is taken as checked (`SquadLayout.folder`) before it is checked again."""
_clock = time.monotonic

__all__ = ["JOURNAL_SUFFIX", "SQUAD_DIRNAMES", "SquadLayout", "find_squad_dir", "open_inside",
           "read_inside", "safe_id"]


class SquadLayout(RunPaths):
    """The paths of one squad dir. Build it with `SquadLayout.find` or `SquadLayout.at`.

    Immutable, and equal to another layout of the same root. (A plain class, not a dataclass:
    `dataclasses` imports `inspect`, a tenth of what `squadd status` takes to start.)
    """

    __slots__ = ("_folders", "_prefix", "_prompt_paths", "_root_text", "_skill_roots", "repo",
                 "root")

    root: Path
    repo: Path
    """The repository: the squad dir's parent."""
    _root_text: str
    _prefix: str
    _skill_roots: tuple[tuple[SkillSource, Path], ...]
    _prompt_paths: dict[tuple[str, str], Path]
    _folders: dict[tuple[str, ...], tuple[Path, float]]

    def __init__(self, root: Path):
        resolved = Path(os.path.realpath(root))
        object.__setattr__(self, "root", resolved)
        object.__setattr__(self, "repo", resolved.parent)
        # Built once: every session start lists the skills, and these never change.
        object.__setattr__(self, "_skill_roots", (
            ("github", resolved.parent / ".github" / "skills"), ("squad", resolved / "skills"),
            ("copilot", resolved.parent / ".copilot" / "skills")))
        # `inside` works on text: building `Path` objects for each check cost more than the
        # `lstat` calls it makes, and it runs for every path of every route.
        object.__setattr__(self, "_root_text", str(resolved))
        object.__setattr__(self, "_prefix", str(resolved).rstrip(os.sep) + os.sep)
        # `prompt_file(check=False)`'s paths, kept: every route asks for four of them.
        object.__setattr__(self, "_prompt_paths", {})
        # `folder`'s checked folders, each with when it is checked again.
        object.__setattr__(self, "_folders", {})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a SquadLayout cannot be changed (tried to set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a SquadLayout cannot be changed (tried to delete {name!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SquadLayout):
            return NotImplemented
        return self.root == other.root

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"SquadLayout(root={self.root!r})"

    def __reduce__(self) -> tuple[type[SquadLayout], tuple[Path]]:
        return SquadLayout, (self.root,)

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

    def inside(self, path: Path | str) -> Path:
        """Resolve `path` and refuse it unless it stays inside the squad dir.

        Paths below the root are checked component by component with `lstat`; any symlink on
        the way (or a `..`) sends the path through a full `realpath` check.
        """
        text = os.fspath(path)
        if not os.path.isabs(text):
            text = os.path.join(os.getcwd(), text)
        if text == self._root_text:
            return self.root
        if text.startswith(self._prefix):
            parts = [part for part in text[len(self._prefix):].split(os.sep)
                     if part and part != "."]
            if ".." not in parts and not self._has_link(parts):
                return Path(text)
        resolved = Path(os.path.realpath(path))
        if resolved != self.root and self.root not in resolved.parents:
            raise PathEscapeError(f"{path} resolves to {resolved}, outside {self.root}")
        return resolved

    def open_file(self, path: Path) -> int:
        """`open_inside(path, repo)`: the one rule for every file squadd reads from the squad
        (and from the repository's skill folders)."""
        return open_inside(path, self.repo)

    def read_text(self, path: Path, *, errors: str = "strict") -> str:
        """A squad file's text through `open_file` (`FileNotFoundError` when it is missing,
        `PathEscapeError` when it leads outside the repository)."""
        return read_inside(path, self.repo).decode("utf-8", errors)

    def _has_link(self, parts: list[str]) -> bool:
        """Whether a path below the root, given as its components, passes through a symlink
        (a missing component ends the walk: nothing below it exists to lead anywhere)."""
        current = self._root_text
        for part in parts:
            current = current + os.sep + part
            try:
                mode = os.lstat(current).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return False
            if stat.S_ISLNK(mode):
                return True
        return False

    def folder(self, *parts: str) -> Path:
        """`_p(*parts)` for a folder squadd uses at every route, checked at most once every
        `FOLDER_RECHECK_S`: each check is a `lstat` a component on the event loop (or the
        commit thread), and each makes the other thread wait for the interpreter. A link put
        in place of the folder is refused from the next check on; a file in it is opened with
        `O_NOFOLLOW` (or read through a checked path), so a link at its own name is refused at
        once."""
        now = _clock()
        known = self._folders.get(parts)
        if known is not None and now < known[1]:
            return known[0]
        path = self._p(*parts)
        self._folders[parts] = (path, now + FOLDER_RECHECK_S)
        return path

    def _p(self, *parts: str, check: bool = True) -> Path:
        if check and not any(os.path.isabs(part) for part in parts):
            return self.inside(self._prefix + os.sep.join(parts))  # as text: see `inside`
        joined = self.root.joinpath(*parts)
        return self.inside(joined) if check else joined

    def prompt_file(self, part: str, agent: str = "", *, check: bool = True) -> Path:
        """A file the system prompt is built from: the agent's `charter` or `history`, or the
        team's `decisions` (no agent). `check=False` skips the walk that refuses a path through a
        symlink: only for a path that is read through `open_file` (or a cache filled by it),
        which refuses whatever the file leads outside the repository by itself."""
        if not check:
            known: Path | None = self._prompt_paths.get((part, agent))
            if known is not None:
                return known
        if part == "decisions":
            path = self._p("decisions.md", check=check)
        elif part in ("charter", "history"):
            path = self._p("agents", self.agent_folder(agent), f"{part}.md", check=check)
        else:
            raise ValueError(f"not a prompt file: {part!r}")
        if not check:
            if len(self._prompt_paths) >= _PROMPT_PATHS_KEPT:
                self._prompt_paths.clear()
            self._prompt_paths[part, agent] = path
        return path

    # Team-wide files.
    @property
    def team_md(self) -> Path:
        return self._p("team.md")

    @property
    def routing_md(self) -> Path:
        return self._p("routing.md")

    @property
    def decisions_md(self) -> Path:
        return self.prompt_file("decisions")

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
    def hooks_json(self) -> Path:
        """The squad's hooks, in Claude Code's format (`{"hooks": {EVENT: [...]}}`)."""
        return self._p("hooks.json")

    @property
    def claude_settings(self) -> Path:
        """The project's `.claude/settings.json`, whose hooks `hooks.import_claude` reads.
        Outside the squad dir: read it through `open_file` (it must stay in the repository)."""
        return self.repo / ".claude" / "settings.json"

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

    def agent_folder(self, agent: str) -> str:
        """The folder under `agents/` that holds agent `agent`: its lower-case name, or, where
        only a folder of another case exists (Squad's `agents/Rai/`), that one."""
        name = safe_name(agent)
        agents = self._prefix + "agents"
        if os.path.lexists(agents + os.sep + name):
            return name
        try:
            children = sorted(child.name for child in Path(agents).iterdir())
        except OSError:
            return name
        return next((child for child in children if child.lower() == name), name)

    def agent_dir(self, agent: str) -> Path:
        return self._p("agents", self.agent_folder(agent))

    def charter(self, agent: str) -> Path:
        return self.prompt_file("charter", agent)

    def history(self, agent: str) -> Path:
        return self.prompt_file("history", agent)

    def history_archive(self, agent: str) -> Path:
        return self._p("agents", self.agent_folder(agent), "history-archive.md")

    # Squad's casting state (written by Squad's `init`, `cast` and presets).
    @property
    def casting_registry(self) -> Path:
        return self._p("casting", "registry.json")

    @property
    def casting_history(self) -> Path:
        return self._p("casting", "history.json")

    # Skills and tools.
    @property
    def skills_dir(self) -> Path:
        return self._p("skills")

    def skill_file(self, skill: str) -> Path:
        return self._p("skills", safe_name(skill, kind="skill"), "SKILL.md")

    @property
    def github_skills_dir(self) -> Path:
        """`.github/skills/` in the repo: Squad's canonical skills folder."""
        return self._skill_roots[0][1]

    @property
    def copilot_skills_dir(self) -> Path:
        """`.copilot/skills/` in the repo: read after the other two."""
        return self._skill_roots[2][1]

    def skill_roots(self) -> tuple[tuple[SkillSource, Path], ...]:
        """The skill folders in Squad's precedence: `.github/skills/`, `.squad/skills/`,
        `.copilot/skills/`. A skill found in an earlier folder hides one of the same name later."""
        # unchecked here: the readers check each path they use (skill_files, skill_file_in)
        return self._skill_roots

    def _skill_root(self, source: SkillSource) -> Path:
        return next(folder for name, folder in self._skill_roots if name == source)

    def skill_file_in(self, source: SkillSource, skill: str) -> Path:
        """`{root}/{skill}/SKILL.md` of one skill folder, refused unless it resolves inside that
        folder, and the folder inside the repository."""
        name = safe_name(skill, kind="skill")
        if source == "squad":
            return self.skill_file(name)
        base = self._skill_root(source)
        path = base / name / "SKILL.md"
        resolved = Path(os.path.realpath(path))
        real_base = Path(os.path.realpath(base))
        if real_base not in resolved.parents:
            raise PathEscapeError(f"{path} resolves to {resolved}, outside {real_base}")
        if Path(os.path.realpath(self.repo)) not in real_base.parents:
            raise PathEscapeError(f"{base} resolves to {real_base}, outside the repository")
        return resolved

    def skill_files(self, source: SkillSource) -> list[tuple[str, Path]]:
        """(name, SKILL.md path) of each skill in one skill folder, sorted by name: folders
        with a lower-case safe name and a SKILL.md, each path kept inside its folder as
        `skill_file_in` would. A scan costs a stat per skill; links get the full check."""
        return self.skill_files_if_there(source) or []

    def skill_files_if_there(self, source: SkillSource) -> list[tuple[str, Path]] | None:
        """`skill_files`, or None when the folder is not there (nothing by its name)."""
        base = self._skill_root(source)
        try:
            entries = sorted(os.scandir(base), key=lambda entry: entry.name)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            return []
        if source != "squad":
            real_base = Path(os.path.realpath(base))
            if Path(os.path.realpath(self.repo)) not in real_base.parents:
                return []
        else:
            try:
                real_base = self.inside(base)
            except PathEscapeError:
                return []
        found: list[tuple[str, Path]] = []
        for entry in entries:
            name = entry.name
            if name != name.lower() or not is_safe_name(name):
                continue
            path = real_base / name / "SKILL.md"
            try:
                linked = entry.is_symlink() or stat.S_ISLNK(os.lstat(path).st_mode)
                if linked:
                    path = self.skill_file_in(source, name)
                if path.is_file():
                    found.append((name, path))
            except (OSError, PathEscapeError):
                continue  # gone, not a folder, or a link that leads out
        return found

    def github_skill_file(self, skill: str) -> Path:
        """`.github/skills/{name}/SKILL.md` in the repo."""
        return self.skill_file_in("github", skill)

    def skill_write_file(self, skill: str) -> tuple[SkillSource, Path]:
        """Where a skill is written: `.github/skills/` when that folder exists (as Squad
        writes), else `.squad/skills/`."""
        if self.github_skills_dir.is_dir():
            return "github", self.skill_file_in("github", skill)
        return "squad", self.skill_file(skill)

    @property
    def tools_dir(self) -> Path:
        return self._p("tools")

    @property
    def cycod_tools_dir(self) -> Path:
        """`.cycod/tools/` in the repo: CYCOD's project tool folder, read-only to squadd."""
        return self.repo / ".cycod" / "tools"
