"""Files that squadd, git or a later session will execute: `write` and `edit` change them only
with a person's approval.

The list: every folder tool discovery reads (`discovery.tool_dirs`, the CYCOD folders included
whether or not they are switched on), git's hook folders (`.git/hooks`, the configured
`core.hooksPath`, `.githooks`, `.husky/`), every `.gitattributes` (it picks filters and drivers),
and the files that name hooks and commands (`.claude/settings*.json`, `.squad/hooks.json`,
`.squad/config.toml`). Names compare case-folded and without invisible characters, so a case
game on a case-insensitive disk is caught too; a folder reached through a symlink counts as the
folder it is.
"""

from __future__ import annotations

import os
import subprocess
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from squadd import gitsafe
from squadd.config import Settings
from squadd.errors import StateError
from squadd.state.layout import SquadLayout
from squadd.tools.builtin.confine import Parts, shown
from squadd.tools.discovery import ToolDir, tool_dirs

HOOKS_PATH_TIMEOUT_S = 10.0
"""Most seconds `git config core.hooksPath` may take (it reads a file or two)."""

HOOK_FOLDERS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".git", "hooks"), "git's hook folder"),
    ((".githooks",), "a git hook folder (core.hooksPath)"),
    ((".husky",), "husky's git hook folder"),
)
EXECUTED_FILES: tuple[tuple[tuple[str, ...], str], ...] = (
    ((".claude", "settings.json"), "hooks that agents run (Claude Code settings)"),
    ((".claude", "settings.local.json"), "hooks that agents run (Claude Code settings)"),
    ((".squad", "hooks.json"), "hooks that squadd runs"),
    ((".squad", "config.toml"), "squadd's settings, which name the commands it runs"),
)
ANYWHERE = {".gitattributes": "git attributes, which choose the filters and drivers git runs"}
"""File names protected in every folder."""


def folded(name: str) -> str:
    """`name` as a case-insensitive, normalising disk would see it."""
    name = unicodedata.normalize("NFKC", name)
    name = "".join(c for c in name if unicodedata.category(c) != "Cf")
    return name.casefold().rstrip(" .") or name


def _fold(parts: Iterable[str]) -> tuple[str, ...]:
    return tuple(folded(p) for p in parts)


@dataclass(frozen=True)
class Protected:
    """The protected places of one workspace, as folded components under its root."""

    prefixes: tuple[tuple[tuple[str, ...], str], ...]
    outside: tuple[tuple[str, str], ...]
    """Absolute real paths of protected folders outside the workspace, and what each is."""

    def reason(self, root: Path, *candidates: Parts) -> str | None:
        """What makes any of `candidates` (a path inside `root`) a protected file, or None."""
        for parts in candidates:
            if not parts:
                continue
            key = _fold(parts)
            name = ANYWHERE.get(key[-1])
            if name is not None:
                return f"{shown(parts)} is {name}"
            for prefix, what in self.prefixes:
                if key[:len(prefix)] == prefix and len(key) >= len(prefix):
                    return f"{shown(parts)} is in {what}"
            absolute = os.path.realpath(root.joinpath(*parts))
            for folder, what in self.outside:
                if absolute == folder or absolute.startswith(folder.rstrip("/") + "/"):
                    return f"{shown(parts)} is in {what}"
        return None


def protected_places(root: Path, squad_dir: Path, settings: Settings) -> Protected:
    """The protected places of workspace `root` (a repository or one of its worktrees),
    whose squad is `squad_dir`."""
    layout = SquadLayout.at(squad_dir)
    every_kind = settings.model_copy(update={"tools": settings.tools.model_copy(
        update={"cycod_dirs": True})})
    prefixes: list[tuple[tuple[str, ...], str]] = []
    outside: list[tuple[str, str]] = []
    real_root = os.path.realpath(root)

    def add(relative: tuple[str, ...], what: str) -> None:
        prefixes.append((_fold(relative), what))
        real = os.path.realpath(Path(real_root).joinpath(*relative))
        if _inside(real, real_root) and real != real_root:
            resolved = tuple(os.path.relpath(real, real_root).split("/"))
            prefixes.append((_fold(resolved), what))

    try:
        folders = tool_dirs(layout, every_kind)
    except StateError:  # a tool folder that leads out of the squad: protected all the same
        folders = [ToolDir(layout.root / "tools", "project"),
                   ToolDir(layout.cycod_tools_dir, "cycod-project")]
    for folder in folders:
        what = f"a tool folder ({folder.source} tools: squadd runs the files there as tools)"
        relative = _relative_to_repo(folder.path, layout.repo)
        if relative is not None:
            add(relative, what)
        else:
            outside.append((os.path.realpath(folder.path), what))
    for relative, what in (*HOOK_FOLDERS, *EXECUTED_FILES):
        add(relative, what)
    # The hooks files as the hooks feature finds them (the squad's folder may be named
    # otherwise than `.squad`), and its settings file.
    for place, what in (("hooks_json", "hooks that squadd runs"),
                        ("claude_settings", "hooks that agents run (Claude Code settings)"),
                        ("config_toml", "squadd's settings, which name the commands it runs")):
        try:
            relative = _relative_to_repo(getattr(layout, place), layout.repo)
        except StateError:  # it leads out of the squad: the fixed names above still count
            continue
        if relative is not None:
            add(relative, what)
    hooks = configured_hooks_path(root)
    if hooks is not None:
        real = os.path.realpath(hooks)
        if _inside(real, real_root) and real != real_root:
            add(tuple(os.path.relpath(real, real_root).split("/")),
                "the configured git hook folder (core.hooksPath)")
        else:
            outside.append((real, "the configured git hook folder (core.hooksPath)"))
    return Protected(tuple(prefixes), tuple(outside))


def configured_hooks_path(root: Path) -> Path | None:
    """The hook folder `git config core.hooksPath` names in `root` (relative to it), if any."""
    try:
        done = subprocess.run(["git", "config", "--get", "core.hooksPath"], cwd=root,
                              capture_output=True, text=True, timeout=HOOKS_PATH_TIMEOUT_S,
                              check=False, stdin=subprocess.DEVNULL,
                              env=gitsafe.hardened_env(os.environ) | {"GIT_CONFIG_COUNT": "0"})
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = done.stdout.strip()
    if done.returncode != 0 or not value:
        return None
    return root / Path(value).expanduser()


def _relative_to_repo(path: Path, repo: Path) -> tuple[str, ...] | None:
    """`path` as components under `repo` (by name, then by real path), None when outside."""
    for base, target in ((str(repo), os.path.normpath(path)),
                         (os.path.realpath(repo), os.path.realpath(path))):
        if _inside(target, base) and target != base:
            return tuple(os.path.relpath(target, base).split("/"))
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
