"""kill -9 in the middle of a turn of three tool calls, in a real subprocess: the calls that
finished keep their results, and resuming the session uses them without running them again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from squadd.config import Settings
from squadd.providers.replay import ReplayProvider, parse_script
from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT
from squadd.runtime.session_info import SessionInfo
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript
from squadd.tools.base import ToolSet
from squadd.tools.invoke import ToolInvoker
from tests._helpers import REPO_ROOT
from tests.runtime.scripted import make_session
from tests.runtime.test_session import Events, Spy
from tests.tools.conftest import make_squad

SCRIPT = {"default": [
    {"tool_calls": [{"name": "step", "arguments": {"n": 1}},
                    {"name": "step", "arguments": {"n": 2}},
                    {"name": "step", "arguments": {"n": 3}}]},
    {"text": "all three handled"},
]}

# The child runs a session whose three calls each leave a marker file. The kill hook (chosen
# by KILL_AT, a test-only variable of this script) is either inside call 2 ("in-call") or in
# the invoker just before call 2 starts ("before-call"): the child says where it is on stdout
# and blocks on stdin until the parent kills it.
CHILD = """
import json, os, sys
from pathlib import Path
import anyio
from squadd import tool
from squadd.config import Settings
from squadd.providers.replay import ReplayProvider, parse_script
from squadd.runtime.session_info import SessionInfo
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from squadd.tools.invoke import ToolInvoker
from tests.runtime.scripted import make_session

layout = SquadLayout.at(Path(sys.argv[1]))
marks = Path(sys.argv[2])
kill_at = os.environ["KILL_AT"]

def hold(where):
    print(where, flush=True)
    sys.stdin.readline()  # the parent never answers: it kills us here

@tool
def step(n: int) -> str:
    \"\"\"Leave a marker for call n.\"\"\"
    (marks / f"ran-{n}").write_text("ran")
    if n == 2 and kill_at == "in-call":
        hold("in-call-2")
    return f"step {n} done"

class HookedInvoker(ToolInvoker):
    async def invoke(self, tools, call, origin):
        if call.arguments.get("n") == 2 and kill_at == "before-call":
            await anyio.to_thread.run_sync(hold, "before-call-2")
        return await super().invoke(tools, call, origin)

class Quiet:
    def publish(self, event):
        pass

settings = Settings()
session = make_session(
    layout, SessionInfo(session_id="s-crash", agent="fenster", model="m", task="three steps"),
    ReplayProvider(parse_script(sys.argv[3], source="test", yaml_syntax=False)),
    HookedInvoker(layout, settings, Quiet()), ToolSet([step.bound("step",
    source="project", file=None)]), Quiet(), settings=settings)
anyio.run(session.start, "three steps", None)
print("finished", flush=True)
"""


def _kill_mid_turn(layout: SquadLayout, marks: Path, kill_at: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KILL_AT": kill_at}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(layout.root), str(marks), json.dumps(SCRIPT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env)
    try:
        assert proc.stdout is not None
        where = proc.stdout.readline().strip()
        if not where:
            assert proc.stderr is not None
            pytest.fail(f"the child ended early: {proc.stderr.read()[-2000:]}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        return where
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.parametrize("kill_at", ["in-call", "before-call"])
async def test_sigkill_mid_turn_keeps_finished_results_and_resume_uses_them(
        tmp_path: Path, kill_at: str) -> None:
    layout = make_squad(tmp_path / "repo")
    marks = tmp_path / "marks"
    marks.mkdir()
    where = _kill_mid_turn(layout, marks, kill_at)
    assert where == f"{kill_at}-2"

    on_disk = read_transcript(layout.transcript("s-crash"))
    results = [m for m in on_disk.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [("call_0_0", "step 1 done")]
    assert not (marks / "ran-3").exists()

    # Resume in this process: the finished call's result goes to the model as it was.
    spy = Spy(ReplayProvider(parse_script(json.dumps(SCRIPT), source="test",
                                          yaml_syntax=False)))
    settings = Settings()
    events = Events()
    session = make_session(
        layout, SessionInfo(session_id="s-crash", agent="fenster", model="m",
                            task="three steps"),
        spy, ToolInvoker(layout, settings, events), ToolSet(), events, settings=settings)
    outcome = await session.continue_with(None)
    assert outcome.status == "completed" and outcome.answer == "all three handled"
    sent = spy.requests[0].messages
    assert [m.role for m in sent] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert [(m.tool_call_id, m.content) for m in sent[3:]] == [
        ("call_0_0", "step 1 done"), ("call_0_1", INTERRUPTED_TOOL_TEXT),
        ("call_0_2", NOT_STARTED_TOOL_TEXT)]
    # the stand-ins are in the transcript now, after the real result: a second resume reads
    # the same conversation
    again = read_transcript(layout.transcript("s-crash"))
    assert [m["content"] for m in again.messages if m["role"] == "tool"] == [
        "step 1 done", INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT]
    assert sorted(p.name for p in marks.iterdir()) == (
        ["ran-1", "ran-2"] if kill_at == "in-call" else ["ran-1"])
