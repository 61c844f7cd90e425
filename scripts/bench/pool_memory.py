"""Benchmark: memory held by a busy pool: 10,000 queued routes plus 1,000 idle sessions.

A squad's runtime first completes 1,000 routes (their sessions stay idle, holding no messages),
then admits 10,000 routes that wait in the queue behind `max_concurrent` sessions whose model
never answers. The process's resident memory is read then, with everything real: records,
queued tasks, orchestration log entries, events on the bus.
It runs with the garbage-collector settings and the event loop (uvloop) `squadd serve` uses
(`squadd.gc_tuning`, `_common.run_like_squadd`).

Prints, as its last line:
    pool_memory rss_mb=… queued=… idle=… baseline_rss_mb=…
Target: rss_mb <= 300.

    .venv/bin/python scripts/bench/pool_memory.py [--queued 10000] [--idle 1000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, make_squad, run_like_squadd, say, serve_like_squadd


def rss_mb() -> float:
    """Resident set size of this process, from /proc (no dependency needed)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def measure(root: Path, queued: int, idle: int, concurrency: int) -> tuple[float, int, int]:
    from squadd.config import Settings
    from squadd.contracts.messages import Completion
    from squadd.contracts.routes import RouteRequest
    from squadd.providers.base import CompletionRequest
    from squadd.runtime.runtime import SquadRuntime
    from squadd.state.layout import SquadLayout

    release = anyio.Event()

    class HeldModel:
        """Answers at once for the idle sessions; holds every later turn until released."""

        name = "held"
        default_model = "held"

        def __init__(self) -> None:
            self.hold = False

        async def complete(self, request: CompletionRequest) -> Completion:
            if self.hold:
                await release.wait()
            return Completion(text="done")

        async def aclose(self) -> None:
            return None

    model = HeldModel()
    settings = Settings.model_validate({"pool": {
        "max_concurrent": concurrency, "max_queued": queued, "max_idle": idle,
        "idle_timeout_s": 3600}})
    async with SquadRuntime(SquadLayout.at(root), settings, model) as runtime:
        for n in range(idle):
            result = await runtime.route(RouteRequest(target_agent="fenster", task=f"idle {n}"))
            if not result.ok:
                raise SystemExit(f"route failed: {result.message}")
        model.hold = True
        for n in range(concurrency + queued):
            result = await runtime.route(RouteRequest(
                target_agent=("fenster", "hockney", "keaton", "mcmanus")[n % 4],
                task=f"queued job {n}: " + "details " * 20, wait_for_result=False))
            if not result.ok:
                raise SystemExit(f"route {n} refused: {result.message}")
        await anyio.sleep(0.5)  # the running sessions reach their held turn
        await runtime.orchestration.flush(timeout_s=120)
        gc.collect()
        totals = runtime.pool.totals()
        measured = rss_mb()
        release.set()
    return measured, totals.queued, totals.idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--idle", type=int, default=1_000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    import squadd.runtime.runtime  # noqa: F401  (imports count in the baseline)

    serve_like_squadd()
    baseline = rss_mb()
    started = time.perf_counter()
    with bench_folder() as tmp:
        layout = make_squad(Path(tmp) / "repo")
        measured, queued, idle = run_like_squadd(measure, layout.root, args.queued, args.idle,
                                                 args.concurrency)
    say(f"seconds={time.perf_counter() - started:.1f} running={args.concurrency}")
    print(f"pool_memory rss_mb={measured:.1f} queued={queued} idle={idle} "
          f"baseline_rss_mb={baseline:.1f}")


if __name__ == "__main__":
    main()
