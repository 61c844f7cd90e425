"""Fixtures for workspace tests: a real git repository (branch `main`, one commit) with a squad."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from squadd.config import Settings, load_settings
from squadd.contracts.events import BaseEvent
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.workspaces import Workspaces

USER = ["-c", "user.name=Tester", "-c", "user.email=tester@example.com"]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *USER, *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> SquadLayout:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", "-b", "main")
    for name, text in (files or {"app.txt": "one\ntwo\nthree\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "start")
    return SquadLayout.at(init_squad(path).squad_dir)


class Events:
    def __init__(self) -> None:
        self.seen: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.seen.append(event)

    def types(self) -> list[str]:
        return [getattr(e, "type", "") for e in self.seen]


@pytest.fixture
def squad_repo(tmp_path: Path) -> SquadLayout:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def events() -> Events:
    return Events()


def settings_with(layout: SquadLayout, **workspace: object) -> Settings:
    return load_settings(layout.root, overrides={"workspace": {"isolation": "worktree",
                                                               **workspace}})


@pytest.fixture
def spaces(squad_repo: SquadLayout, events: Events) -> Workspaces:
    return Workspaces(squad_repo, settings_with(squad_repo), events)
