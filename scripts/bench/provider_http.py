"""Benchmark: the CPU one model call costs the provider, by transport.

A `JsonEndpoint` (what the OpenAI and Anthropic providers POST through) sends `--requests`
chat completions, `--concurrency` at a time, to `_model_server.py` in its own process
(uvicorn; every answer after `--delay-ms`). The request body is a turn's worth: a 2 KB prompt
and eight tool schemas. Each round measures, in turn, httpx's own transport (httpcore and h11,
with the pool limits the providers set) and `AiohttpTransport` (squadd's default), and the
bare aiohttp client as the floor. What is measured is this process's CPU (user + system) a
request, the answer's JSON parse included; rounds alternate, so the machine's drift falls on
every transport alike.

Prints, as its last line:
    provider_http httpx_ms=… aiohttp_transport_ms=… aiohttp_bare_ms=… ratio=…
(ratio: squadd's transport ÷ httpx's own, the median of the rounds' ratios.)

    .venv/bin/python scripts/bench/provider_http.py [--requests 3000] [--concurrency 32]
        [--delay-ms 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
import aiohttp
import httpx
from _common import cpu_s, fmt, run_like_squadd, say
from _scale_fleet import start_model_server

from squadd.providers.http import JsonEndpoint
from squadd.providers.pool import DEFAULT_MAX_CONNECTIONS, KEEPALIVE_EXPIRY_S, AiohttpTransport

BODY = {"model": "bench-model", "messages": [{"role": "user", "content": "x" * 2000}],
        "tools": [{"type": "function", "function": {"name": f"tool_{n}", "parameters": {
            "type": "object", "properties": {"path": {"type": "string"}}}}}
            for n in range(8)]}
HEADERS = {"authorization": "Bearer bench"}


async def measure(call: Callable[[], Awaitable[object]], requests: int,
                  concurrency: int) -> float:
    """CPU milliseconds a call, over `requests` calls after a warm-up."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one() for _ in range(min(200, requests))))
    started = cpu_s()
    await asyncio.gather(*(one() for _ in range(requests)))
    return (cpu_s() - started) / requests * 1000


async def through_endpoint(url: str, transport: httpx.AsyncBaseTransport, requests: int,
                           concurrency: int) -> float:
    endpoint = JsonEndpoint(provider="bench", url=url, headers=HEADERS, transport=transport)
    try:
        return await measure(lambda: endpoint.post(BODY), requests, concurrency)
    finally:
        await endpoint.aclose()


async def bare_aiohttp(url: str, requests: int, concurrency: int) -> float:
    payload = json.dumps(BODY).encode()
    headers = {**HEADERS, "content-type": "application/json"}
    async with aiohttp.ClientSession() as session:
        async def call() -> object:
            async with session.post(url, data=payload, headers=headers) as response:
                response.raise_for_status()
                return json.loads(await response.read())
        return await measure(call, requests, concurrency)


async def one_round(url: str, requests: int, concurrency: int) -> dict[str, float]:
    limits = httpx.Limits(max_connections=DEFAULT_MAX_CONNECTIONS,
                          max_keepalive_connections=DEFAULT_MAX_CONNECTIONS,
                          keepalive_expiry=KEEPALIVE_EXPIRY_S)
    return {
        "httpx": await through_endpoint(url, httpx.AsyncHTTPTransport(limits=limits),
                                        requests, concurrency),
        "aiohttp_transport": await through_endpoint(url, AiohttpTransport(), requests,
                                                    concurrency),
        "aiohttp_bare": await bare_aiohttp(url, requests, concurrency),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    server, port = start_model_server(args.delay_ms / 1000)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    rounds: list[dict[str, float]] = []
    try:
        for number in range(1, args.rounds + 1):
            result = run_like_squadd(one_round, url, args.requests, args.concurrency)
            rounds.append(result)
            say(f"round {number}: " + "  ".join(f"{name} {fmt(ms)} ms"
                                                for name, ms in result.items()))
    finally:
        server.kill()
        server.wait()
    median = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    ratio = statistics.median(r["aiohttp_transport"] / r["httpx"] for r in rounds)
    print("provider_http " + " ".join(f"{name}_ms={fmt(ms)}" for name, ms in median.items())
          + f" ratio={fmt(ratio)}")


if __name__ == "__main__":
    main()
