"""Event streams: their bound, and the reserve that keeps routes followable when watchers hold
every ordinary stream."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from squadd.daemon.app import create_app
from squadd.daemon.streams import MAX_EVENT_STREAMS, ROUTE_STREAM_RESERVE
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, make_repo
from tests.support.in_process import api_in_process
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


@pytest.mark.parametrize("spec_version", ["2.0", "2.4"])
async def test_a_stream_whose_client_left_before_its_first_frame_is_let_go(
        tmp_path: Path, model_server: OpenAIServer, spec_version: str) -> None:
    """The client is gone as the answer starts: the body is never iterated, yet the stream
    must not stay counted (64 such would lock every watcher out until a restart)."""
    layout = make_repo(tmp_path / "repo", ("lead",), config=FAST_CONFIG)
    async with api_in_process(layout, model_server.url) as daemon:
        app = create_app(daemon.context)
        scope: dict[str, Any] = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": spec_version},
            "http_version": "1.1", "method": "GET", "scheme": "http", "path": "/v1/events",
            "raw_path": b"/v1/events", "query_string": b"", "root_path": "",
            "headers": [(b"host", b"squadd")], "client": None, "server": None}
        starts: list[dict[str, Any]] = []
        requests = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive() -> dict[str, Any]:
            if requests:
                return requests.pop()
            await anyio.sleep_forever()  # no disconnect message: the failed send says it
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                starts.append(message)
                raise OSError("the client hung up")

        with anyio.fail_after(20), contextlib.suppress(Exception):
            await app(scope, receive, send)
        assert starts and starts[0]["status"] == 200
        assert daemon.context.streams == set()
