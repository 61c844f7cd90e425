"""Fixtures for the daemon tests (the daemon and its model server are the root conftest's): the
repo the test's `daemon` mark describes, for the API run in process, and the dashboard of the
test's daemon open in a real browser tab."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squadd.state.layout import SquadLayout
from tests.support.browser import browser_page
from tests.support.daemon_process import DaemonProcess
from tests.support.daemon_spec import DaemonSpec


@pytest.fixture
def layout(request: pytest.FixtureRequest, tmp_path: Path) -> SquadLayout:
    """A fresh repo as the test's `daemon` mark describes it (agents, config, prepare), for
    `tests.support.in_process.api_in_process`."""
    return DaemonSpec.of(request.node).repo(tmp_path)


@pytest.fixture
def page(daemon: DaemonProcess) -> Iterator[Any]:
    """The daemon's dashboard (started with `--ui`) in a browser tab."""
    with browser_page(daemon.client.ui()["link"]) as tab:
        yield tab
