"""The blocking client's HTTP/1.1 exchange against a real Unix socket server that answers with
bytes the test chooses: chunked bodies, cut-off answers, silence."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from squadd.daemon._http1 import ExchangeError, exchange


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[str, list[bytes], list[bytes]]]:
    """A socket path, the answers to send (one per connection), and the requests received."""
    path = str(tmp_path / "s.sock")
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
def one_connection(tmp_path: Path, handle: Callable[[socket.socket, threading.Event], None]
                   ) -> Iterator[str]:
    """A socket path whose server takes one connection and hands it to `handle`, with an
    event set when the test is done (a handler that holds the connection waits on it)."""
    path = str(tmp_path / "one.sock")
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


def call(socket_path: str, **extra: object) -> Any:
    options: dict[str, object] = dict(uds=socket_path, tcp=None, method="POST", path="/v1/x",
                                      params={"a": "1 2"}, body={"task": "é"}, headers={},
                                      timeout=5.0, connect_timeout=5.0)
    options.update(extra)
    return exchange(**options)  # type: ignore[arg-type]


def test_a_chunked_answer_is_joined_and_the_request_carries_its_json(serve) -> None:
    path, answers, received = serve
    answers.append(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                   b"5\r\n{\"ok\"\r\n6\r\n: true\r\n1\r\n}\r\n0\r\n\r\n")
    answer = call(path)
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    request = received[0]
    assert request.startswith(b"POST /v1/x?a=1+2 HTTP/1.1\r\n")
    head, _, body = request.partition(b"\r\n\r\n")
    assert json.loads(body) == {"task": "é"}
    assert f"Content-Length: {len(body)}\r\n".encode() in head + b"\r\n"


def test_an_answer_cut_short_is_a_broken_exchange(serve) -> None:
    path, answers, _ = serve
    answers.append(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n{\"ok\"")
    with pytest.raises(ExchangeError) as caught:
        call(path)
    assert caught.value.kind == "broken" and "45 bytes short" in str(caught.value)


def test_silence_ends_in_a_timeout_and_nothing_listening_in_connect(serve,
                                                                    tmp_path: Path) -> None:
    path, _, _ = serve
    with pytest.raises(ExchangeError) as caught:
        call(path, timeout=0.2)
    assert caught.value.kind == "timeout"
    with pytest.raises(ExchangeError) as missing:
        call(str(tmp_path / "nobody.sock"))
    assert missing.value.kind == "connect"


def test_a_target_too_long_is_refused_before_connecting(tmp_path: Path) -> None:
    with pytest.raises(ExchangeError) as caught:
        call(str(tmp_path / "nobody.sock"), path="/v1/" + "x" * 70_000)
    assert caught.value.kind == "invalid"


def test_an_answer_trickled_byte_by_byte_still_ends_at_the_timeout(tmp_path: Path) -> None:
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

    with one_connection(tmp_path, trickle) as path, pytest.raises(ExchangeError) as caught:
        call(path, timeout=0.5)
    assert caught.value.kind == "timeout"


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\ncontent-length: -3\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\r\n{}\r\n0\r\n\r\n",
    # a chunk longer than its size: the bytes past it are not quietly dropped
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}XY0\r\n\r\n",
])
def test_a_malformed_length_or_chunk_is_a_broken_exchange(serve, head: bytes) -> None:
    path, answers, _ = serve
    answers.append(head)
    with pytest.raises(ExchangeError) as caught:
        call(path)
    assert caught.value.kind == "broken" and "malformed" in str(caught.value)


def test_a_long_answer_in_many_chunks_arrives_whole_and_in_order(serve) -> None:
    """Thousands of chunks, split across many reads, with the chunk extensions the spec
    allows: the body is their bytes in order, nothing lost or repeated at a read boundary."""
    path, answers, _ = serve
    pieces = [f"{i:05d}".encode() * (1 + i % 700) for i in range(3000)]
    answers.append(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                   + b"".join(b"%x;n=%d\r\n%s\r\n" % (len(p), i, p) for i, p in enumerate(pieces))
                   + b"0\r\n\r\n")
    answer = call(path, timeout=60.0)
    assert answer.content == b"".join(pieces)


def test_interim_answers_are_skipped_and_a_field_sent_twice_must_agree(serve) -> None:
    """RFC 9110 15.2: a client must read 1xx answers it did not ask for; RFC 9112 6.3: two
    Content-Length values that differ are an error (the last one is not taken on trust)."""
    path, answers, _ = serve
    answers.append(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
                   b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}")
    answers.append(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\ncontent-length: 2\r\n\r\n{}")
    answer = call(path)
    assert answer.status_code == 201 and answer.json() == {}
    with pytest.raises(ExchangeError) as caught:
        call(path)
    assert caught.value.kind == "broken" and "disagrees" in str(caught.value)


def test_a_coding_after_chunked_leaves_the_body_as_sent_until_the_close(serve) -> None:
    path, answers, _ = serve
    answers.append(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, x-other\r\n\r\n"
                   b"2\r\n{}\r\n0\r\n\r\n")
    assert call(path).content == b"2\r\n{}\r\n0\r\n\r\n"


@pytest.mark.parametrize(("method", "status"), [("GET", 204), ("GET", 304), ("HEAD", 200)])
def test_an_answer_without_a_body_ends_at_its_head_not_at_the_close(
        tmp_path: Path, method: str, status: int) -> None:
    """The server sends the head (with a length it must be ignored, RFC 9112 6.3) and keeps the
    connection open until the test ends: a client waiting for the body or the close would
    time out instead."""
    def answer_and_hold(conn: socket.socket, done: threading.Event) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 %d X\r\ncontent-length: 10\r\n\r\n" % status)
        done.wait(30)

    with one_connection(tmp_path, answer_and_hold) as path:
        answer = call(path, method=method, body=None, timeout=20.0)
    assert answer.status_code == status and answer.content == b""


@pytest.mark.parametrize(("extra", "named"), [
    ({"path": "/v1/a b"}, "URL"),
    ({"path": "/v1/a\r\nX-Injected: 1"}, "URL"),
    ({"headers": {"authorization": "Bearer secret\r\nX-Injected: 1"}}, "'authorization'"),
])
def test_a_request_that_would_split_its_own_lines_is_refused_before_connecting(
        tmp_path: Path, extra: dict[str, object], named: str) -> None:
    with pytest.raises(ExchangeError) as caught:
        call(str(tmp_path / "nobody.sock"), **extra)
    assert caught.value.kind == "invalid" and named in str(caught.value)
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize("answered", [True, False])
def test_an_answer_sent_before_the_request_was_read_is_read_despite_the_broken_pipe(
        tmp_path: Path, answered: bool) -> None:
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

    with one_connection(tmp_path, answer_early) as path:
        if answered:
            answer = call(path, body={"task": "x" * (16 << 20)})
            assert answer.status_code == 413 and answer.content == error
        else:
            with pytest.raises(ExchangeError) as caught:
                call(path, body={"task": "x" * (16 << 20)})
            assert caught.value.kind == "broken" and "pipe" in str(caught.value).lower()


def test_a_post_without_a_body_says_its_length_is_zero_and_a_get_says_nothing(serve) -> None:
    path, answers, received = serve
    answers += [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"] * 2
    call(path, method="POST", body=None, params=None)
    call(path, method="GET", body=None, params=None)
    post, get = (request.lower() for request in received)
    assert b"\r\ncontent-length: 0\r\n" in post and b"content-type" not in post
    assert b"content-length" not in get


def test_a_header_from_undecodable_bytes_is_refused_not_a_crash(tmp_path: Path) -> None:
    """A token read from an environment holding bytes that are not UTF-8 (a lone surrogate)."""
    with pytest.raises(ExchangeError) as caught:
        call(str(tmp_path / "nobody.sock"), headers={"authorization": "Bearer \udcff"})
    assert caught.value.kind == "invalid" and "no character" in str(caught.value)
