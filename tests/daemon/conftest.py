"""Fixtures for the daemon tests: a test model server and a real `squadd serve` process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer


@pytest.fixture
def model_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def daemon(tmp_path: Path, model_server: OpenAIServer) -> Iterator[DaemonProcess]:
    """A daemon in a fresh repo with one agent, `lead`; killed at the end whatever happened."""
    with DaemonProcess.in_new_repo(tmp_path, model_server.url, config=FAST_CONFIG) as process:
        yield process
