"""Diagnosis: where a pool slot's time goes in `pool_throughput.py`'s load.

The same load as one round of `pool_throughput.py` (5,000 routes at once, 32 slots, a model
that takes 50 ms a turn, the garbage-collector settings and event loop of `squadd serve`),
with timestamps taken at each step of each route by wrappers around the runtime's own
methods: the slot granted (`SessionPool.take_slot` returns), the model asked and answered,
the slot given back (`SessionPool._give_back` of a session holding one: when its last turn is
over, or at its end) and the session put to rest (`SessionPool.finish`, once its end is
durable). Also timed: each session flush (`_flush`, what
waits for the records to be durable), each batch of the group commit's thread
(`JournalWriter.commit`, wall and the thread's CPU time), each garbage-collector pass, and
the loop's lag (how late a 2 ms sleep wakes). The wrappers cost time themselves: routes/s
here run below `pool_throughput.py`'s; compare the parts with each other, not with it.

Prints a table of percentiles (ms), then as its last line:
    pool_slots routes_per_s=… fraction_of_bound=… hold_p50_ms=… model_to_slot_back_p50_ms=…
        model_to_finish_p50_ms=… model_to_finish_mean_ms=… flush_p50_ms=… flush_mean_ms=…
        batch_p50_ms=… batch_mean_ms=… batch_cpu_mean_ms=… batches=… gc_ms=… gc_max_ms=…
        lag_p99_ms=…

    .venv/bin/python scripts/bench/pool_slots.py [--routes 5000] [--concurrency 32]
        [--delay-ms 50]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, make_squad, percentile, run_like_squadd, serve_like_squadd

AGENTS = ("fenster", "hockney", "keaton", "mcmanus")


class Clock:
    """What the wrappers record: per route, the moments of its steps; per kind, durations."""

    def __init__(self) -> None:
        self.steps: dict[str, dict[str, float]] = {}
        self.spans: dict[str, list[float]] = {}

    def step(self, session_id: str, name: str) -> None:
        self.steps.setdefault(session_id, {})[name] = time.perf_counter()

    def span(self, name: str, seconds: float) -> None:
        self.spans.setdefault(name, []).append(seconds)

    def between(self, first: str, last: str) -> list[float]:
        return [s[last] - s[first] for s in self.steps.values() if first in s and last in s]


def instrument(clock: Clock) -> None:
    """Wrap the runtime's methods (process-wide) so that they record into `clock`."""
    from squadd.runtime.pool import SessionPool
    from squadd.runtime.session import AgentSession
    from squadd.state.journal.writer import JournalWriter

    take_slot, finish, give_back = SessionPool.take_slot, SessionPool.finish, \
        SessionPool._give_back
    flush, commit = AgentSession._flush, JournalWriter.commit

    async def timed_take_slot(self: SessionPool, record: Any, *args: Any) -> None:
        await take_slot(self, record, *args)
        clock.step(record.session_id, "granted")

    def timed_give_back(self: SessionPool, record: Any, **kwargs: Any) -> None:
        if record.holds_slot:
            clock.step(record.session_id, "given back")
        give_back(self, record, **kwargs)

    def timed_finish(self: SessionPool, record: Any, *args: Any, **kwargs: Any) -> None:
        clock.step(record.session_id, "finished")
        finish(self, record, *args, **kwargs)

    async def timed_flush(self: AgentSession) -> None:
        started = time.perf_counter()
        await flush(self)
        clock.span("flush", time.perf_counter() - started)

    def timed_commit(self: JournalWriter, batch: Any) -> None:
        started, cpu = time.perf_counter(), time.thread_time()
        commit(self, batch)
        clock.span("batch", time.perf_counter() - started)
        clock.span("batch_cpu", time.thread_time() - cpu)

    SessionPool.take_slot = timed_take_slot  # type: ignore[method-assign,assignment]
    SessionPool.finish = timed_finish  # type: ignore[method-assign]
    SessionPool._give_back = timed_give_back  # type: ignore[method-assign]
    AgentSession._flush = timed_flush  # type: ignore[method-assign]
    JournalWriter.commit = timed_commit  # type: ignore[method-assign]

    collecting: dict[str, float] = {}

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collecting["at"] = time.perf_counter()
        elif "at" in collecting:
            clock.span(f"gc{info['generation']}", time.perf_counter() - collecting.pop("at"))

    gc.callbacks.append(on_gc)


async def run(root: Path, routes: int, concurrency: int, delay_s: float,
              clock: Clock) -> tuple[float, int]:
    """Routes per second over `routes` routes at once, and the group commit's batches."""
    from squadd.config import Settings
    from squadd.contracts.messages import Completion
    from squadd.contracts.routes import RouteRequest
    from squadd.providers.base import CompletionRequest
    from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedTurn
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.layout import SquadLayout

    class SlowModel:
        name, default_model = "slow-replay", "replay"

        def __init__(self) -> None:
            self.inner = ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")]))

        async def complete(self, request: CompletionRequest) -> Completion:
            clock.step(request.session_id, "asked")
            await anyio.sleep(delay_s)
            clock.step(request.session_id, "answered")
            return await self.inner.complete(request)

        async def aclose(self) -> None:
            return None

    settings = Settings.model_validate(
        {"pool": {"max_concurrent": concurrency, "max_queued": routes}})
    failures: list[str] = []
    async with SquadRuntime(SquadLayout.at(root), settings, SlowModel()) as runtime:
        async def one(n: int) -> None:
            result = await runtime.route(RouteRequest(target_agent=AGENTS[n % 4],
                                                      task=f"job {n}"))
            if not result.ok:
                failures.append(result.message)

        done = False

        async def lag() -> None:
            while not done:
                asked = time.perf_counter()
                await anyio.sleep(0.002)
                clock.span("lag", time.perf_counter() - asked - 0.002)

        started = time.perf_counter()
        async with anyio.create_task_group() as outer:
            outer.start_soon(lag)
            async with anyio.create_task_group() as tg:
                for n in range(routes):
                    tg.start_soon(one, n)
            elapsed = time.perf_counter() - started
            done = True
        batches = runtime.commits.batches
    if failures:
        raise SystemExit(f"{len(failures)} routes failed, e.g. {failures[0]}")
    return routes / elapsed, batches


def ms(values: list[float], fraction: float) -> float:
    """The `fraction` percentile of `values` (seconds), in ms."""
    return percentile(sorted(values), fraction) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    args = parser.parse_args()
    clock = Clock()
    serve_like_squadd()
    with bench_folder() as folder:
        layout = make_squad(folder / "repo")
        instrument(clock)
        rate, batches = run_like_squadd(run, layout.root, args.routes, args.concurrency,
                                        args.delay_ms / 1000, clock)
    rows: list[tuple[str, list[float]]] = [
        ("slot held (granted to given back)", clock.between("granted", "given back")),
        ("granted to model asked", clock.between("granted", "asked")),
        ("model asked to answered", clock.between("asked", "answered")),
        ("model answered to slot given back", clock.between("answered", "given back")),
        ("model answered to session at rest", clock.between("answered", "finished")),
        ("a session's flush", clock.spans.get("flush", [])),
        ("a commit-thread batch, wall", clock.spans.get("batch", [])),
        ("a commit-thread batch, its CPU", clock.spans.get("batch_cpu", [])),
        ("loop lag (a 2 ms sleep's lateness)", clock.spans.get("lag", [])),
    ]
    print(f"{'ms':<38} {'p50':>8} {'p90':>8} {'p99':>8} {'mean':>8} {'n':>7}")
    for name, values in rows:
        mean = statistics.fmean(values) * 1000 if values else float("nan")
        print(f"{name:<38} {ms(values, 0.5):8.2f} {ms(values, 0.9):8.2f} "
              f"{ms(values, 0.99):8.2f} {mean:8.2f} {len(values):7d}")
    collected = [v for g in ("gc0", "gc1", "gc2") for v in clock.spans.get(g, [])]
    for generation in ("gc0", "gc1", "gc2"):
        found = clock.spans.get(generation, [])
        if found:
            print(f"garbage collector, generation {generation[-1]}: {len(found)} passes, "
                  f"{sum(found) * 1000:.1f} ms in all, the longest {max(found) * 1000:.1f} ms")
    hold, after = clock.between("granted", "given back"), clock.between("answered", "finished")
    back = clock.between("answered", "given back")
    flush = clock.spans.get("flush", [])
    batch, cpu = clock.spans.get("batch", []), clock.spans.get("batch_cpu", [])
    bound = args.concurrency / (args.delay_ms / 1000)
    print(f"pool_slots routes_per_s={rate:.1f} fraction_of_bound={rate / bound:.3f} "
          f"hold_p50_ms={ms(hold, 0.5):.2f} model_to_slot_back_p50_ms={ms(back, 0.5):.2f} "
          f"model_to_finish_p50_ms={ms(after, 0.5):.2f} "
          f"model_to_finish_mean_ms={statistics.fmean(after) * 1000:.2f} "
          f"flush_p50_ms={ms(flush, 0.5):.2f} flush_mean_ms={statistics.fmean(flush) * 1000:.2f} "
          f"batch_p50_ms={ms(batch, 0.5):.2f} batch_mean_ms={statistics.fmean(batch) * 1000:.2f} "
          f"batch_cpu_mean_ms={statistics.fmean(cpu) * 1000:.2f} batches={batches} "
          f"gc_ms={sum(collected) * 1000:.1f} "
          f"gc_max_ms={max(collected, default=0.0) * 1000:.1f} "
          f"lag_p99_ms={ms(clock.spans.get('lag', []), 0.99):.2f}")


if __name__ == "__main__":
    main()
