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
The runs alternate: `--rounds` rounds of `--routes / --rounds` each, squadd's routes and then
every peer's runs (the peers first in every other round), the peers in a process of their own
kept up between rounds when this interpreter lacks them. Each ratio is taken within a round, from
runs made at the same moment, and the line gives the median over the rounds, the lowest, the
highest, and in how many rounds the target was met (`_rounds_met`); the p50s are over all rounds.
Every framework runs with the garbage-collector settings and on the event loop (uvloop) that
`squadd serve` uses (`squadd.gc_tuning`, `_common.run_like_squadd`).

Prints, as its last line:
    route_overhead p50_ms=… p99_ms=… openai_agents_p50_ms=… pydantic_ai_p50_ms=…
        openai_agents_sqlite_p50_ms=… rounds=… ratio_vs_best_peer=… ratio_vs_best_peer_min=…
        ratio_vs_best_peer_max=… ratio_vs_best_peer_rounds_met=… (the same four for
        ratio_vs_durable_peer and floor_ratio)
Targets: ratio_vs_best_peer <= 1.0, ratio_vs_durable_peer <= 0.2, floor_ratio <= 1.6.

    .venv/bin/python scripts/bench/route_overhead.py [--routes 2000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    Peers,
    Spread,
    bench_folder,
    events_drained,
    fmt,
    make_squad,
    percentile,
    run_like_squadd,
    say,
    serve_like_squadd,
    serve_peers,
)

WARMUP = 50
"""Unmeasured runs of each framework before its first round."""
ROUND_WARMUP = 5
"""Unmeasured runs at the start of every later round (after the other side's round)."""
PEER_KINDS = ("openai_agents", "pydantic_ai", "openai_agents_sqlite")


@dataclass
class Round:
    """One round's timings (seconds): squadd's routes, the floor iteration after each, and
    each peer's runs, made one after the other at the same moment."""

    ours: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)
    peers: dict[str, list[float]] = field(default_factory=dict)


async def alternate(layout_root: Path, routes: int, rounds: int, peers: Peers) -> list[Round]:
    """`rounds` rounds of about `routes / rounds` routes each, squadd's and the peers' in turn
    (squadd first in even rounds, the peers first in odd ones, so a steady drift of the
    machine weighs on both alike). Each route is followed by one floor iteration, so that both
    see the same disk and load."""
    from squadd.config import Settings
    from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedTurn
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.layout import SquadLayout

    layout = SquadLayout.at(layout_root)
    provider = ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")]))
    floor_dir = layout_root / "floor-sessions"
    floor_dir.mkdir()
    per_round = max(1, routes // rounds)
    done: list[Round] = []
    async with SquadRuntime(layout, Settings(), provider) as runtime, events_drained(runtime):
        start = 0
        for index in range(rounds):
            warmup = WARMUP if index == 0 else ROUND_WARMUP
            current = Round()
            for side in (("ours", "peers") if index % 2 == 0 else ("peers", "ours")):
                if side == "ours":
                    await squadd_round(runtime, layout_root, floor_dir, current,
                                       range(start, start + warmup + per_round), warmup)
                elif peers.missing is None:
                    for kind in PEER_KINDS:
                        reply = await anyio.to_thread.run_sync(peers.ask, {
                            "run": kind, "squad": str(layout_root), "routes": per_round,
                            "warmup": warmup, "start": start})
                        current.peers[kind] = reply["timings"]
            start += warmup + per_round
            done.append(current)
    return done


async def squadd_round(runtime: Any, layout_root: Path, floor_dir: Path, into: Round,
                       numbers: range, warmup: int) -> None:
    """Our routes numbered `numbers`, the first `warmup` of them not measured."""
    from squadd.contracts.routes import RouteRequest

    for n in numbers:
        request = RouteRequest(target_agent="fenster", task=f"say done {n}")
        started = time.perf_counter()
        result = await runtime.route(request)
        elapsed = time.perf_counter() - started
        if not result.ok:
            raise SystemExit(f"route failed: {result.message}")
        floor_s = floor_once(layout_root, floor_dir, n)
        if n >= numbers.start + warmup:
            into.ours.append(elapsed)
            into.floors.append(floor_s)


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


async def openai_agents_runs(layout_root: Path, routes: int, *, db_file: Path | None = None,
                             warmup: int = WARMUP, start: int = 0) -> list[float]:
    """openai-agents' runs numbered from `start`, the first `warmup` not measured; with
    `db_file`, each in a new `SQLiteSession` stored in that file."""
    from agents import Agent, Runner, SQLiteSession, set_tracing_disabled
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    set_tracing_disabled(True)
    model = ScriptedModel()
    timings = []
    for n in range(start, start + routes + warmup):
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
        if n >= start + warmup:
            timings.append(elapsed)
    return timings


async def pydantic_ai_runs(layout_root: Path, routes: int, *, warmup: int = WARMUP,
                           start: int = 0) -> list[float]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("done")])

    model = FunctionModel(answer)
    timings = []
    for n in range(start, start + routes + warmup):
        started = time.perf_counter()
        agent = Agent(model, instructions=_instructions(layout_root))
        result = await agent.run(f"say done {n}")
        elapsed = time.perf_counter() - started
        if result.output != "done":
            raise SystemExit(f"pydantic-ai answered {result.output!r}")
        if n >= start + warmup:
            timings.append(elapsed)
    return timings


def p50_ms(timings: list[float]) -> float:
    return percentile(sorted(timings), 0.5) * 1000


def peer_round(request: dict[str, Any]) -> dict[str, Any]:
    """One round of one peer (`request["run"]`, a `PEER_KINDS`): its timings in seconds."""
    root = Path(request["squad"])
    kind, routes = request["run"], int(request["routes"])
    bounds = {"warmup": int(request["warmup"]), "start": int(request["start"])}
    if kind == "openai_agents":
        runs = functools.partial(openai_agents_runs, root, routes, **bounds)
    elif kind == "openai_agents_sqlite":
        runs = functools.partial(openai_agents_runs, root, routes,
                                 db_file=root / "peer-sessions.db", **bounds)
    else:
        runs = functools.partial(pydantic_ai_runs, root, routes, **bounds)
    return {"timings": run_like_squadd(runs)}


HANDLERS = {kind: peer_round for kind in PEER_KINDS}
PEER_KEYS = {"openai_agents": "openai_agents_p50_ms", "pydantic_ai": "pydantic_ai_p50_ms",
             "openai_agents_sqlite": "openai_agents_sqlite_p50_ms"}


def ratios(done: list[Round]) -> dict[str, list[float]]:
    """Each round's route p50 over the best non-durable peer's, the durable peer's, the floor's."""
    best, durable, floor = [], [], []
    for one in done:
        ours = p50_ms(one.ours)
        plain = [p50_ms(one.peers[k]) for k in ("openai_agents", "pydantic_ai") if k in one.peers]
        best.append(ours / min(plain) if plain else math.nan)
        durable.append(ours / p50_ms(one.peers["openai_agents_sqlite"])
                       if "openai_agents_sqlite" in one.peers else math.nan)
        floor.append(ours / p50_ms(one.floors))
    return {"ratio_vs_best_peer": best, "ratio_vs_durable_peer": durable, "floor_ratio": floor}


TARGETS = {"ratio_vs_best_peer": 1.0, "ratio_vs_durable_peer": 0.2, "floor_ratio": 1.6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--routes", type=int, default=2000,
                        help="measured routes in all, for squadd and for each peer")
    parser.add_argument("--rounds", type=int, default=20,
                        help="rounds of squadd's routes and the peers' runs, in turn")
    parser.add_argument("--peers-only", action="store_true",
                        help="run only the peer frameworks and print their p50s as JSON")
    parser.add_argument("--peers-serve", action="store_true",
                        help="answer rounds of peer runs asked on stdin (see _common.Peers)")
    parser.add_argument("--squad", type=Path, help="(with --peers-only) the squad dir to read")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    serve_like_squadd()
    if args.peers_serve:
        serve_peers(HANDLERS)
        return
    if args.peers_only:
        with bench_folder() as tmp:
            root = args.squad or make_squad(Path(tmp) / "repo").root
            print(json.dumps({PEER_KEYS[kind]: p50_ms(peer_round({
                "run": kind, "squad": str(root), "routes": args.routes, "warmup": WARMUP,
                "start": 0})["timings"]) for kind in PEER_KINDS}))
        return

    with bench_folder() as tmp:
        layout = make_squad(Path(tmp) / "repo")
        with Peers(Path(__file__), [], HANDLERS, modules=("agents", "pydantic_ai")) as peers:
            done = run_like_squadd(alternate, layout.root, args.routes, args.rounds, peers)
    ours = sorted(t for one in done for t in one.ours)
    base = sorted(t for one in done for t in one.floors)
    p50, p99 = percentile(ours, 0.5) * 1000, percentile(ours, 0.99) * 1000
    floor_p50 = percentile(base, 0.5) * 1000
    say(f"routes={len(ours)} rounds={len(done)} mean_ms={sum(ours) / len(ours) * 1000:.3f} "
        f"floor_p50_ms={floor_p50:.3f}")
    if peers.missing is not None:
        say(f"peers not measured: {peers.missing}")
    overall = {PEER_KEYS[kind]: p50_ms([t for one in done for t in one.peers.get(kind, [])])
               for kind in PEER_KINDS}
    spreads = {key: Spread.of(values, TARGETS[key], "lower")
               for key, values in ratios(done).items()}
    for index, one in enumerate(done):
        say(f"round {index}: route_p50_ms={fmt(p50_ms(one.ours))} "
            f"floor_p50_ms={fmt(p50_ms(one.floors))} " + " ".join(
                f"{PEER_KEYS[k]}={fmt(p50_ms(v))}" for k, v in one.peers.items()))
    print(f"route_overhead p50_ms={fmt(p50)} p99_ms={fmt(p99)} "
          + " ".join(f"{key}={fmt(value)}" for key, value in overall.items())
          + f" rounds={len(done)} " + " ".join(s.fields(key) for key, s in spreads.items()))


if __name__ == "__main__":
    main()
