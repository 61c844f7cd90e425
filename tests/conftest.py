"""Fixtures every test shares: an environment free of the user's settings, and a fresh squad."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squadd.runtime.pool import SessionPool
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.tools.python import calls as python_calls


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path_factory: pytest.TempPathFactory,
                       monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reads the real ~/.config/squadd or a SQUADD_* variable of the person running it."""
    config_home = tmp_path_factory.mktemp("xdg-config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    for name in list(os.environ):
        if name.startswith("SQUADD_"):
            monkeypatch.delenv(name)
    yield


@pytest.fixture(autouse=True)
def _pool_invariants(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SessionPool]]:
    """Every session pool a test builds keeps its slot accounting exact: checked when the
    test ends (`SessionPool.check_invariants`), whatever the test itself asserted."""
    pools: list[SessionPool] = []
    build = SessionPool.__init__

    def tracked(self: SessionPool, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        pools.append(self)

    monkeypatch.setattr(SessionPool, "__init__", tracked)
    yield pools
    for pool in pools:
        pool.check_invariants()


@pytest.fixture(autouse=True)
def _no_spare_workers_left(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A Python tool's spare worker process does not outlive the test that started it: every
    spare pool the test made (one per tool discoverer) is closed when it ends."""
    pools: list[python_calls.SpareWorkers] = []
    build = python_calls.SpareWorkers.__init__

    def tracked(self: python_calls.SpareWorkers, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        pools.append(self)

    monkeypatch.setattr(python_calls.SpareWorkers, "__init__", tracked)
    yield
    for pool in pools:
        pool.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """An empty folder standing for a repository."""
    path = tmp_path / "repo"
    path.mkdir()
    return path


@pytest.fixture
def squad(repo: Path) -> SquadLayout:
    """A repository with a freshly initialized `.squad/`."""
    result = init_squad(repo)
    return SquadLayout.at(result.squad_dir)
