"""An OpenAI-compatible model server for the scale benchmark, run as its own process.

Every `POST /v1/chat/completions` is answered "done" after `--delay-ms`, by uvicorn on uvloop
and httptools, on a socket listening with a backlog of `--backlog` (1024 by default: hundreds
of connections opened at once are queued, not reset). `GET /stats` answers how many
completions it served. It prints `port=N` once it listens, and serves until killed.

    .venv/bin/python scripts/bench/_model_server.py [--delay-ms 200] [--backlog 1024]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def completion(number: int) -> bytes:
    return json.dumps({
        "id": f"chatcmpl-{number}", "object": "chat.completion", "created": 0,
        "model": "bench-model",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "done"}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }).encode()


class ModelApp:
    """The ASGI app: completions after a delay, and their count."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s
        self.served = 0
        self._numbers = itertools.count(1)

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off
            return
        more = True
        while more:  # the request's body is read in full, as a real server would
            more = bool((await receive()).get("more_body", False))
        if scope["method"] == "GET" and scope["path"] == "/stats":
            await self._answer(send, 200, json.dumps({"served": self.served}).encode())
            return
        if scope["method"] != "POST" or scope["path"] != "/v1/chat/completions":
            await self._answer(send, 404, b'{"error": {"message": "no such endpoint"}}')
            return
        await asyncio.sleep(self.delay_s)
        self.served += 1
        await self._answer(send, 200, completion(next(self._numbers)))

    @staticmethod
    async def _answer(send: Send, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--delay-ms", type=float, default=200.0)
    parser.add_argument("--backlog", type=int, default=1024)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(args.backlog)
    config = uvicorn.Config(ModelApp(args.delay_ms / 1000), loop="uvloop", http="httptools",
                            lifespan="off", access_log=False, log_level="warning",
                            backlog=args.backlog, timeout_keep_alive=300)
    print(f"port={sock.getsockname()[1]}", flush=True)
    sys.stdout.close()
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
