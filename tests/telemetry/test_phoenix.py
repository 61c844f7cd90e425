"""The proof against a real OTLP receiver (Arize Phoenix): a route an outside caller makes
with a `traceparent` (as an MCP client sends it), which routes to a second agent that runs a
tool, arrives as one trace under the caller's span, with the GenAI conventions' names, parents
and attributes; the tool's process saw its span's `TRACEPARENT`; the commit the route landed on
main names the trace in its `Squad-Trace:` trailer."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the squadd[otel] extra is not installed")

from tests.support.daemon_process import DaemonProcess, clean_env
from tests.support.model_servers import OpenAIServer
from tests.support.phoenix import Phoenix, phoenix_bin

pytestmark = pytest.mark.slow

CONFIG = """\
[daemon]
grace_s = 5.0

[provider]
max_attempts = 1

[tools]
approvals = { "bash" = "allow" }

[workspace]
isolation = "worktree"
land = "auto"
"""
ARTIFACTS = Path(os.environ.get("SQUADD_TEST_ARTIFACTS")
                 or Path(__file__).resolve().parents[2] / "test-artifacts") / "traces"
CHROMIUM = Path("/usr/bin/chromium")
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[Phoenix]:
    executable = phoenix_bin()
    if executable is None:
        pytest.skip("Arize Phoenix is not installed: run scripts/install-phoenix (or set "
                    "PHOENIX_BIN to a `phoenix` executable) to run the trace proof")
    workdir = tmp_path / "phoenix"
    workdir.mkdir()
    with Phoenix(executable, workdir) as receiver:
        yield receiver


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def _one(spans: list[dict[str, Any]], name: str, parent: str) -> dict[str, Any]:
    """The one span named `name` whose parent is the span id `parent`."""
    [found] = [s for s in spans if s["name"] == name and s["parent_id"] == parent]
    return found


def _id(span: dict[str, Any]) -> str:
    return str(span["context"]["span_id"])


def test_a_nested_route_with_tool_calls_arrives_in_phoenix_as_one_trace(
        tmp_path: Path, phoenix: Phoenix) -> None:
    with OpenAIServer() as model:
        model.script(
            OpenAIServer.tool_call_turn(("squad_route", {"targetAgent": "fenster",
                                                         "task": "write the notes"})),
            OpenAIServer.tool_call_turn(("bash", {
                "command": "echo notes > notes.txt && echo seen=$TRACEPARENT"})),
            OpenAIServer.text_turn("notes written", prompt_tokens=40, completion_tokens=5),
            OpenAIServer.text_turn("fenster wrote the notes"))
        daemon = DaemonProcess.in_new_repo(
            tmp_path, model.url, config=CONFIG, agents=("lead", "fenster"),
            env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"),
                          OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.url,
                          OTEL_SERVICE_NAME="squadd-proof", OTEL_BSP_SCHEDULE_DELAY="200"))
        repo = daemon.layout.repo
        _git(repo, "init", "--quiet", "-b", "main")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet",
             "--allow-empty", "-m", "start")
        with daemon:
            result = daemon.client.call_tool(
                "squad_route", {"targetAgent": "lead", "task": "get the notes written"},
                traceparent=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
            assert result["result_type"] == "success", result
            assert daemon.stop() == 0  # a stop exports what is left

    spans = phoenix.wait_for_trace(CALLER_TRACE, count=12)
    # the caller's call -> lead -> lead's squad_route -> fenster -> fenster's bash
    called = _one(spans, "execute_tool squad_route", CALLER_SPAN)
    lead = _one(spans, "invoke_agent lead", _id(called))
    route = _one(spans, "execute_tool squad_route", _id(lead))
    fenster = _one(spans, "invoke_agent fenster", _id(route))
    bash = _one(spans, "execute_tool bash", _id(fenster))
    chats = [s for s in spans if s["name"] == "chat test-model"]
    assert sorted(c["parent_id"] for c in chats) == sorted([_id(lead)] * 2 + [_id(fenster)] * 2)
    _one(spans, "squadd.queue_wait", _id(lead))
    _one(spans, "squadd.queue_wait", _id(fenster))
    land = _one(spans, "squadd.land", _id(lead))
    assert land["attributes"]["squadd.land.state"] == "landed"
    assert {s["context"]["trace_id"] for s in spans} == {CALLER_TRACE}

    assert lead["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert lead["attributes"]["gen_ai.agent.name"] == "lead"
    assert lead["attributes"]["gen_ai.provider.name"] == "openai"
    session = lead["attributes"]["gen_ai.conversation.id"]
    assert bash["attributes"]["gen_ai.tool.name"] == "bash"
    assert bash["attributes"]["gen_ai.tool.type"] == "function"
    assert bash["attributes"]["gen_ai.tool.call.id"]
    last = max((c for c in chats if c["parent_id"] == _id(fenster)),
               key=lambda c: c["start_time"])
    attributes = last["attributes"]
    assert attributes["gen_ai.request.model"] == "test-model"
    assert attributes["gen_ai.response.model"] == "test-model"
    assert attributes["gen_ai.usage.input_tokens"] == 40
    assert attributes["gen_ai.usage.output_tokens"] == 5
    assert list(attributes["gen_ai.response.finish_reasons"]) == ["stop"]
    assert "gen_ai.input.messages" not in attributes  # content capture is off

    transcript = daemon.layout.transcript(fenster["attributes"]["gen_ai.conversation.id"])
    assert f"seen=00-{CALLER_TRACE}-{_id(bash)}-" in transcript.read_text()
    message = _git(repo, "log", "-1", "--format=%B", "main")
    assert f"Squad-Session: {session}" in message
    assert f"Squad-Trace: {CALLER_TRACE}" in message
    _screenshot(phoenix, CALLER_TRACE)


def _screenshot(phoenix: Phoenix, trace_id: str) -> None:
    """The trace as Phoenix's UI shows it, in test-artifacts/traces/trace.png (where a
    headless Chromium and playwright are at hand): the picture in docs/observability.md."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return
    if not CHROMIUM.exists():
        return
    import httpx

    [project] = [p for p in httpx.get(f"{phoenix.url}/v1/projects", timeout=30).json()["data"]
                 if p["name"] == "default"]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                         args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            tab = browser.new_page(viewport={"width": 1500, "height": 900})
            tab.goto(f"{phoenix.url}/projects/{project['id']}/traces/{trace_id}")
            tab.get_by_text("invoke_agent fenster").first.wait_for(timeout=60_000)
            tab.screenshot(path=str(ARTIFACTS / "trace.png"))
        finally:
            browser.close()
