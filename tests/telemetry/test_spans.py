"""The spans of a nested route through the runtime, recorded by the SDK's in-memory exporter:
one trace, `invoke_agent` > `chat` / `execute_tool` > the routed session's `invoke_agent`, with
the GenAI conventions' attributes; content only when capture is on, secrets redacted; and
without tracing nothing is recorded and nothing changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the squadd[otel] extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from squadd import telemetry
from squadd.config import Settings, load_settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from tests.runtime.scripted import call, make_squad, script, text


def _trace(exporter: InMemorySpanExporter, *, capture: bool = False,
           redact: Any = None) -> None:
    said = telemetry.configure(traces="on", service_name="squadd-test", version="0",
                               capture_content=capture, max_queue=2048, export_timeout_s=5,
                               redact=redact, exporter=exporter, environ={})
    assert telemetry.active(), said


def _finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    telemetry.shutdown()  # flushes the batch processor
    return list(exporter.get_finished_spans())


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


async def test_a_nested_route_with_tool_calls_is_one_trace_with_the_right_parents(
        tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    layout = make_squad(tmp_path / "repo")
    settings = load_settings(layout.root, overrides={"tools": {"approvals": {"bash": "allow"}}})
    provider = script(
        lead=[call("squad_route", targetAgent="fenster", task="list the files"),
              text("fenster listed them")],
        fenster=[call("bash", command="echo TRACEPARENT=$TRACEPARENT"), text("done")])
    _trace(exporter)
    async with SquadRuntime(layout, settings, provider) as runtime:
        result = await runtime.route(RouteRequest(task="get the files listed",
                                                  targetAgent="lead"))
    assert result.ok, result.message
    spans = _finished(exporter)
    assert len({span.context.trace_id for span in spans}) == 1
    named = _by_name(spans)
    [lead] = named["invoke_agent lead"]
    [fenster] = named["invoke_agent fenster"]
    [route] = named["execute_tool squad_route"]
    [bash] = named["execute_tool bash"]
    chats = named["chat replay"]
    assert lead.parent is None
    assert route.parent is not None and route.parent.span_id == lead.context.span_id
    assert fenster.parent is not None and fenster.parent.span_id == route.context.span_id
    assert bash.parent is not None and bash.parent.span_id == fenster.context.span_id
    assert sorted(c.parent.span_id for c in chats if c.parent) == sorted(
        [lead.context.span_id] * 2 + [fenster.context.span_id] * 2)
    for queued in named["squadd.queue_wait"]:
        assert queued.parent is not None
        assert queued.parent.span_id in (lead.context.span_id, fenster.context.span_id)

    assert dict(lead.attributes or {}).items() >= {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "lead",
        "gen_ai.conversation.id": result.session_id, "gen_ai.provider.name": "replay"}.items()
    assert (fenster.attributes or {})["squadd.session.parent_id"] == result.session_id
    assert dict(bash.attributes or {}).items() >= {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "bash",
        "gen_ai.tool.type": "function", "gen_ai.agent.name": "fenster"}.items()
    assert (bash.attributes or {})["gen_ai.tool.call.id"]
    chat = chats[0]
    assert dict(chat.attributes or {}).items() >= {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "replay",
        "gen_ai.response.finish_reasons": ("tool_calls",)}.items()
    assert "gen_ai.usage.input_tokens" in (chat.attributes or {})
    assert "gen_ai.input.messages" not in (chat.attributes or {})
    assert "gen_ai.tool.call.arguments" not in (bash.attributes or {})

    # the tool process got the trace of its execute_tool span
    trace_hex = format(bash.context.trace_id, "032x")
    span_hex = format(bash.context.span_id, "016x")
    child_session = str((fenster.attributes or {})["gen_ai.conversation.id"])
    transcript = layout.transcript(child_session).read_text()
    assert f"TRACEPARENT=00-{trace_hex}-{span_hex}-0" in transcript  # flags: sampled


async def test_content_is_captured_only_when_asked_and_secrets_are_redacted(
        tmp_path: Path, exporter: InMemorySpanExporter) -> None:
    layout = make_squad(tmp_path / "repo")
    settings = load_settings(layout.root, overrides={"tools": {"approvals": {"bash": "allow"}}})
    provider = script(lead=[call("bash", command="echo hunter2-token"), text("done")])
    _trace(exporter, capture=True, redact=lambda s: s.replace("hunter2-token", "[secret:T]"))
    async with SquadRuntime(layout, settings, provider) as runtime:
        result = await runtime.route(RouteRequest(task="say the hunter2-token",
                                                  targetAgent="lead"))
    assert result.ok
    named = _by_name(_finished(exporter))
    [bash] = named["execute_tool bash"]
    attributes = dict(bash.attributes or {})
    assert attributes["gen_ai.tool.call.arguments"] == '{"command": "echo [secret:T]"}'
    first, _second = named["chat replay"]
    assert "say the [secret:T]" in str((first.attributes or {})["gen_ai.input.messages"])
    assert "hunter2-token" not in str((first.attributes or {})["gen_ai.input.messages"])
    assert '"type": "tool_call"' in str((first.attributes or {})["gen_ai.output.messages"])
    assert "gen_ai.system_instructions" in (first.attributes or {})


async def test_without_tracing_nothing_is_recorded(tmp_path: Path) -> None:
    assert not telemetry.active()
    assert telemetry.configure(traces="auto", service_name="x", version="0",
                               capture_content=False, max_queue=1, export_timeout_s=1,
                               environ={}) == "traces off (no OTEL_EXPORTER_OTLP_ENDPOINT set)"
    assert not telemetry.active() and telemetry.environment() == {}
    with telemetry.span("anything") as span:
        span.set("k", "v")
        assert telemetry.traceparent() is None
    layout = make_squad(tmp_path / "repo")
    async with SquadRuntime(layout, Settings(), script(lead=[text("ok")])) as runtime:
        assert (await runtime.route(RouteRequest(task="t", targetAgent="lead"))).ok


def test_a_callers_traceparent_is_continued_and_a_malformed_one_ignored(
        exporter: InMemorySpanExporter) -> None:
    _trace(exporter)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with telemetry.continued(parent), telemetry.span("child"):
        assert telemetry.trace_id() == "0af7651916cd43dd8448eb211c80319c"
    with telemetry.continued("garbage"), telemetry.span("own"):
        assert telemetry.trace_id() != "0af7651916cd43dd8448eb211c80319c"
    named = _by_name(_finished(exporter))
    [child] = named["child"]
    assert child.parent is not None and format(child.parent.span_id, "016x") == \
        "b7ad6b7169203331"
    [own] = named["own"]
    assert own.parent is None
