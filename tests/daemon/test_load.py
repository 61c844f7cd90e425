"""Load: 500 concurrent routes against a pool of 8 slots and 256 queue places. Each request gets
its answer or a structured 503 "pool full", and `/v1/health` answers while the pool is full.

The model holds every turn until the test has seen the pool full, so the test checks what
happened (who got a slot, who queued, who was refused, that health answered meanwhile), never how
fast this machine is. Health latency under load is measured by scripts/bench/health_under_load.py.
"""

from __future__ import annotations

import threading
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
SLOTS = 8
QUEUE = 256
WAIT_S = 120.0
LOAD_CONFIG = f"""\
[pool]
max_concurrent = {SLOTS}
max_queued = {QUEUE}

[provider]
max_attempts = 1
"""


class HeldModel:
    """A model whose turns wait until `release` is set; counts the turns it has begun."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.begun = 0

    def __call__(self, body: Any) -> Reply:
        with self._lock:
            self.begun += 1
        if not self.release.wait(WAIT_S):
            raise RuntimeError("the test never released the model")
        return OpenAIServer.text_turn("done")


async def _load(socket_path: Path, model: HeldModel) -> tuple[list[httpx.Response],
                                                            list[dict[str, Any]]]:
    # No connection is kept for reuse: a kept one the server closes for idleness just as the
    # client picks it again fails with "disconnected" (a race of HTTP keep-alive, not of the
    # daemon), and on a loaded machine the refused routes' connections sit idle long enough.
    limits = httpx.Limits(max_connections=ROUTES + 10, max_keepalive_connections=0)
    responses: list[httpx.Response] = []
    health_seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(socket_path),
                                                                    limits=limits),
                                 base_url="http://squadd", timeout=WAIT_S) as client:
        async def one(index: int) -> None:
            responses.append(await client.post("/v1/route", json={
                "targetAgent": "lead", "task": f"task {index}", "waitForResult": True}))

        async with anyio.create_task_group() as group:
            for index in range(ROUTES):
                group.start_soon(one, index)
            # Wait (bounded) for the state the test is about: every slot taken, every queue place
            # filled, every other route refused. Health must answer throughout.
            with anyio.fail_after(WAIT_S):
                while True:
                    answer = await client.get("/v1/health")
                    assert answer.status_code == 200, answer.text
                    pool = answer.json()["pool"]
                    health_seen.append(pool)
                    refused = sum(1 for r in responses if r.status_code == 503)
                    if pool["running"] == SLOTS and pool["queued"] == QUEUE \
                            and refused == ROUTES - SLOTS - QUEUE:
                        break
                    await anyio.sleep(0.02)
            model.release.set()
    return responses, health_seen


def test_500_concurrent_routes_get_answers_or_pool_full_and_health_answers_while_full(
        tmp_path: Path) -> None:
    model = HeldModel()
    with OpenAIServer(responder=model) as server, \
            DaemonProcess.in_new_repo(tmp_path, server.url, config=LOAD_CONFIG) as daemon:
        try:
            responses, health_seen = anyio.run(_load, daemon.layout.socket, model)
        finally:
            model.release.set()
        statuses = [r.status_code for r in responses]
        assert len(responses) == ROUTES
        assert set(statuses) <= {200, 503}, sorted(set(statuses))
        full = [r for r in responses if r.status_code == 503]
        for response in full:
            body = response.json()
            assert body["ok"] is False and body["reason"] == "pool_full"
            assert body["pool"]["max_queued"] == QUEUE and "pool full" in body["error"]
            assert int(response.headers["retry-after"]) > 0
        answered = [r.json() for r in responses if r.status_code == 200]
        assert all(body["ok"] and body["answer"] == "done" for body in answered)
        # Every slot and queue place was used, and nobody else got in.
        assert len(answered) == SLOTS + QUEUE
        assert len(full) == ROUTES - SLOTS - QUEUE
        # Health answered while the pool was full; each admitted route made exactly one turn.
        last = health_seen[-1]
        assert last["running"] == SLOTS and last["queued"] == QUEUE
        assert all(pool["running"] <= SLOTS and pool["queued"] <= QUEUE for pool in health_seen)
        assert model.begun == SLOTS + QUEUE
        deadline = time.monotonic() + WAIT_S
        totals = daemon.client.health()["pool"]
        while (totals["running"] or totals["queued"]) and time.monotonic() < deadline:
            time.sleep(0.05)
            totals = daemon.client.health()["pool"]
        assert totals["running"] == 0 and totals["queued"] == 0
