"""kill -9 of a real daemon while a continuation (a new task for a session at rest, sent with
`sessionId` and without waiting) is still queued: it was answered as accepted, so it must not
be lost. A new daemon lists the session interrupted, and resuming it runs that task."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.state.transcripts import read_transcript
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.slow

# The only slot is held by a session whose tool never returns, so the continuation queues.
HOLD = '''\
import threading
from squadd import tool


@tool
def hold() -> str:
    """Hold the only slot."""
    threading.Event().wait()
    return "never"
'''
ONE_SLOT = FAST_CONFIG + "\n[pool]\nmax_concurrent = 1\n"


def test_a_queued_continuation_survives_sigkill_and_resume_runs_it(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(
        OpenAIServer.text_turn("first task done"),
        OpenAIServer.tool_call_turn(("hold", {})),
        OpenAIServer.text_turn("second task done"))
    first = DaemonProcess.in_new_repo(tmp_path, model_server.url, config=ONE_SLOT)
    layout = first.layout
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "hold.py").write_text(HOLD, encoding="utf-8")
    with first:
        done = first.client.route("the first task", "lead")
        assert done["ok"] and done["answer"] == "first task done", done
        session_id = done["session_id"]
        with first.client.subscribe(types=["tool.started"]) as stream:
            first.client.route("hold the slot", "lead", wait=False)
            next(iter(stream))  # the slot is taken from here on
        accepted = first.client.route("the second task", session_id=session_id, wait=False)
        assert accepted["ok"] and accepted["session_id"] == session_id, accepted
        assert accepted["state"] == "queued", accepted
        first.kill()

    transcript = read_transcript(layout.transcript(session_id))
    assert transcript.last_state == "queued"
    assert transcript.states[-1]["task"] == "the second task"

    with DaemonProcess(layout, model_server.url) as second:
        listed = {s["session_id"]: s for s in second.client.status()["sessions"]}
        assert listed[session_id]["state"] == "interrupted"
        resumed = second.client.resume(session_id)
    assert resumed["ok"] and resumed["answer"] == "second task done", resumed
    sent = model_server.bodies[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        "the first task", "the second task"]
    assert [m["content"] for m in sent if m["role"] == "assistant"] == ["first task done"]
