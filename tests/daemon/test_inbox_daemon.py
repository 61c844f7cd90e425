"""The inbox and budgets through a real daemon and a real OpenAI-compatible server that reports
usage: a route tree parks at its budget and finishes after `squadd inbox approve --budget`; an
approval survives a SIGKILL and answering it after the restart runs the call; `squad_ask`
parks until `squadd inbox answer`; the notify command and a signed webhook hear of each item
once, across a restart too."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from squadd.state.transcripts import read_transcript
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, clean_env
from tests.support.hook_scripts import RECORDER, command_hook, recorded, script, write_hooks
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.slow

PRICED = FAST_CONFIG.replace("[provider]\n", "[provider]\nmax_tokens = 10\n") + """
[pricing."openai/test-model"]
input = 1.0
output = 1000.0
"""
"""$0.001 an output token: a turn that answers with 2000 tokens costs $2."""
DEPLOY = '''\
from squadd import tool, ToolContext


@tool
def deploy(target: str, ctx: ToolContext) -> str:
    """Deploy to TARGET."""
    with (ctx.repo_dir / "deployed").open("a") as marker:
        marker.write(target + "\\n")
    return f"deployed to {target}"
'''


def _inbox(daemon: DaemonProcess) -> list[dict[str, Any]]:
    done = daemon.squadd("inbox", "--json")
    assert done.returncode == 0, done.stderr
    items: list[dict[str, Any]] = json.loads(done.stdout)
    return items


def _wait_item(daemon: DaemonProcess, kind: str, timeout: float = 20.0) -> dict[str, Any]:
    """The first open item of `kind` once its session is parked (or, after a restart, at
    rest): read now, then again at each `inbox.added` and `agent.state` event."""
    with contextlib.suppress(TimeoutError), daemon.follow_events(
            timeout, types=["inbox.added", "agent.state"]) as changes:
        for _ in itertools.chain([None], changes):
            report = daemon.client.status()
            for item in daemon.client.inbox()["items"]:
                sessions = [s for s in report["sessions"]
                            if s["session_id"] == item["session_id"]]
                if item["kind"] == kind and (not sessions or sessions[0]["state"] == "parked"):
                    return item
    raise TimeoutError(f"no {kind} item: {daemon.client.inbox()}\n{daemon.output}")


def test_a_route_tree_parks_at_its_budget_and_finishes_after_approve_budget(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(
        OpenAIServer.tool_call_turn(("squad_route", {"targetAgent": "fenster", "task": "fix"}),
                                    completion_tokens=2000),
        OpenAIServer.text_turn("fixed", completion_tokens=2000),
        OpenAIServer.text_turn("all done", completion_tokens=2000))
    config = PRICED + "\n[budget]\nper_route_usd = 1.0\n"
    with DaemonProcess.in_new_repo(tmp_path, model_server.url, config=config,
                                   agents=("lead", "fenster")) as daemon:
        accepted = daemon.client.route("ship the fix", "lead", wait=False)
        item = _wait_item(daemon, "parked")
        # fenster's first call would pass the tree's $1 with $2 spent: it was never sent
        assert len(model_server.requests) == 1
        assert item["agent"] == "fenster" and item["route"] == accepted["session_id"]
        assert item["details"]["setting"] == "budget.per_route_usd"
        pool = daemon.client.status()["pool"]
        assert pool["running"] == 0 and pool["parked"] == 1 and pool["waiting"] == 1
        shown = daemon.squadd("inbox")
        assert item["id"] in shown.stdout and "parked" in shown.stdout
        approved = daemon.squadd("inbox", "approve", item["id"], "--budget", "+5")
        assert approved.returncode == 0, approved.stderr
        view = daemon.wait_for_state(accepted["session_id"], {"idle"}, timeout=30)
        assert view["answer"] == "all done"
        assert len(model_server.requests) == 3
        call = 2000 * 1000 / 1e6 + 11 * 1 / 1e6  # 2000 tokens out, 11 in (the server's usage)
        assert view["cost_usd"] == pytest.approx(2 * call)
        assert view["route_cost_usd"] == pytest.approx(3 * call)
        status = daemon.squadd("status")
        assert "$4.00" in status.stdout and "spent today" in status.stdout
        shown = daemon.squadd("sessions", "show", accepted["session_id"])
        assert "route " in shown.stdout and "$6.00" in shown.stdout
        assert _inbox(daemon) == []


def test_an_approval_waits_across_a_sigkill_and_answering_it_runs_the_call(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.tool_call_turn(("deploy", {"target": "prod"})),
                        OpenAIServer.text_turn("deployed it"))
    config = FAST_CONFIG + '\n[tools]\napprovals = { "deploy" = "ask" }\n'
    first = DaemonProcess.in_new_repo(tmp_path, model_server.url, config=config)
    layout = first.layout
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "deploy.py").write_text(DEPLOY, encoding="utf-8")
    with first:
        session_id = first.client.route("deploy to prod", "lead", wait=False)["session_id"]
        item = _wait_item(first, "approval")
        assert item["details"]["tool"] == "deploy"
        assert item["details"]["arguments"] == {"target": "prod"}
        assert first.client.status()["pool"]["running"] == 0  # it waits holding no slot
        first.kill()
    assert not (layout.repo / "deployed").exists()
    with DaemonProcess(layout, model_server.url) as second:
        (still,) = _inbox(second)
        assert still["id"] == item["id"] and still["actions"] == ["approve", "deny"]
        assert second.client.status()["pool"]["running"] == 0
        answered = second.squadd("inbox", "approve", item["id"])
        assert answered.returncode == 0, answered.stderr
        view = second.wait_for_state(session_id, {"idle"}, timeout=30)
        assert view["answer"] == "deployed it"
    assert (layout.repo / "deployed").read_text() == "prod\n"  # run once, after the answer
    tools = [m for m in read_transcript(layout.transcript(session_id)).messages
             if m["role"] == "tool"]
    assert [m["content"] for m in tools] == ["deployed to prod"]


class _Hooks(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.received.append(({k.lower(): v for k, v in self.headers.items()}, body))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def webhook() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hooks)
    server.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _wait(predicate: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def test_squad_ask_parks_notifies_once_and_the_answer_reaches_the_transcript(
        tmp_path: Path, model_server: OpenAIServer, webhook: ThreadingHTTPServer) -> None:
    model_server.script(OpenAIServer.tool_call_turn(("squad_ask", {"question": "Which DB?"})),
                        OpenAIServer.text_turn("using postgres"),
                        OpenAIServer.tool_call_turn(("squad_ask", {"question": "Ship?"})),
                        OpenAIServer.text_turn("shipped"))
    heard = tmp_path / "heard.jsonl"
    notifier = [sys.executable, "-c",
                f"import sys; open({str(heard)!r}, 'a').write(sys.stdin.read() + '\\n')"]
    url = f"http://127.0.0.1:{webhook.server_address[1]}/hook"
    config = FAST_CONFIG + f"\n[notify]\ncommand = {json.dumps(notifier)}\nwebhook = \"{url}\"\n"
    env = clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"), SQUADD_WEBHOOK_SECRET="s3cret")
    received: list[tuple[dict[str, str], bytes]] = webhook.received  # type: ignore[attr-defined]
    daemon = DaemonProcess.in_new_repo(tmp_path, model_server.url, config=config, env=env)
    layout = daemon.layout
    with daemon:
        session_id = daemon.client.route("set up the db", "lead", wait=False)["session_id"]
        item = _wait_item(daemon, "question")
        assert item["details"]["question"] == "Which DB?"
        assert daemon.client.status()["pool"]["running"] == 0
        _wait(lambda: set(daemon.client.inbox_item(item["id"])["item"]["notified"])
              == {"command", "webhook"}, "the first item was not notified")
        answered = daemon.squadd("inbox", "answer", item["id"], "postgres")
        assert answered.returncode == 0, answered.stderr
        assert daemon.wait_for_state(session_id, {"idle"}, timeout=30)["answer"] == \
            "using postgres"
        assert daemon.stop() == 0
    tools = [m for m in read_transcript(layout.transcript(session_id)).messages
             if m["role"] == "tool"]
    assert tools[-1]["content"] == "Answer from person: postgres"
    # a restart sends nothing again; a new item is sent once more, to both channels
    with DaemonProcess(layout, model_server.url, env=env) as again:
        again.client.route("ship it", "lead", session_id=session_id, wait=False)
        second = _wait_item(again, "question")
        _wait(lambda: set(again.client.inbox_item(second["id"])["item"]["notified"])
              == {"command", "webhook"}, "the second item was not notified")
    lines = [json.loads(line) for line in heard.read_text().splitlines() if line.strip()]
    assert [line["item"]["id"] for line in lines] == [item["id"], second["id"]]
    assert [json.loads(body)["item"]["id"] for _, body in received] == [item["id"], second["id"]]
    for headers, body in received:
        expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert headers["x-squadd-signature"] == expected


def test_each_new_item_reaches_the_notification_hooks(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    model_server.script(OpenAIServer.tool_call_turn(("squad_ask", {"question": "Which DB?"})),
                        OpenAIServer.text_turn("using sqlite"))
    notes = tmp_path / "notes" / "heard.jsonl"
    notes.parent.mkdir()
    # The hook runs in the sandbox: the folder it lives and writes in is declared writable.
    config = FAST_CONFIG + f'\n[sandbox]\nwritable = ["{notes.parent}"]\n'
    daemon = DaemonProcess.in_new_repo(tmp_path, model_server.url, config=config)
    recorder = script(notes.parent, "recorder.py", RECORDER)
    write_hooks(daemon.layout, {"Notification": [{"matcher": "question", "hooks": [
        command_hook(f"{recorder} {notes}")]}]})
    with daemon:
        session_id = daemon.client.route("pick a db", "lead", wait=False)["session_id"]
        item = _wait_item(daemon, "question")
        _wait(lambda: notes.exists() and recorded(notes), "the Notification hook never ran")
        [note] = recorded(notes)
        assert note["hook_event_name"] == "Notification"
        assert note["notification_type"] == "question"
        assert note["session_id"] == session_id and note["message"] == item["reason"]
        assert daemon.squadd("inbox", "answer", item["id"], "sqlite").returncode == 0
        assert daemon.wait_for_state(session_id, {"idle"}, timeout=30)["answer"] == \
            "using sqlite"
