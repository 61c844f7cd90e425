"""The HTTP API's error contracts, in process (`tests.support.in_process`): statuses and JSON
errors for unknown agents, bad bodies, bad queries and bad names. The same app as `squadd serve`
(tests/daemon/test_socket.py reaches it on a real daemon's socket)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from squadd.state.layout import SquadLayout
from tests.support.in_process import api_in_process
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.daemon(agents=("lead", "backend"), config="")


@asynccontextmanager
async def api(layout: SquadLayout, server: OpenAIServer) -> AsyncIterator[httpx.AsyncClient]:
    # Entered in the test itself: the runtime's task group lives and ends in one task.
    async with api_in_process(layout, server.url) as daemon:
        yield daemon.http


async def test_health_answers_in_process(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        health = (await http.get("/v1/health")).json()
        assert health["ok"] is True and health["pool"]["running"] == 0


async def test_unknown_agent_is_a_404_with_the_roster(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        response = await http.post("/v1/route", json={"targetAgent": "nobody", "task": "x"})
        assert response.status_code == 404
        body = response.json()
        assert body["ok"] is False and body["reason"] == "unknown_agent"
        assert 'unknown agent "nobody"' in body["error"] and "backend" in body["error"]


async def test_invalid_route_body_is_a_422_naming_each_bad_field(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        response = await http.post("/v1/route", json={"task": "", "priority": "asap", "colour": 1})
        assert response.status_code == 422
        body = response.json()
        fields = {f["field"] for f in body["fields"]}
        assert fields == {"task", "priority", "colour"}
        assert "task" in body["error"] and "priority" in body["error"]


async def test_bad_json_and_oversized_bodies_are_json_errors(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        bad = await http.post("/v1/route", content=b"{not json",
                              headers={"content-type": "application/json"})
        assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
        huge = await http.post("/v1/route", content=b"x" * (4 * 1024 * 1024 + 1))
        assert huge.status_code == 413 and "limit" in huge.json()["error"]
        missing = await http.get("/v1/nothing-here")
        assert missing.status_code == 404 and "no such endpoint" in missing.json()["error"]
        wrong_method = await http.delete("/v1/health")
        assert wrong_method.status_code == 405 and "error" in wrong_method.json()


async def test_unknown_session_is_a_404_json_error(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        response = await http.get("/v1/sessions/20990101-000000-deadbeef")
        assert response.status_code == 404 and "no session" in response.json()["error"]
        traversal = await http.get("/v1/sessions/..%2F..%2Fetc%2Fpasswd")
        assert traversal.status_code == 404 and traversal.json()["error"]


async def test_unknown_event_type_is_refused(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        response = await http.get("/v1/events", params={"type": "tool.bogus"})
        assert response.status_code == 422 and "tool.started" in response.json()["error"]


async def test_unknown_approval_is_a_404_and_a_bad_body_a_422(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        unknown = await http.post("/v1/approvals/abc123", json={"approved": True})
        assert unknown.status_code == 404 and "no pending approval" in unknown.json()["error"]
        response = await http.post("/v1/approvals/abc123", json={"approved": "yes"})
        assert response.status_code == 422 and "approved" in response.json()["error"]


async def test_names_in_bodies_and_filters_must_be_agent_names(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        for path, body in (("/v1/tools/squad_status", {"agent": "../../etc"}),
                           ("/v1/route", {"task": "t", "targetAgent": "lead",
                                          "requestedBy": "a/b"})):
            response = await http.post(path, json=body)
            assert response.status_code == 422 and "invalid agent name" in response.json()["error"]
        listed = await http.get("/v1/sessions", params={"agent": ".."})
        assert listed.status_code == 422 and "agent" in listed.json()["error"]
        streamed = await http.get("/v1/events", params={"session": "../x", "follow": "0"})
        assert streamed.status_code == 422 and "session id" in streamed.json()["error"]


async def test_bad_query_values_and_unknown_approval_fields_are_422s(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        # The query is checked before the session is looked up: a 422, not a 404.
        tail = await http.get("/v1/sessions/20990101-000000-deadbeef", params={"tail": "²"})
        assert tail.status_code == 422 and "tail" in tail.json()["error"]
        recent = await http.get("/v1/events", params={"recent": "9" * 5000, "follow": "0"})
        assert recent.status_code == 200  # all digits: clamped to what is kept, not a 500
        extra = await http.post("/v1/approvals/abc123", json={"approved": True, "colour": "red"})
        assert extra.status_code == 422 and "colour" in extra.json()["error"]


async def test_a_tool_call_runs_through_the_pipeline(
        layout: SquadLayout, model_server: OpenAIServer) -> None:
    async with api(layout, model_server) as http:
        response = await http.post("/v1/tools/squad_status", json={})
        assert response.status_code == 200
        body = response.json()
        assert body["result_type"] == "success" and "squad_status" not in body.get("error", "")
