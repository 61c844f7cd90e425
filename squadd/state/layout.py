"""Where everything in a squad dir lives, and the rules that keep paths inside it.

Every path squadd reads or writes under ``.squad/`` comes from a method of `SquadLayout`, which
checks names against the naming rule and resolves each path to be sure it stays inside. Every
file squadd reads from the squad (charters, routing, team, skills, tools, histories, decisions)
is opened through `open_inside`: the file actually opened must lie inside the repository, so a
symlink such as `SKILL.md -> ~/.netrc` is refused before a byte of it is read.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from squadd.contracts.names import is_safe_name, safe_name
from squadd.errors import InvalidNameError, PathEscapeError, SquadNotFoundError, StateError

TYPE_CHECKING = False  # `squadd status` finds the squad dir here: no `typing` at run time
if TYPE_CHECKING:
    from typing import Literal

    SkillSource = Literal["github", "squad", "copilot"]
    """Where a skill lives: `.github/skills/`, `.squad/skills/` or `.copilot/skills/`."""

SQUAD_DIRNAMES = (".squad", ".ai-team")
"""Squad dir names in order of preference; `.ai-team` is the legacy name, used in place."""

JOURNAL_SUFFIX = ".log"
"""The end of a group-commit journal's name (`SquadLayout.transcript_journal`)."""
_PROMPT_PATHS_KEPT = 4096
"""Unchecked prompt-file paths a layout keeps (past that it starts over): three an agent."""
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def safe_id(value: str, *, kind: str = "session id") -> str:
    """Check an opaque id (session, tool call) used as a file name."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value) or ".." in value:
        raise InvalidNameError(
            f"invalid {kind} {value!r}: ids must match {_ID_RE.pattern}"
        )
    return value


def _opened_path(fd: int, path: Path) -> Path:
    """The real path of the file open on `fd` (from /proc where there is one)."""
    try:
        return Path(f"/proc/self/fd/{fd}").readlink()
    except OSError:
        return Path(os.path.realpath(path))


def open_inside(path: Path, base: Path) -> int:
    """Open `path` for reading and return the descriptor, only if the file opened (after every
    symlink) lies inside `base` and is a regular file; else `PathEscapeError` or `StateError`,
    and nothing is read. Checked on the open descriptor, so a swapped link cannot slip past.
    FIFOs do not block the open (O_NONBLOCK) and are refused as not regular."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        real = _opened_path(fd, path)
        real_base = Path(os.path.realpath(base))
        if real != real_base and real_base not in real.parents:
            raise PathEscapeError(f"{path} leads to {real}, outside {real_base}: squadd does not "
                                  "read files outside the repository (replace the symlink "
                                  "with the file itself)")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"{path} is not a regular file: not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_inside(path: Path, base: Path, *, max_bytes: int | None = None) -> bytes:
    """The bytes of `path`, opened through `open_inside` (at most `max_bytes` + 1 of them)."""
    with os.fdopen(open_inside(path, base), "rb") as handle:
        return handle.read() if max_bytes is None else handle.read(max_bytes + 1)


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


def _entry_name(stamp: str, agent: str) -> str:
    """An orchestration-log entry's file name: `{stamp}-{agent}.md`, both checked."""
    return f"{safe_id(stamp, kind='timestamp')}-{safe_name(agent)}.md"


class SquadLayout:
    """The paths of one squad dir. Build it with `SquadLayout.find` or `SquadLayout.at`.

    Immutable, and equal to another layout of the same root. (A plain class, not a dataclass:
    `dataclasses` imports `inspect`, a tenth of what `squadd status` takes to start.)
    """

    __slots__ = ("_prefix", "_prompt_paths", "_root_text", "_skill_roots", "repo", "root")

    root: Path
    repo: Path
    """The repository: the squad dir's parent."""
    _root_text: str
    _prefix: str
    _skill_roots: tuple[tuple[SkillSource, Path], ...]
    _prompt_paths: dict[tuple[str, str], Path]

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
        base = self._skill_root(source)
        try:
            entries = sorted(os.scandir(base), key=lambda entry: entry.name)
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

    # Sessions and their output. squadd's transcripts live under run/ (git-ignored), apart
    # from Squad's own committed `sessions/`; a transcript an older squadd left in `sessions/`
    # is still found there and continued in place.
    @property
    def transcripts_dir(self) -> Path:
        return self._p("run", "transcripts")

    @property
    def transcript_journals_dir(self) -> Path:
        """`run/transcripts/.journal/`: each runtime's group-commit journal of transcript
        records (see `squadd.state.journal`)."""
        return self._p("run", "transcripts", ".journal")

    def transcript_journal(self, pid: int, token: str) -> Path:
        """`run/transcripts/.journal/{pid}-{token}.log`: the journal a runtime in process
        `pid` writes (`token` tells two of one process apart)."""
        return self.transcript_journals_dir / f"{pid}-{token}{JOURNAL_SUFFIX}"

    def transcript_journals_of(self, pid: int) -> list[Path]:
        """The journals of process `pid` still there, sorted (blocking). A clean close
        removes its own, and a start replays and removes those of ended processes."""
        try:
            return sorted(self.transcript_journals_dir.glob(f"{pid}-*{JOURNAL_SUFFIX}"))
        except OSError:
            return []

    @property
    def transcript_prompts_dir(self) -> Path:
        """`run/transcripts/.prompts/`: each system prompt once, named by its digest, which
        the transcripts' system messages name (see `squadd.state.transcripts`)."""
        return self._p("run", "transcripts", ".prompts")

    @property
    def sessions_dir(self) -> Path:
        """The folder of squadd's transcripts (the same as `transcripts_dir`)."""
        return self.transcripts_dir

    @property
    def legacy_transcripts_dir(self) -> Path:
        """`sessions/`, where squadd kept transcripts before; read, never written anew."""
        return self._p("sessions")

    def transcript(self, session_id: str) -> Path:
        """A session's transcript: `run/transcripts/{id}.jsonl`, or the older `sessions/{id}.jsonl`
        when only that one exists."""
        name = safe_id(session_id) + ".jsonl"
        path = self._p("run", "transcripts", name)
        # two plain stats on the common path; the legacy path is checked only when it is used
        if not os.path.lexists(path) and os.path.isfile(self._prefix + "sessions" + os.sep + name):
            return self._p("sessions", name)
        return path

    def new_transcript(self, session_id: str) -> Path:
        """The transcript of a session this process is creating: `run/transcripts/{id}.jsonl`
        (a new id has no older copy in `sessions/` to look for). Only its folder is checked:
        `TranscriptWriter` opens it with `O_NOFOLLOW`, so a link at the name is refused by the
        open itself, and no lookup of a name not there yet is made."""
        return self.transcripts_dir / (safe_id(session_id) + ".jsonl")

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

    def orchestration_entry(self, stamp: str, agent: str) -> Path:
        """`orchestration_log`'s path with only its folder checked, for a writer that opens it
        with `O_NOFOLLOW` (a link at the name is refused by the open itself): a new entry's
        name is not there yet, and looking it up costs more than any other check."""
        return self.orchestration_dir / _entry_name(stamp, agent)

    def orchestration_log(self, stamp: str, agent: str) -> Path:
        return self._p("orchestration-log", _entry_name(stamp, agent))

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

    def workspace_output(self, session_id: str, step: str) -> Path:
        """The full output of a workspace command (setup, land check) of a session."""
        return self._p("run", "workspaces", f"{safe_id(session_id)}.{safe_id(step)}.txt")

    def land_check_report(self, session_id: str, step: str) -> Path:
        """A fresh path for the JUnit report a land check writes (`{report}`): in the session
        worktree's own copy of the squad dir, which its sandbox may write and squadd never
        commits."""
        return self.worktree(session_id) / self.root.name / "run" / \
            f"land-check.{safe_id(step)}.xml"

    def land_check_result(self, commit: str) -> Path:
        """The land check's result on a target's tip commit, kept until the tip moves."""
        return self._p("run", "land-checks", f"{safe_id(commit)}.json")

    @property
    def land_checks_dir(self) -> Path:
        return self._p("run", "land-checks")

    @property
    def landing_lock(self) -> Path:
        """Held while a branch lands: one landing at a time per repository."""
        return self._p("run", "landing.lock")

    @property
    def worktrees_lock(self) -> Path:
        """Held while git adds, moves or removes a worktree, by every squadd process."""
        return self._p("run", "worktrees.lock")

    # Daemon runtime files (git-ignored): run/ and tool-output/.
    @property
    def log_dir(self) -> Path:
        """Where squadd's own log lives: run/ (`log/` is Squad's, so squadd keeps out)."""
        return self._p("run")

    @property
    def log_file(self) -> Path:
        return self._p("run", "squadd.log")

    def private_dirs(self) -> tuple[Path, ...]:
        """The folders of squadd's own files, kept 0700: transcripts and their journals and
        stored prompts, tool output, workspace records, logs and run/ (never the team's
        committed files)."""
        return (self.run_dir, self.transcripts_dir, self.transcript_journals_dir,
                self.transcript_prompts_dir, self.workspaces_dir, self.log_dir,
                self._p("tool-output"), self._p("sessions"))

    @property
    def ui_handoff(self) -> Path:
        """The page `squadd ui --open` gives the browser (0600 in run/, 0700): it carries the
        dashboard's token, which must never be on a command line."""
        return self._p("run", "ui-open.html")

    @property
    def run_dir(self) -> Path:
        return self._p("run")

    @property
    def squad_id_file(self) -> Path:
        """The squad's id (one line), made by the first cluster coordinator: workers whose
        clone holds it compare it with the coordinator's. Commit it with the squad."""
        return self._p("squad-id")

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
        """The lock file that guards `path`: kept under run/locks/ so git never sees it.

        A file of the repo outside the squad dir (a `.github/skills/` skill) gets a lock too,
        named with a `repo__` prefix."""
        flat = None
        if self.root not in Path(path).absolute().parents:
            resolved = Path(os.path.realpath(path))
            repo = Path(os.path.realpath(self.repo))
            if self.root not in resolved.parents and repo in resolved.parents:
                flat = "repo__" + "__".join(resolved.relative_to(repo).parts)
        if flat is None:
            flat = "__".join(self.inside(path).relative_to(self.root).parts)
        return self._p("run", "locks", flat + ".lock")
