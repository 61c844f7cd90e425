"""The dashboard's event streams have a budget of their own: a full set of dashboard tabs (and
one more, refused) never locks `squadd events` or an API stream out, and the API's streams
never lock the dashboard out."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx
import pytest

from squadd.daemon.streams import MAX_DASHBOARD_STREAMS, MAX_EVENT_STREAMS
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.slow


def _open(stack: contextlib.ExitStack, client: httpx.Client, path: str, count: int,
          **headers: str) -> list[int]:
    statuses = []
    for _ in range(count):
        response = stack.enter_context(client.stream("GET", path, headers=headers))
        statuses.append(response.status_code)
    return statuses


def test_dashboard_tabs_and_api_watchers_never_lock_each_other_out(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    with DaemonProcess.in_new_repo(tmp_path, model_server.url, config=FAST_CONFIG,
                                   extra_args=("--ui",)) as daemon, \
            contextlib.ExitStack() as stack:
        answer = json.loads(daemon.squadd("ui", "--json").stdout)
        token = answer["link"].partition("?token=")[2]
        board = stack.enter_context(httpx.Client(
            base_url=answer["url"], limits=httpx.Limits(max_connections=None), timeout=30))
        api = stack.enter_context(httpx.Client(
            base_url="http://squadd", transport=httpx.HTTPTransport(
                uds=str(daemon.layout.socket)),
            limits=httpx.Limits(max_connections=None), timeout=30))
        tabs = _open(stack, board, "api/events", MAX_DASHBOARD_STREAMS,
                     **{"x-squadd-token": token})
        assert tabs == [200] * MAX_DASHBOARD_STREAMS
        assert _open(stack, board, "api/events", 1, **{"x-squadd-token": token}) == [503]
        health = daemon.client.health()
        assert health["dashboard_streams"] == MAX_DASHBOARD_STREAMS
        assert health["event_streams"] == 0
        # Every tab is taken: the command line still gets its streams, up to the API's bound.
        shown = daemon.squadd("events", "--json", "-n", "5")
        assert shown.returncode == 0, shown.stderr
        assert _open(stack, api, "/v1/events", MAX_EVENT_STREAMS) == [200] * MAX_EVENT_STREAMS
        assert _open(stack, api, "/v1/events", 1) == [503]
        # And the API's full bound leaves the dashboard's own alone.
        assert daemon.client.health()["dashboard_streams"] == MAX_DASHBOARD_STREAMS
