"""The blocking client's exchange (the standard library's `http.client` over the socket)
against a real Unix socket server that answers with bytes the test chooses: chunked bodies,
cut-off answers, silence, answers sent before the request was read."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from squadd.daemon.client import DaemonClient
from squadd.daemon.wire import Call
from squadd.errors import DaemonError, DaemonNotRunningError
from squadd.state.layout import SquadLayout


@pytest.fixture
def serve(squad: SquadLayout) -> Iterator[tuple[str, list[bytes], list[bytes]]]:
    """The squad's socket, the answers to send (one per connection), and the requests received."""
    squad.run_dir.mkdir(parents=True, exist_ok=True)
    path = str(squad.socket)
    answers: list[bytes] = []
    received: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    stop = threading.Event()

    def loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if stop.is_set():
                conn.close()
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                received.append(head + b"\r\n\r\n" + rest)
                if answers:
                    conn.sendall(answers.pop(0))
                else:
                    stop.wait(5)  # silence: the client's timeout must end the exchange

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield path, answers, received
    stop.set()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:  # out of accept()
        wake.connect(path)
    thread.join(10)
    server.close()


@contextlib.contextmanager
def one_connection(squad: SquadLayout, handle: Callable[[socket.socket, threading.Event], None]
                   ) -> Iterator[str]:
    """A socket path whose server takes one connection and hands it to `handle`, with an
    event set when the test is done (a handler that holds the connection waits on it)."""
    squad.run_dir.mkdir(parents=True, exist_ok=True)
    path = str(squad.socket)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    done = threading.Event()

    def accept() -> None:
        conn, _ = server.accept()
        with conn:
            handle(conn, done)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        done.set()
        thread.join(10)
        server.close()


def call(squad: SquadLayout, timeout: float = 5.0, **extra: Any) -> Any:
    options: dict[str, Any] = dict(method="POST", path="/v1/x", params={"a": "1 2"},
                                   body={"task": "é"}, headers={})
    options.update(extra)
    method, path = options.pop("method"), options.pop("path")
    token = options.pop("token", None)
    with DaemonClient(squad, timeout=timeout, token=token) as client:
        return client._send(Call(method, path, **options))


def test_a_chunked_answer_is_joined_and_the_request_carries_its_json(serve, squad) -> None:
    _, answers, received = serve
    answers.append(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                   b"5\r\n{\"ok\"\r\n6\r\n: true\r\n1\r\n}\r\n0\r\n\r\n")
    assert call(squad) == {"ok": True}
    request = received[0]
    assert request.startswith(b"POST /v1/x?a=1+2 HTTP/1.1\r\n")
    head, _, body = request.partition(b"\r\n\r\n")
    assert json.loads(body) == {"task": "é"}
    assert f"content-length: {len(body)}\r\n".encode() in head.lower() + b"\r\n"


def test_an_answer_cut_short_is_a_broken_exchange(serve, squad) -> None:
    _, answers, _ = serve
    answers.append(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{\"ok\"")
    with pytest.raises(DaemonError) as caught:
        call(squad)
    assert "connection to the daemon broke" in str(caught.value)


def test_silence_ends_in_a_timeout_and_nothing_listening_is_not_running(serve, squad,
                                                                      tmp_path) -> None:
    with pytest.raises(DaemonError) as caught:
        call(squad, timeout=0.2)
    assert "did not answer POST /v1/x in time: no answer within 0.2s" in str(caught.value)
    elsewhere = SquadLayout.at(tmp_path / "elsewhere" / ".squad")
    with pytest.raises(DaemonNotRunningError):
        call(elsewhere)


def test_a_target_too_long_is_refused_before_connecting(squad) -> None:
    with pytest.raises(DaemonError) as caught:
        call(squad, path="/v1/" + "x" * 70_000)
    assert "cannot be sent" in str(caught.value) and "that long" in str(caught.value)


def test_an_answer_trickled_byte_by_byte_still_ends_at_the_timeout(squad) -> None:
    """Each byte comes well within the timeout, so only a deadline over the whole answer ends
    the exchange; the server gives up (and closes) long after that deadline."""
    def trickle(conn: socket.socket, done: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(400):  # 20 s at most, ended early once the client hangs up
            if done.wait(0.05):
                return
            try:
                conn.sendall(b" ")
            except OSError:
                return

    with one_connection(squad, trickle), pytest.raises(DaemonError) as caught:
        call(squad, timeout=0.5)
    assert "in time" in str(caught.value)


def test_a_long_answer_in_many_chunks_arrives_whole_and_in_order(serve, squad) -> None:
    """Thousands of chunks, split across many reads, with the chunk extensions the spec
    allows: the body is their bytes in order, nothing lost or repeated at a read boundary."""
    _, answers, _ = serve
    words = [f"w{i:05d}" * (1 + i % 300) for i in range(3000)]
    text = json.dumps({"words": words}).encode()
    pieces = [text[i:i + 997] for i in range(0, len(text), 997)]
    answers.append(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                   + b"".join(b"%x;n=%d\r\n%s\r\n" % (len(p), i, p) for i, p in enumerate(pieces))
                   + b"0\r\n\r\n")
    assert call(squad, timeout=60.0) == {"words": words}


@pytest.mark.parametrize(("extra", "named"), [
    ({"path": "/v1/a b"}, "URL"),
    ({"path": "/v1/a\r\nX-Injected: 1"}, "URL"),
    ({"token": "secret\r\nX-Injected: 1"}, "'authorization'"),
])
def test_a_request_that_would_split_its_own_lines_is_refused_before_connecting(
        squad, extra: dict[str, object], named: str) -> None:
    with pytest.raises(DaemonError) as caught:
        call(squad, **extra)
    assert "cannot be sent" in str(caught.value) and named in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize("answered", [True, False])
def test_an_answer_sent_before_the_request_was_read_is_read_despite_the_broken_pipe(
        squad, answered: bool) -> None:
    """The server reads only the head, answers (as a 413 for a body over its limit does) and
    closes: the client's send then breaks, and the answer is what it reports. With no answer,
    the broken pipe is."""
    error = b'{"error":"request body is over the 4194304-byte limit"}'

    def answer_early(conn: socket.socket, done: threading.Event) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        if answered:
            conn.sendall(b"HTTP/1.1 413 Content Too Large\r\nconnection: close\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(error), error))

    with one_connection(squad, answer_early), pytest.raises(DaemonError) as caught:
        call(squad, body={"task": "x" * (16 << 20)})
    if answered:
        assert getattr(caught.value, "status", None) == 413
        assert "over the 4194304-byte limit" in str(caught.value)
    else:
        assert "connection to the daemon broke" in str(caught.value)


def test_a_post_without_a_body_says_its_length_is_zero_and_a_get_says_nothing(serve,
                                                                              squad) -> None:
    _, answers, received = serve
    answers += [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"] * 2
    call(squad, method="POST", body=None, params=None)
    call(squad, method="GET", body=None, params=None)
    post, get = (request.lower() for request in received)
    assert b"\r\ncontent-length: 0\r\n" in post and b"content-type" not in post
    assert b"content-length" not in get


def test_a_header_from_undecodable_bytes_is_refused_not_a_crash(squad) -> None:
    """A token read from an environment holding bytes that are not UTF-8 (a lone surrogate)."""
    with pytest.raises(DaemonError) as caught:
        call(squad, token="\udcff")
    assert "cannot be sent" in str(caught.value) and "no character" in str(caught.value)
