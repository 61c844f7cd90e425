"""The HTTP API in process (`tests.support.in_process`): routes and transcripts, tools, the event
stream, cancel, approvals, through the `AsyncDaemonClient` squadd's own commands use. The error
contracts are in tests/daemon/test_api_contracts.py; the same app on a real daemon's socket in
tests/daemon/test_socket.py."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.contracts.events import ToolCompleted, ToolStarted
from squadd.daemon.client import DaemonRequestError
from squadd.state.layout import SquadLayout
from tests.support.in_process import InProcessDaemon, api_in_process
from tests.support.model_servers import OpenAIServer, Reply

pytestmark = pytest.mark.daemon(agents=("lead", "backend"))


@asynccontextmanager
async def running(layout: SquadLayout, server: OpenAIServer) -> AsyncIterator[InProcessDaemon]:
    async with api_in_process(layout, server.url) as daemon:
        yield daemon


async def test_health_names_the_daemon_and_its_pool(layout: SquadLayout,
                                                    model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        health = await daemon.client.health()
        assert health["ok"] is True and health["pid"] == os.getpid()
        assert health["repo"] == str(layout.repo)
        assert health["pool"]["max_concurrent"] == 8 and health["stopping"] is False


async def test_route_returns_the_answer_and_the_session_shows_its_transcript(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.tool_call_turn(("squad_memory", {
        "agentName": "backend", "learning": "The API lives in src/api", "category": "technical"})),
        OpenAIServer.text_turn("Noted."))
    async with running(layout, model_server) as daemon:
        client = daemon.client
        result = await client.route("Remember where the API is", "backend")
        assert result["ok"] is True and result["answer"] == "Noted."
        assert result["agent"] == "backend" and result["turns"] == 2
        shown = await client.session(result["session_id"])
        assert shown["session"]["state"] == "idle"
        kinds = [r["kind"] for r in shown["transcript"]]
        assert kinds[0] == "meta" and kinds[-1] == "state"
        roles = [r["message"]["role"] for r in shown["transcript"] if r["kind"] == "message"]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        tail = (await client.session(result["session_id"], tail=1))["transcript"]
        assert tail == shown["transcript"][-1:]
        listed = (await client.status(agent="backend"))["sessions"]
        assert result["session_id"] in [s["session_id"] for s in listed]


async def test_unknown_session_is_a_404_json_error(layout: SquadLayout,
                                                   model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        with pytest.raises(DaemonRequestError) as caught:
            await daemon.client.session("20990101-000000-deadbeef")
        assert caught.value.status == 404 and "no session" in str(caught.value)
        with pytest.raises(DaemonRequestError) as traversal:
            await daemon.client.session("../../etc/passwd")
        assert traversal.value.status == 404


async def test_tools_are_listed_with_their_schema_and_source(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        tools = {tool["name"]: tool for tool in await daemon.client.tools()}
    assert {"squad_route", "squad_decide", "squad_memory", "squad_status", "squad_skill"} <= set(
        tools)
    route = tools["squad_route"]
    assert route["source"] == "builtin" and route["squad_tool"] is True
    assert route["parameters"]["type"] == "object"
    assert "targetAgent" in route["parameters"]["properties"]
    assert route["parameters"]["required"] == ["task"]


async def test_a_tool_runs_through_the_pipeline_and_a_failure_is_a_result(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        client = daemon.client
        done = await client.call_tool("squad_decide", {
            "agentName": "lead", "title": "Ship on Fridays", "body": "Never."})
        assert done["result_type"] == "success"
        inbox = layout.inbox_dir / "lead-ship-on-fridays.md"
        assert inbox.exists() or "Ship on Fridays" in layout.decisions_md.read_text(
            encoding="utf-8")
        bad = await client.call_tool("squad_decide", {"agentName": "lead"})
        assert bad["result_type"] == "failure" and "title" in bad["text"]
        unknown = await client.call_tool("squad_nothing", {})
        assert unknown["result_type"] == "failure" and "squad_decide" in unknown["text"]


async def test_event_stream_filters_by_type_and_ends_when_the_client_leaves(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    seen: list[Any] = []
    async with running(layout, model_server) as daemon:
        client = daemon.client
        async with client.subscribe_raw(types=["tool.*"]) as stream:
            assert (await client.health())["event_streams"] == 1
            await client.call_tool("squad_status", {})
            with anyio.fail_after(15):
                async for event in stream:
                    seen.append(event)
                    if event["type"] == "tool.completed":
                        break
        assert [e["type"] for e in seen] == ["tool.started", "tool.completed"]
        assert ToolStarted.model_validate(seen[0]).tool == "squad_status"
        assert ToolCompleted.model_validate(seen[1]).result_type == "success"
        with anyio.fail_after(15):  # the app hears the disconnect and drops the subscription
            while daemon.context.streams:  # noqa: ASYNC110 (a set: nothing to wait on)
                await anyio.sleep(0.01)
        assert (await client.health())["event_streams"] == 0


async def test_recent_events_are_replayed_without_follow(layout: SquadLayout,
                                                         model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        client = daemon.client
        await client.call_tool("squad_status", {})
        async with client.subscribe_raw(types=["tool.completed"], recent=1,
                                        follow=False) as stream:
            with anyio.fail_after(15):
                recent = [event async for event in stream]
    assert len(recent) == 1 and recent[0]["tool"] == "squad_status"


async def test_pending_session_can_be_cancelled_and_shows_interrupted(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    release = threading.Event()

    def slow(body: Any) -> Reply:
        release.wait(10)
        return OpenAIServer.text_turn("late")

    model_server.respond_with(slow)
    try:
        async with running(layout, model_server) as daemon:
            client = daemon.client
            started = await client.route("Take your time", "lead", wait=False)
            session = started["session_id"]
            await daemon.wait_for_state(session, {"active"})
            assert (await client.cancel(session))["cancelled"] is True
            view = await daemon.wait_for_state(session, {"interrupted"})
            assert view["state"] == "interrupted"
            with pytest.raises(DaemonRequestError) as again:
                await client.cancel(session)
            assert again.value.status == 409
    finally:
        release.set()


async def test_unknown_approval_is_a_404_and_a_bad_body_a_422(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with running(layout, model_server) as daemon:
        with pytest.raises(DaemonRequestError) as caught:
            await daemon.client.resolve_approval("abc123", True)
        assert caught.value.status == 404 and "no pending approval" in str(caught.value)
        response = await daemon.http.post("/v1/approvals/abc123", json={"approved": "yes"})
        assert response.status_code == 422 and "approved" in response.json()["error"]


async def test_transcript_records_are_json_lines_on_disk(layout: SquadLayout,
                                                         model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.text_turn("fine"))
    async with running(layout, model_server) as daemon:
        result = await daemon.client.route("Say fine", "lead")
        path: Path = layout.transcript(result["session_id"])
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["kind"] for line in lines][-1] == "state"
        on_disk = [json.loads(line) for line in lines]
        system = next(r for r in on_disk if r.get("message", {}).get("role") == "system")
        assert "content" not in system["message"]  # the prompt is kept once, by digest
        text = (layout.transcript_prompts_dir / f"{system['prompt']}.txt").read_text("utf-8")
        assert text.startswith("You are lead, a Squad agent.")
        system["message"]["content"] = text  # the API puts the text back
        assert (await daemon.client.session(result["session_id"]))["transcript"] == on_disk
