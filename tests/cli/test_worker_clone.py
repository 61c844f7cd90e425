"""`squadd worker`'s clone of the repository: made in a new or empty folder, brought up to
date when it is one, and a folder holding something else refused (or, for squadd's own cache,
made again)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import click
import pytest

from squadd.cli.worker import ensure_clone


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, timeout=60).stdout.strip()


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    repo = tmp_path / "origin"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty",
         "-m", "first")
    return repo


def test_a_new_or_empty_folder_gets_the_clone(origin: Path, tmp_path: Path) -> None:
    for clone in (tmp_path / "new" / "w1", tmp_path / "empty"):
        if clone.name == "empty":
            clone.mkdir()  # as the refusal's message says to leave it
        ensure_clone(str(origin), clone, remake=False)
        assert _git(clone, "rev-parse", "HEAD") == _git(origin, "rev-parse", "HEAD")


def test_a_clone_of_the_repository_is_brought_up_to_date(origin: Path, tmp_path: Path) -> None:
    clone = tmp_path / "w1"
    ensure_clone(str(origin), clone, remake=False)
    _git(origin, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty",
         "-m", "second")
    ensure_clone(str(origin), clone, remake=False)
    assert _git(clone, "log", "-1", "--format=%s") == "second"


def test_a_folder_holding_something_else_is_refused_or_made_again(origin: Path,
                                                                  tmp_path: Path) -> None:
    clone = tmp_path / "w1"
    clone.mkdir()
    (clone / "notes.txt").write_text("mine\n", encoding="utf-8")
    with pytest.raises(click.ClickException, match=r"is not a git clone.*empty this one"):
        ensure_clone(str(origin), clone, remake=False)
    assert (clone / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    ensure_clone(str(origin), clone, remake=True)  # squadd's own cache: cloned again
    assert not (clone / "notes.txt").exists()
    assert _git(clone, "rev-parse", "HEAD") == _git(origin, "rev-parse", "HEAD")
