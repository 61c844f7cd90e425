"""The HTTP providers' transport against real servers on 127.0.0.1, seen from the server's side:
connections are reused, bounded, replaced when the server closed them, closed when idle past
their keep-alive; answers are decompressed and bounded as they arrive; aiohttp's errors reach
the provider as httpx's."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Callable

import anyio
import anyio.abc
import httpx
import pytest

from squadd.errors import ProviderError
from squadd.providers.base import RetryInfo
from squadd.providers.http import JsonEndpoint
from squadd.providers.openai import OpenAIProvider
from squadd.providers.pool import AiohttpTransport, default_transport
from tests.providers._shared import FAST_RETRIES, TIMEOUT, ask
from tests.support.model_servers import OpenAIServer, Reply


def provider_over(server: OpenAIServer, transport: AiohttpTransport,
                  retries: list[RetryInfo]) -> OpenAIProvider:
    return OpenAIProvider(base_url=server.url, model="test-model", timeout=TIMEOUT,
                          policy=FAST_RETRIES, transport=transport, on_retry=retries.append)


def ports(server: OpenAIServer) -> list[int]:
    return [request.client_port for request in server.requests]


def open_connections(server: OpenAIServer) -> int:
    with server._lock:
        return len(server._connections)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (10 s at most) for something only polling can see: a socket's state."""
    for _ in range(1000):
        if condition():
            return
        await anyio.sleep(0.01)
    assert condition(), what


async def test_turns_one_after_another_share_one_connection(openai_server: OpenAIServer) -> None:
    openai_server.script(*(OpenAIServer.text_turn(f"turn {n}") for n in range(4)))
    transport, retries = AiohttpTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        texts = [(await provider.complete(ask())).text for _ in range(4)]
        assert texts == ["turn 0", "turn 1", "turn 2", "turn 3"]
        assert len(set(ports(openai_server))) == 1
    finally:
        await provider.aclose()
    assert retries == []


async def test_concurrent_turns_stay_within_max_connections(openai_server: OpenAIServer) -> None:
    openai_server.respond_with(lambda body: Reply(body=OpenAIServer.text_turn("ok").body,
                                                  delay_s=0.05))
    transport, retries = AiohttpTransport(max_connections=2), []
    provider = provider_over(openai_server, transport, retries)
    answers: list[str] = []

    async def one() -> None:
        answers.append((await provider.complete(ask())).text)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(one)
        assert answers == ["ok"] * 6
        assert len(openai_server.requests) == 6
        assert len(set(ports(openai_server))) == 2  # reused: no third was ever opened
    finally:
        await provider.aclose()
    assert retries == []


async def test_a_connection_the_server_closed_is_replaced_without_a_retry(
        openai_server: OpenAIServer) -> None:
    openai_server.script(OpenAIServer.text_turn("first"), OpenAIServer.text_turn("second"))
    transport, retries = AiohttpTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        assert (await provider.complete(ask())).text == "first"
        with openai_server._lock:  # the server hangs up its idle keep-alive connection
            held = list(openai_server._connections)
        for connection in held:
            connection.shutdown(socket.SHUT_RDWR)
        # Until the hang-up reaches the client's side of the socket.
        await until(lambda: not _idle(transport), "the client never saw the hang-up")
        assert (await provider.complete(ask())).text == "second"
        first, second = ports(openai_server)
        assert first != second
    finally:
        await provider.aclose()
    assert retries == []


def _idle(transport: AiohttpTransport) -> int:
    """Idle connections in the pool that are still connected (aiohttp has no public count)."""
    connector = transport.connector
    assert connector is not None
    return sum(1 for held in connector._conns.values()
               for protocol, _ in held if protocol.is_connected())


async def test_idle_connections_past_their_keep_alive_are_closed(
        openai_server: OpenAIServer) -> None:
    openai_server.respond_with(lambda body: Reply(body=OpenAIServer.text_turn("ok").body,
                                                  delay_s=0.05))
    transport, retries = AiohttpTransport(keepalive_expiry_s=0.5), []
    provider = provider_over(openai_server, transport, retries)
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(provider.complete, ask())
        assert len(set(ports(openai_server))) == 2
        # The server sees both closed by the client, without another request to prompt it.
        await until(lambda: open_connections(openai_server) == 0,
                    "idle connections outlived their keep-alive")
        assert (await provider.complete(ask())).text == "ok"
        assert len(set(ports(openai_server))) == 3
    finally:
        await provider.aclose()
    assert retries == []


async def test_a_compressed_answer_is_read_decompressed(openai_server: OpenAIServer) -> None:
    body = json.dumps(OpenAIServer.text_turn("squeezed").body).encode()
    openai_server.script(Reply(raw=gzip.compress(body), headers={"content-encoding": "gzip"}))
    transport, retries = AiohttpTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        assert (await provider.complete(ask())).text == "squeezed"
        assert "gzip" in openai_server.requests[0].headers["accept-encoding"]
    finally:
        await provider.aclose()


async def test_an_endless_answer_is_cut_at_the_bound_and_its_connection_dropped() -> None:
    """A server that streams a chunked body for ever: the read stops past the bound, the turn
    fails once (no retry), and the connection is closed, not put back in the pool."""
    closed = anyio.Event()

    async def endless(client: anyio.abc.SocketStream) -> None:
        async with client:
            request = b""
            while b"\r\n\r\n" not in request:
                request += await client.receive()
            await client.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                              b"transfer-encoding: chunked\r\n\r\n")
            try:
                while True:
                    await client.send(b"2000\r\n" + b"x" * 0x2000 + b"\r\n")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                closed.set()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    transport = AiohttpTransport()
    endpoint = JsonEndpoint(provider="test", url=f"http://127.0.0.1:{port}/v1/x", headers={},
                            timeout=TIMEOUT, policy=FAST_RETRIES, transport=transport,
                            max_response_bytes=100_000)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, endless)
        try:
            with pytest.raises(ProviderError, match="larger than 100000 bytes") as caught:
                await endpoint.post({})
            assert not caught.value.retryable
            with anyio.fail_after(10):
                await closed.wait()
        finally:
            await endpoint.aclose()
            tg.cancel_scope.cancel()


_ANSWER = json.dumps({"ok": "yes"}).encode()


@pytest.mark.parametrize(("answer", "kept_alive"), [
    (b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n" + _ANSWER, False),
    (b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + _ANSWER, False),
    (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
     + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (_ANSWER[:5], _ANSWER[5:]))
     + b"0\r\n\r\n", True),
], ids=["http-1.0-read-to-close", "close-without-length", "chunked-kept-alive"])
async def test_answers_framed_every_way_http_allows_are_read_whole(
        answer: bytes, kept_alive: bool) -> None:
    """Servers nobody here wrote: an HTTP/1.0 answer read until the server closes, one with
    neither a length nor chunks, a chunked one on a kept-alive connection: each is read to its
    end, and the next call goes on the same connection or a new one as the answer said."""
    connections: list[int] = []

    async def serve(client: anyio.abc.SocketStream) -> None:
        connections.append(1)
        async with client:
            pending = b""
            while True:
                while b"\r\n\r\n" not in pending:
                    pending += await client.receive()
                head, _, pending = pending.partition(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length:")))
                while len(pending) < length:
                    pending += await client.receive()
                pending = pending[length:]
                await client.send(answer)
                if not kept_alive:
                    return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    retries: list[RetryInfo] = []
    endpoint = JsonEndpoint(provider="test", url=f"http://127.0.0.1:{port}/v1/x", headers={},
                            timeout=TIMEOUT, policy=FAST_RETRIES, transport=AiohttpTransport(),
                            on_retry=retries.append)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        try:
            for _ in range(3):
                assert await endpoint.post({"n": 1}) == {"ok": "yes"}
        finally:
            await endpoint.aclose()
            tg.cancel_scope.cancel()
    assert retries == []
    assert len(connections) == (1 if kept_alive else 3)


@pytest.mark.parametrize(("reply", "expected"), [
    (Reply(drop=True), "connection to .* failed"),
    (Reply(body={"choices": []}, drop_after_bytes=5), "connection to .* failed"),
])
async def test_a_server_that_hangs_up_is_a_retryable_connection_error(
        openai_server: OpenAIServer, reply: Reply, expected: str) -> None:
    openai_server.script(reply, reply, reply)
    transport, retries = AiohttpTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        with pytest.raises(ProviderError, match=expected) as caught:
            await provider.complete(ask())
        assert caught.value.retryable
        assert len(retries) == FAST_RETRIES.max_attempts - 1
    finally:
        await provider.aclose()


async def test_a_port_nobody_listens_on_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = AiohttpTransport()
    try:
        with pytest.raises(httpx.ConnectError):
            await transport.handle_async_request(
                httpx.Request("POST", f"http://127.0.0.1:{port}/", content=b"{}"))
    finally:
        await transport.aclose()


async def test_a_slow_answer_is_a_read_timeout(openai_server: OpenAIServer) -> None:
    openai_server.script(Reply(body=OpenAIServer.text_turn("late").body, delay_s=2.0))
    transport = AiohttpTransport()
    request = httpx.Request("POST", f"{openai_server.url}/chat/completions", content=b"{}",
                            extensions={"timeout": httpx.Timeout(5.0, read=0.2).as_dict()})
    try:
        with pytest.raises(httpx.ReadTimeout):
            await transport.handle_async_request(request)
    finally:
        await transport.aclose()


async def test_a_server_that_stops_reading_a_large_request_is_a_timeout_not_a_hang() -> None:
    """A server that accepts and never reads: the body's write stalls once the socket buffers
    fill. aiohttp waits for the answer while it writes, so the read budget bounds the stall."""
    accepted: list[anyio.abc.SocketStream] = []

    async def never_read(client: anyio.abc.SocketStream) -> None:
        accepted.append(client)
        await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    transport = AiohttpTransport()
    # Connecting may take its time on a busy machine; the stall is what is measured.
    timeout = httpx.Timeout(connect=10.0, read=0.5, write=0.5, pool=10.0)
    request = httpx.Request("POST", f"http://127.0.0.1:{port}/v1/x",
                            content=b"x" * (64 << 20),  # past any socket buffers
                            extensions={"timeout": timeout.as_dict()})
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, never_read)
        try:
            with anyio.fail_after(60), pytest.raises(httpx.ReadTimeout):
                await transport.handle_async_request(request)
            assert len(accepted) == 1  # it got as far as sending
        finally:
            await transport.aclose()
            tg.cancel_scope.cancel()


def test_a_proxy_in_the_environment_keeps_httpx_transports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert default_transport() is None
    monkeypatch.delenv("HTTPS_PROXY")
    for name in ("HTTP_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(default_transport(), AiohttpTransport)


async def test_cookies_a_server_set_are_sent_back(openai_server: OpenAIServer) -> None:
    answer = OpenAIServer.text_turn("ok").body
    openai_server.script(Reply(body=answer, headers={"set-cookie": "route=a1; Path=/"}),
                         Reply(body=answer))
    transport, retries = AiohttpTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        for _ in range(2):
            assert (await provider.complete(ask())).text == "ok"
    finally:
        await provider.aclose()
    assert [request.headers.get("cookie") for request in openai_server.requests] == [
        None, "route=a1"]

