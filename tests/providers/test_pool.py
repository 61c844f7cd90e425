"""The HTTP providers' connection pool against a real server on 127.0.0.1: connections are
reused, bounded, and one the server closed is never handed out."""

from __future__ import annotations

import socket

import anyio
import httpx
import pytest

from squadd.providers.base import RetryInfo
from squadd.providers.http import JsonEndpoint
from squadd.providers.openai import OpenAIProvider
from squadd.providers.pool import LeanTransport, default_transport
from tests.providers._shared import FAST_RETRIES, TIMEOUT, ask
from tests.support.model_servers import OpenAIServer, Reply


def provider_over(server: OpenAIServer, transport: LeanTransport,
                  retries: list[RetryInfo]) -> OpenAIProvider:
    return OpenAIProvider(base_url=server.url, model="test-model", timeout=TIMEOUT,
                          policy=FAST_RETRIES, transport=transport, on_retry=retries.append)


async def test_turns_one_after_another_share_one_connection(openai_server: OpenAIServer) -> None:
    openai_server.script(*(OpenAIServer.text_turn(f"turn {n}") for n in range(4)))
    transport, retries = LeanTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        texts = [(await provider.complete(ask())).text for _ in range(4)]
        assert texts == ["turn 0", "turn 1", "turn 2", "turn 3"]
        assert len(transport.pool.connections) == 1
        assert transport.pool.connections[0].is_idle()
    finally:
        await provider.aclose()
    assert retries == []


async def test_concurrent_turns_stay_within_max_connections(openai_server: OpenAIServer) -> None:
    openai_server.respond_with(lambda body: Reply(body=OpenAIServer.text_turn("ok").body,
                                                  delay_s=0.05))
    transport, retries = LeanTransport(max_connections=2), []
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
        assert len(transport.pool.connections) == 2  # reused: no third was ever opened
    finally:
        await provider.aclose()
    assert retries == []


async def test_a_connection_the_server_closed_is_replaced_without_a_retry(
        openai_server: OpenAIServer) -> None:
    openai_server.script(OpenAIServer.text_turn("first"), OpenAIServer.text_turn("second"))
    transport, retries = LeanTransport(), []
    provider = provider_over(openai_server, transport, retries)
    try:
        assert (await provider.complete(ask())).text == "first"
        [used] = transport.pool.connections
        with openai_server._lock:  # the server hangs up its idle keep-alive connection
            held = list(openai_server._connections)
        for connection in held:
            connection.shutdown(socket.SHUT_RDWR)
        for _ in range(500):  # until the hang-up reaches the client's socket (5 s at most)
            if used.has_expired():
                break
            await anyio.sleep(0.01)
        assert used.has_expired()
        assert (await provider.complete(ask())).text == "second"
        assert transport.pool.connections != [used]
    finally:
        await provider.aclose()
    assert retries == []


async def test_an_idle_connection_past_its_keep_alive_is_closed_though_never_handed_out(
        openai_server: OpenAIServer) -> None:
    openai_server.respond_with(lambda body: Reply(body=OpenAIServer.text_turn("ok").body,
                                                  delay_s=0.05))
    transport, retries = LeanTransport(keepalive_expiry_s=1.0), []
    provider = provider_over(openai_server, transport, retries)
    try:
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(provider.complete, ask())
        older, _newer = transport.pool.connections
        await anyio.sleep(0.5)
        assert (await provider.complete(ask())).text == "ok"  # on the newer: its time restarts
        for _ in range(500):  # until the older one's keep-alive ran out (5 s at most)
            if older.has_expired():
                break
            await anyio.sleep(0.01)
        assert older.has_expired()
        assert (await provider.complete(ask())).text == "ok"
        # Idle connections go out newest first, so the older one is never handed out again:
        # the pass closed it all the same.
        assert older not in transport.pool.connections
        assert len(transport.pool.connections) == 1
    finally:
        await provider.aclose()
    assert retries == []


def test_a_proxy_in_the_environment_keeps_httpx_transports(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert default_transport() is None
    monkeypatch.delenv("HTTPS_PROXY")
    for name in ("HTTP_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(default_transport(), LeanTransport)


async def test_cookies_a_server_set_are_sent_back() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        return httpx.Response(200, json={"n": len(seen)},
                              headers={"set-cookie": "route=a1; Path=/"})

    endpoint = JsonEndpoint(provider="test", url="http://model.test/v1/x", headers={},
                            transport=httpx.MockTransport(answer))
    try:
        assert await endpoint.post({}) == {"n": 1}
        assert await endpoint.post({}) == {"n": 2}
    finally:
        await endpoint.aclose()
    assert seen == [None, "route=a1"]
