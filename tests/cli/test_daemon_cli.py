"""The CLI over a real daemon: route with live progress, status, events, sessions, stop, and
what a person sees when no daemon runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.daemon_process import DaemonProcess, make_repo
from tests.support.model_servers import OpenAIServer

pytestmark = [pytest.mark.slow, pytest.mark.daemon(agents=("lead", "backend"))]


def test_route_round_trip_shows_progress_status_events_transcript_and_log(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    model_server.script(
        OpenAIServer.tool_call_turn(("squad_decide", {
            "agentName": "backend", "title": "Use SQLite", "body": "One file, no server."})),
        OpenAIServer.text_turn("We use SQLite."),
    )
    watcher = subprocess.Popen(
        [sys.executable, "-m", "squadd", "events", "--follow", "--json",
         "--type", "tool.*", "--type", "agent.completed"],
        cwd=daemon.layout.repo, env=daemon.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_streams(daemon, 1)
        routed = daemon.squadd("route", "backend", "Pick a database", "--context",
                               "We ship a CLI.")
        assert routed.returncode == 0, routed.stderr
        assert routed.stdout == "We use SQLite.\n"
        assert "→ backend: squad_decide(" in routed.stderr
        assert "✓ squad_decide" in routed.stderr
        events = _collect(watcher, until="agent.completed")
    finally:
        watcher.terminate()
        watcher.wait(10)
    assert [e["type"] for e in events] == ["tool.started", "tool.completed", "agent.completed"]
    assert events[2]["answer"] == "We use SQLite."
    session = events[2]["session_id"]
    request = model_server.requests[0].body
    assert "We ship a CLI." in request["messages"][0]["content"]

    status = daemon.squadd("status")
    assert status.returncode == 0
    row = next(line for line in status.stdout.splitlines() if session in line)
    assert row.split()[:2] == ["backend", "idle"]
    assert "Pick a database" in row and "pool: 0/8 running" in status.stdout
    report = json.loads(daemon.squadd("status", "--json").stdout)
    assert report["sessions"][0]["session_id"] == session

    shown = daemon.squadd("sessions", "show", session)
    assert shown.returncode == 0
    assert "→ squad_decide(" in shown.stdout and "We use SQLite." in shown.stdout
    assert "— completed" in shown.stdout
    records = [json.loads(line) for line in
               daemon.layout.transcript(session).read_text(encoding="utf-8").splitlines()]
    assert records[-1]["state"] == "completed"

    logs = list(daemon.layout.orchestration_dir.glob("*-backend.md"))
    assert len(logs) == 1
    entry = logs[0].read_text(encoding="utf-8")
    assert f"| **Session** | {session} |" in entry and "| **Outcome** | Completed |" in entry


def _wait_for_streams(daemon: DaemonProcess, count: int) -> None:
    deadline = time.monotonic() + 15
    while daemon.client.health()["event_streams"] < count:
        assert time.monotonic() < deadline, "the event watcher never subscribed"
        time.sleep(0.02)


def _collect(watcher: subprocess.Popen[str], until: str) -> list[dict[str, object]]:
    assert watcher.stdout is not None
    events = []
    for line in watcher.stdout:
        events.append(json.loads(line))
        if events[-1]["type"] == until:
            return events
    raise AssertionError(f"the stream ended before {until}: {events}")


def test_route_failures_exit_non_zero_with_the_reason(daemon: DaemonProcess,
                                                     model_server: OpenAIServer) -> None:
    unknown = daemon.squadd("route", "nobody", "Do it")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert 'unknown agent "nobody"' in unknown.stderr
    model_server.script(OpenAIServer.error(400, "model not found"))
    failed = daemon.squadd("route", "lead", "Do it")
    assert failed.returncode == 1
    assert "did not complete" in failed.stderr and "model not found" in failed.stderr


def test_no_wait_prints_the_session_and_sessions_list_shows_it(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.text_turn("later"))
    started = daemon.squadd("route", "lead", "Background work", "--no-wait",
                            "--priority", "urgent")
    assert started.returncode == 0, started.stderr
    session = started.stdout.strip()
    view = daemon.wait_for_state(session, {"idle"})
    assert view["answer"] == "later" and view["priority"] == "urgent"
    listed = daemon.squadd("sessions", "list")
    assert session in listed.stdout
    cancel = daemon.squadd("sessions", "cancel", session)
    assert cancel.returncode == 1 and "has no task to cancel" in cancel.stderr


def test_approve_and_deny_of_an_unknown_id_say_so(daemon: DaemonProcess) -> None:
    for verb in ("approve", "deny"):
        answer = daemon.squadd(verb, "0badc0de")
        assert answer.returncode == 1 and "no pending approval 0badc0de" in answer.stderr


def test_recent_events_are_printed_readably(daemon: DaemonProcess) -> None:
    daemon.client.call_tool("squad_status", {})
    shown = daemon.squadd("events", "--type", "tool.completed")
    assert shown.returncode == 0
    assert "tool.completed" in shown.stdout and "✓ squad_status" in shown.stdout


def test_stop_ends_the_daemon_and_the_cli_then_says_none_runs(daemon: DaemonProcess) -> None:
    stopped = daemon.squadd("stop")
    assert stopped.returncode == 0 and f"PID {daemon.pid}" in stopped.stdout
    assert daemon.wait(10) == 0
    for command in (["status"], ["route", "lead", "x"], ["events", "-f"]):
        answer = daemon.squadd(*command)
        assert answer.returncode == 1
        assert answer.stderr.strip() == (f"Error: no squadd daemon is running for "
                                         f"{daemon.layout.repo}: start one with 'squadd serve'")


def test_stop_returns_once_the_daemon_has_exited_with_its_journal_closed(
        daemon: DaemonProcess) -> None:
    daemon.client.call_tool("squad_status", {})
    stopped = daemon.squadd("stop")
    assert stopped.returncode == 0, stopped.stderr
    # Not only its API closed: the process is gone (a zombie until this test reaps it), and
    # with it the journal it closes after its API.
    assert daemon.proc is not None and daemon.proc.poll() == 0
    journals = daemon.layout.transcript_journals_dir
    assert not journals.exists() or list(journals.iterdir()) == []


def test_no_daemon_message_names_the_repo(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    answer = subprocess.run([sys.executable, "-m", "squadd", "status"], cwd=layout.repo,
                            capture_output=True, text=True, timeout=30)
    assert answer.returncode == 1
    assert (f"no squadd daemon is running for {layout.repo}: start one with 'squadd serve'"
            in answer.stderr)


def test_ctrl_c_cancels_the_route_s_own_session_and_exits_130(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    """The route is followed through its own request and the event stream: the session it
    cancels is the one whose start the stream showed, and it ends interrupted."""
    import signal

    from tests.support.model_servers import Reply

    model_server.script(OpenAIServer.tool_call_turn(("squad_status", {})),
                        Reply(body=OpenAIServer.text_turn("late").body, delay_s=60))
    routed = subprocess.Popen([sys.executable, "-m", "squadd", "route", "lead", "Take your time"],
                              cwd=daemon.layout.repo, env=daemon.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert routed.stderr is not None
        for line in routed.stderr:  # the progress line of the session's first tool call
            if "squad_status" in line:
                break
        routed.send_signal(signal.SIGINT)
        out, err = routed.communicate(timeout=30)
    finally:
        if routed.poll() is None:
            routed.kill()
    assert routed.returncode == 130, err
    session = err.split("cancelled session ")[1].split()[0]
    view = daemon.wait_for_state(session, {"interrupted"})
    assert view["task"] == "Take your time" and out == ""
