"""Skills: `.squad/skills/{name}/SKILL.md` to read, write and list, plus `.github/skills/`.

Skills under `.squad/` win over `.github/skills/` of the same name; the latter are read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from squadd.contracts.names import is_safe_name, safe_name
from squadd.errors import LimitExceededError, NotFoundError, StateError
from squadd.fsio import atomic_write, file_lock
from squadd.state.layout import SquadLayout

SKILL_FILE = "SKILL.md"


@dataclass(frozen=True)
class SkillInfo:
    name: str
    path: Path
    source: str
    """`squad` for `.squad/skills/`, `github` for `.github/skills/`."""
    summary: str


def _summary(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            for line in handle:
                text = line.strip().lstrip("#").strip()
                if text and not text.startswith("---"):
                    return text[:120]
    except OSError:
        pass
    return ""


def _scan(folder: Path, source: str) -> list[SkillInfo]:
    if not folder.is_dir():
        return []
    found = []
    for child in sorted(folder.iterdir()):
        if child.is_dir() and is_safe_name(child.name) and (child / SKILL_FILE).is_file():
            found.append(SkillInfo(child.name, child / SKILL_FILE, source,
                                   _summary(child / SKILL_FILE)))
    return found


def list_skills(layout: SquadLayout) -> list[SkillInfo]:
    """Every skill, `.squad/skills/` first; a `.github` skill of the same name is hidden."""
    squad = _scan(layout.skills_dir, "squad")
    names = {skill.name for skill in squad}
    github = [s for s in _scan(layout.github_skills_dir, "github") if s.name not in names]
    return sorted([*squad, *github], key=lambda s: s.name)


def read_skill(layout: SquadLayout, name: str) -> str:
    """The text of skill `name`, from `.squad/skills/` or else `.github/skills/`."""
    name = safe_name(name, kind="skill")
    for path in (layout.skill_file(name), layout.github_skill_file(name)):
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
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
