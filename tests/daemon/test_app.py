"""The HTTP API's contracts, against one real daemon process: statuses, JSON errors, routes,
tools, the event stream, cancel, approvals."""

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


def test_unknown_agent_is_a_404_with_the_roster(http: httpx.Client) -> None:
    response = http.post("/v1/route", json={"targetAgent": "nobody", "task": "x"})
    assert response.status_code == 404
    body = response.json()
    assert body["ok"] is False and body["reason"] == "unknown_agent"
    assert 'unknown agent "nobody"' in body["error"] and "backend" in body["error"]


def test_invalid_route_body_is_a_422_naming_each_bad_field(http: httpx.Client) -> None:
    response = http.post("/v1/route", json={"task": "", "priority": "asap", "colour": 1})
    assert response.status_code == 422
    body = response.json()
    fields = {f["field"] for f in body["fields"]}
    assert fields == {"task", "priority", "colour"}
    assert "task" in body["error"] and "priority" in body["error"]


def test_bad_json_and_oversized_bodies_are_json_errors(http: httpx.Client) -> None:
    bad = http.post("/v1/route", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
    huge = http.post("/v1/route", content=b"x" * (4 * 1024 * 1024 + 1))
    assert huge.status_code == 413 and "limit" in huge.json()["error"]
    missing = http.get("/v1/nothing-here")
    assert missing.status_code == 404 and "no such endpoint" in missing.json()["error"]
    wrong_method = http.delete("/v1/health")
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()


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


def test_unknown_event_type_is_refused(http: httpx.Client) -> None:
    response = http.get("/v1/events", params={"type": "tool.bogus"})
    assert response.status_code == 422 and "tool.started" in response.json()["error"]


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


def test_names_in_bodies_and_filters_must_be_agent_names(http: httpx.Client) -> None:
    for path, body in (("/v1/tools/squad_status", {"agent": "../../etc"}),
                       ("/v1/route", {"task": "t", "targetAgent": "lead",
                                      "requestedBy": "a/b"})):
        response = http.post(path, json=body)
        assert response.status_code == 422 and "invalid agent name" in response.json()["error"]
    listed = http.get("/v1/sessions", params={"agent": ".."})
    assert listed.status_code == 422 and "agent" in listed.json()["error"]
    streamed = http.get("/v1/events", params={"session": "../x", "follow": "0"})
    assert streamed.status_code == 422 and "session id" in streamed.json()["error"]


def test_bad_query_values_and_unknown_approval_fields_are_422s(http: httpx.Client) -> None:
    # The query is checked before the session is looked up: a 422, not a 404.
    tail = http.get("/v1/sessions/20990101-000000-deadbeef", params={"tail": "²"})
    assert tail.status_code == 422 and "tail" in tail.json()["error"]
    recent = http.get("/v1/events", params={"recent": "9" * 5000, "follow": "0"})
    assert recent.status_code == 200  # all digits: clamped to what is kept, not a 500
    extra = http.post("/v1/approvals/abc123", json={"approved": True, "colour": "red"})
    assert extra.status_code == 422 and "colour" in extra.json()["error"]
