"""Benchmark: the CPU one `AsyncDaemonClient` spends a route, with 8 to 1000 routes in flight.

A real daemon (`squadd serve`, 32 slots, a queue long enough for every route) talks to an
OpenAI-compatible model server on 127.0.0.1 that answers every turn after `--delay-ms`; the
model server runs in this script's process, the daemon in its own. For each count N a fresh
client process keeps N routes in flight through one `AsyncDaemonClient` (N tasks, each routing
again as soon as its route is answered) until `max(N, --routes)` have been answered, and
reports the CPU time its own process spent (`time.process_time`, after a warm-up route) a
route. Prints one line per N, then as its last line:

    client_load n8_cpu_ms=… n100_cpu_ms=… n400_cpu_ms=… n1000_cpu_ms=… ratio_400_vs_8=…

Target: ratio_400_vs_8 <= 1.2 (CPU a route flat as routes in flight grow).

    .venv/bin/python scripts/bench/client_load.py [--counts 8,100,400,1000] [--routes 400]
        [--delay-ms 50] [--max-connections N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
from _common import bench_folder, make_squad, say

from tests.support.daemon_process import clean_env
from tests.support.model_servers import OpenAIServer, Reply

READY_TIMEOUT_S = 60.0
AGENTS = ("fenster", "hockney", "keaton", "mcmanus")


async def fire(repo: Path, in_flight: int, total: int, lanes: int) -> dict[str, float]:
    """In this (client) process: `total` routes, `in_flight` at a time, through one client."""
    from squadd.daemon.client import MAX_CONNECTIONS, AsyncDaemonClient
    from squadd.state.layout import SquadLayout

    failures: list[str] = []
    async with AsyncDaemonClient(SquadLayout.find(repo), timeout=600.0,
                                 max_connections=lanes or MAX_CONNECTIONS) as client:
        await client.route("warm up", AGENTS[0])
        left = total

        async def keep_one_in_flight(n: int) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                result = await client.route(f"job {n} {left}", AGENTS[n % len(AGENTS)])
                if not result.get("ok"):
                    failures.append(str(result.get("message")))

        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.gather(*(keep_one_in_flight(n) for n in range(in_flight)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if failures:
        raise SystemExit(f"{len(failures)} of {total} routes failed, e.g. {failures[0]}")
    return {"cpu_ms_a_route": cpu * 1000 / total, "routes_per_s": total / wall}


def serve(root: Path, model_url: str) -> tuple[subprocess.Popen[bytes], Path]:
    layout = make_squad(root / "repo")
    (layout.root / "config.toml").write_text(
        "[daemon]\ngrace_s = 1.0\n[pool]\nmax_concurrent = 32\nmax_queued = 100000\n"
        "[provider]\nmax_attempts = 3\n", encoding="utf-8")
    log = root / "daemon.out"
    with log.open("ab") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "squadd", "serve", "--provider", "openai", "--base-url",
             model_url, "--model", "m"], cwd=layout.repo, stdin=subprocess.DEVNULL,
            stdout=out, stderr=out,
            env=clean_env(XDG_CONFIG_HOME=str(root / "xdg"), XDG_CACHE_HOME=str(root / "xc")))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while "squadd serving" not in log.read_text(errors="replace"):
        if daemon.poll() is not None or time.monotonic() > deadline:
            daemon.kill()
            raise SystemExit(f"the daemon did not start: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    return daemon, layout.repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="8,100,400,1000")
    parser.add_argument("--routes", type=int, default=400)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--max-connections", type=int, default=0,
                        help="the client's max_connections (default: its own default)")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # REPO,N,TOTAL: the client process
    args = parser.parse_args()
    if args.client:
        repo, in_flight, total = args.client.rsplit(",", 2)
        print(json.dumps(asyncio.run(fire(Path(repo), int(in_flight), int(total),
                                          args.max_connections))))
        return
    counts = [int(n) for n in args.counts.split(",")]
    delay_s = args.delay_ms / 1000
    found: dict[int, float] = {}
    with bench_folder("squadd-client-load-") as root, OpenAIServer(
            lambda body: Reply(body=OpenAIServer.text_turn("done").body, delay_s=delay_s),
            keep_bodies=False) as model:
        daemon, repo = serve(root, model.url)
        try:
            for count in counts:
                total = max(count, args.routes)
                done = subprocess.run(
                    [sys.executable, __file__, "--client", f"{repo},{count},{total}",
                     "--max-connections", str(args.max_connections)],
                    capture_output=True, text=True, timeout=1800)
                if done.returncode != 0:
                    raise SystemExit(f"the client with {count} in flight failed:\n"
                                     f"{done.stdout}{done.stderr}")
                result = json.loads(done.stdout.splitlines()[-1])
                found[count] = result["cpu_ms_a_route"]
                say(f"{count:5d} in flight: {total} routes, {result['routes_per_s']:.1f} "
                    f"routes/s, client CPU {result['cpu_ms_a_route']:.3f} ms a route")
        finally:
            daemon.terminate()
            daemon.wait(30)
    line = " ".join(f"n{count}_cpu_ms={cpu:.3f}" for count, cpu in found.items())
    if 8 in found and 400 in found:
        line += f" ratio_400_vs_8={found[400] / found[8]:.2f}"
    print(f"client_load {line}")


if __name__ == "__main__":
    main()
