"""Creating a squad dir from the bundled `agents_template/` scaffold (`squadd init`).

Each file is created with O_EXCL and never overwritten, so running it twice changes nothing.
The scaffold's `templates/` folder is not copied: it holds the charter and history templates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from squadd.config import data_path
from squadd.errors import StateError
from squadd.fsio import TEAM_FILE, create_exclusive
from squadd.state.layout import SQUAD_DIRNAMES, SquadLayout

TEMPLATES_DIRNAME = "templates"
"""The scaffold's folder of charter and history templates, used by `squadd agent add`."""

_SKIPPED_NAMES = {"__pycache__", ".DS_Store"}


@dataclass(frozen=True)
class InitResult:
    """What `init_squad` did: the squad dir, and the scaffold files it created or found."""

    squad_dir: Path
    created: list[Path]
    existing: list[Path]
    created_dir: bool
    legacy: bool
    """True when the squad dir is a legacy `.ai-team/`, used in place."""


def template_root() -> Path:
    """The bundled `agents_template/` folder (in the wheel or in a checkout)."""
    return data_path("agents_template")


def templates_dir() -> Path:
    """The folder of `charter.md` and `history.md` templates inside the scaffold."""
    return template_root() / TEMPLATES_DIRNAME


def scaffold_files(root: Path) -> list[Path]:
    """Every file of the scaffold under `root`, relative to it, sorted; `templates/` left out."""
    files: list[Path] = []
    for path in root.rglob("*"):
        relative = path.relative_to(root)
        if relative.parts[0] == TEMPLATES_DIRNAME or _SKIPPED_NAMES & set(relative.parts):
            continue
        if path.is_file():
            files.append(relative)
    return sorted(files)


def init_squad(repo: Path, *, template: Path | None = None) -> InitResult:
    """Copy the scaffold into `repo`'s squad dir, creating only the files that are missing.

    An existing `.squad/` (or legacy `.ai-team/`) is used in place; no existing file is touched.
    """
    repo = repo.resolve()
    if not repo.is_dir():
        raise StateError(f"{repo} is not a folder: create it first, or pass another --dir")
    for dirname in SQUAD_DIRNAMES:
        candidate = repo / dirname
        if candidate.exists() and not candidate.is_dir():
            raise StateError(
                f"{candidate} exists but is not a folder: move it away, then run 'squadd init'"
            )
    layout = SquadLayout.for_repo(repo)
    source = template if template is not None else template_root()
    files = scaffold_files(source)
    if not files:
        raise StateError(f"the scaffold at {source} holds no files: reinstall squadd")
    created_dir = not layout.root.exists()
    created: list[Path] = []
    existing: list[Path] = []
    for relative in files:
        target = layout.inside(layout.root / relative)
        # O_EXCL: a file that appeared since we looked (or always was there) is left alone.
        if target.exists() or not create_exclusive(target, (source / relative).read_bytes(),
                                                         mode=TEAM_FILE):
            existing.append(target)
        else:
            created.append(target)
    return InitResult(
        squad_dir=layout.root,
        created=created,
        existing=existing,
        created_dir=created_dir,
        legacy=layout.root.name == ".ai-team",
    )
