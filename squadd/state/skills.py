"""Skills: `{root}/{name}/SKILL.md` in Squad's three skill folders, to list, read and write.

The folders, in Squad's precedence: `.github/skills/` (canonical), `.squad/skills/`, then
`.copilot/skills/`; a skill in an earlier folder hides one of the same name in a later one.
A write goes to `.github/skills/` when that folder exists, else to `.squad/skills/`. A
skill's index line is the `description` of its YAML front matter (else its first heading or
line). Every path comes from `SquadLayout`, which keeps it inside its folder.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from squadd.contracts.names import safe_name
from squadd.errors import LimitExceededError, NotFoundError, PathEscapeError, StateError
from squadd.fsio import TEAM_FILE, atomic_write, file_lock
from squadd.statcache import Absences, NotCached, StatCache
from squadd.state.layout import SquadLayout

if TYPE_CHECKING:
    from squadd.state.layout import SkillSource

SKILL_FILE = "SKILL.md"
SUMMARY_CHARS = 200
_HEAD_BYTES = 16384
_FRONT_MATTER_RE = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)",
                              re.DOTALL)
CONFIDENCE_LEVELS = ("low", "medium", "high")


@dataclass(frozen=True)
class SkillInfo:
    name: str
    path: Path
    source: SkillSource
    """`github`, `squad` or `copilot`: the folder the skill was found in."""
    summary: str
    """The front matter's `description` (one line), else the first heading or line."""
    hidden: tuple[SkillSource, ...] = ()
    """Later folders that also hold a skill of this name (this one wins)."""


def front_matter(text: str) -> tuple[dict[str, object], str]:
    """The YAML front matter of `text` as a dict ({} when absent or unreadable), and the rest."""
    match = _FRONT_MATTER_RE.match(text)
    if match is None:
        return {}, text
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}, text[match.end():]
    return (data if isinstance(data, dict) else {}), text[match.end():]


def summary_of(text: str) -> str:
    """The index line for a skill's text: `description`, else its first heading or line."""
    data, body = front_matter(text)
    description = data.get("description")
    if isinstance(description, str) and description.strip():
        line = " ".join(description.split())
    else:
        line = ""
        for raw in body.splitlines():
            candidate = raw.strip().lstrip("#").strip()
            if candidate and not candidate.startswith(("---", "<!--")):
                line = candidate
                break
    return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1] + "…"


def _head(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            return handle.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _summary_of_file(path: Path) -> str:
    return summary_of(_head(path))


class SkillSummaries(StatCache[str]):
    """Skills' index lines by the file's stat signature, for an owner that lists the skills
    often (every prompt does: parsing front matter again for unchanged files would cost each
    spawn), and the skill folders found missing (`Absences`: most squads have one of the three
    folders, or none). Each owner (a `SquadRuntime`) makes its own; the `squad_skill` tool and
    the CLI list without one, and always look."""

    def __init__(self, limit: int = 512, *, clock: Callable[[], float] = time.monotonic):
        super().__init__(_summary_of_file, limit=limit)
        self.absent = Absences(clock)

    def files(self, layout: SquadLayout, source: SkillSource,
              folder: Path) -> list[tuple[str, Path]]:
        """`layout.skill_files(source)`, without a look while its `folder` is known missing."""
        if self.absent.known_missing(folder):
            return []
        found = layout.skill_files_if_there(source)
        if found is None:
            self.absent.missing(folder)
            return []
        return found


def summary_cache(limit: int = 512) -> SkillSummaries:
    """A new `SkillSummaries` (see there)."""
    return SkillSummaries(limit)


def _read_summary(path: Path, summaries: SkillSummaries | None) -> str:
    """A skill's index line, through `summaries` when given (read here on a miss, then kept)."""
    if summaries is None:
        return _summary_of_file(path)
    try:
        try:
            return summaries.peek(path)
        except NotCached:
            key = summaries.stamp(path)
            summary = _summary_of_file(path)
            summaries.store(path, key, summary)
            return summary
    except OSError:
        return ""


def _known_summary(path: Path, summaries: SkillSummaries) -> str:
    try:
        return summaries.peek(path)
    except OSError:
        return ""


def list_skills(layout: SquadLayout,
                summaries: SkillSummaries | None = None) -> list[SkillInfo]:
    """Every skill, sorted by name; of two with the same name, the earlier folder's wins.
    `summaries` (`summary_cache()`) keeps the index lines between calls (blocking: a SKILL.md
    new or changed since is read), and skips a folder it found missing a moment ago; without
    it, every folder is looked at."""
    return _listed(layout, lambda path: _read_summary(path, summaries), summaries)


def list_known_skills(layout: SquadLayout, summaries: SkillSummaries) -> list[SkillInfo]:
    """`list_skills` from the cache alone: the folders are listed and stat'ed but no SKILL.md
    is read (the event loop may call it); `NotCached` when one must be."""
    return _listed(layout, lambda path: _known_summary(path, summaries), summaries)


def _listed(layout: SquadLayout, summary: Callable[[Path], str],
            summaries: SkillSummaries | None) -> list[SkillInfo]:
    chosen: dict[str, SkillInfo] = {}
    for source, folder in layout.skill_roots():
        files = layout.skill_files(source) if summaries is None \
            else summaries.files(layout, source, folder)
        for info in (SkillInfo(name, path, source, summary(path)) for name, path in files):
            first = chosen.get(info.name)
            if first is None:
                chosen[info.name] = info
            else:
                chosen[info.name] = SkillInfo(first.name, first.path, first.source,
                                              first.summary, (*first.hidden, source))
    return [chosen[name] for name in sorted(chosen)]


def read_skill(layout: SquadLayout, name: str) -> str:
    """The text of skill `name` from the first folder that has it."""
    name = safe_name(name, kind="skill")
    for source, _folder in layout.skill_roots():
        try:
            path = layout.skill_file_in(source, name)
            return path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, PathEscapeError):
            continue
        except UnicodeDecodeError as exc:
            raise StateError(f"skill {name!r} at {path} is not UTF-8 text") from exc
    known = ", ".join(s.name for s in list_skills(layout)) or "none yet"
    raise NotFoundError(f"no skill named {name!r} (skills: {known})")


def with_confidence(content: str, confidence: str) -> str:
    """`content` with `confidence: {level}` in its front matter (added, or replaced)."""
    if confidence not in CONFIDENCE_LEVELS:
        raise StateError(f"unknown confidence {confidence!r}: use one of "
                         f"{', '.join(CONFIDENCE_LEVELS)}")
    match = _FRONT_MATTER_RE.match(content)
    if match is None:
        return f'---\nconfidence: "{confidence}"\n---\n\n{content}'
    block = match.group(1)
    line = f'confidence: "{confidence}"'
    if re.search(r"^confidence\s*:", block, re.MULTILINE):
        block = re.sub(r"^confidence\s*:.*$", line, block, count=1, flags=re.MULTILINE)
    else:
        block = f"{block}\n{line}"
    return f"---\n{block}\n---\n{content[match.end():]}"


def write_skill(layout: SquadLayout, name: str, content: str, *, max_bytes: int = 65536) -> Path:
    """Create or replace skill `name` atomically where Squad writes skills (see the module)."""
    name = safe_name(name, kind="skill")
    if "\x00" in content:
        raise StateError("skill content may not contain NUL bytes")
    size = len(content.encode("utf-8"))
    if size > max_bytes:
        raise LimitExceededError(
            f"skill content is {size} bytes, over the limit of {max_bytes} bytes "
            "(limits.max_entry_bytes)"
        )
    if not content.strip():
        raise StateError("skill content must not be empty")
    _source, path = layout.skill_write_file(name)
    with file_lock(layout.lock_for(path)):
        atomic_write(path, content if content.endswith("\n") else content + "\n",
                     new_mode=TEAM_FILE)
    return path
