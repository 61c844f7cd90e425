"""Fixtures every test shares: an environment free of the user's settings, a fresh squad, a test
model server and a real daemon (described by a test's `daemon` mark: tests/support/daemon_spec.py),
and the sandbox's mechanism chosen afresh."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squadd.runtime.pool import SessionPool
from squadd.sandbox import core as sandbox_core
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.tools.python import calls as python_calls
from tests.support.daemon_process import DaemonProcess
from tests.support.daemon_spec import DaemonSpec
from tests.support.model_servers import OpenAIServer
from tests.support.squad_team import build_team


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "daemon(**spec): how the `daemon` fixture builds and starts its real "
        "`squadd serve` (tests.support.daemon_spec.DaemonSpec)")


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


@pytest.fixture
def team(repo: Path) -> SquadLayout:
    """The Squad team of tests/support/squad_team.py written into `repo`."""
    return build_team(repo)


@pytest.fixture
def fresh_choice() -> Iterator[None]:
    """The sandbox mechanism chosen again (it is cached per process), before and after."""
    sandbox_core.mechanism_for.cache_clear()
    yield
    sandbox_core.mechanism_for.cache_clear()


@pytest.fixture
def model_server(request: pytest.FixtureRequest) -> Iterator[OpenAIServer]:
    """The OpenAI-compatible test server the `daemon` fixture's daemon talks to."""
    spec = DaemonSpec.of(request.node)
    if spec.shared:
        yield request.getfixturevalue("shared_model_server")
        return
    with spec.server() as server:
        yield server


@pytest.fixture
def daemon(request: pytest.FixtureRequest, tmp_path: Path,
           model_server: OpenAIServer) -> Iterator[DaemonProcess]:
    """A real `squadd serve` as the test's `daemon` mark describes it (default: a fresh repo
    with one agent, `lead`, and FAST_CONFIG); killed at the end whatever happened."""
    spec = DaemonSpec.of(request.node)
    if spec.shared:
        yield request.getfixturevalue("shared_daemon")
        return
    with spec.started(tmp_path, model_server) as process:
        yield process


@pytest.fixture(scope="module")
def shared_model_server(request: pytest.FixtureRequest) -> Iterator[OpenAIServer]:
    """`model_server` for a module whose `daemon` mark says `shared=True`."""
    with DaemonSpec.of(request.node).server() as server:
        yield server


@pytest.fixture(scope="module")
def shared_daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  shared_model_server: OpenAIServer) -> Iterator[DaemonProcess]:
    """`daemon` for a module whose `daemon` mark says `shared=True`: one for all its tests."""
    folder = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with DaemonSpec.of(request.node).started(folder, shared_model_server) as process:
        yield process
