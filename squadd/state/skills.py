"""Skills: `.squad/skills/{name}/SKILL.md` to read, write and list, plus `.github/skills/`.

Skills under `.squad/` win over `.github/skills/` of the same name; the latter are read-only.
Every SKILL.md is read through the layout's "stays inside" rule: one that leads outside the
repository is listed with the reason and never read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import is_safe_name, safe_name
from squadd.errors import LimitExceededError, NotFoundError, StateError
from squadd.fsio import atomic_write, file_lock
from squadd.state.layout import SquadLayout

SKILL_FILE = "SKILL.md"
_SUMMARY_BYTES = 65536


@dataclass(frozen=True)
class SkillInfo:
    name: str
    path: Path
    source: str
    """`squad` for `.squad/skills/`, `github` for `.github/skills/`."""
    summary: str
    problem: str | None = None
    """Why the file was not read (it leads outside the repository, ...), if it was not."""


def _summary(layout: SquadLayout, path: Path) -> str:
    with os.fdopen(layout.open_file(path), "rb") as handle:
        head = handle.read(_SUMMARY_BYTES).decode("utf-8", errors="replace")
    for line in head.splitlines():
        text = line.strip().lstrip("#").strip()
        if text and not text.startswith("---"):
            return text[:120]
    return ""


def _scan(layout: SquadLayout, folder: Path, source: str) -> list[SkillInfo]:
    if not folder.is_dir():
        return []
    found = []
    for child in sorted(folder.iterdir()):
        path = child / SKILL_FILE
        if not (is_safe_name(child.name) and child.is_dir() and os.path.lexists(path)):
            continue
        try:
            found.append(SkillInfo(child.name, path, source, _summary(layout, path)))
        except (OSError, StateError) as exc:
            problem = str(exc) if isinstance(exc, StateError) else f"{path}: {exc.strerror}"
            found.append(SkillInfo(child.name, path, source, "", problem=problem))
    return found


def list_skills(layout: SquadLayout) -> list[SkillInfo]:
    """Every skill, `.squad/skills/` first; a `.github` skill of the same name is hidden. A
    skill whose file cannot be read safely is listed with its `problem`."""
    squad = _scan(layout, layout.skills_dir, "squad")
    names = {skill.name for skill in squad}
    github = [s for s in _scan(layout, layout.github_skills_dir, "github")
              if s.name not in names]
    return sorted([*squad, *github], key=lambda s: s.name)


def read_skill(layout: SquadLayout, name: str) -> str:
    """The text of skill `name`, from `.squad/skills/` or else `.github/skills/`."""
    name = safe_name(name, kind="skill")
    for where in (layout.skill_file, layout.github_skill_file):
        path = where(name)
        try:
            return layout.read_text(path)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except UnicodeDecodeError as exc:
            raise StateError(f"skill {name!r} at {path} is not UTF-8 text") from exc
    known = ", ".join(s.name for s in list_skills(layout)) or "none yet"
    raise NotFoundError(f"no skill named {name!r} (skills: {known})")


def write_skill(layout: SquadLayout, name: str, content: str, *, max_bytes: int = 65536) -> Path:
    """Create or replace `.squad/skills/{name}/SKILL.md` atomically."""
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
    path = layout.skill_file(name)
    with file_lock(layout.lock_for(path)):
        atomic_write(path, content if content.endswith("\n") else content + "\n")
    return path
