"""The API on a real daemon's Unix socket: the process answers as itself, and an event stream
whose client hangs up is noticed by the server and dropped. Everything else the API does runs
in process (tests/daemon/test_app.py); lifecycle and signals are in tests/daemon/test_server.py.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from squadd.errors import DaemonRequestError
from tests.support.daemon_process import DaemonProcess

pytestmark = pytest.mark.daemon(shared=True)


def test_health_over_the_socket_names_the_daemon_process(daemon: DaemonProcess) -> None:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.layout.socket)),
                      base_url="http://squadd", timeout=30) as http:
        response = http.get("/v1/health")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    health = response.json()
    assert health["pid"] == daemon.pid and health["repo"] == str(daemon.layout.repo)
    assert daemon.client.health()["pid"] == daemon.pid  # squadd's own client, same socket


def test_an_event_stream_ends_on_the_server_when_its_client_hangs_up(
        daemon: DaemonProcess) -> None:
    seen: list[Any] = []
    with daemon.client.subscribe(types=["tool.*"]) as stream:
        assert daemon.client.health()["event_streams"] == 1
        daemon.client.call_tool("squad_status", {})
        for event in stream:
            seen.append(event)
            if event["type"] == "tool.completed":
                break
    assert [e["type"] for e in seen] == ["tool.started", "tool.completed"]
    deadline = time.monotonic() + 15
    while daemon.client.health()["event_streams"] != 0:  # noticed at the next write at most
        assert time.monotonic() < deadline, "the event stream outlived its client"
        time.sleep(0.1)


def test_a_body_over_the_limit_gets_the_daemons_413_not_a_broken_pipe(
        daemon: DaemonProcess) -> None:
    """The daemon refuses the body from its Content-Length and closes without reading it; the
    blocking client still reports the daemon's own answer."""
    with pytest.raises(DaemonRequestError) as caught:
        daemon.client.route("x" * (8 << 20), "lead", wait=False)
    assert caught.value.status == 413 and "limit" in str(caught.value)
