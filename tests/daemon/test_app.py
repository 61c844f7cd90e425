"""The HTTP API against one real daemon process on its socket: routes and transcripts, tools,
the event stream, cancel, approvals. The error contracts (statuses and JSON errors for bad
input) run in process: tests/daemon/test_api_contracts.py."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from squadd.contracts.events import ToolCompleted, ToolStarted
from squadd.daemon.client import DaemonRequestError
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer, Reply


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as model:
        yield model


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory,
           server: OpenAIServer) -> Iterator[DaemonProcess]:
    with DaemonProcess.in_new_repo(tmp_path_factory.mktemp("api"), server.url,
                                   config=FAST_CONFIG, agents=("lead", "backend")) as process:
        yield process


@pytest.fixture
def http(daemon: DaemonProcess) -> Iterator[httpx.Client]:
    """A raw HTTP client on the daemon's socket, to see statuses and headers as they are."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.layout.socket)),
                      base_url="http://squadd", timeout=30) as client:
        yield client


def test_health_names_the_daemon_and_its_pool(daemon: DaemonProcess) -> None:
    health = daemon.client.health()
    assert health["ok"] is True and health["pid"] == daemon.pid
    assert health["repo"] == str(daemon.layout.repo)
    assert health["pool"]["max_concurrent"] == 8 and health["stopping"] is False


def test_route_returns_the_answer_and_the_session_shows_its_transcript(
        daemon: DaemonProcess, server: OpenAIServer) -> None:
    server.script(OpenAIServer.tool_call_turn(("squad_memory", {
        "agentName": "backend", "learning": "The API lives in src/api", "category": "technical"})),
        OpenAIServer.text_turn("Noted."))
    result = daemon.client.route("Remember where the API is", "backend")
    assert result["ok"] is True and result["answer"] == "Noted."
    assert result["agent"] == "backend" and result["turns"] == 2
    shown = daemon.client.session(result["session_id"])
    assert shown["session"]["state"] == "idle"
    kinds = [r["kind"] for r in shown["transcript"]]
    assert kinds[0] == "meta" and kinds[-1] == "state"
    roles = [r["message"]["role"] for r in shown["transcript"] if r["kind"] == "message"]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    tail = daemon.client.session(result["session_id"], tail=1)["transcript"]
    assert tail == shown["transcript"][-1:]
    listed = daemon.client.status(agent="backend")["sessions"]
    assert result["session_id"] in [s["session_id"] for s in listed]


def test_unknown_session_is_a_404_json_error(daemon: DaemonProcess) -> None:
    with pytest.raises(DaemonRequestError) as caught:
        daemon.client.session("20990101-000000-deadbeef")
    assert caught.value.status == 404 and "no session" in str(caught.value)
    with pytest.raises(DaemonRequestError) as traversal:
        daemon.client.session("../../etc/passwd")
    assert traversal.value.status == 404


def test_tools_are_listed_with_their_schema_and_source(daemon: DaemonProcess) -> None:
    tools = {tool["name"]: tool for tool in daemon.client.tools()}
    assert {"squad_route", "squad_decide", "squad_memory", "squad_status", "squad_skill"} <= set(
        tools)
    route = tools["squad_route"]
    assert route["source"] == "builtin" and route["squad_tool"] is True
    assert route["parameters"]["type"] == "object"
    assert "targetAgent" in route["parameters"]["properties"]
    assert route["parameters"]["required"] == ["task"]


def test_a_tool_runs_through_the_pipeline_and_a_failure_is_a_result(
        daemon: DaemonProcess) -> None:
    done = daemon.client.call_tool("squad_decide", {
        "agentName": "lead", "title": "Ship on Fridays", "body": "Never."})
    assert done["result_type"] == "success"
    inbox = daemon.layout.inbox_dir / "lead-ship-on-fridays.md"
    merged = daemon.layout.decisions_md
    assert inbox.exists() or "Ship on Fridays" in merged.read_text(encoding="utf-8")
    bad = daemon.client.call_tool("squad_decide", {"agentName": "lead"})
    assert bad["result_type"] == "failure" and "title" in bad["text"]
    unknown = daemon.client.call_tool("squad_nothing", {})
    assert unknown["result_type"] == "failure" and "squad_decide" in unknown["text"]


def test_event_stream_filters_by_type_and_ends_when_the_client_leaves(
        daemon: DaemonProcess) -> None:
    seen: list[Any] = []
    with daemon.client.subscribe(types=["tool.*"]) as stream:
        daemon.client.call_tool("squad_status", {})
        for event in stream:
            seen.append(event)
            if event["type"] == "tool.completed":
                break
    assert [e["type"] for e in seen] == ["tool.started", "tool.completed"]
    assert ToolStarted.model_validate(seen[0]).tool == "squad_status"
    assert ToolCompleted.model_validate(seen[1]).result_type == "success"
    deadline = time.monotonic() + 15
    while daemon.client.health()["event_streams"] != 0:  # noticed at the next write at most
        assert time.monotonic() < deadline, "the event stream outlived its client"
        time.sleep(0.1)


def test_recent_events_are_replayed_without_follow(daemon: DaemonProcess) -> None:
    daemon.client.call_tool("squad_status", {})
    recent = list(daemon.client.events(types=["tool.completed"], recent=1, follow=False))
    assert len(recent) == 1 and recent[0]["tool"] == "squad_status"


def test_pending_session_can_be_cancelled_and_shows_interrupted(
        daemon: DaemonProcess, server: OpenAIServer) -> None:
    release = threading.Event()

    def slow(body: Any) -> Reply:
        release.wait(10)
        return OpenAIServer.text_turn("late")

    server.respond_with(slow)
    try:
        started = daemon.client.route("Take your time", "lead", wait=False)
        session = started["session_id"]
        daemon.wait_for_state(session, {"active"})
        assert daemon.client.cancel(session)["cancelled"] is True
        view = daemon.wait_for_state(session, {"interrupted"})
        assert view["state"] == "interrupted"
        with pytest.raises(DaemonRequestError) as again:
            daemon.client.cancel(session)
        assert again.value.status == 409
    finally:
        release.set()
        server.respond_with(None)


def test_unknown_approval_is_a_404_and_a_bad_body_a_422(
        daemon: DaemonProcess, http: httpx.Client) -> None:
    with pytest.raises(DaemonRequestError) as caught:
        daemon.client.resolve_approval("abc123", True)
    assert caught.value.status == 404 and "no pending approval" in str(caught.value)
    response = http.post("/v1/approvals/abc123", json={"approved": "yes"})
    assert response.status_code == 422 and "approved" in response.json()["error"]


def test_transcript_records_are_json_lines_on_disk(daemon: DaemonProcess,
                                                   server: OpenAIServer) -> None:
    server.script(OpenAIServer.text_turn("fine"))
    result = daemon.client.route("Say fine", "lead")
    path: Path = daemon.layout.transcript(result["session_id"])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["kind"] for line in lines][-1] == "state"
    assert daemon.client.session(result["session_id"])["transcript"] == [
        json.loads(line) for line in lines]
