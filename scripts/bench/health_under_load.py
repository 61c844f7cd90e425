"""Benchmark: how fast `/v1/health` answers while 500 concurrent routes fill the pool.

A real `squadd serve` (8 slots, 256 queue places) in a temp repo, against a real HTTP model server
on 127.0.0.1 that takes 5 ms per turn. 500 routes arrive at once; meanwhile a probe in its own
process (so that the load generator's work does not count against the daemon) asks
`GET /v1/health` every 20 ms on its own connection and records each answer's wall time.

Prints, as its last line:
    health_under_load p50_ms=… p95_ms=… max_ms=… probes=… answered=… refused=…
Target: p95 <= 100 ms.

    .venv/bin/python scripts/bench/health_under_load.py [--routes 500]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from _common import bench_folder, fmt, percentile

from tests.support.daemon_process import DaemonProcess
from tests.support.model_servers import OpenAIServer, Reply

LOAD_CONFIG = """\
[pool]
max_concurrent = 8
max_queued = 256

[provider]
max_attempts = 1
"""

PROBE = """
import json, sys, time
import httpx
socket_path, stop_file = sys.argv[1], sys.argv[2]
timings, failures = [], []
with httpx.Client(transport=httpx.HTTPTransport(uds=socket_path), base_url="http://squadd",
                  timeout=5) as client:
    deadline = time.monotonic() + 300
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


def _model(body: Any) -> Reply:
    time.sleep(0.005)
    return OpenAIServer.text_turn("done")


async def _route_all(socket_path: Path, routes: int) -> list[int]:
    limits = httpx.Limits(max_connections=routes + 10, max_keepalive_connections=routes + 10)
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(socket_path),
                                                                    limits=limits),
                                 base_url="http://squadd", timeout=300) as client:
        async def one(index: int) -> None:
            response = await client.post("/v1/route", json={
                "targetAgent": "lead", "task": f"task {index}", "waitForResult": True})
            statuses.append(response.status_code)

        async with anyio.create_task_group() as group:
            for index in range(routes):
                group.start_soon(one, index)
    return statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=500)
    args = parser.parse_args()
    with bench_folder("squadd-health-bench-") as tmp, \
            OpenAIServer(responder=_model, keep_bodies=False) as server, \
            DaemonProcess.in_new_repo(Path(tmp), server.url, config=LOAD_CONFIG) as daemon:
        stop_file = Path(tmp) / "stop-probe"
        probe = subprocess.Popen([sys.executable, "-c", PROBE, str(daemon.layout.socket),
                                  str(stop_file)], stdout=subprocess.PIPE, text=True)
        try:
            statuses = anyio.run(_route_all, daemon.layout.socket, args.routes)
        finally:
            stop_file.touch()
            out, _ = probe.communicate(timeout=60)
    measured = json.loads(out)
    if measured["failures"]:
        sys.exit(f"health failed under load: {measured['failures'][:5]}")
    ordered = sorted(t * 1000 for t in measured["timings"])
    print(f"health_under_load p50_ms={fmt(percentile(ordered, 0.5))} "
          f"p95_ms={fmt(percentile(ordered, 0.95))} max_ms={fmt(ordered[-1])} "
          f"probes={len(ordered)} answered={statuses.count(200)} refused={statuses.count(503)}")


if __name__ == "__main__":
    main()
