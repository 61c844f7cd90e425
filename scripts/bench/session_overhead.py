"""Benchmark: the cost of one in-process, one-turn agent session, everything real but the model.

Each session reads the agent's charter, history and decisions.md (real files of realistic size),
builds its prompt and tool set, asks an instant scripted provider (`replay`) for one turn, and
writes and fsyncs its transcript. Prints `session_overhead p50_ms=… p99_ms=… fsyncs=…` as its
last line (`fsyncs`: fsync calls per session, counted). Target: p50 <= 1.0 ms on a 2-core machine.
With `--tool-calls N` the first turn asks for N calls of a no-op tool before the final answer:
each result is made durable before the next call starts, so `fsyncs` shows what that costs.
It runs on the event loop `squadd serve` uses (uvloop).

    .venv/bin/python scripts/bench/session_overhead.py [--sessions 2000] [--tool-calls 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # the same realistic squad the other benchmarks use
    bench_folder,
    make_squad,
    run_like_squadd,
)

from squadd import tool
from squadd.config import Settings
from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedCall, ScriptedTurn
from squadd.runtime.events import EventBus
from squadd.runtime.services import Found, SessionServices
from squadd.runtime.session import AgentSession
from squadd.runtime.session_info import SessionInfo, choose_model, session_toolset
from squadd.statcache import StatCache, text_cache
from squadd.state.charters import read_charter
from squadd.state.journal import GroupCommit
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache
from squadd.state.transcripts import FileSink, SpareFiles, TranscriptWriter
from squadd.tools.base import ToolSet
from squadd.tools.invoke import ToolInvoker
from squadd.tools.squad import file_tools

FSYNCS = [0]
_fsync = os.fsync


def _counted_fsync(fd: int) -> None:
    FSYNCS[0] += 1
    _fsync(fd)


@tool
async def noop() -> str:
    """Do nothing (the cost measured is squadd's, not the tool's)."""
    return "ok"


def _script(tool_calls: int) -> ReplayScript:
    final = ScriptedTurn(text="done")
    if not tool_calls:
        return ReplayScript(default=[final])
    calls = [ScriptedCall(name="noop") for _ in range(tool_calls)]
    return ReplayScript(default=[ScriptedTurn(tool_calls=calls), final])


async def run(sessions: int, tool_calls: int) -> list[float]:
    with bench_folder() as tmp:
        layout = make_squad(Path(tmp) / "repo")
        settings = Settings()
        provider = ReplayProvider(_script(tool_calls))
        bus = EventBus()
        invoker = ToolInvoker(layout, settings, bus)
        all_tools = ToolSet([*file_tools(layout, settings),
                             noop.bound("noop", source="builtin", file=None)])
        timings: list[float] = []
        # As in the runtime: new transcripts' files are made ahead, off the sessions' path.
        spares = SpareFiles(layout.sessions_dir)
        async with anyio.create_task_group() as background:
            background.start_soon(_keep_spares, spares)
            await _measure(sessions, layout, settings, provider, bus, invoker, all_tools,
                           timings, text_cache(), spares)
            background.cancel_scope.cancel()
        return timings


async def _keep_spares(spares: SpareFiles) -> None:
    while True:
        if len(spares) < 40:
            await anyio.to_thread.run_sync(spares.refill, 80)
        await anyio.sleep(0.1)


async def _measure(sessions: int, layout: SquadLayout, settings: Settings,
                   provider: ReplayProvider, bus: EventBus, invoker: ToolInvoker,
                   all_tools: ToolSet, timings: list[float], files: StatCache[str],
                   spares: SpareFiles) -> None:
    for n in range(sessions + 50):
        started = time.perf_counter()
        charter = read_charter(layout, "fenster")
        tools = session_toolset(all_tools, None, charter)
        info = SessionInfo(session_id=f"bench-{n}", agent="fenster", task="say done",
                           model=choose_model(None, charter, settings, "fenster",
                                              provider.default_model))
        services = SessionServices(layout, settings, provider, invoker, files=files,
                                   summaries=summary_cache())
        sink = FileSink(TranscriptWriter(layout.new_transcript(info.session_id), spares,
                                         new=True), GroupCommit(layout))
        session = AgentSession(info, services, sink=sink, events=bus, tools=Found(tools))
        outcome = await session.start("say done", None)
        elapsed = time.perf_counter() - started
        if outcome.status != "completed":
            raise SystemExit(f"session failed: {outcome.error}")
        if n == 49:
            FSYNCS[0] = 0
        if n >= 50:  # the first sessions warm caches and imports
            timings.append(elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--tool-calls", type=int, default=0,
                        help="calls of a no-op tool in the first turn (default: none)")
    args = parser.parse_args()
    os.fsync = _counted_fsync  # counts the transcript's fsyncs (the spares' too, made apart)
    timings = sorted(run_like_squadd(run, args.sessions, args.tool_calls))
    p50 = statistics.median(timings) * 1000
    p99 = timings[int(len(timings) * 0.99) - 1] * 1000
    print(f"sessions={len(timings)} mean_ms={statistics.fmean(timings) * 1000:.3f}")
    fsyncs = FSYNCS[0] / len(timings)
    print(f"session_overhead p50_ms={p50:.3f} p99_ms={p99:.3f} fsyncs={fsyncs:.2f}")


if __name__ == "__main__":
    main()
