"""Benchmark: how close the pool runs to its bound with many routes and a slow model.

5,000 routes at once through `SquadRuntime.route`, `pool.max_concurrent=32`, and a provider that
sleeps 50 ms per turn: the bound is 32 / 0.05 = 640 routes/s. That is one round; `--rounds`
(default 5) rounds run in turn with the peer's (squadd first in even rounds, the peer first in
odd ones; the peer in a process of its own kept up between rounds when this interpreter lacks
it), through one runtime, and each figure is the median over the rounds (with `_min`, `_max`
and, for the targets, in how many rounds each was met: `_rounds_met`). Everything else is real
(files, fsync, events, orchestration log). The same load also runs on pydantic-ai
(`Agent.run` with a `FunctionModel` that sleeps as long) under an equal semaphore, for
comparison. `cpu_ms_per_route` is the process's CPU time (user + system, every thread) over a
round, divided by its routes; pydantic-ai's is measured the same way, in its own process. CPU
time here moves with the host's load and with what creating a file costs (the same code has
measured 1.2-2.2 ms a route within an hour), so the ratio of the two, from one round, says more
than either.
Both run with the garbage-collector settings and the event loop (uvloop) `squadd serve` uses
(`squadd.gc_tuning`, `_common.run_like_squadd`).

Prints, as its last line:
    pool_throughput routes_per_s=… fraction_of_bound=… (_min, _max, _rounds_met)
        cpu_ms_per_route=… (_min, _max, _rounds_met)
        pydantic_ai_routes_per_s=… pydantic_ai_fraction_of_bound=…
        pydantic_ai_cpu_ms_per_route=… cpu_ratio_vs_pydantic_ai=… (_min, _max)
        loop_cpu_ms_per_route=… commit_cpu_ms_per_route=… rounds=… create_cost_us=…
Targets: fraction_of_bound >= 0.85, cpu_ms_per_route <= 1.4.
`loop_` and `commit_cpu_ms_per_route` split ours between the event loop's thread and the group
commit's (the rest is worker threads: spare files made ahead, prompt reads). `create_cost_us` is
what creating one empty file cost in the benchmark's folder just before the run: every route
leaves two new files (its transcript and its orchestration-log entry), and on ext4 without a
journal a creation costs many times its usual 20 µs for minutes after deletions nearby (see
"File creation after deletions" in docs/benchmark-notes.md).

    .venv/bin/python scripts/bench/pool_throughput.py [--routes 5000] [--concurrency 32]
        [--delay-ms 50] [--rounds 5] [--no-peers] [--base-url URL] [--profile FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    Peers,
    Spread,
    bench_folder,
    cpu_s,
    create_cost_us,
    fmt,
    make_squad,
    run_like_squadd,
    say,
    serve_like_squadd,
    serve_peers,
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


@dataclass
class Round:
    """One round: squadd's routes/s and CPU split, and the peer's routes/s and CPU seconds a
    route (nan when it is not measured), made one after the other at the same moment."""

    rate: float
    split: Split
    peer_rate: float = math.nan
    peer_cpu: float = math.nan


async def alternate(root: Path, routes: int, concurrency: int, delay_s: float, rounds: int,
                    peers: Peers | None, base_url: str | None = None,
                    profile: cProfile.Profile | None = None) -> list[Round]:
    """`rounds` rounds of `routes` routes at once through one runtime, each with a round of the
    peer's (squadd first in even rounds, the peer first in odd ones, so a steady drift of the
    machine weighs on both alike). `base_url`: the model is the OpenAI-compatible server there
    (its delay is its own), not a replay. `profile`: enabled on the loop's thread over squadd's
    rounds only."""
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
    done: list[Round] = []
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

        async def ours(index: int) -> tuple[float, Split]:
            started, cpu_started = time.perf_counter(), cpu_s()
            loop_started, commit_started = thread_cpu_s(loop), thread_cpu_s(committer)
            if profile is not None:
                profile.enable()
            async with anyio.create_task_group() as tg:
                for n in range(index * routes, (index + 1) * routes):
                    tg.start_soon(one, n)
            if profile is not None:
                profile.disable()
            elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu_started
            if failures:
                raise SystemExit(f"{len(failures)} routes failed, e.g. {failures[0]}")
            return routes / elapsed, Split(cpu / routes,
                                           (thread_cpu_s(loop) - loop_started) / routes,
                                           (thread_cpu_s(committer) - commit_started) / routes)

        for index in range(rounds):
            peer: dict[str, Any] = {}
            if index % 2 == 1 and peers is not None:
                peer = await anyio.to_thread.run_sync(peers.ask, {"run": "pydantic_ai"})
            rate, split = await ours(index)
            if index % 2 == 0 and peers is not None:
                peer = await anyio.to_thread.run_sync(peers.ask, {"run": "pydantic_ai"})
            done.append(Round(rate, split, float(peer.get("pydantic_ai_routes_per_s", math.nan)),
                              float(peer.get("pydantic_ai_cpu_s_per_route", math.nan))))
    if base_url is not None:  # ours, not the runtime's: its connections are closed here
        await model.aclose()
    return done


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
    parser.add_argument("--routes", type=int, default=5000, help="routes at once, each round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of squadd's routes and the peer's, in turn (default 5; "
                             "1 with --no-peers)")
    parser.add_argument("--peers-only", action="store_true",
                        help="run only pydantic-ai and print its routes/s as JSON")
    parser.add_argument("--peers-serve", action="store_true",
                        help="answer rounds of peer runs asked on stdin (see _common.Peers)")
    parser.add_argument("--base-url", default=None, metavar="URL",
                        help="squadd's model is the OpenAI-compatible server at URL (e.g. "
                             "scale.py's, in its own process) instead of a replay that sleeps "
                             "--delay-ms")
    parser.add_argument("--no-peers", action="store_true",
                        help="measure squadd only (the peer's figures print as nan)")
    parser.add_argument("--profile", type=Path, default=None, metavar="FILE",
                        help="cProfile the event loop's thread (its CPU time) over squadd's "
                             "rounds and write the statistics to FILE (read them with pstats)")
    args = parser.parse_args()
    rounds = args.rounds if args.rounds is not None else (1 if args.no_peers else 5)
    if rounds < 1:
        parser.error(f"--rounds must be at least 1, not {rounds}")
    serve_like_squadd()
    delay_s = args.delay_ms / 1000
    bound = args.concurrency / delay_s

    def peer_round(request: dict[str, Any]) -> dict[str, Any]:
        rate, cpu = run_like_squadd(pydantic_ai_throughput, args.routes, args.concurrency,
                                    delay_s)
        return {"pydantic_ai_routes_per_s": rate, "pydantic_ai_cpu_s_per_route": cpu}

    if args.peers_serve:
        serve_peers({"pydantic_ai": peer_round})
        return
    if args.peers_only:
        print(json.dumps(peer_round({})))
        return

    with bench_folder() as tmp:
        creating_us = create_cost_us(Path(tmp))
        layout = make_squad(Path(tmp) / "repo")
        peer_args = ["--routes", str(args.routes), "--concurrency", str(args.concurrency),
                     "--delay-ms", str(args.delay_ms)]
        with Peers(Path(__file__), peer_args, {"pydantic_ai": peer_round},
                   modules=("pydantic_ai",)) as peers:
            if args.no_peers:
                missing: str | None = "--no-peers"
            else:
                missing = peers.missing
            profile = None if args.profile is None else cProfile.Profile(time.thread_time)
            done = run_like_squadd(alternate, layout.root, args.routes, args.concurrency,
                                   delay_s, rounds, None if missing else peers, args.base_url,
                                   profile)
            if profile is not None:
                profile.dump_stats(args.profile)
    if missing:
        say(f"pydantic-ai not measured: {missing}")
    say(f"routes={args.routes} rounds={rounds} max_concurrent={args.concurrency} "
        f"delay_ms={args.delay_ms:g} bound_routes_per_s={bound:.1f}")
    for index, one in enumerate(done):
        say(f"round {index}: fraction_of_bound={fmt(one.rate / bound)} "
            f"cpu_ms_per_route={fmt(one.split.total * 1000)} "
            f"pydantic_ai_fraction_of_bound={fmt(one.peer_rate / bound)} "
            f"pydantic_ai_cpu_ms_per_route={fmt(one.peer_cpu * 1000)}")

    def median(values: list[float]) -> float:
        kept = [v for v in values if not math.isnan(v)]
        return statistics.median(kept) if kept else math.nan

    rate = median([one.rate for one in done])
    peer_rate = median([one.peer_rate for one in done])
    peer_cpu = median([one.peer_cpu for one in done])
    fraction = Spread.of([one.rate / bound for one in done], 0.85, "higher")
    cpu = Spread.of([one.split.total * 1000 for one in done], 1.4, "lower")
    cpu_ratio = Spread.of([one.split.total / one.peer_cpu for one in done])
    print(f"pool_throughput routes_per_s={fmt(rate)} {fraction.fields('fraction_of_bound')} "
          f"{cpu.fields('cpu_ms_per_route')} "
          f"pydantic_ai_routes_per_s={fmt(peer_rate)} "
          f"pydantic_ai_fraction_of_bound={fmt(peer_rate / bound)} "
          f"pydantic_ai_cpu_ms_per_route={fmt(peer_cpu * 1000)} "
          f"{cpu_ratio.fields('cpu_ratio_vs_pydantic_ai')} "
          f"loop_cpu_ms_per_route={fmt(median([one.split.loop * 1000 for one in done]))} "
          f"commit_cpu_ms_per_route={fmt(median([one.split.commit * 1000 for one in done]))} "
          f"rounds={rounds} create_cost_us={fmt(creating_us)}")


if __name__ == "__main__":
    main()
