"""Custom tools in a real agent session: a scripted model calls a Python tool that reports
progress, then a multi-step YAML tool with a run-condition and a parallel step; and a tool
that prints its secret leaves no trace of it anywhere under .squad/."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import ToolCompleted, ToolStarted, ToolUpdated
from squadd.providers.replay import ReplayProvider, ReplayScript
from squadd.runtime.events import EventBus
from squadd.runtime.session_info import SessionInfo
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript
from squadd.tools.discovery import Discovery, ToolDiscoverer
from squadd.tools.invoke import ToolInvoker
from squadd.tools.secrets import SecretRegistry
from squadd.tools.variables import SquadVariables, default_secrets_file
from tests.runtime.scripted import make_session
from tests.tools.custom_tools import Recorder, write

REPORT_TOOL = '''
from squadd import ToolContext, tool

@tool
async def report(topic: str, ctx: ToolContext) -> str:
    """Write a short report."""
    ctx.progress("gathering", 0.25)
    ctx.progress("writing", 0.75)
    return f"report on {topic}"
'''

PIPELINE_TOOL = """
description: Build, then check and lint in parallel, then publish if the build passed
tags: [run]
parameters:
  TARGET: {type: string, description: what to build}
steps:
  - name: build
    bash: echo built {TARGET}
  - name: check
    bash: sleep 0.2; echo checked
  - name: lint
    parallel: true
    bash: sleep 0.2; echo linted
  - name: publish
    run-condition: "{build.exit-code} == 0 && {build.output} contains 'built'"
    bash: echo published
  - name: rollback
    run-condition: "{build.exit-code} != 0"
    bash: echo rolled back
"""


async def _run_session(layout: SquadLayout, found: Discovery, turns: list[dict[str, Any]],
                       settings: Settings, sink: Recorder,
                       known_secrets: SecretRegistry | None = None) -> str:
    bus = EventBus()
    bus.add_listener(sink.publish)
    provider = ReplayProvider(ReplayScript.model_validate({"default": turns}))
    variables = SquadVariables(layout, settings, registry=known_secrets or SecretRegistry())
    invoker = ToolInvoker(layout, settings, bus, variables=variables)
    info = SessionInfo(session_id="e2e-1", agent="fenster", model="replay", task="go")
    session = make_session(layout, info, provider, invoker, found.toolset(), bus,
                           settings=settings)
    outcome = await session.start("go", None, timeout_s=60)
    assert outcome.status == "completed", outcome.error
    return info.session_id


async def test_model_calls_python_then_multi_step_yaml_and_results_arrive_in_order(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "report.py", REPORT_TOOL)
    write(layout.tools_dir, "pipeline.yaml", PIPELINE_TOOL)
    found = ToolDiscoverer().discover(layout, Settings())
    assert found.failures == ()
    sink = Recorder()
    session_id = await _run_session(layout, found, [
        {"tool_calls": [{"name": "report", "arguments": {"topic": "speed"}},
                        {"name": "pipeline", "arguments": {"TARGET": "app"}}]},
        {"text": "all done"},
    ], Settings(), sink)

    tool_messages = [m for m in read_transcript(layout.transcript(session_id)).messages
                     if m["role"] == "tool"]
    assert [m["name"] for m in tool_messages] == ["report", "pipeline"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_0_0", "call_0_1"]
    assert tool_messages[0]["content"] == "report on speed"
    assert tool_messages[1]["content"].splitlines() == [
        "[step build] exit 0", "built app",
        "[step check] exit 0", "checked",
        "[step lint] exit 0", "linted",
        "[step publish] exit 0", "published",
        "[step rollback] skipped: run-condition '{build.exit-code} != 0' is false",
        "[5 steps: 4 ok, 1 skipped]",
    ]
    order = [(type(e).__name__, getattr(e, "tool", None)) for e in sink.events
             if isinstance(e, ToolStarted | ToolUpdated | ToolCompleted)]
    assert order[:4] == [("ToolStarted", "report"), ("ToolUpdated", "report"),
                         ("ToolUpdated", "report"), ("ToolCompleted", "report")]
    assert order[4] == ("ToolStarted", "pipeline") and order[-1] == ("ToolCompleted", "pipeline")
    fractions = [e.fraction for e in sink.of(ToolUpdated) if e.tool == "report"]
    assert fractions == [0.25, 0.75]


SECRET = "sk-live-9f8e7d6c5b4a"

LEAKY_YAML = """
description: Calls an API and prints far too much
tags: [read]
variables:
  - {name: API_TOKEN, type: secret, description: the API token}
parameters:
  LINES: {type: number, description: how many lines, default: 3}
bash: for i in $(seq 1 {LINES}); do echo "line $i token=$API_TOKEN"; done
"""

LEAKY_PY = '''
import structlog
from squadd import ToolContext, tool

@tool(variables=[{"name": "API_TOKEN", "type": "secret"}])
def leaky(ctx: ToolContext) -> dict:
    """Returns its token."""
    token = ctx.variables["API_TOKEN"]
    ctx.progress(f"authenticating with {token}", 0.5)
    structlog.get_logger("tooldev").info("leaky ran")
    return {"token": token, "header": f"Bearer {token}"}
'''


@pytest.fixture
def known_secrets() -> SecretRegistry:
    return SecretRegistry()


@pytest.fixture
def json_log(layout: SquadLayout, known_secrets: SecretRegistry) -> Iterator[Path]:
    """squadd's real logging setup, writing JSON lines to .squad/run/squadd.log, redacting the
    secrets `known_secrets` is told of."""
    from squadd.logs import configure_logging

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(redact=known_secrets.redact_log_event, console=False,
                      json_file=layout.log_file,
                      file_level="debug")
    yield layout.log_file
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    structlog.configure(**saved)


async def test_a_secret_printed_by_tools_is_found_nowhere_under_the_squad_dir(
        layout: SquadLayout, json_log: Path, known_secrets: SecretRegistry) -> None:
    secrets = default_secrets_file()
    secrets.parent.mkdir(parents=True, exist_ok=True)
    secrets.write_text(f"API_TOKEN={SECRET}\n", encoding="utf-8")
    secrets.chmod(0o600)
    write(layout.tools_dir, "leaky_shell.yaml", LEAKY_YAML)
    write(layout.tools_dir, "leaky.py", LEAKY_PY)
    settings = Settings(tools=ToolsSettings(max_output_lines=50))
    found = ToolDiscoverer().discover(layout, settings)
    assert found.failures == ()
    sink = Recorder()
    session_id = await _run_session(layout, found, [
        {"tool_calls": [{"name": "leaky_shell", "arguments": {"LINES": 3}}]},
        {"tool_calls": [{"name": "leaky_shell", "arguments": {"LINES": 5000}},
                        {"name": "leaky", "arguments": {}}]},
        {"text": "done"},
    ], settings, sink, known_secrets)

    messages = [m for m in read_transcript(layout.transcript(session_id)).messages
                if m["role"] == "tool"]
    assert messages[0]["content"].splitlines()[0] == "line 1 token=[secret:API_TOKEN]"
    assert "[output truncated" in messages[1]["content"]
    assert json.loads(messages[2]["content"]) == {
        "token": "[secret:API_TOKEN]", "header": "Bearer [secret:API_TOKEN]"}
    spill = layout.tool_output(session_id, "call_1_0")
    assert spill.read_text().count("[secret:API_TOKEN]") == 5000
    progress = [e.message for e in sink.of(ToolUpdated) if e.tool == "leaky"]
    assert progress == ["authenticating with [secret:API_TOKEN]"]
    assert any("[secret:API_TOKEN]" in e.summary for e in sink.of(ToolCompleted))
    assert all(SECRET not in e.model_dump_json() for e in sink.events)
    for handler in logging.getLogger().handlers:
        handler.flush()
    log_text = json_log.read_text(encoding="utf-8")
    assert "shell tool finished" in log_text and "leaky ran" in log_text
    leaks = [path for path in layout.root.rglob("*")
             if path.is_file() and SECRET.encode() in path.read_bytes()]
    assert leaks == []
