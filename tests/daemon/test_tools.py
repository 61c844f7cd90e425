"""Custom tools in a real daemon process: a tool that must be approved waits for `squadd
approve|deny ID`, and `squadd stop` (or kill -9) ends the daemon while a tool runs away. Listing
and calling tools through the API runs in process: tests/daemon/test_tool_api.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from squadd.daemon.client import DaemonClient
from squadd.state.layout import SquadLayout
from squadd.state.owner import process_start
from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer

CONFIG = """\
[daemon]
grace_s = 1.0

[sandbox]
# These tests watch a tool's worker process by its PID from outside: in a sandbox's PID
# namespace the PID it reports is not the host's (tests/sandbox proves nothing outlives a
# sandboxed call).
mode = "off"

[tools]
approvals = { "squad_decide" = "ask" }
approval_timeout_s = 20
"""

SHOUT = '''\
from squadd import tool


@tool
def shout(text: str) -> str:
    """Say TEXT louder."""
    return text.upper() + "!"
'''


def _write_tools(layout: SquadLayout) -> None:
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "shout.py").write_text(SHOUT, encoding="utf-8")


pytestmark = [pytest.mark.slow, pytest.mark.daemon(config=CONFIG, prepare=_write_tools)]


def _call_in_background(daemon: DaemonProcess, title: str) -> tuple[threading.Thread,
                                                                     dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def call() -> None:
        with DaemonClient(daemon.layout) as client:
            outcome.update(client.call_tool("squad_decide", {
                "agentName": "lead", "title": title, "body": "Because."}))

    thread = threading.Thread(target=call, daemon=True)
    return thread, outcome


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_a_tool_waiting_for_approval_runs_only_when_approved(daemon: DaemonProcess,
                                                            verb: str) -> None:
    with daemon.client.subscribe(types=["approval.*"]) as stream:
        thread, outcome = _call_in_background(daemon, f"Ask first {verb}")
        thread.start()
        requested = next(stream)
        assert requested["type"] == "approval.requested" and requested["tool"] == "squad_decide"
        answered = daemon.squadd(verb, requested["approval_id"], "--reason", "checked it")
        assert answered.returncode == 0, answered.stderr
        resolved = next(stream)
    thread.join(20)
    assert resolved["type"] == "approval.resolved"
    assert resolved["approved"] is (verb == "approve") and resolved["reason"] == "checked it"
    inbox = daemon.layout.inbox_dir / f"lead-ask-first-{verb}.md"
    if verb == "approve":
        assert outcome["result_type"] == "success"
    else:
        assert outcome["result_type"] == "failure" and "checked it" in outcome["text"]
        assert not inbox.exists()
    again = daemon.squadd(verb, requested["approval_id"])
    assert again.returncode == 1 and "no pending approval" in again.stderr


RUNAWAY = '''\
import os
import time
from squadd import tool


@tool(timeout_s=600)
def runaway_sync(pidfile: str) -> str:
    """Never ends on its own."""
    open(pidfile, "w").write(str(os.getpid()))
    time.sleep(600)
    return "never"


@tool(timeout_s=600)
async def runaway_async(pidfile: str) -> str:
    """Blocks its own event loop for good."""
    open(pidfile, "w").write(str(os.getpid()))
    time.sleep(600)
    return "never"
'''


@pytest.mark.parametrize(("tool", "how"), [("runaway_runaway_sync", "stop"),
                                         ("runaway_runaway_async", "stop"),
                                         ("runaway_runaway_sync", "kill -9")])
def test_squadd_stop_ends_the_daemon_while_a_tool_runs_away(
        tmp_path: Path, model_server: OpenAIServer, tool: str, how: str) -> None:
    process = DaemonProcess.in_new_repo(tmp_path, model_server.url, config=CONFIG)
    (process.layout.root / "tools").mkdir(exist_ok=True)
    (process.layout.root / "tools" / "runaway.py").write_text(RUNAWAY, encoding="utf-8")
    pidfile = tmp_path / "tool.pid"
    outcome: list[Any] = []
    with process:
        def call_it() -> None:
            try:
                with DaemonClient(process.layout) as client:
                    outcome.append(client.call_tool(tool, {"pidfile": str(pidfile)}))
            except Exception as exc:  # the daemon went away under it: expected
                outcome.append(exc)

        caller = threading.Thread(target=call_it)
        caller.start()
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()):
            assert time.monotonic() < deadline, "the tool never started"
            time.sleep(0.02)
        tool_pid = int(pidfile.read_text())
        daemon_pid = process.pid
        assert tool_pid != daemon_pid
        if how == "stop":
            stopped = process.squadd("stop", "--timeout", "60")
            assert stopped.returncode == 0, stopped.stderr
        else:  # a crash: the worker notices it has no daemon any more, and ends itself
            process.kill()
        assert process.wait(timeout=60) is not None  # the daemon process itself has ended
        caller.join(60)
        deadline = time.monotonic() + 30
        while process_start(tool_pid) is not None:
            assert time.monotonic() < deadline, "the tool's worker outlived its daemon"
            time.sleep(0.05)
    assert process_start(daemon_pid) is None
    assert outcome
