"""Benchmark: how close the pool runs to its bound with many routes and a slow model.

5,000 routes at once through `SquadRuntime.route`, `pool.max_concurrent=32`, and a provider that
sleeps 50 ms per turn: the bound is 32 / 0.05 = 640 routes/s. Everything else is real (files,
fsync, events, orchestration log). The same load also runs on pydantic-ai (`Agent.run` with a
`FunctionModel` that sleeps as long) under an equal semaphore, for comparison. `cpu_ms_per_route`
is the process's CPU time (user + system, every thread) over the run, divided by the routes;
pydantic-ai's is measured the same way, in its own process. CPU time here moves with the host's
load and with what creating a file costs (the same code has measured 1.2-2.2 ms a route within
an hour), so the ratio of the two, from one run, says more than either.
Both run with the garbage-collector settings and the event loop (uvloop) `squadd serve` uses
(`squadd.gc_tuning`, `_common.run_like_squadd`).

Prints, as its last line:
    pool_throughput routes_per_s=… fraction_of_bound=… cpu_ms_per_route=…
        pydantic_ai_routes_per_s=… pydantic_ai_fraction_of_bound=…
        pydantic_ai_cpu_ms_per_route=… cpu_ratio_vs_pydantic_ai=…
        loop_cpu_ms_per_route=… commit_cpu_ms_per_route=… create_cost_us=…
Targets: fraction_of_bound >= 0.85, cpu_ms_per_route <= 1.4.
`loop_` and `commit_cpu_ms_per_route` split ours between the event loop's thread and the group
commit's (the rest is worker threads: spare files made ahead, prompt reads). `create_cost_us` is
what creating one empty file cost in the benchmark's folder just before the run: every route
leaves two new files (its transcript and its orchestration-log entry), and on ext4 without a
journal a creation costs many times its usual 20 µs for minutes after deletions nearby (see
"File creation after deletions" in docs/benchmark-notes.md).

    .venv/bin/python scripts/bench/pool_throughput.py [--routes 5000] [--concurrency 32]
        [--delay-ms 50] [--no-peers] [--base-url URL]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    bench_folder,
    cpu_s,
    create_cost_us,
    fmt,
    have,
    make_squad,
    run_in_bench_venv,
    run_like_squadd,
    say,
    serve_like_squadd,
)


@dataclass
class Split:
    """CPU seconds per route: all of the process, the event loop's thread, the group commit's
    thread (the rest is worker threads: spare files, prompt reads)."""

    total: float
    loop: float
    commit: float


def thread_cpu_s(thread: threading.Thread) -> float:
    """CPU time of `thread` so far (it is running)."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


async def squadd_throughput(root: Path, routes: int, concurrency: int,
                            delay_s: float, base_url: str | None = None) -> tuple[float, Split]:
    """Routes per second, and CPU seconds per route (all, loop, commit thread). `base_url`:
    the model is the OpenAI-compatible server there (its delay is its own), not a replay."""
    from squadd.config import Settings
    from squadd.contracts.messages import Completion
    from squadd.contracts.routes import RouteRequest
    from squadd.providers.base import CompletionRequest
    from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedTurn
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.journal import COMMIT_THREAD
    from squadd.state.layout import SquadLayout

    class SlowModel:
        """An instant replay provider that takes `delay_s` per turn, like a remote model."""

        name = "slow-replay"
        default_model = "replay"

        def __init__(self) -> None:
            self.inner = ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")]))

        async def complete(self, request: CompletionRequest) -> Completion:
            await anyio.sleep(delay_s)
            return await self.inner.complete(request)

        async def aclose(self) -> None:
            return None

    settings = Settings.model_validate(
        {"pool": {"max_concurrent": concurrency, "max_queued": routes}})
    layout = SquadLayout.at(root)
    failures: list[str] = []
    if base_url is None:
        model: Any = SlowModel()
    else:
        from squadd.providers.openai import OpenAIProvider

        model = OpenAIProvider(model="bench-model", base_url=base_url, api_key="bench")
    async with SquadRuntime(layout, settings, model) as runtime:
        async def one(n: int) -> None:
            result = await runtime.route(RouteRequest(target_agent=f"{AGENTS[n % 4]}",
                                                      task=f"job {n}"))
            if not result.ok:
                failures.append(result.message)

        committer = next((thread for thread in threading.enumerate()
                          if thread.name == COMMIT_THREAD), None)
        if committer is None:
            raise SystemExit(f"no {COMMIT_THREAD} thread: the runtime's group commit did not start")
        loop = threading.current_thread()
        started, cpu_started = time.perf_counter(), cpu_s()
        loop_started, commit_started = thread_cpu_s(loop), thread_cpu_s(committer)
        async with anyio.create_task_group() as tg:
            for n in range(routes):
                tg.start_soon(one, n)
        elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu_started
        split = Split(cpu / routes, (thread_cpu_s(loop) - loop_started) / routes,
                      (thread_cpu_s(committer) - commit_started) / routes)
    if failures:
        raise SystemExit(f"{len(failures)} routes failed, e.g. {failures[0]}")
    return routes / elapsed, split


AGENTS = ("fenster", "hockney", "keaton", "mcmanus")


async def pydantic_ai_throughput(routes: int, concurrency: int,
                                 delay_s: float) -> tuple[float, float]:
    """Routes per second, and CPU seconds per route."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await anyio.sleep(delay_s)
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(answer), instructions="You are fenster, a Squad agent.")
    semaphore = anyio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with semaphore:
            result = await agent.run(f"job {n}")
            if result.output != "done":
                raise SystemExit(f"pydantic-ai answered {result.output!r}")

    started, cpu_started = time.perf_counter(), cpu_s()
    async with anyio.create_task_group() as tg:
        for n in range(routes):
            tg.start_soon(one, n)
    elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu_started
    return routes / elapsed, cpu / routes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--routes", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--peers-only", action="store_true",
                        help="run only pydantic-ai and print its routes/s as JSON")
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="squadd's model is the OpenAI-compatible server at URL (e.g. "
                             "scale.py's, in its own process) instead of a replay that sleeps "
                             "--delay-ms")
    parser.add_argument("--no-peers", action="store_true",
                        help="measure squadd only (the peer's figures print as nan)")
    args = parser.parse_args()
    serve_like_squadd()
    delay_s = args.delay_ms / 1000
    bound = args.concurrency / delay_s
    if args.peers_only:
        rate, cpu = run_like_squadd(pydantic_ai_throughput, args.routes, args.concurrency, delay_s)
        print(json.dumps({"pydantic_ai_routes_per_s": rate, "pydantic_ai_cpu_s_per_route": cpu}))
        return

    with bench_folder() as tmp:
        creating_us = create_cost_us(Path(tmp))
        layout = make_squad(Path(tmp) / "repo")
        rate, split = run_like_squadd(squadd_throughput, layout.root, args.routes,
                                      args.concurrency, delay_s, args.base_url)
    cpu_per_route = split.total
    if args.no_peers:
        peer = {"missing": "--no-peers"}
    elif have("pydantic_ai"):
        peer_rate, peer_cpu = run_like_squadd(pydantic_ai_throughput, args.routes,
                                              args.concurrency, delay_s)
        peer: dict[str, float | str] = {"pydantic_ai_routes_per_s": peer_rate,
                                        "pydantic_ai_cpu_s_per_route": peer_cpu}
    else:
        peer = run_in_bench_venv(Path(__file__), [
            "--routes", str(args.routes), "--concurrency", str(args.concurrency),
            "--delay-ms", str(args.delay_ms)])
    if "missing" in peer:
        say(f"pydantic-ai not measured: {peer['missing']}")
    peer_rate = float(peer.get("pydantic_ai_routes_per_s", math.nan))
    peer_cpu = float(peer.get("pydantic_ai_cpu_s_per_route", math.nan))
    say(f"routes={args.routes} max_concurrent={args.concurrency} delay_ms={args.delay_ms:g} "
        f"bound_routes_per_s={bound:.1f}")
    print(f"pool_throughput routes_per_s={fmt(rate)} fraction_of_bound={fmt(rate / bound)} "
          f"cpu_ms_per_route={fmt(cpu_per_route * 1000)} "
          f"pydantic_ai_routes_per_s={fmt(peer_rate)} "
          f"pydantic_ai_fraction_of_bound={fmt(peer_rate / bound)} "
          f"pydantic_ai_cpu_ms_per_route={fmt(peer_cpu * 1000)} "
          f"cpu_ratio_vs_pydantic_ai={fmt(cpu_per_route / peer_cpu)} "
          f"loop_cpu_ms_per_route={fmt(split.loop * 1000)} "
          f"commit_cpu_ms_per_route={fmt(split.commit * 1000)} "
          f"create_cost_us={fmt(creating_us)}")


if __name__ == "__main__":
    main()
