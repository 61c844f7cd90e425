"""`SandboxPolicy`: what one confined command may touch, as plain values.

The tools and workspaces layers build it from the settings and the call (`policy_for` in
`squadd.tools.sandboxing`); the mechanisms (`bwrap`, `landlock`) read it. It imports no
setting: a caller that runs a command of its own (a hook) builds one directly.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Mode = Literal["auto", "bwrap", "landlock", "off"]
Mechanism = Literal["bwrap", "landlock", "seatbelt", "off"]
"""`seatbelt` (macOS `sandbox-exec`) is what `auto` takes there; no setting names it."""

DEFAULT_DENY_READ = ("~/.ssh", "~/.gnupg", "~/.aws", "~/.config/gcloud", "~/.netrc",
                     "~/.docker/config.json", "~/.config/squadd/secrets")
PROTECTED_NAMES = (".git",)
"""Entries of a writable folder that stay read-only (squadd commits for the agent)."""


@dataclass(frozen=True)
class SandboxPolicy:
    """One call's confinement. Paths are absolute; those that do not exist are left out
    when the sandbox is built."""

    mode: Mode = "auto"
    network: bool = False
    writable: tuple[Path, ...] = ()
    """Folders the command may write (the worktree, `sandbox.writable`)."""
    read_only: tuple[Path, ...] = ()
    """Paths inside `writable` that stay read-only (`.git`, `.squad`)."""
    deny_read: tuple[Path, ...] = ()
    """Paths the command may not read at all (secrets, `.squad/run/`, other users' homes)."""
    visible: tuple[Path, ...] = ()
    """Folders kept readable even where the private temp dir hides their parent (the
    repository, when it lives under /tmp)."""
    max_processes: int = 512
    max_file_bytes: int = 4096 << 20
    cwd: Path | None = None
    extra: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    """Free notes recorded with the policy (e.g. which agent's network override applied)."""

    def describe(self, mechanism: Mechanism) -> dict[str, Any]:
        """What a tool result and the transcript record about the call's sandbox."""
        return {"mechanism": mechanism, "network": "on" if self.network else "off",
                "writable": [str(p) for p in self.writable],
                "read_only": [str(p) for p in self.read_only],
                "deny_read": len(self.deny_read), "max_processes": self.max_processes,
                "max_file_bytes": self.max_file_bytes, **dict(self.extra)}


def expand(path: str, home: Path) -> Path:
    """`~/x` under `home`; other paths as written (made absolute)."""
    if path == "~" or path.startswith("~/"):
        return home / path[2:] if path != "~" else home
    return Path(path).absolute()


def other_homes(own_home: Path) -> list[Path]:
    """Every user's home folder except `own_home` (and anything above it): /root and the
    home folders of the password database and of /home."""
    found: set[Path] = {Path("/root")}
    with contextlib.suppress(OSError):
        found.update(Path(entry.pw_dir) for entry in pwd.getpwall()
                     if entry.pw_dir.startswith("/home/"))
    with contextlib.suppress(OSError):
        found.update(entry for entry in Path("/home").iterdir() if entry.is_dir())
    own = [own_home.resolve() if own_home.exists() else own_home]
    with contextlib.suppress(KeyError):
        own.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    return sorted(p for p in found
                  if all(p != mine and p not in mine.parents and mine not in p.parents
                         for mine in own)
                  and p.exists() and not p.is_symlink())


def build_policy(*, mode: Mode, network: bool, workspace: Path, repo: Path, squad_dir: Path,
                 writable: Iterable[str] = (), deny_read: Iterable[str] = DEFAULT_DENY_READ,
                 max_processes: int = 512, max_file_bytes: int = 4096 << 20,
                 home: Path | None = None) -> SandboxPolicy:
    """The policy for a command run in `workspace`: the workspace writable (without its
    `.git`; with isolation none, the repository without `.git` and `.squad`), the folders in
    `writable`, nothing in `deny_read`, the squad's `run/` folder or other users' homes."""
    home = home if home is not None else Path(os.environ.get("HOME") or Path.home())
    workspace, repo, squad_dir = workspace.absolute(), repo.absolute(), squad_dir.absolute()
    writes = [workspace, *(expand(p, home) for p in writable)]
    read_only = [workspace / name for name in PROTECTED_NAMES]
    if workspace == repo or squad_dir.is_relative_to(workspace):
        read_only.append(squad_dir)
    denied = [expand(p, home) for p in deny_read]
    denied.append(squad_dir / "run")
    denied.extend(other_homes(home))
    # The programs a command finds on PATH stay readable even where the private /tmp would
    # hide them (a virtual environment under /tmp).
    programs = [Path(entry) for entry in os.environ.get("PATH", "").split(os.pathsep)
                if entry.startswith("/")]
    return SandboxPolicy(
        mode=mode, network=network, writable=tuple(_unique(writes)),
        read_only=tuple(_unique(read_only)), deny_read=tuple(_unique(denied)),
        visible=tuple(_unique([repo, workspace, *programs])), max_processes=max_processes,
        max_file_bytes=max_file_bytes, cwd=workspace)


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        if path not in seen:
            seen.append(path)
    return seen

