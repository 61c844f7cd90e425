"""Load: 500 concurrent routes against a pool of 8 slots and 256 queue places. Each request gets
its answer or a structured 503 "pool full"; `/v1/health` keeps answering within 100 ms."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer, Reply

pytestmark = pytest.mark.slow

ROUTES = 500
HEALTH_LIMIT_S = 0.100
LOAD_CONFIG = """\
[pool]
max_concurrent = 8
max_queued = 256

[provider]
max_attempts = 1
"""


def _fast_model(body: Any) -> Reply:
    time.sleep(0.005)
    return OpenAIServer.text_turn("done")


PROBE = """
import json, sys, time
import httpx
socket_path, stop_file = sys.argv[1], sys.argv[2]
timings, failures = [], []
with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), base_url="http://squadd",
                  timeout=5) as client:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            status = client.get("/v1/health").status_code
            if status != 200:
                failures.append(f"HTTP {status}")
        except httpx.HTTPError as exc:
            failures.append(repr(exc))
        timings.append(time.perf_counter() - started)
        try:
            open(stop_file).close()
            break
        except FileNotFoundError:
            time.sleep(0.02)
print(json.dumps({"timings": timings, "failures": failures}))
"""
"""Asks /v1/health every 20 ms on its own connection, in its own process (so that the load
generator's work in this process does not count against the daemon), until a file appears."""


async def _route_all(socket_path: Path) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=ROUTES + 10, max_keepalive_connections=ROUTES + 10)
    responses: list[httpx.Response] = []
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(socket_path),
                                                                    limits=limits),
                                 base_url="http://squadd", timeout=120) as client:
        async def one(index: int) -> None:
            responses.append(await client.post("/v1/route", json={
                "targetAgent": "lead", "task": f"task {index}", "waitForResult": True}))

        async with anyio.create_task_group() as group:
            for index in range(ROUTES):
                group.start_soon(one, index)
    return responses


def test_500_concurrent_routes_get_answers_or_pool_full_and_health_stays_fast(
        tmp_path: Path) -> None:
    with OpenAIServer(responder=_fast_model) as server, \
            DaemonProcess.in_new_repo(tmp_path, server.url, config=LOAD_CONFIG) as daemon:
        stop_file = tmp_path / "stop-probe"
        probe = subprocess.Popen([sys.executable, "-c", PROBE, str(daemon.layout.socket),
                                  str(stop_file)], stdout=subprocess.PIPE, text=True)
        try:
            time.sleep(0.2)
            responses = anyio.run(_route_all, daemon.layout.socket)
        finally:
            stop_file.touch()
            out, _ = probe.communicate(timeout=30)
        measured = json.loads(out)
        statuses = [r.status_code for r in responses]
        assert len(responses) == ROUTES
        assert set(statuses) <= {200, 503}, sorted(set(statuses))
        full = [r for r in responses if r.status_code == 503]
        for response in full:
            body = response.json()
            assert body["ok"] is False and body["reason"] == "pool_full"
            assert body["pool"]["max_queued"] == 256 and "pool full" in body["error"]
            assert int(response.headers["retry-after"]) > 0
        answered = [r.json() for r in responses if r.status_code == 200]
        assert all(body["ok"] and body["answer"] == "done" for body in answered)
        assert len(answered) >= 8 + 256  # every slot and queue place was used
        assert len(answered) + len(full) == ROUTES
        assert measured["failures"] == []
        assert len(measured["timings"]) >= 20
        worst = max(measured["timings"])
        assert worst < HEALTH_LIMIT_S, f"health took {worst * 1000:.0f} ms at worst"
        totals = daemon.client.health()["pool"]
        assert totals["running"] == 0 and totals["queued"] == 0
