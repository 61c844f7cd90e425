"""The TCP listener cannot be tied up by connections that never finish a request: a
slowloris client (silent sockets, headers sent a byte at a time, idle keep-alives) is
disconnected by the server, connections past the cap get a 503 at once, and through it all a
Unix-socket client is served. Real daemon, real sockets; each check waits for what the server
does (its answer or its closing the socket), never for a length of time."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn

from squadd.daemon.client import DaemonClient
from squadd.daemon.listener_limits import ListenerLimits, limited
from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer

pytestmark = pytest.mark.slow

WAIT_S = 60.0
"""How long a test waits for the server to act before it fails (a hang guard, not a timing)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _daemon(tmp_path: Path, model_url: str, limits: str) -> Iterator[tuple[DaemonProcess, int]]:
    port = _free_port()
    config = f"[daemon]\ngrace_s = 1.0\n{limits}\n[provider]\nmax_attempts = 1\n"
    with DaemonProcess.in_new_repo(tmp_path, model_url, config=config,
                                   extra_args=("--tcp", f"127.0.0.1:{port}")) as daemon:
        yield daemon, port


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    sock.settimeout(WAIT_S)
    return sock


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_connections_past_the_cap_get_a_503_and_unix_clients_are_still_served(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    limits = "header_timeout_s = 600.0\nkeep_alive_s = 600\nmax_connections = 8"
    with _daemon(tmp_path, model_server.url, limits) as (daemon, port):
        held = []
        try:
            for index in range(8):  # fill the cap: silent, half-sent and byte-at-a-time
                sock = _connect(port)
                if index % 3 == 1:
                    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
                elif index % 3 == 2:
                    sock.sendall(b"G")
                held.append(sock)
            # The server has seen all eight once one more connection is refused.
            answers = []
            for _ in range(12):
                extra = _connect(port)
                with extra:
                    answers.append(_read_until_closed(extra))
            assert all(a.startswith(b"HTTP/1.1 503 ") for a in answers), answers[0][:200]
            assert b"too many open connections" in answers[0]
            with DaemonClient(daemon.layout, timeout=WAIT_S) as client:  # the Unix socket
                assert client.health()["ok"] is True
            assert "listener at its connection cap" in daemon.output
        finally:
            for sock in held:
                sock.close()


@pytest.mark.parametrize("opening", [
    b"",                                      # connects and says nothing
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\n",  # headers never finished
    b"POST /v1/route HTTP/1.1\r\nHost: x\r\nContent-Le",
])
def test_a_client_that_does_not_finish_its_headers_is_disconnected(
        tmp_path: Path, model_server: OpenAIServer, opening: bytes) -> None:
    limits = "header_timeout_s = 0.5\nkeep_alive_s = 1\nmax_connections = 64"
    with _daemon(tmp_path, model_server.url, limits) as (daemon, port), _connect(port) as sock:
        if opening:
            sock.sendall(opening)
        assert _read_until_closed(sock) == b""  # closed by the server, nothing answered
        assert daemon.client.health()["ok"] is True


def test_a_slow_drip_of_header_bytes_does_not_keep_a_connection(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    limits = "header_timeout_s = 0.5\nkeep_alive_s = 1\nmax_connections = 64"
    with _daemon(tmp_path, model_server.url, limits) as (_, port), _connect(port) as sock:
        # 10 KB: under h11's 16 KB header limit, so only the deadline can end it.
        request = b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 10_000
        closed = False
        for byte in request:  # each byte is prompt; only the deadline for the whole can end it
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        if not closed:
            assert _read_until_closed(sock) == b""


def test_an_idle_keep_alive_connection_is_closed_after_its_answer(
        tmp_path: Path, model_server: OpenAIServer) -> None:
    limits = "header_timeout_s = 600.0\nkeep_alive_s = 1\nmax_connections = 64"
    with _daemon(tmp_path, model_server.url, limits) as (daemon, port), _connect(port) as sock:
        token = daemon.layout.token_file.read_text(encoding="utf-8").strip()
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                     + token.encode() + b"\r\n\r\n")
        data = _read_until_closed(sock)  # the answer, then the server closes the idle socket
        assert data.startswith(b"HTTP/1.1 200 ") and b'"ok":true' in data.replace(b" ", b"")


@pytest.mark.parametrize("parser", ["h11", "auto"])
async def test_both_http_parsers_enforce_the_limits(parser: str) -> None:
    """The limits around each of uvicorn's protocol classes, served in-process on a real socket."""
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hi"})

    limits = ListenerLimits("tcp", max_connections=2, header_timeout_s=0.3, keep_alive_s=600)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served, protocol = limited(app, limits, parser=parser)
    server = uvicorn.Server(uvicorn.Config(served, lifespan="off", log_config=None,
                                           http=protocol))

    def client() -> None:
        with _connect(port) as silent, _connect(port) as half:
            half.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            with _connect(port) as third:  # past the cap of 2
                assert _read_until_closed(third).startswith(b"HTTP/1.1 503 ")
            assert _read_until_closed(silent) == b"" and _read_until_closed(half) == b""
        with _connect(port) as served:
            served.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            # The answer, then (keep-alive is long) the header deadline for a next request.
            assert _read_until_closed(served).startswith(b"HTTP/1.1 200 ")

    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [listener])  # already listening: clients may connect
        try:
            await anyio.to_thread.run_sync(client)
        finally:
            server.should_exit = True
    listener.close()
