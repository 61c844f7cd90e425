"""The client without a daemon: the exact "not running" message, and how answers and event
streams are read."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from squadd.daemon.client import AsyncDaemonClient, DaemonClient
from squadd.daemon.wire import Call, Calls, SSEParser, read_answer
from squadd.errors import DaemonError, DaemonNotRunningError, DaemonRequestError
from squadd.state.layout import SquadLayout


def _expected(layout: SquadLayout) -> str:
    return f"no squadd daemon is running for {layout.repo}: start one with 'squadd serve'"


def test_no_socket_means_not_running_with_the_exact_message(squad: SquadLayout) -> None:
    with DaemonClient(squad) as client, pytest.raises(DaemonNotRunningError) as caught:
        client.health()
    assert str(caught.value) == _expected(squad)


def test_a_stale_socket_nobody_listens_on_means_not_running(squad: SquadLayout) -> None:
    squad.run_dir.mkdir(parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(squad.socket))
    stale.close()  # the file stays, as after kill -9
    with DaemonClient(squad) as client, pytest.raises(DaemonNotRunningError) as caught:
        client.status()
    assert str(caught.value) == _expected(squad)


def test_a_daemon_whose_socket_backlog_is_full_is_busy_not_gone(squad: SquadLayout) -> None:
    """A listener that accepts nothing, its backlog (of one) taken: the client waits for room
    up to its timeout, then says the daemon is busy; it does not say none runs."""
    squad.run_dir.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as queued:
        listener.bind(str(squad.socket))
        listener.listen(0)
        queued.setblocking(False)
        queued.connect(str(squad.socket))
        with DaemonClient(squad, timeout=0.5) as client, pytest.raises(DaemonError) as caught:
            client.health()
    assert not isinstance(caught.value, DaemonNotRunningError)
    assert "in time" in str(caught.value) and "busy" in str(caught.value)


async def test_the_async_client_says_the_same(squad: SquadLayout) -> None:
    async with AsyncDaemonClient(squad) as client:
        with pytest.raises(DaemonNotRunningError) as caught:
            await client.route("task", "lead")
    assert str(caught.value) == _expected(squad)


def test_a_deep_repo_without_a_run_dir_is_not_running(tmp_path: Path) -> None:
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    layout = SquadLayout.for_repo(deep)
    with DaemonClient(layout) as client, pytest.raises(DaemonNotRunningError):
        client.health()


def _response(status: int, body: object | None = None, text: str = "") -> httpx.Response:
    if body is not None:
        return httpx.Response(status, json=body)
    return httpx.Response(status, text=text)


@pytest.mark.parametrize("text", ['{"sessions": [', "", "[" * 100_000])
def test_a_good_status_whose_body_is_not_json_is_a_daemon_error(text: str) -> None:
    """Cut short, empty or nested past the parser: never `None` handed on as the answer."""
    with pytest.raises(DaemonError, match="is not JSON"):
        read_answer(Calls.status(None, False), _response(200, text=text))


def test_a_structured_route_failure_is_returned_not_raised() -> None:
    call = Calls.route({"task": "x"})
    full = {"ok": False, "reason": "pool_full", "error": "pool full: ...", "message": "m"}
    assert read_answer(call, _response(503, full)) == full


def test_an_error_answer_raises_with_the_daemons_message() -> None:
    with pytest.raises(DaemonRequestError) as caught:
        read_answer(Calls.health(), _response(422, {"error": "task: required", "fields": []}))
    assert str(caught.value) == "task: required" and caught.value.status == 422
    assert caught.value.payload["fields"] == []
    with pytest.raises(DaemonRequestError, match="HTTP 502: bad gateway"):
        read_answer(Call("GET", "/v1/x"), _response(502, text="bad gateway"))


def test_sse_parser_joins_data_lines_and_notes_the_subscription() -> None:
    parser = SSEParser()
    lines = [": subscribed", "", "id: 3", "event: tool.started", 'data: {"type":',
             'data: "tool.started", "seq": 3}', "", ": ping", "", "data: not json", "",
             "data: " + "[" * 100_000, "", 'data: {"seq": 4}', ""]
    events = [event for line in lines if (event := parser.feed(line)) is not None]
    assert parser.subscribed
    assert events == [{"type": "tool.started", "seq": 3}, {"seq": 4}]


def test_an_id_too_long_for_a_url_is_a_daemon_error_not_a_crash(squad: SquadLayout) -> None:
    with DaemonClient(squad) as client, pytest.raises(DaemonError) as caught:
        client.session("x" * 70_000)
    assert "cannot be sent" in str(caught.value) and len(str(caught.value)) < 400


async def test_the_async_client_refuses_a_too_long_tool_name_the_same_way(
        squad: SquadLayout) -> None:
    async with AsyncDaemonClient(squad) as client:
        with pytest.raises(DaemonError, match="cannot be sent"):
            await client.call_tool("t" * 70_000, {})
