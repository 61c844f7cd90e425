"""Diagnosis: where a sequential route's time goes in `route_overhead.py`'s load.

The same routes as `route_overhead.py` (one at a time through `SquadRuntime.route`, the replay
provider, a squad of realistic size, one bus subscriber draining events, the garbage-collector
settings and event loop of `squadd serve`), without the peers and the floor, with wrappers
around the runtime's own methods: the session's flushes (`AgentSession._flush`, what waits for
its records to be durable) and its model request (`AgentSession._ask_durably`), and on the
group commit's thread each batch (`JournalWriter.commit`), the journal's write and sync
(`JournalWriter.write`) and the appends to transcripts and orchestration-log entries. Also:
the event loop thread's CPU time and the whole process's, a route. The wrappers cost time
themselves: compare the parts with each other and with the same script on another commit,
not with `route_overhead.py`.

Prints, as its last line (µs a route, except the counts):
    route_timeline p50_us=… mean_us=… loop_cpu_us=… process_cpu_us=… flush_us=… ask_us=…
        thread_commit_us=… journal_write_sync_us=… transcript_append_us=…
        orchestration_append_us=… batches=… synced_batches=…

    .venv/bin/python scripts/bench/route_timeline.py [--routes 1500] [--warmup 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, events_drained, make_squad, run_like_squadd

Spent = defaultdict[str, float]


def instrument(spent: Spent) -> None:
    """Wrap the methods named in the module docstring, adding their wall time to `spent`."""
    from squadd.runtime import orchestration, session
    from squadd.state import transcripts
    from squadd.state.journal import writer

    def timed_async(name: str, method: Callable[..., Awaitable[Any]]) -> Any:
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return wrapper

    def timed(name: str, method: Callable[..., Any]) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - started
        return wrapper

    def counted(method: Callable[..., Any]) -> Any:
        def wrapper(self: Any, batch: Any) -> Any:
            spent["batches"] += 1
            spent["synced_batches"] += 1 if batch.sync else 0
            return method(self, batch)
        return wrapper

    agent = session.AgentSession
    agent._flush = timed_async("flush", agent._flush)
    agent._ask_durably = timed_async("ask", agent._ask_durably)
    journal = writer.JournalWriter
    journal.commit = timed("thread_commit", counted(journal.commit))
    journal.write = timed("journal_write_sync", journal.write)
    transcript = transcripts.TranscriptWriter
    transcript.append_unsynced = timed(
        "transcript_append", transcript.append_unsynced)
    entry = orchestration._EntryFile
    entry.append_unsynced = timed(
        "orchestration_append", entry.append_unsynced)


async def measure(root: Path, routes: int, warmup: int) -> dict[str, float]:
    from squadd.config import Settings
    from squadd.contracts.routes import RouteRequest
    from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedTurn
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.layout import SquadLayout

    spent: Spent = defaultdict(float)
    instrument(spent)
    provider = ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")]))
    walls: list[float] = []
    async with SquadRuntime(SquadLayout.at(root), Settings(), provider) as runtime, \
            events_drained(runtime):
        for n in range(warmup):
            await runtime.route(RouteRequest(target_agent="fenster", task=f"warm {n}"))
        spent.clear()
        loop_started, process_started = time.thread_time(), time.process_time()
        for n in range(routes):
            started = time.perf_counter()
            result = await runtime.route(RouteRequest(target_agent="fenster",
                                                      task=f"say done {n}"))
            walls.append(time.perf_counter() - started)
            if not result.ok:
                raise SystemExit(f"route failed: {result.message}")
        loop_cpu = time.thread_time() - loop_started
        process_cpu = time.process_time() - process_started
    figures = {"p50_us": statistics.median(walls) * 1e6, "mean_us": statistics.fmean(walls) * 1e6,
               "loop_cpu_us": loop_cpu / routes * 1e6,
               "process_cpu_us": process_cpu / routes * 1e6}
    for name in ("flush", "ask", "thread_commit", "journal_write_sync", "transcript_append",
                 "orchestration_append"):
        figures[f"{name}_us"] = spent[name] / routes * 1e6
    for name in ("batches", "synced_batches"):
        figures[name] = spent[name] / routes
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=1500)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    with bench_folder() as folder:
        root = make_squad(folder / "repo").root
        figures = run_like_squadd(measure, root, args.routes, args.warmup)
    print("route_timeline " + " ".join(f"{key}={value:.2f}" if value < 10 else
                                       f"{key}={value:.0f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
