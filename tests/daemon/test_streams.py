"""Event streams: their bound, and the reserve that keeps routes followable when watchers hold
every ordinary stream."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from squadd.daemon.streams import MAX_EVENT_STREAMS, ROUTE_STREAM_RESERVE
from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer


def _open_streams(stack: contextlib.ExitStack, daemon: DaemonProcess, count: int,
                  **params: str) -> list[int]:
    """Open `count` event streams (each on its own connection); their HTTP statuses."""
    client = stack.enter_context(httpx.Client(
        base_url="http://squadd", transport=httpx.HTTPTransport(uds=str(daemon.layout.socket)),
        limits=httpx.Limits(max_connections=None), timeout=30))
    statuses = []
    for _ in range(count):
        response = stack.enter_context(client.stream("GET", "/v1/events", params=params))
        statuses.append(response.status_code)
    return statuses


@pytest.mark.slow
@pytest.mark.parametrize("watchers", ["ordinary full", "reserve full too"])
def test_a_waited_route_runs_however_many_event_streams_are_open(
        daemon: DaemonProcess, model_server: OpenAIServer, watchers: str) -> None:
    with contextlib.ExitStack() as stack:
        statuses = _open_streams(stack, daemon, MAX_EVENT_STREAMS)
        assert statuses == [200] * MAX_EVENT_STREAMS
        # The bound itself still holds for ordinary streams.
        assert _open_streams(stack, daemon, 1) == [503]
        if watchers == "reserve full too":
            assert _open_streams(stack, daemon, ROUTE_STREAM_RESERVE, reserve="route") == \
                [200] * ROUTE_STREAM_RESERVE
        model_server.script(OpenAIServer.text_turn("answered anyway"))
        done = daemon.squadd("route", "lead", "do it", timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "answered anyway"
    if watchers == "reserve full too":  # followed by asking for its state instead
        assert "no progress lines" in done.stderr
    else:
        assert "no progress lines" not in done.stderr
