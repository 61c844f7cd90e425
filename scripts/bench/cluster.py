"""Benchmark: the cost of one squad-tool call forwarded from a worker through Redis.

A real redis-server and a coordinator (`squadd serve --cluster`); a session is claimed by this
script acting as a worker, and `squad_status` is called through the request stream many times
(round trip p50 / p99); the same call through the coordinator's pipeline in-process is the
baseline the added latency is measured against.

The cluster's throughput and CPU a route, against one daemon, are `scale.py`'s: it runs the
model server and the clients in processes of their own (this benchmark used to run both in
its own process, with the default listen backlog, and measured its own harness).

Prints, as its last line:
    cluster forwarded_p50_ms=… forwarded_p99_ms=… added_p50_ms=… added_p99_ms=…

    .venv/bin/python scripts/bench/cluster.py [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from _common import bench_folder, fmt, make_squad, percentile, say, wait_for_line

from tests.support.daemon_process import clean_env
from tests.support.model_servers import OpenAIServer
from tests.support.redis_server import RedisServer


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Bench", "-c", "user.email=bench@example.com",
                    *args], cwd=repo, check=True, capture_output=True)


class Processes:
    """The coordinator and workers of one run; all killed at the end."""

    def __init__(self, root: Path, redis_url: str, model_url: str):
        self.root = root
        self.redis_url = redis_url
        self.model_url = model_url
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = clean_env(XDG_CONFIG_HOME=str(root / "xdg"), XDG_CACHE_HOME=str(root / "xc"))

    def spawn(self, name: str, argv: list[str], cwd: Path) -> None:
        log = (self.root / f"{name}.out").open("ab")
        self.procs.append(subprocess.Popen([sys.executable, "-m", "squadd", *argv], cwd=cwd,
                                           env=self.env, stdin=subprocess.DEVNULL,
                                           stdout=log, stderr=log))
        log.close()

    def wait_for(self, name: str, text: str) -> None:
        wait_for_line(self.root / f"{name}.out", text, name)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)


def prepare_repo(root: Path) -> Path:
    layout = make_squad(root / "repo")
    (layout.root / "config.toml").write_text(
        "[daemon]\ngrace_s = 1.0\n[provider]\nmax_attempts = 1\n"
        "[cluster]\nheartbeat_s = 0.5\n", encoding="utf-8")
    git(layout.repo, "init", "-q")
    git(layout.repo, "add", "-A")
    git(layout.repo, "commit", "-qm", "squad")
    return layout.repo


async def forwarded_calls(root: Path, calls: int) -> tuple[list[float], list[float]]:
    """Round trips of `squad_status` forwarded through Redis, and the same call in-process."""
    from squadd.cluster.connection import RedisGuard, connect
    from squadd.cluster.jobs import JobQueue
    from squadd.cluster.requests import send
    from squadd.cluster.wire import Request
    from squadd.contracts.messages import ToolCall
    from squadd.daemon.client import AsyncDaemonClient
    from squadd.state.layout import SquadLayout

    redis = RedisServer(root / "redis").start()
    model = OpenAIServer(lambda body: OpenAIServer.text_turn("done"), keep_bodies=False).start()
    repo = prepare_repo(root)
    procs = Processes(root, redis.url, model.url)
    client = connect(redis.url)
    guard = RedisGuard(client, url=redis.url, down_s=30)
    try:
        procs.spawn("coordinator", ["serve", "--cluster", redis.url, "--provider", "openai",
                                    "--base-url", model.url, "--model", "m"], repo)
        procs.wait_for("coordinator", "squadd serving")
        async with AsyncDaemonClient(SquadLayout.find(repo), timeout=60.0) as daemon:
            started = await daemon.route("hold on", "fenster", wait=False)
        sid = started["session_id"]

        async def request(kind: str, rid: str, epoch: int, body: dict[str, Any]) -> Any:
            return await send(guard, Request(request_id=rid, kind=kind,  # type: ignore[arg-type]
                                             session_id=sid, worker="bench", epoch=epoch,
                                             body=body), timeout_s=10, attempts=3)
        # As a worker does: the session's job is taken in the workers' group before its claim.
        jobs = JobQueue(guard)
        await jobs.ensure()
        delivery = await jobs.take("bench", block_s=10)
        if delivery is None or delivery.job.session_id != sid:
            raise SystemExit(f"the route's job did not come: {delivery}")
        claim = await request("claim", "bench-claim", 0, {})
        if not claim.ok:
            raise SystemExit(f"claim refused: {claim.error}")
        epoch = int(claim.body["epoch"])
        forwarded: list[float] = []
        for n in range(calls):
            call = ToolCall(id=f"c{n}", name="squad_status", arguments={}).model_dump()
            t0 = time.perf_counter()
            reply = await request("tool", f"bench-{n}", epoch, {"call": call})
            forwarded.append((time.perf_counter() - t0) * 1000)
            if not reply.ok:
                raise SystemExit(f"forwarded call failed: {reply.error}")
        await request("end", "bench-end", epoch, {"status": "completed", "answer": "x"})
    finally:
        await client.aclose()
        procs.close()
        redis.close()
        model.close()
    return forwarded, await local_calls(root / "local", calls)


async def local_calls(root: Path, calls: int) -> list[float]:
    """`squad_status` through an in-process runtime's pipeline: the baseline."""
    from squadd.config import Settings
    from squadd.contracts.messages import ToolCall
    from squadd.providers.replay import ReplayProvider, ReplayScript
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.layout import SquadLayout
    from squadd.tools.invoke import CallOrigin

    layout = SquadLayout.at(make_squad(root / "repo").root)
    times: list[float] = []
    async with SquadRuntime(layout, Settings(), ReplayProvider(ReplayScript())) as runtime:
        origin = CallOrigin(session_id="bench", agent="fenster")
        for n in range(calls):
            t0 = time.perf_counter()
            result = await runtime.invoker.invoke(
                runtime.tools, ToolCall(id=f"l{n}", name="squad_status", arguments={}), origin)
            times.append((time.perf_counter() - t0) * 1000)
            if not result.ok:
                raise SystemExit(f"local call failed: {result.text}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    parts: list[str] = []
    with bench_folder() as tmp:
        forwarded, local = asyncio.run(forwarded_calls(Path(tmp), args.calls))
    forwarded.sort()
    local.sort()
    f50, f99 = percentile(forwarded, 0.5), percentile(forwarded, 0.99)
    l50, l99 = percentile(local, 0.5), percentile(local, 0.99)
    say(f"squad_status in-process p50 {l50:.3f} ms p99 {l99:.3f} ms")
    parts.append(f"forwarded_p50_ms={fmt(f50)} forwarded_p99_ms={fmt(f99)} "
                 f"added_p50_ms={fmt(f50 - l50)} added_p99_ms={fmt(f99 - l99)}")
    print("cluster " + " ".join(parts))


if __name__ == "__main__":
    main()
