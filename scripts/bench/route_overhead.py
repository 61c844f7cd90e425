"""Benchmark: the cost of one route through the pool, everything real but the model.

2,000 sequential routes through `SquadRuntime.route` with an instant scripted provider (replay):
charter, history and decisions reads, the prompt, one turn, the transcript written and fsynced,
every event published to the bus (one subscriber drains it), the orchestration log written. The
same one-turn job (the same three files read into the instructions) also runs on openai-agents'
`Runner.run` with its `ScriptedModel` and pydantic-ai's `Agent.run` with `FunctionModel`, which
persist nothing, and on openai-agents with `SQLiteSession(session_id, db_file)` on a file in the
same folder (a new session per run, every item committed to SQLite): the durable peer. The
floor is those three reads plus one fsynced transcript write in plain Python; one floor
iteration follows each route, so that both see the same disk and load.
Every framework runs with the garbage-collector settings and on the event loop (uvloop) that
`squadd serve` uses (`squadd.gc_tuning`, `_common.run_like_squadd`).

Prints, as its last line:
    route_overhead p50_ms=… p99_ms=… openai_agents_p50_ms=… pydantic_ai_p50_ms=…
        openai_agents_sqlite_p50_ms=… ratio_vs_best_peer=… ratio_vs_durable_peer=… floor_ratio=…
Targets: ratio_vs_best_peer <= 1.0, ratio_vs_durable_peer <= 0.2, floor_ratio <= 1.6.

    .venv/bin/python scripts/bench/route_overhead.py [--routes 2000]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    bench_folder,
    fmt,
    have,
    make_squad,
    percentile,
    run_in_bench_venv,
    run_like_squadd,
    say,
    serve_like_squadd,
)

WARMUP = 50


async def squadd_routes(layout_root: Path, routes: int) -> tuple[list[float], list[float]]:
    """Our routes, each followed by one floor iteration, so both see the same disk and load."""
    from squadd.config import Settings
    from squadd.contracts.routes import RouteRequest
    from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedTurn
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.layout import SquadLayout

    layout = SquadLayout.at(layout_root)
    provider = ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")]))
    floor_dir = layout_root / "floor-sessions"
    floor_dir.mkdir()
    timings: list[float] = []
    floors: list[float] = []
    async with SquadRuntime(layout, Settings(), provider) as runtime:
        subscription = runtime.bus.subscribe(buffer=4096)

        async def drain() -> None:
            async for _ in subscription:
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            for n in range(routes + WARMUP):
                request = RouteRequest(target_agent="fenster", task=f"say done {n}")
                started = time.perf_counter()
                result = await runtime.route(request)
                elapsed = time.perf_counter() - started
                if not result.ok:
                    raise SystemExit(f"route failed: {result.message}")
                floor_s = floor_once(layout_root, floor_dir, n)
                if n >= WARMUP:
                    timings.append(elapsed)
                    floors.append(floor_s)
            subscription.close()
    return timings, floors


def floor_once(layout_root: Path, sessions: Path, n: int) -> float:
    """Three reads and one fsynced transcript write, with no framework at all."""
    agent = layout_root / "agents" / "fenster"
    started = time.perf_counter()
    charter = (agent / "charter.md").read_text(encoding="utf-8")
    history = (agent / "history.md").read_text(encoding="utf-8")
    decisions = (layout_root / "decisions.md").read_text(encoding="utf-8")
    record = json.dumps({"system": charter + history + decisions, "user": f"say done {n}",
                         "assistant": "done"})
    fd = os.open(sessions / f"{n}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, record.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - started


def _instructions(layout_root: Path) -> str:
    """The same three files a route reads, as the peers' instructions (read on every run)."""
    agent = layout_root / "agents" / "fenster"
    return "\n\n".join([
        "You are fenster, a Squad agent.",
        (agent / "charter.md").read_text(encoding="utf-8"),
        (agent / "history.md").read_text(encoding="utf-8"),
        (layout_root / "decisions.md").read_text(encoding="utf-8"),
    ])


async def openai_agents_runs(layout_root: Path, routes: int, *,
                             db_file: Path | None = None) -> list[float]:
    """openai-agents' runs; with `db_file`, each in a new `SQLiteSession` stored in that file."""
    from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    set_tracing_disabled(True)
    model = ScriptedModel()
    timings = []
    for n in range(routes + WARMUP):
        started = time.perf_counter()
        model.enqueue(ModelStep(output=[assistant_message("done")]))
        agent = Agent(name="fenster", instructions=_instructions(layout_root), model=model)
        session = None if db_file is None else SQLiteSession(f"session-{n}", db_file)
        result = await Runner.run(agent, f"say done {n}", session=session)
        if session is not None:
            session.close()
        elapsed = time.perf_counter() - started
        if result.final_output != "done":
            raise SystemExit(f"openai-agents answered {result.final_output!r}")
        if n >= WARMUP:
            timings.append(elapsed)
    return timings


async def pydantic_ai_runs(layout_root: Path, routes: int) -> list[float]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("done")])

    model = FunctionModel(answer)
    timings = []
    for n in range(routes + WARMUP):
        started = time.perf_counter()
        agent = Agent(model, instructions=_instructions(layout_root))
        result = await agent.run(f"say done {n}")
        elapsed = time.perf_counter() - started
        if result.output != "done":
            raise SystemExit(f"pydantic-ai answered {result.output!r}")
        if n >= WARMUP:
            timings.append(elapsed)
    return timings


def p50_ms(timings: list[float]) -> float:
    return percentile(sorted(timings), 0.5) * 1000


def peers(layout_root: Path, routes: int) -> dict[str, float | str]:
    """The peers' p50 in ms, from this interpreter or from .bench-venv."""
    if have("agents", "pydantic_ai"):
        durable = p50_ms(run_like_squadd(functools.partial(
            openai_agents_runs, layout_root, routes, db_file=layout_root / "peer-sessions.db")))
        plain = p50_ms(run_like_squadd(openai_agents_runs, layout_root, routes))
        other = p50_ms(run_like_squadd(pydantic_ai_runs, layout_root, routes))
        return {"openai_agents_p50_ms": plain, "pydantic_ai_p50_ms": other,
                "openai_agents_sqlite_p50_ms": durable}
    return run_in_bench_venv(Path(__file__), ["--routes", str(routes), "--squad",
                                              str(layout_root)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--routes", type=int, default=2000)
    parser.add_argument("--peers-only", action="store_true",
                        help="run only the peer frameworks and print their p50s as JSON")
    parser.add_argument("--squad", type=Path, help="(with --peers-only) the squad dir to read")
    args = parser.parse_args()
    serve_like_squadd()
    if args.peers_only:
        with bench_folder() as tmp:
            root = args.squad or make_squad(Path(tmp) / "repo").root
            print(json.dumps(peers(root, args.routes)))
        return

    with bench_folder() as tmp:
        layout = make_squad(Path(tmp) / "repo")
        ours, base = (sorted(t) for t in run_like_squadd(squadd_routes, layout.root, args.routes))
        peer = peers(layout.root, args.routes)
    p50, p99 = percentile(ours, 0.5) * 1000, percentile(ours, 0.99) * 1000
    floor_p50 = percentile(base, 0.5) * 1000
    say(f"routes={len(ours)} mean_ms={sum(ours) / len(ours) * 1000:.3f} "
        f"floor_p50_ms={floor_p50:.3f}")
    oa = float(peer.get("openai_agents_p50_ms", math.nan))
    pa = float(peer.get("pydantic_ai_p50_ms", math.nan))
    durable = float(peer.get("openai_agents_sqlite_p50_ms", math.nan))
    if "missing" in peer:
        say(f"peers not measured: {peer['missing']}")
    best = min((v for v in (oa, pa) if not math.isnan(v)), default=math.nan)
    print(f"route_overhead p50_ms={fmt(p50)} p99_ms={fmt(p99)} openai_agents_p50_ms={fmt(oa)} "
          f"pydantic_ai_p50_ms={fmt(pa)} openai_agents_sqlite_p50_ms={fmt(durable)} "
          f"ratio_vs_best_peer={fmt(p50 / best)} ratio_vs_durable_peer={fmt(p50 / durable)} "
          f"floor_ratio={fmt(p50 / floor_p50)}")


if __name__ == "__main__":
    main()
