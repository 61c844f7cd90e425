"""The trace context squadd is handed: an MCP client's `_meta.traceparent` (through `squadd
mcp`'s bridge and the daemon's API), an HTTP caller's `traceparent` header, a cluster job's
`traceparent`; each call's spans are children of the caller's span."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the squadd[otel] extra is not installed")

import mcp.types as types
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from squadd import telemetry
from squadd.cluster.wire import Job
from squadd.mcp_server import DaemonBridge
from tests.support.daemon_process import make_repo
from tests.support.in_process import api_in_process

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
PARENT = f"00-{TRACE}-{SPAN}-01"


@pytest.fixture(autouse=True)
def _traces_on(request: pytest.FixtureRequest) -> None:
    """A test that asks for `exporter` traces into it (the telemetry conftest shuts it down)."""
    if "exporter" in request.fixturenames:
        telemetry.configure(traces="on", service_name="t", version="0", capture_content=False,
                            max_queue=64, export_timeout_s=5,
                            exporter=request.getfixturevalue("exporter"), environ={})


def _parent_of(exporter: InMemorySpanExporter, name: str) -> tuple[str, str]:
    telemetry.shutdown()
    [span] = [s for s in exporter.get_finished_spans() if s.name == name]
    assert span.parent is not None
    return format(span.context.trace_id, "032x"), format(span.parent.span_id, "016x")


async def test_an_mcp_clients_traceparent_reaches_the_daemons_spans(
        tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    layout = make_repo(tmp_path / "repo")
    async with api_in_process(layout, "http://127.0.0.1:9") as daemon:
        bridge = DaemonBridge(daemon.client)
        params = types.CallToolRequestParams.model_validate(
            {"name": "squad_status", "arguments": {}, "_meta": {"traceparent": PARENT}})
        result = await bridge.call_tool(None, params)  # type: ignore[arg-type]
        assert not result.is_error
    assert _parent_of(exporter, "execute_tool squad_status") == (TRACE, SPAN)


async def test_an_http_callers_traceparent_header_is_continued(
        tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    layout = make_repo(tmp_path / "repo")
    async with api_in_process(layout, "http://127.0.0.1:9") as daemon:
        answer = await daemon.http.post("/v1/tools/squad_status", json={"arguments": {}},
                                        headers={"traceparent": PARENT})
        assert answer.status_code == 200, answer.text
    assert _parent_of(exporter, "execute_tool squad_status") == (TRACE, SPAN)


def test_a_job_carries_its_routes_trace_context_on_the_wire() -> None:
    job = Job(session_id="s-1", agent="lead", timeout_s=30, traceparent=PARENT)
    assert Job.model_validate_json(job.model_dump_json()).traceparent == PARENT
    assert Job.model_validate_json('{"session_id": "s", "agent": "a", "timeout_s": 1}'
                                   ).traceparent is None
