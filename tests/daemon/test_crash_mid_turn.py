"""kill -9 of a real daemon between two tool calls of one turn, then a new daemon resumes the
session: the call that finished keeps its result and is not run again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT
from squadd.state.transcripts import read_transcript
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.slow

# Call 2 never returns: the daemon is killed once its tool.started is seen (before or while
# it runs). Each run appends to its marker file.
STEP = '''\
import threading
from squadd import tool, ToolContext


@tool
def step(n: int, ctx: ToolContext) -> str:
    """Take step N, leaving a marker."""
    with (ctx.repo_dir / f"ran-{n}").open("a") as marker:
        marker.write("ran\\n")
    if n == 2:
        threading.Event().wait()
    return f"step {n} done"
'''


def test_a_killed_daemon_keeps_the_finished_result_and_resume_uses_it(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(
        OpenAIServer.tool_call_turn(("step", {"n": 1}), ("step", {"n": 2}), ("step", {"n": 3})),
        OpenAIServer.text_turn("resumed and done"))
    first = DaemonProcess.in_new_repo(tmp_path, model_server.url, config=FAST_CONFIG)
    layout = first.layout
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "step.py").write_text(STEP, encoding="utf-8")
    with first:
        with first.client.subscribe(types=["tool.started"]) as stream:
            accepted = first.client.route("take three steps", "lead", wait=False)
            session_id = accepted["session_id"]
            for event in stream:
                if event["arguments"] == {"n": 2}:
                    break
        first.kill()

    transcript = read_transcript(layout.transcript(session_id))
    results = [m for m in transcript.messages if m["role"] == "tool"]
    assert [m["content"] for m in results] == ["step 1 done"]

    with DaemonProcess(layout, model_server.url) as second:
        resumed = second.client.resume(session_id)
    assert resumed["ok"], resumed
    assert resumed["answer"] == "resumed and done"
    last = model_server.bodies[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "tool"] == [
        "step 1 done", INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT]
    assert (layout.repo / "ran-1").read_text() == "ran\n"  # run once, not again on resume
    assert not (layout.repo / "ran-3").exists()
    assert json.dumps(last).count("step 1 done") == 1
