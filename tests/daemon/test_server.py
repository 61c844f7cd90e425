"""The daemon's lifecycle with real processes: one per repo, stale files after kill -9, graceful
stop on SIGTERM, crash and resume, long socket paths, and `serve --detach`."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from squadd.daemon._unix import MAX_UNIX_PATH_BYTES
from squadd.daemon.client import DaemonClient
from squadd.errors import DaemonNotRunningError
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, make_repo
from tests.support.model_servers import OpenAIServer, Reply

pytestmark = pytest.mark.slow


def _hold(server: OpenAIServer) -> threading.Event:
    """Make every later model request wait (until the event is set or the server closes)."""
    release = threading.Event()

    def held(body: Any) -> Reply:
        release.wait(30)
        return OpenAIServer.text_turn("released")

    server.respond_with(held)
    return release


def test_a_second_serve_in_the_same_repo_fails_naming_the_running_pid(
        daemon: DaemonProcess) -> None:
    second = daemon.squadd("serve", "--provider", "openai", "--base-url", daemon.model_url,
                           timeout=30)
    assert second.returncode == 1
    assert f"PID {daemon.pid}" in second.stderr and "already running" in second.stderr
    assert daemon.client.health()["pid"] == daemon.pid  # the first one is untouched


def test_after_kill_9_the_stale_socket_is_cleaned_and_serve_starts_again(
        daemon: DaemonProcess) -> None:
    layout = daemon.layout
    daemon.kill()
    assert layout.socket.exists() and layout.pid_file.exists()
    gone = daemon.squadd("status")
    assert gone.returncode == 1
    assert (f"no squadd daemon is running for {layout.repo}: start one with 'squadd serve'"
            in gone.stderr)
    restarted = DaemonProcess(layout, daemon.model_url)
    with restarted:
        assert restarted.client.health()["pid"] == restarted.pid
        assert layout.pid_file.read_text().strip() == str(restarted.pid)
        assert "left behind" in (layout.log_file.read_text(encoding="utf-8"))


def test_sigterm_interrupts_a_running_session_and_leaves_no_socket(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    release = _hold(model_server)
    try:
        session = daemon.client.route("Think hard", "lead", wait=False)["session_id"]
        daemon.wait_for_state(session, {"active"})
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    finally:
        release.set()
    layout = daemon.layout
    assert not layout.socket.exists() and not layout.pid_file.exists()
    records = [json.loads(line) for line in
               layout.transcript(session).read_text(encoding="utf-8").splitlines()]
    assert records[-1]["kind"] == "state" and records[-1]["state"] == "interrupted"
    with pytest.raises(DaemonNotRunningError):
        daemon.client.health()


def test_a_session_killed_mid_way_shows_interrupted_and_resume_finishes_it(
        daemon: DaemonProcess, model_server: OpenAIServer) -> None:
    model_server.script(
        OpenAIServer.tool_call_turn(("squad_decide", {
            "agentName": "lead", "title": "Cache the index", "body": "It is slow."})),
        OpenAIServer.tool_call_turn(("squad_memory", {
            "agentName": "lead", "learning": "The index is slow", "category": "technical"})),
    )
    release = _hold(model_server)  # the third turn hangs: the daemon dies waiting for it
    layout = daemon.layout
    try:
        session = daemon.client.route("Speed up the index", "lead", wait=False)["session_id"]
        model_server.wait_for_requests(3, timeout=15)
        before = layout.transcript(session).read_text(encoding="utf-8")
        assert before.count('"role":"tool"') == 2
        daemon.kill()
    finally:
        release.set()
    model_server.respond_with(None)
    model_server.script(OpenAIServer.text_turn("Index cached."))
    restarted = DaemonProcess(layout, daemon.model_url)
    with restarted:
        view = restarted.client.session(session, transcript=False)["session"]
        assert view["state"] == "interrupted"
        listed = {s["session_id"]: s["state"] for s in restarted.client.status()["sessions"]}
        assert listed[session] == "interrupted"
        resumed = restarted.squadd("sessions", "resume", session)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == "Index cached."
        after = layout.transcript(session).read_text(encoding="utf-8")
        assert after.startswith(before)
        states = [json.loads(line).get("state") for line in after.splitlines()]
        assert states[-1] == "completed" and "interrupted" in states
        assert restarted.client.session(session, transcript=False)["session"]["state"] == "idle"
    assert (layout.inbox_dir / "lead-cache-the-index.md").exists() or \
        "Cache the index" in layout.decisions_md.read_text(encoding="utf-8")


def test_a_route_still_queued_when_the_daemon_is_killed_is_resumed_after_a_restart(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    daemon = DaemonProcess.in_new_repo(tmp_path, model_server.url,
                                       config=FAST_CONFIG + "\n[pool]\nmax_concurrent = 1\n")
    release = _hold(model_server)
    with daemon:
        try:
            daemon.client.route("Hold the only slot", "lead", wait=False)
            model_server.wait_for_requests(1, timeout=15)
            queued = daemon.client.route("Wait in line", "lead", wait=False)
            assert queued["ok"] and queued["state"] == "queued"
            daemon.kill()
        finally:
            release.set()
    model_server.respond_with(None)
    model_server.script(OpenAIServer.text_turn("Done in line."))
    with DaemonProcess(daemon.layout, daemon.model_url) as restarted:
        session = queued["session_id"]
        assert restarted.client.session(session, transcript=False)["session"]["state"] == \
            "interrupted"
        resumed = restarted.client.resume(session)
    assert resumed["ok"] and resumed["answer"] == "Done in line."
    sent = model_server.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["content"] == "Wait in line"


def test_a_repo_too_deep_for_a_unix_socket_path_is_served_through_its_folder(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    deep = tmp_path
    while len(os.fsencode(deep / ".squad" / "run" / "squadd.sock")) <= MAX_UNIX_PATH_BYTES + 20:
        deep = deep / "a-rather-long-folder-name"
    layout = make_repo(deep, config=FAST_CONFIG)
    assert len(os.fsencode(layout.socket)) > MAX_UNIX_PATH_BYTES
    model_server.script(OpenAIServer.text_turn("deep answer"))
    with DaemonProcess(layout, model_server.url) as daemon:
        assert layout.socket.exists()
        assert oct(layout.socket.stat().st_mode & 0o777) == "0o600"
        assert daemon.client.route("hello", "lead")["answer"] == "deep answer"
        routed = daemon.squadd("status", "--json")
        assert routed.returncode == 0, routed.stderr
        assert daemon.stop() == 0
    assert not layout.socket.exists()


def test_detach_returns_once_the_daemon_answers_and_stop_ends_it(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    layout = make_repo(tmp_path / "repo", config=FAST_CONFIG)
    runner = DaemonProcess(layout, model_server.url)
    started = runner.squadd("serve", "--detach", "--provider", "openai", "--base-url",
                            model_server.url, "--model", "test-model", timeout=60)
    match = re.search(r"PID (\d+)", started.stdout)
    assert started.returncode == 0 and match, started.stderr
    pid = int(match.group(1))
    try:
        assert "squadd.log" in started.stdout
        with DaemonClient(layout) as client:
            assert client.health()["pid"] == pid
        stopped = runner.squadd("stop")
        assert stopped.returncode == 0 and f"PID {pid}" in stopped.stdout, stopped.stderr
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, "the detached daemon is still running"
            time.sleep(0.05)
        assert not layout.socket.exists()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (reaped later by init) counts as gone.
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return status != "Z"
    return False
