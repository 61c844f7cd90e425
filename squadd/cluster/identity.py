"""Which squad a coordinator serves and a worker's clone holds: the repository's root commit,
its `origin` URL, and the squad id kept in `.squad/squad-id`. The coordinator publishes its
own; a worker compares its clone with it before it takes a job, and is refused with both
names when they differ (a worker for another repository would run sessions in the wrong
clone). `clone_dir` says where a worker keeps its clone of a repository.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.fsio import TEAM_FILE, atomic_write

GIT_TIMEOUT_S = 30.0


class SquadIdentity(BaseModel):
    """What names a squad across hosts."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    root_commit: str = ""
    """The repository's first commit (empty: no commit yet)."""
    remote: str = ""
    """Its `origin` URL, when it has one."""
    squad_id: str = ""
    """`.squad/squad-id`, when the repository holds one."""
    repo: str = ""
    """Where it lives, as the publishing host sees it (shown, never compared)."""
    host: str = ""

    def named(self) -> str:
        """The identity in a few words, for an error message."""
        where = f"{self.host}:{self.repo}" if self.host else self.repo
        parts = [where or "a repository"]
        if self.remote:
            parts.append(f"origin {self.remote}")
        parts.append(f"root commit {self.root_commit[:12] or '(none)'}")
        if self.squad_id:
            parts.append(f"squad id {self.squad_id}")
        return ", ".join(parts)

    def differs(self, other: SquadIdentity) -> str | None:
        """Why `other` is another squad than this one; None when nothing says so."""
        if self.root_commit and other.root_commit and self.root_commit != other.root_commit:
            return "their repositories have different root commits"
        if self.squad_id and other.squad_id and self.squad_id != other.squad_id:
            return "their .squad/squad-id files differ"
        return None


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def read_identity(repo: Path, squad_id_file: Path, *, host: str = "") -> SquadIdentity:
    """The identity of the repository at `repo` (blocking: runs git)."""
    roots = sorted(_git(repo, "rev-list", "--max-parents=0", "HEAD").split())
    try:
        squad_id = squad_id_file.read_text(encoding="utf-8").strip()[:128]
    except OSError:
        squad_id = ""
    return SquadIdentity(root_commit=roots[0] if roots else "",
                         remote=_git(repo, "remote", "get-url", "origin"),
                         squad_id=squad_id, repo=str(repo), host=host)


def ensure_squad_id(squad_id_file: Path) -> str:
    """The squad id, made (and written atomically) the first time."""
    try:
        found = squad_id_file.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    made = "sq-" + secrets.token_hex(8)
    atomic_write(squad_id_file, made + "\n", new_mode=TEAM_FILE)  # committed with the squad
    return made


def repo_key(repo: str) -> str:
    """`repo` as compared between a clone's origin and `--repo`: a local path resolved, a
    URL as written, less a trailing slash or `.git`."""
    text = repo.strip().rstrip("/")
    if "://" not in text and ":" not in text.split("/")[0]:
        text = str(Path(text).expanduser().resolve())
    return text.removesuffix(".git")


def origin_of(clone: Path) -> str | None:
    """The clone's `origin` URL; None when `clone` is not a git repository."""
    if not (clone / ".git").exists():
        return None
    return _git(clone, "remote", "get-url", "origin")


async def published_identity(guard: RedisGuard) -> SquadIdentity | None:
    """The identity the coordinator published on this Redis (None: no coordinator yet)."""
    client = guard.client
    value: Any = await guard.run(lambda: client.get(keys.SQUAD))
    if not value:
        return None
    try:
        return SquadIdentity.model_validate_json(value)
    except ValueError:
        return None


def clone_dir(name: str, workdir: Path | None, repo: str) -> Path:
    """Where worker `name` keeps its clone of `repo`: `--workdir`, else the user's cache, one
    folder per repository (so a worker of the same name for another repository never reuses
    this one's clone) and per worker name (two workers on one host never share a tree)."""
    if workdir is not None:
        return workdir.resolve()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    key = repo_key(repo)
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", key.rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(base) / "squadd" / "workers" / f"{tail[:40] or 'repo'}-{digest}" / name
