"""Which files of the workspace `find` and `grep` see, and the glob patterns that pick among them.

In a git repository the list is `git ls-files --cached --others --exclude-standard` (so
`.gitignore`, `.git/info/exclude` and the global excludes file are respected); elsewhere a walk
of the folder that skips `.git/`. Only regular files count (no symlinks, FIFOs or devices), in
the order of a sorted walk (a folder's files by name, `a/b` before `a.txt`).
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import anyio

from squadd import gitsafe
from squadd.tools.builtin.confine import Parts, PathRefused, Workspace, shown
from squadd.untrusted import LinearPattern

LIST_TIMEOUT_S = 60.0


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> LinearPattern:
    """`*` (within a name), `?`, `[...]`, `{a,b}` and `**` (any folders) as a whole-text regex
    run in linear time: a model's `*a*a*a*a*b` would backtrack for ages in Python's engine."""
    return LinearPattern(r"\A(?:" + _translate(pattern) + r")\z")


def _literal(char: str) -> str:
    return char if char.isalnum() or char == "_" else f"\\x{{{ord(char):x}}}"


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) > 0:
            body = pattern[i + 1:end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "")
                       + "".join(c if c == "-" else _literal(c) for c in body) + "]")
            i = end + 1
        elif pattern[i] == "{" and (end := pattern.find("}", i)) > 0:
            alternatives = pattern[i + 1:end].split(",")
            out.append("(?:" + "|".join(_translate(a) for a in alternatives) + ")")
            i = end + 1
        else:
            out.append(_literal(pattern[i]))
            i += 1
    return "".join(out)


def glob_matches(pattern: str, relative: str) -> bool:
    """A pattern without `/` matches a file's name at any depth; one with `/` matches its path
    relative to the folder searched."""
    target = relative if "/" in pattern.strip("/") else relative.rsplit("/", 1)[-1]
    return glob_regex(pattern.strip("/")).search(target)


@dataclass
class Listing:
    """The regular files under a folder of the workspace, in walk order."""

    base: Parts
    files: list[tuple[Parts, int]] = field(default_factory=list)
    """Each file's parts and size."""
    source: str = "walk"
    """"git" or "walk": where the list came from."""

    def relative(self, parts: Parts) -> str:
        return "/".join(parts[len(self.base):])


async def list_files(workspace: Workspace, base: Parts) -> Listing:
    """The files under `base` (a folder, or one file) as `find` and `grep` see them."""
    info = await anyio.to_thread.run_sync(_lstat, workspace, base)
    if stat.S_ISREG(info.st_mode):
        return Listing(base[:-1], [(base, info.st_size)], "file")
    if not stat.S_ISDIR(info.st_mode):
        raise PathRefused(f"{shown(base)} is neither a folder nor a regular file")
    names = await _git_files(workspace, base)
    listing = Listing(base, source="git" if names is not None else "walk")
    if names is None:
        listing.files = await anyio.to_thread.run_sync(_walk, workspace, base)
    else:
        listing.files = await anyio.to_thread.run_sync(_regular, workspace, names)
    listing.files.sort(key=lambda item: item[0])
    return listing


def _lstat(workspace: Workspace, parts: Parts) -> os.stat_result:
    try:
        return workspace.root.joinpath(*parts).lstat()
    except FileNotFoundError:
        raise PathRefused(f"{shown(parts)} does not exist") from None


async def _git_files(workspace: Workspace, base: Parts) -> list[Parts] | None:
    """The paths git lists under `base`, or None when the workspace is not in a git repo."""
    command = gitsafe.hardened_argv(["git", "-c", "core.quotepath=off", "ls-files", "-z",
                                     "--cached", "--others", "--exclude-standard", "--",
                                     shown(base)])
    try:
        with anyio.fail_after(LIST_TIMEOUT_S):
            done = await anyio.run_process(command, cwd=workspace.root, check=False,
                                           stdin=subprocess.DEVNULL,
                                           env=gitsafe.hardened_env(os.environ))
    except (OSError, TimeoutError):
        return None
    if done.returncode != 0:
        return None
    found: set[Parts] = set()
    for raw in done.stdout.split(b"\0"):
        if raw:
            found.add(tuple(os.fsdecode(raw).split("/")))
    return list(found)


def _regular(workspace: Workspace, names: list[Parts]) -> list[tuple[Parts, int]]:
    files: list[tuple[Parts, int]] = []
    for parts in names:
        if ".git" in parts:
            continue
        try:
            info = workspace.root.joinpath(*parts).lstat()
        except OSError:
            continue  # listed by git, since deleted (or under a folder now a symlink)
        if stat.S_ISREG(info.st_mode):
            files.append((parts, info.st_size))
    return files


def _walk(workspace: Workspace, base: Parts) -> list[tuple[Parts, int]]:
    files: list[tuple[Parts, int]] = []
    top = workspace.root.joinpath(*base)
    for folder, dirs, names in os.walk(top, followlinks=False):
        dirs[:] = [d for d in dirs if d != ".git"]
        relative = os.path.relpath(folder, workspace.root)
        prefix: Parts = () if relative == "." else tuple(relative.split("/"))
        for name in names:
            try:
                info = Path(folder, name).lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                files.append(((*prefix, name), info.st_size))
    return files
