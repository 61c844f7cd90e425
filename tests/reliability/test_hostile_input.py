"""Bad input, tried everywhere it enters: the HTTP API, the CLI, MCP, tool arguments from the
model, files dropped into the inbox, tool files and config files all get the same hostile values
(`hostile.values`). Each one gets a clear error (never a 500, a traceback or a hang), the daemon
keeps serving with the same PID, and nothing outside `.squad/` is written.

One daemon serves the module; after each batch `World.assert_intact` checks its health and the
files around the repo (the repo sits in a folder of its own, so its siblings are checked too).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import stat
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from squadd.cli.app import main as cli_main
from squadd.config import load_settings
from squadd.errors import ConfigError
from tests.reliability.hostile import (
    ARGV_MAX,
    BIG,
    DEEP,
    ESCAPE_NAME,
    TRAVERSALS,
    RawMcp,
    Snapshot,
    Value,
    differences,
    mcp_text,
    snapshot,
    splice,
    values,
)
from tests.support.daemon_process import DaemonProcess, clean_env, make_repo
from tests.support.model_servers import OpenAIServer, Reply

pytestmark = pytest.mark.slow

CONFIG = """\
[daemon]
grace_s = 1.0

[provider]
max_attempts = 1
# Room for the 10 MB argument values the model sends; the "huge" answer passes it.
max_response_bytes = 16777216

[scribe]
debounce_ms = 50
poll_interval_s = 0.2
"""
GOOD_PY = '''from squadd import tool


@tool
def echo(text: str) -> str:
    """Say the text back."""
    return text
'''
GOOD_YAML = "description: Say hello.\nbash: echo hello\ntags: [read]\n"


@dataclass
class World:
    """The module's daemon, its model server, and the files around its repo at the start."""

    top: Path
    daemon: DaemonProcess
    model: OpenAIServer
    harness: Path
    outside: Path
    """A file outside the repo that a symlink in the inbox points at: never written."""
    absolute: Path
    """An absolute path outside the repo, given as a name: it must never appear."""
    plain: Path
    """A second repo, with no tool files, for the CLI's own JSON parsing (discovery is slow)."""
    before: Snapshot = field(default_factory=dict)
    pid: int = 0

    @property
    def repo(self) -> Path:
        return self.daemon.layout.repo

    def _skip(self, path: Path) -> bool:
        return path == self.daemon.log_path or any(
            path == folder or folder in path.parents
            for folder in (self.daemon.layout.root, self.plain / ".squad", self.harness))

    def take_snapshot(self) -> Snapshot:
        return snapshot(self.top, self._skip)

    def assert_intact(self) -> None:
        """The daemon answers with the same PID, its recent events (names from hostile files
        among them) still stream, and no file outside `.squad/` changed."""
        health = self.daemon.client.health()
        assert health["ok"] is True and health["pid"] == self.pid, health
        recent = list(self.daemon.client.events(recent=512, follow=False))
        assert recent and all(isinstance(event.get("type"), str) for event in recent)
        assert self.daemon.proc is not None and self.daemon.proc.poll() is None
        assert differences(self.before, self.take_snapshot()) == []
        for folder in (self.top, *self.top.parents[:2]):
            assert not (folder / ESCAPE_NAME).exists(), f"a traversal escaped into {folder}"
        assert not self.absolute.exists()
        assert "Traceback" not in self.daemon.output, self.daemon.output[-3000:]


def model_reply(body: Any) -> Reply:
    """The model's default turn: a short final answer."""
    return OpenAIServer.text_turn("ok")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    top = tmp_path_factory.mktemp("hostile")
    harness = top / "harness"
    harness.mkdir()
    with OpenAIServer(model_reply) as model:
        daemon = DaemonProcess.in_new_repo(top / "box", model.url, config=CONFIG,
                                           agents=("lead", "backend"))
        outside = daemon.layout.repo.parent / "outside.txt"
        outside.write_text("not the Scribe's\n", encoding="utf-8")
        write_tool_files(daemon.layout.tools_dir, outside)
        plain = make_repo(top / "plain" / "repo").repo
        world = World(top, daemon, model, harness, outside, top / "abs-escape" / "owned", plain)
        try:
            daemon.start()
            world.pid = daemon.pid
            world.before = world.take_snapshot()
            yield world
        finally:
            daemon.close()


@pytest.fixture
def http(world: World) -> Iterator[httpx.Client]:
    transport = httpx.HTTPTransport(uds=str(world.daemon.layout.socket))
    with httpx.Client(transport=transport, base_url="http://squadd", timeout=60) as client:
        yield client


# The HTTP API ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """A field of a request body: its template (with `@V@`), and what squadd says on a bad
    value there: the status and a fragment of the error."""

    name: str
    template: str
    refused: tuple[int, str]
    absent_ok: bool = False
    """null means "not given" here (the request then fails on the unknown agent: a 404)."""
    strings_ok: bool = False
    """Any text is acceptable here (the request then fails on the unknown agent: a 404)."""


NOBODY = "nobody-here"
ROUTE = '{"task": "probe", "targetAgent": "nobody-here", "waitForResult": false, %s}'
ROUTE_FIELDS = [
    Field("task", '{"task": @V@, "targetAgent": "nobody-here"}', (422, "task"),
          strings_ok=True),
    Field("targetAgent", '{"task": "probe", "targetAgent": @V@}', (422, "targetAgent")),
    Field("context", ROUTE % '"context": @V@', (422, "context"), absent_ok=True,
          strings_ok=True),
    Field("model", ROUTE % '"model": @V@', (422, "model"), absent_ok=True, strings_ok=True),
    Field("priority", ROUTE % '"priority": @V@', (422, "priority")),
    Field("waitForResult", '{"task": "probe", "targetAgent": "nobody-here", '
          '"waitForResult": @V@}', (422, "waitForResult")),
    Field("sessionId", ROUTE % '"sessionId": @V@', (422, "sessionId"), absent_ok=True),
    Field("availableTools", ROUTE % '"availableTools": @V@', (422, "availableTools"),
          absent_ok=True),
    Field("timeoutSeconds", ROUTE % '"timeoutSeconds": @V@', (422, "timeoutSeconds"),
          absent_ok=True),
    Field("requestedBy", ROUTE % '"requestedBy": @V@', (422, "requestedBy"), absent_ok=True),
]
TOOL_FIELDS = [
    Field("arguments", '{"arguments": @V@}', (422, "arguments")),
    Field("agent", '{"arguments": {}, "agent": @V@}', (422, "agent"), absent_ok=True),
    Field("sessionId", '{"arguments": {}, "sessionId": @V@}', (422, "sessionId"),
          absent_ok=True),
]
APPROVAL_FIELDS = [
    Field("approved", '{"approved": @V@}', (422, "approved")),
    Field("reason", '{"approved": true, "reason": @V@}', (422, "reason"), strings_ok=True),
]


def expected(field_: Field, value: Value, *, ok: tuple[int, str]) -> tuple[int, str]:
    """What squadd answers `value` in `field_`; `ok` is the answer to an acceptable value."""
    if value.problem is not None:  # refused while reading the body, wherever it is
        status = 413 if value.problem == "limit" else 400
        return status, value.problem
    if value.json == b"null":
        return ok if field_.absent_ok else field_.refused
    if value.text is not None and field_.strings_ok:
        return ok
    if field_.name in ("waitForResult", "approved") and value.json == b"true":
        return ok
    if field_.name == "arguments" and value.json.startswith(b"{"):
        return ok  # an object: the tool runs (and fails on its own schema)
    if field_.name == "timeoutSeconds" and value.json == b"5":
        return ok
    if field_.name == "sessionId" and value.text is not None and field_.template.startswith(
            '{"task"'):
        return 404, "no session"  # an id that names no transcript (looked up safely)
    if field_.name == "targetAgent" and value.text is not None:
        return 422, "agent name"
    return field_.refused


def check_answer(response: httpx.Response, status: int, fragment: str, what: str) -> None:
    assert response.status_code == status, (what, response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("application/json"), what
    body = response.json()
    error = body.get("error") or ""
    named = [error, *(f["field"] for f in body.get("fields", []))]
    assert any(fragment in part for part in named), (what, fragment, body)
    assert "Traceback" not in response.text, what


def test_http_api_answers_every_hostile_value_with_a_json_error(world: World,
                                                                 http: httpx.Client) -> None:
    table = values(world.absolute)
    for field_ in ROUTE_FIELDS:
        for value in table:
            status, fragment = expected(field_, value, ok=(404, NOBODY))
            response = http.post("/v1/route", content=splice(field_.template, value),
                                 headers={"content-type": "application/json"})
            check_answer(response, status, fragment, f"route {field_.name} = {value.label}")
    for field_ in TOOL_FIELDS:
        for value in table:
            status, fragment = expected(field_, value, ok=(200, ""))
            response = http.post("/v1/tools/squad_status", content=splice(field_.template, value))
            if status == 200:  # a tool result, not an error: the pipeline ran
                assert response.status_code == 200, (field_.name, value.label, response.text)
                assert response.json()["result_type"] in ("success", "failure")
            else:
                check_answer(response, status, fragment, f"tool {field_.name} = {value.label}")
    for field_ in APPROVAL_FIELDS:
        for value in table:
            status, fragment = expected(field_, value, ok=(404, "no pending approval"))
            response = http.post("/v1/approvals/abc123", content=splice(field_.template, value))
            check_answer(response, status, fragment, f"approval {field_.name} = {value.label}")
    for value in table:  # the whole body
        response = http.post("/v1/route", content=value.json)
        status, fragment = ((413 if value.problem == "limit" else 400, value.problem)
                            if value.problem else
                            (422, "task") if value.json.startswith(b"{") else (422, "JSON object"))
        check_answer(response, status, fragment, f"route body = {value.label}")
    world.assert_intact()


def test_http_api_refuses_unknown_fields_and_bad_tool_arguments(world: World,
                                                                http: httpx.Client) -> None:
    for path, extra in (("/v1/route", {"task": "t", "targetAgent": "lead", "colour": "red"}),
                        ("/v1/tools/squad_status", {"arguments": {}, "colour": "red"}),
                        ("/v1/approvals/abc123", {"approved": True, "colour": "red"})):
        check_answer(http.post(path, json=extra), 422, "colour", path)
    for value in values(world.absolute):
        if value.problem is not None:
            continue  # refused with the body, as above
        body = splice('{"arguments": {"title": "t", "body": "b", "agentName": @V@}}', value)
        result = http.post("/v1/tools/squad_decide", content=body)
        assert result.status_code == 200, (value.label, result.text[:300])
        assert result.json()["result_type"] == "failure", value.label
        assert "agentName" in result.json()["text"] or "agent name" in result.json()["text"]
    unknown = http.post("/v1/tools/squad_status", json={"arguments": {"colour": "red"}})
    assert unknown.json()["result_type"] == "failure" and "colour" in unknown.json()["text"]
    world.assert_intact()


def test_http_paths_and_queries_refuse_hostile_names(world: World, http: httpx.Client) -> None:
    names = [*TRAVERSALS, str(world.absolute), "lead\x00evil", "\udcff\udcfe", "x" * 60_000]
    for name in names:
        for method, suffix in (("GET", ""), ("POST", "/cancel"), ("POST", "/resume")):
            response = http.request(method, _url("/v1/sessions/", name, suffix))
            assert response.status_code in (404, 409, 422), (name[:40], suffix, response.text)
            assert isinstance(response.json()["error"], str)
        tool = http.post(_url("/v1/tools/", name), json={})
        assert tool.status_code == 404 and tool.json()["error"], name[:40]
        check_answer(http.get(_url("/v1/sessions", query={"agent": name})), 422, "agent name",
                     f"sessions?agent={name[:40]!r}")
        check_answer(http.get(_url("/v1/events", query={"session": name, "follow": "0"})), 422,
                     "session id", f"events?session={name[:40]!r}")
        check_answer(http.get(_url("/v1/events", query={"type": name, "follow": "0"})), 422,
                     "unknown event type", f"events?type={name[:40]!r}")
    for number in ("-1", "1e308", str(2**64), "nan", "inf", "²", "7" * 5000):
        recent = http.get(_url("/v1/events", query={"recent": number, "follow": "0"}))
        tail = http.get(_url("/v1/sessions/20990101-000000-deadbeef", query={"tail": number}))
        wait = http.post(_url("/v1/sessions/20990101-000000-deadbeef/resume",
                              query={"wait": number}))
        if number.isascii() and number.isdigit():  # a count past the limit: clamped
            assert recent.status_code == 200, recent.text
        else:
            check_answer(recent, 422, "recent", f"recent={number[:20]}")
            check_answer(tail, 422, "tail", f"tail={number[:20]}")
        check_answer(wait, 422, "wait", f"wait={number[:20]}")
    world.assert_intact()


def _quote(text: str) -> bytes:
    """Percent-encode every byte of `text` (undecodable bytes too) but letters, digits, -._"""
    return b"".join(bytes([b]) if bytes([b]).isalnum() or b in b"-._" else b"%%%02X" % b
                    for b in text.encode("utf-8", "surrogateescape"))


def _url(path: str, name: str = "", suffix: str = "",
         query: dict[str, str] | None = None) -> httpx.URL:
    """A URL with `name` as one path segment and `query`, encoded byte by byte."""
    raw_query = b"&".join(key.encode() + b"=" + _quote(value)
                          for key, value in (query or {}).items())
    return httpx.URL("http://squadd/").copy_with(
        raw_path=path.encode() + _quote(name) + suffix.encode()
        + (b"?" + raw_query if raw_query else b""))


def test_requests_broken_below_the_api_get_a_4xx_and_the_daemon_serves_on(
        world: World) -> None:
    broken = [
        b"GET /v1/sessions/" + b"x" * BIG + b" HTTP/1.1\r\nHost: squadd\r\n\r\n",
        b"GET /v1/sessions/a\xff\x00b HTTP/1.1\r\nHost: squadd\r\n\r\n",
        b"POST /v1/route HTTP/1.1\r\nHost: squadd\r\nContent-Length: -1\r\n\r\n{}",
        b"POST /v1/route HTTP/1.1\r\nHost: squadd\r\nContent-Length: %d\r\n\r\n{}" % 2**64,
        b"POST /v1/route HTTP/1.1\r\nHost: squadd\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"%x\r\n" % BIG + b"a" * BIG + b"\r\n0\r\n\r\n",
    ]
    for request in broken:
        status, headers, body = _raw_exchange(world.daemon.layout.socket, request)
        # Below the API the HTTP server answers itself (text/plain); the API answers in JSON.
        assert 400 <= status < 500, (request[:60], status, body[:200])
        if b"application/json" in headers:
            assert b'"error"' in body
    world.assert_intact()


def _raw_exchange(path: Path, request: bytes) -> tuple[int, bytes, bytes]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)  # the server may answer and hang up before reading it all
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 10:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, head.lower(), body


# MCP ------------------------------------------------------------------------------------------
def test_mcp_answers_every_hostile_call_and_keeps_serving(world: World) -> None:
    env = clean_env(XDG_CONFIG_HOME=str(world.repo.parent / "xdg-config"))
    mcp = RawMcp(world.repo, env, world.harness / "mcp-stderr.log")
    try:
        mcp.initialize()
        request_id = 100
        for value in values(world.absolute):
            for params in ('{"name": "squad_decide", "arguments": {"title": "t", "body": "b", '
                           '"agentName": @V@}}',
                           '{"name": "squad_status", "arguments": @V@}',
                           '{"name": @V@, "arguments": {}}'):
                request_id += 1
                answer = mcp.request(request_id, "tools/call", splice(params, value))
                refused = "error" in answer or answer["result"].get("isError") is True
                if value.json == b"null" and '"arguments": @V@' in params:
                    assert not refused, answer  # no arguments: squad_status needs none
                    continue
                assert refused, (value.label, params, answer)
                assert mcp_text(answer).strip(), (value.label, params)
                if value.problem not in (None, "limit", "UTF-8"):  # the SDK mends bad UTF-8
                    # The SDK or squadd names it: not JSON, too deep, or not a JSON number.
                    assert "error" in answer or "JSON" in mcp_text(answer), answer
        for line in (b"[" * DEEP, b"\xff\xfe{", b"null", b'{"jsonrpc": "2.0", "id": 7, '
                     b'"method": "tools/call", "params": {"name": "squad_status", "arguments": '
                     + b"[" * 150 + b"]" * 150 + b"}}"):
            mcp.send(line)
            if line.startswith(b'{"jsonrpc"'):
                assert "error" in mcp.answer(7), "a request the SDK cannot read is answered"
            elif line.startswith(b"["):
                assert mcp.answer(None)["error"]["code"] == -32700
        well = mcp.request(999, "tools/call", b'{"name": "squad_status", "arguments": {}}')
        assert well["result"]["isError"] is False, well
    finally:
        assert mcp.close() == 0
    assert "Traceback" not in (world.harness / "mcp-stderr.log").read_text(errors="replace")
    world.assert_intact()


# Tool arguments from the model -----------------------------------------------------------------
MARK = "HOSTILE-TOOL-CALLS"


def hostile_calls(table: list[Value]) -> list[tuple[str, str, str]]:
    """(tool name, arguments as the model writes them, call id) for every hostile value."""
    calls: list[tuple[str, str, str]] = []
    for n, value in enumerate(table):
        if value.json.startswith(b'"' + b"x" * 100):
            continue  # the 10 MB string goes in once, below: not three times
        raw = value.json.decode("utf-8", "replace")
        calls.append(("squad_memory", f'{{"agentName": {raw}, "learning": "x"}}', f"m{n}"))
        calls.append(("squad_status", raw, f"s{n}"))
        calls.append(("squad_route", f'{{"task": "t", "targetAgent": "backend", '
                                     f'"timeoutSeconds": {raw}}}', f"r{n}"))
        if value.text is not None:
            calls.append((value.text, "{}", f"n{n}"))
    calls.append(("squad_memory", json.dumps({"agentName": "lead", "learning": "x" * BIG}),
                  "big"))
    calls.append(("squad_status", '{"colour": "red"}', "unknown"))
    return calls


def test_model_tool_calls_with_hostile_arguments_get_failure_results(world: World) -> None:
    calls = hostile_calls(values(world.absolute))
    asked: list[Any] = []

    def scripted(body: Any) -> Reply:
        messages = body["messages"]
        if MARK in str(messages[-1].get("content")) and messages[-1]["role"] == "user":
            return OpenAIServer.tool_call_turn(*calls)
        if messages[-1]["role"] == "tool":
            asked.append(messages)
            return OpenAIServer.text_turn("survived")
        return OpenAIServer.text_turn("ok")

    world.model.respond_with(scripted)
    try:
        result = world.daemon.client.route(f"{MARK}: try them all", "backend")
    finally:
        world.model.respond_with(model_reply)
    assert result["ok"] is True and result["answer"] == "survived", result
    results = [m for m in asked[0] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [c[2] for c in calls]
    for (_, _, call_id), message in zip(calls, results, strict=True):
        assert _failure_text(message["content"]), (call_id, message["content"][:300])
    shown = world.daemon.client.session(result["session_id"])["transcript"]
    _assert_results_follow_calls(shown)
    world.assert_intact()


def _failure_text(text: str) -> bool:
    return any(word in text for word in (
        "invalid", "not valid JSON", "unknown tool", "not stored", "over the limit",
        "expected a JSON object", "cannot route", "Extra inputs", "would make a cycle"))


def _assert_results_follow_calls(records: list[dict[str, Any]]) -> None:
    open_calls: list[str] = []
    for record in records:
        message = record.get("message") or {}
        if record.get("kind") != "message":
            continue
        if message.get("role") == "assistant":
            assert not open_calls, f"calls {open_calls} got no result"
            open_calls = [c["id"] for c in message.get("tool_calls") or []]
        elif message.get("role") == "tool":
            assert open_calls and message["tool_call_id"] == open_calls.pop(0)
    assert not open_calls


def test_a_hostile_model_answer_fails_only_its_own_session(world: World) -> None:
    deep = b'{"choices": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    answers = {
        "deep": Reply(raw=deep),
        "nan": Reply(raw=b'{"choices": [{"message": {"role": "assistant", "content": "x"}, '
                         b'"finish_reason": "stop"}], "usage": {"prompt_tokens": NaN}}'),
        "bad utf-8": Reply(raw=b'{"choices": [{"message": {"role": "assistant", "content": '
                               b'"\xff\xfe"}, "finish_reason": "stop"}]}'),
        "surrogate": Reply(raw=b'{"choices": [{"message": {"role": "assistant", "content": '
                               b'"half \\ud800 a pair"}, "finish_reason": "stop"}]}'),
        "huge": Reply(raw=b'{"choices": [{"message": {"role": "assistant", "content": "'
                          + b"x" * (17 * 1024 * 1024) + b'"}, "finish_reason": "stop"}]}'),
    }

    def scripted(body: Any) -> Reply:
        task = str(body["messages"][-1].get("content"))
        return next((reply for key, reply in answers.items() if f"[{key}]" in task),
                    OpenAIServer.text_turn("ok"))

    world.model.respond_with(scripted)
    try:
        outcomes = {key: world.daemon.client.route(f"answer [{key}]", "lead")
                    for key in answers}
    finally:
        world.model.respond_with(model_reply)
    for key in ("deep", "nan", "bad utf-8"):
        assert outcomes[key]["ok"] is False and outcomes[key]["reason"] == "failed", key
        assert "malformed response" in outcomes[key]["error"], outcomes[key]
    huge = outcomes["huge"]
    assert huge["ok"] is False and "provider.max_response_bytes" in huge["error"], huge
    assert world.daemon.layout.transcript(huge["session_id"]).stat().st_size < 1024 * 1024
    assert outcomes["surrogate"]["ok"] is True
    assert outcomes["surrogate"]["answer"] == "half \ufffd a pair"
    assert world.daemon.client.route("still there?", "lead")["answer"] == "ok"
    world.assert_intact()


# Squad files that lead outside the repository ---------------------------------------------------
def test_squad_files_leading_outside_are_reported_and_never_read(world: World,
                                                               http: httpx.Client) -> None:
    squad = world.daemon.layout.root
    secret = world.outside.read_text(encoding="utf-8").strip()
    routing = squad / "routing.md"
    saved = routing.read_bytes()
    (squad / "skills" / "leak").mkdir(parents=True)
    (squad / "skills" / "leak" / "SKILL.md").symlink_to(world.outside)
    routing.unlink()
    routing.symlink_to(world.outside)
    try:
        unrouted = http.post("/v1/route", json={"task": "probe with no agent named"})
        check_answer(unrouted, 404, "routing.md was not read", "routing.md leading outside")
        before = len(world.model.requests)
        answer = world.daemon.client.route("what skills are there?", "lead")
        assert answer["ok"] is True, answer
        prompts = json.dumps([r.body for r in world.model.requests[before:]])
        # A skill whose SKILL.md leads out of its folder is left out of the index, never read.
        assert secret not in prompts and "- leak" not in prompts
        broken = http.post("/v1/tools/arith", json={"arguments": {"N": "1"}})
        check_answer(broken, 404, "exists but failed to load", "a tool that failed to load")
    finally:
        routing.unlink()
        routing.write_bytes(saved)
        (squad / "skills" / "leak" / "SKILL.md").unlink()
        (squad / "skills" / "leak").rmdir()
    world.assert_intact()


# The command line -----------------------------------------------------------------------------
def argv_values(world: World) -> list[bytes]:
    """Hostile values as command-line bytes (a NUL byte cannot be passed to a process)."""
    return [*(t.encode() for t in TRAVERSALS), os.fsencode(world.absolute), b"\xff\xfe\xc3(",
            b"x" * ARGV_MAX, b"[" * ARGV_MAX]


def test_cli_refuses_hostile_arguments_with_an_error_line(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    names = argv_values(world)
    numbers = [b"-1", b"1e308", str(2**64).encode(), b"nan", b"inf", b"-inf", b"7" * 5000]
    cases: list[list[bytes]] = []
    for n, name in enumerate(names):
        cases += [[b"agent", b"add", name, b"--role", b"r"], [b"route", name, b"task"],
                  [b"sessions", b"show", name], [b"approve", name],
                  [b"status", b"--agent", name], [b"events", b"--session", name]]
        if n % 2:  # the slower commands (they load the provider, or discover tools) less often
            cases += [[b"run", name, b"task"], [b"sessions", b"cancel", name]]
        else:
            cases += [[b"tools", b"call", name, b"--dir", os.fsencode(world.plain)]]
    for number in numbers:
        cases += [[b"route", b"lead", b"task", b"--timeout", number],
                  [b"sessions", b"show", b"x", b"--tail", number],
                  [b"events", b"-n", number], [b"status", b"--interval", number]]
    cases += [[b"stop", b"--timeout", number] for number in (b"-1", b"nan", b"-inf")]
    for value in values(world.absolute):  # JSON the CLI parses itself, in a repo of few tools
        if len(value.json) < ARGV_MAX:
            cases.append([b"tools", b"call", b"squad_memory", b"--args", value.json,
                          b"--dir", os.fsencode(world.plain)])
    cases.append([b"tools", b"call", b"squad_memory", b"--arg", b"agentName=../../etc/passwd",
                  b"--arg", b"learning=x", b"--dir", os.fsencode(world.plain)])
    # Every case runs in this process through click's runner; a handful also run as real
    # processes (argv bytes and their decoding by the interpreter, the entry point, exit codes).
    by_process: dict[bytes, list[bytes]] = {}
    for args in cases:
        undecodable = b"\xff" in b"".join(args)
        if args[0] in (b"agent", b"route", b"run", b"tools") or undecodable:
            by_process.setdefault(b"\xff" if undecodable else args[0], args)
    with ThreadPoolExecutor(max_workers=3) as pool:
        real = list(pool.map(lambda args: (args, _squadd(world, args)), by_process.values()))
    for args, done in real:
        shown = [a[:40] for a in args]
        assert done.returncode != 0, (shown, done.stdout[-300:])
        assert b"Traceback" not in done.stderr, (shown, done.stderr[-2000:])
        tool_failed = args[:2] == [b"tools", b"call"] and done.stdout.strip()
        assert b"Error: " in done.stderr or tool_failed, (shown, done.stderr[-500:])
    monkeypatch.chdir(world.repo)
    runner = CliRunner()
    env = {"XDG_CONFIG_HOME": world.daemon.env["XDG_CONFIG_HOME"], "NO_COLOR": "1"}
    for args in cases:
        shown = [a[:40] for a in args]
        result = runner.invoke(cli_main, [os.fsdecode(a) for a in args], env=env)
        # A traceback in-process is an exception other than the exit click makes.
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            shown, "".join(traceback.format_exception(result.exception))[-2000:])
        assert result.exit_code != 0, (shown, result.stdout[-300:])
        tool_failed = args[:2] == [b"tools", b"call"] and result.stdout.strip()
        assert "Error: " in result.stderr or tool_failed, (shown, result.stderr[-500:])
    world.assert_intact()


def _squadd(world: World, args: list[bytes]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "squadd", *args], cwd=world.repo,
                          env=world.daemon.env, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)


# Files dropped into the inbox ------------------------------------------------------------------
@contextlib.contextmanager
def scribe_passes(world: World, done: Callable[[], object], what: Callable[[], object],
                  within_s: float = 30.0) -> Iterator[None]:
    """Run the block (which drops files into the inbox), then wait until `done()` holds: read
    again at each `scribe.*` event of the daemon (a pass that merges or rejects files publishes
    them), subscribed before the block so none is missed. `what()` says what is left if not."""
    with world.daemon.follow_events(within_s, types=["scribe.*"]) as passes:
        yield
        try:
            for _ in itertools.chain([None], passes):
                if done():
                    return
        except TimeoutError:
            pass
    raise AssertionError(what())


def test_inbox_files_are_rejected_with_a_reason_or_merged_safely(world: World) -> None:
    inbox = world.daemon.layout.inbox_dir
    rejected: dict[bytes, str] = {
        b"lead-name-\xff\xfe.md": "not valid UTF-8",
        b"lead-" + b"n" * 240 + b".md": "NUL byte",
        b"lead-nul.md": "NUL byte",
        b"lead-latin1.md": "not UTF-8",
        b"lead-huge.md": "oversized",
        b"lead-link.md": "not a plain file",
        b"lead-fifo.md": "not a plain file",
        b"lead-empty.md": "empty",
    }
    merged: dict[bytes, str] = {
        b"lead-deep.md": "[" * 1000,
        b"lead-json.md": '[1, {"a": null}, 5, "../../etc/passwd"]',
        b"lead-fields.md": "**Colour:** red",
        b"lead-numbers.md": "99999-99-99: -1 and 1e308 and 18446744073709551616",
        b"lead-traversal.md": "**By:** ../../../../hostile-escape",
        b"lead-future.md": "written in the far future",
        b"lead-past.md": "written before 1970",
    }
    contents = {
        b"lead-nul.md": b"### t\n\nbody \x00 here\n",
        b"lead-" + b"n" * 240 + b".md": b"\x00",
        b"lead-name-\xff\xfe.md": b"### a fine entry\n\nbody\n",
        b"lead-latin1.md": b"### t\n\ncaf\xe9\n",
        b"lead-huge.md": b"x" * BIG,
        b"lead-empty.md": b"",
        b"lead-deep.md": b"### deep\n\n" + b"[" * DEEP + b"\n" + b"> " * 1000 + b"end\n",
        b"lead-json.md": b'[1, {"a": null}, 5, "../../etc/passwd"]\n',
        b"lead-fields.md": b"### fields\n\n**Colour:** red\n**Priority:** -1\n",
        b"lead-numbers.md": b"### 99999-99-99: -1 and 1e308 and 18446744073709551616\n\nx\n",
        b"lead-traversal.md": b"### traversal\n\n**By:** ../../../../hostile-escape\n\nx\n",
        b"lead-future.md": b"written in the far future\n",
        b"lead-past.md": b"written before 1970\n",
    }
    def at(name: bytes) -> Path:
        return inbox / os.fsdecode(name)

    times = {b"lead-future.md": 2**33, b"lead-past.md": -(2**31), b"lead-empty.md": 1000}
    with scribe_passes(world, lambda: not any(os.path.lexists(at(name))
                                              for name in [*rejected, *merged]),
                       lambda: sorted(p.name for p in inbox.iterdir())):
        for name, data in contents.items():  # written hidden, then renamed whole into view
            hidden = at(b"." + name + b".tmp")
            hidden.write_bytes(data)
            os.utime(hidden, (times.get(name, time.time()),) * 2)
            hidden.rename(at(name))
        at(b"lead-link.md").symlink_to(world.outside)
        os.mkfifo(at(b"lead-fifo.md"))
    shelf = world.daemon.layout.rejected_dir
    reasons = {os.fsencode(p.name): p.read_text(encoding="utf-8")
               for p in shelf.iterdir() if p.name.endswith(".reason")}
    for name, why in rejected.items():
        found = [text for reason_name, text in reasons.items()
                 if reason_name.startswith(name[:60]) and why in text]
        assert found, (name[:60], why, reasons)
    assert stat.S_ISLNK((shelf / "lead-link.md").lstat().st_mode)
    layout = world.daemon.layout
    decisions = "".join(path.read_text(encoding="utf-8") for path in
                        (layout.decisions_md, layout.decisions_archive) if path.exists())
    for text in merged.values():  # an old entry may already sit in the archive
        assert text in decisions, text
    world.assert_intact()


def test_a_history_with_bad_bytes_is_skipped_and_the_scribe_serves_the_others(
    world: World,
) -> None:
    layout = world.daemon.layout
    history = layout.history("backend")
    original = history.read_bytes()
    bad = original + "- **[team]** caf\xe9 on Fridays\n".encode("latin-1")
    history.write_bytes(bad)
    try:
        for n, day in enumerate(("2025-07-01", "2025-07-02")):
            name = f"someone-bad-bytes-{n}.md"
            hidden = layout.inbox_dir / f".{name}.tmp"
            entry = layout.inbox_dir / name
            with scribe_passes(world, lambda entry=entry: not entry.exists(),
                               lambda: "the Scribe stopped merging"):
                hidden.write_text(f"### {day}: Bad bytes check {n}\n\n**By:** someone\n\n"
                                  "Lead and backend both read this.\n", encoding="utf-8")
                hidden.rename(layout.inbox_dir / name)
            assert f"Bad bytes check {n}" in layout.history("lead").read_text(encoding="utf-8")
            assert history.read_bytes() == bad
        events = list(world.daemon.client.events(recent=512, follow=False))
        skipped = [e for e in events if e.get("type") == "scribe.rejected"
                   and e.get("file") == "agents/backend/history.md"]
        assert len(skipped) == 1 and "not valid UTF-8" in skipped[0]["reason"]  # told once
    finally:
        history.write_bytes(original)
    world.assert_intact()


# Tool files -----------------------------------------------------------------------------------
BAD_TOOL_FILES: dict[bytes, tuple[bytes, str]] = {
    b"name-\xff\xfe.py": (GOOD_PY.encode(), "not valid UTF-8"),
    b"nul.py": (b"x = 1\x00\n", "null bytes"),
    b"nul.yaml": (b"description: a\x00b\nbash: echo\n", "not valid YAML"),
    b"latin1.py": (b'NAME = "caf\xe9"\n', "syntax error"),
    b"latin1.yaml": (b"description: caf\xe9\nbash: echo\n", "cannot be read"),
    b"big.py": (b"#" * BIG, "larger than"),
    b"big.yaml": (b"#" * BIG, "larger than"),
    b"deep.py": (b"x = " + b"[" * DEEP + b"]" * DEEP + b"\n", "nested"),
    b"deep.yaml": (b"description: " + b"[" * DEEP + b"]" * DEEP + b"\n", "nested too deeply"),
    b"types.yaml": (b"name: 5\ndescription: [1]\nbash: {a: 1}\n", "valid string"),
    b"list.yaml": (b"- 1\n- 2\n", "expected a mapping"),
    b"unknown.yaml": (b"description: d\nbash: echo\ncolour: red\n", "unknown key 'colour'"),
    b"traversal.yaml": (b"name: ../../etc/passwd\ndescription: d\nbash: echo\n", "not allowed"),
    b"negative.yaml": (b"description: d\nbash: echo\ntimeout: -1\n", "outside the range"),
    b"huge.yaml": (b"description: d\nbash: echo\ntimeout: 1.0e+308\n", "outside the range"),
    b"nan.yaml": (b"description: d\nbash: echo\ntimeout: .nan\n", "not a finite number"),
    b"inf.yaml": (b"description: d\nbash: echo {N}\nparameters:\n  N:\n    description: n\n"
                  b"    type: number\n    validation: {maximum: .inf}\n", "not a finite number"),
    b"attempts.yaml": (b"description: d\nsteps:\n  - name: a\n    bash: echo\n    error-handling:"
                       b"\n      retry: {attempts: 18446744073709551616}\n", "less than or equal"),
    b"bomb.yaml": (b"description: d\nbash: echo\nversion: &h [&g [&f [&e [&d [&c [&b [&a "
                   b"[x,x,x,x,x,x,x,x,x], *a,*a,*a,*a,*a,*a,*a,*a], *b,*b,*b,*b,*b,*b,*b,*b], "
                   b"*c,*c,*c,*c,*c,*c,*c,*c], *d,*d,*d,*d,*d,*d,*d,*d], *e,*e,*e,*e,*e,*e,*e,*e],"
                   b" *f,*f,*f,*f,*f,*f,*f,*f], *g,*g,*g,*g,*g,*g,*g,*g]\n", "expands to more"),
    b"nan_default.py": (b"from squadd import tool\n\n\n@tool\ndef nan_default(x: float = "
                        b"float('nan')) -> str:\n    \"\"\"Take a number.\"\"\"\n    return ''\n",
                        "not plain JSON"),
    # Templates a value could break out of, and patterns a value could make backtrack.
    b"arith.yaml": (b"description: d\nparameters:\n  N: {type: string, description: n}\n"
                    b"bash: 'if (( {N} > 10 )); then echo big; fi'\n", "arithmetic context"),
    b"tainted.yaml": (b"description: d\nparameters:\n  N: {type: string, description: n}\n"
                      b"bash: 'n={N}; let n+=1'\n", "'let'"),
    b"nested.yaml": (b"description: d\nparameters:\n  N: {type: string, description: n}\n"
                     b"run: sh -c \"echo {N}\"\n", "code that 'sh' runs"),
    b"assign.yaml": (b"description: d\nparameters:\n  F: {type: array, description: f}\n"
                     b"bash: 'FILES={F}; ls $FILES'\n", "cannot be separate words"),
    b"lookahead.yaml": (b"description: d\nparameters:\n  S:\n    type: string\n"
                        b"    description: s\n    validation: {pattern: '^(?=a)a+$'}\n"
                        b"bash: echo {S}\n", "look-around"),
}
LINKED_TOOL_FILES = {"linked.py": "outside", "linked.yaml": "outside"}
"""Tool files that are symlinks to a file outside the repository: refused, never run."""


def write_tool_files(folder: Path, outside: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "echo.py").write_text(GOOD_PY, encoding="utf-8")
    (folder / "hello.yaml").write_text(GOOD_YAML, encoding="utf-8")
    for name, (data, _) in BAD_TOOL_FILES.items():
        (folder / os.fsdecode(name)).write_bytes(data)
    for name in LINKED_TOOL_FILES:
        (folder / name).symlink_to(outside)


def test_bad_tool_files_are_load_failures_and_the_rest_load(world: World,
                                                           http: httpx.Client) -> None:
    listed = _squadd(world, [b"tools", b"list", b"--json"])
    assert listed.returncode == 0, listed.stderr[-2000:]
    rows = json.loads(listed.stdout)["tools"]
    failures = {Path(row["file"]).name: row["error"] for row in rows if row["status"] == "error"}
    for name, (_, why) in BAD_TOOL_FILES.items():
        shown = os.fsdecode(name).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        assert why in failures.get(shown, ""), (shown, why, failures.get(shown))
    for shown, why in LINKED_TOOL_FILES.items():
        assert why in failures.get(shown, ""), (shown, why, failures.get(shown))
    assert {row["name"] for row in rows if row["status"] == "ok"} >= {"echo", "hello"}
    served = http.get("/v1/tools")
    assert served.status_code == 200
    assert {"echo", "hello"} <= {tool["name"] for tool in served.json()["tools"]}
    echoed = http.post("/v1/tools/echo", json={"arguments": {"text": "still works"}})
    assert echoed.json() == {"result_type": "success", "text": "still works", "details": {},
                             "images": []}
    world.assert_intact()


# Config files ---------------------------------------------------------------------------------
CONFIG_CASES: list[tuple[str, bytes, str]] = [
    ("not TOML", b"[pool\nmax_concurrent = 1\n", "not valid TOML"),
    ("invalid UTF-8", b'[provider]\nmodel = "caf\xe9"\n', "not valid UTF-8"),
    ("NUL byte", b'[provider]\nmodel = "a\\u0000b"\n', "provider.model"),
    ("NUL byte raw", b"[pool]\nmax_concurrent = 1\x00\n", "not valid TOML"),
    ("10 MB string", b'[provider]\nmodel = "' + b"x" * BIG + b'"\n', "larger than"),
    ("string for a number", b'[pool]\nmax_concurrent = "eight"\n', "pool.max_concurrent"),
    ("list for a number", b"[pool]\nmax_concurrent = [1]\n", "pool.max_concurrent"),
    ("list for a table", b"pool = [1, 2]\n", "[pool] must be a table"),
    ("number for a table", b"[agents]\nlead = 3\n", "agents.lead"),
    ("number in a list", b"[provider]\ncommand = [1]\n", "provider.command.0"),
    ("bad map value", b'[tools]\napprovals = { "x" = "maybe" }\n', "tools.approvals.x"),
    ("deep nesting", b"[variables]\nx = " + b"[" * DEEP + b"]" * DEEP + b"\n", "nested"),
    ("unknown key", b"[pool]\nmax_concurent = 3\n", "pool.max_concurent"),
    ("unknown section", b"[poool]\nx = 3\n", "[poool]"),
    ("negative", b"[pool]\nmax_concurrent = -1\n", "pool.max_concurrent"),
    ("2**64", b"[pool]\nmax_queued = 18446744073709551616\n", "pool.max_queued"),
    ("inf", b"[route]\ntimeout_s = inf\n", "route.timeout_s"),
    ("nan", b"[daemon]\ngrace_s = nan\n", "daemon.grace_s"),
    ("-inf", b"[provider]\nread_timeout_s = -inf\n", "provider.read_timeout_s"),
    ("traversal agent", b'[agents."../../etc"]\nmodel = "m"\n', "agents.../../etc"),
    ("traversal variable", b'[variables]\n"../x" = "v"\n', "variables.../x"),
]


@pytest.mark.parametrize("where", ["user", "project"])
def test_config_files_with_hostile_values_give_a_config_error(tmp_path: Path,
                                                             where: str) -> None:
    squad = tmp_path / "repo" / ".squad"
    squad.mkdir(parents=True)
    user = tmp_path / "user.toml"
    target = user if where == "user" else squad / "config.toml"
    for label, data, fragment in CONFIG_CASES:
        target.write_bytes(data)
        with pytest.raises(ConfigError) as caught:
            load_settings(squad, environ={}, user_file=user)
        message = str(caught.value)
        assert str(target) in message and fragment in message, (label, message)
        assert caught.value.source == str(target), label


def test_environment_settings_with_hostile_values_give_a_config_error() -> None:
    for name, raw, fragment in [
        ("SQUADD_PROVIDER_MODEL", os.fsdecode(b"caf\xe9"), "not UTF-8"),
        ("SQUADD_TOOLS_EXTRA_DIRS", "[" * DEEP + "]" * DEEP, "nested"),
        ("SQUADD_POOL_MAX_CONCURRENT", "-1", "pool.max_concurrent"),
        ("SQUADD_ROUTE_TIMEOUT_S", "inf", "route.timeout_s"),
        ("SQUADD_ROUTE_TIMEOUT_S", "nan", "route.timeout_s"),
        ("SQUADD_POOL_MAX_QUEUED", str(2**64), "pool.max_queued"),
        ("SQUADD_POOL_MAX_CONCURENT", "3", "pool.max_concurent"),
    ]:
        with pytest.raises(ConfigError) as caught:
            load_settings(None, environ={name: raw}, user_file=Path("/nonexistent/none.toml"))
        assert fragment in str(caught.value), (name, str(caught.value))


def test_commands_refuse_a_hostile_config_without_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    for n, (label, data, fragment) in enumerate(CONFIG_CASES[::3]):
        layout = make_repo(tmp_path / f"r{n}" / "repo")
        xdg = tmp_path / f"r{n}" / "xdg"
        target = layout.config_toml if n % 2 else xdg / "squadd" / "config.toml"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        commands = (["tools", "list"], ["scribe", "--dry-run"],
                    ["serve", "--provider", "openai", "--base-url", "http://127.0.0.1:9"])
        # In this process through click's runner; the first case's also as real processes.
        if n == 0:
            env = clean_env(XDG_CONFIG_HOME=str(xdg))
            for args in commands:
                done = subprocess.run([sys.executable, "-m", "squadd", *args], cwd=layout.repo,
                                      env=env, capture_output=True, text=True, timeout=60,
                                      stdin=subprocess.DEVNULL, check=False)
                assert done.returncode != 0, (label, args)
                assert "Traceback" not in done.stderr, (label, args, done.stderr[-2000:])
                assert "Error: " in done.stderr and fragment in done.stderr, (label, done.stderr)
                assert str(target) in done.stderr, (label, done.stderr)
        monkeypatch.chdir(layout.repo)
        for args in commands:
            result = runner.invoke(cli_main, args, env={"XDG_CONFIG_HOME": str(xdg)})
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                label, args, "".join(traceback.format_exception(result.exception))[-2000:])
            assert result.exit_code != 0, (label, args)
            assert "Error: " in result.stderr and fragment in result.stderr, (label, args,
                                                                            result.stderr)
            assert str(target) in result.stderr, (label, result.stderr)
        assert not layout.socket.exists() and not layout.pid_file.exists(), label
