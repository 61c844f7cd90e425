"""How the shared `daemon` fixture (tests/conftest.py) builds its real `squadd serve`: a test
module (or one test) describes the repo and the start in a `daemon` mark, and the fixture does
the rest, so no test module defines its own `daemon` or `model_server` fixture.

    pytestmark = pytest.mark.daemon(agents=("lead", "backend"), extra_args=("--ui",))

    def test_it(daemon: DaemonProcess, model_server: OpenAIServer) -> None: ...

`shared=True` starts one daemon (and one model server) for the whole module. The daemon tests'
`layout` fixture (tests/daemon/conftest.py) is the same repo, for the API run in process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from squadd.state.layout import SquadLayout
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, make_repo
from tests.support.model_servers import OpenAIServer, Responder


@dataclass(frozen=True, kw_only=True)
class DaemonSpec:
    """What the `daemon` mark may say; every field has the default most tests want."""

    agents: tuple[str, ...] = ("lead",)
    config: str = FAST_CONFIG
    """`.squad/config.toml` (replaces the default: add FAST_CONFIG to keep it)."""
    extra_args: tuple[str, ...] = ()
    """More `squadd serve` arguments."""
    responder: Responder | None = None
    """How the model server answers when nothing is scripted (None: it answers "ok")."""
    build: Callable[[Path, str], DaemonProcess] | None = None
    """Builds the (not yet started) daemon from a temp folder and the model server's URL, in
    place of a fresh repo with `agents` and `config`."""
    prepare: Callable[[SquadLayout], None] | None = None
    """Runs on the repo before the start: tool files, hooks, charters."""
    ready: Callable[[DaemonProcess, OpenAIServer], None] | None = None
    """Runs once the daemon answers, before the test: routes it should find already done."""
    shared: bool = False
    """One daemon and one model server for every test of the module."""

    @classmethod
    def of(cls, node: pytest.Item | pytest.Collector) -> DaemonSpec:
        mark = node.get_closest_marker("daemon")
        return cls(**mark.kwargs) if mark is not None else cls()

    def server(self) -> OpenAIServer:
        return OpenAIServer(responder=self.responder)

    def repo(self, tmp_path: Path) -> SquadLayout:
        """A fresh repo under `tmp_path` with `agents` and `config`, prepared."""
        layout = make_repo(tmp_path / "repo", self.agents, self.config)
        if self.prepare is not None:
            self.prepare(layout)
        return layout

    @contextmanager
    def started(self, tmp_path: Path, server: OpenAIServer) -> Iterator[DaemonProcess]:
        """The daemon, started and waited on; killed at the end whatever happened."""
        if self.build is not None:
            process = self.build(tmp_path, server.url)
            if self.prepare is not None:
                self.prepare(process.layout)
        else:
            process = DaemonProcess(self.repo(tmp_path), server.url, extra_args=self.extra_args)
        with process:
            if self.ready is not None:
                self.ready(process, server)
            yield process
