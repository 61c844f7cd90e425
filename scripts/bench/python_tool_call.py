"""Benchmark: what running each Python tool call in a worker process of its own costs.

One tool file (`echo`, returning its argument) is called through the real invocation pipeline
(`ToolInvoker`) in three ways: in this process (a tool made in code: the cost of the pipeline
alone), in a worker process started ahead of the call (the default: one spare is kept), and in
a worker started for the call (no spare). Warm calls are spaced by `--gap-ms`, as a model's
turns are; `back_to_back` calls follow each other at once and so may wait for the spare's
start-up. Prints `python_tool_call inprocess_p50_ms=… warm_p50_ms=… cold_p50_ms=…
back_to_back_p50_ms=… warm_overhead_ms=…` as its last line.

    .venv/bin/python scripts/bench/python_tool_call.py [--calls 40] [--gap-ms 1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, make_squad  # the same realistic squad the other benchmarks use

from squadd import tool
from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from squadd.tools.discovery import ToolDiscoverer
from squadd.tools.invoke import CallOrigin, ToolInvoker

ECHO = '''\
from squadd import tool


@tool
def echo(text: str) -> str:
    """Say TEXT back."""
    return text
'''


@tool
def echo(text: str) -> str:
    """Say TEXT back (in this process)."""
    return text


async def _timed(invoker: ToolInvoker, tools: ToolSet, calls: int, gap_s: float) -> list[float]:
    timings = []
    for n in range(calls):
        call = ToolCall(id=f"c{n}", name="echo", arguments={"text": f"hello {n}"})
        started = time.perf_counter()
        result = await invoker.invoke(tools, call, CallOrigin(session_id="bench", agent="b"))
        timings.append(time.perf_counter() - started)
        if not result.ok:
            raise SystemExit(f"the call failed: {result.text}")
        if gap_s:
            await anyio.sleep(gap_s)
    return timings


async def run(calls: int, gap_s: float) -> dict[str, list[float]]:
    with bench_folder() as tmp:
        layout: SquadLayout = make_squad(Path(tmp) / "repo")
        layout.tools_dir.mkdir(parents=True, exist_ok=True)
        (layout.tools_dir / "echo.py").write_text(ECHO, encoding="utf-8")
        settings = Settings()
        invoker = ToolInvoker(layout, settings)
        discoverer = ToolDiscoverer()
        from_file = discoverer.discover(layout, settings).toolset()
        results = {"inprocess": await _timed(invoker, ToolSet([echo]), calls, 0.0)}
        await anyio.sleep(1.0)  # the spare discovery started is ready
        results["warm"] = await _timed(invoker, from_file, calls, gap_s)
        results["back_to_back"] = await _timed(invoker, from_file, calls, 0.0)
        discoverer.workers.close()
        discoverer.workers.keep = 0
        results["cold"] = await _timed(invoker, from_file, calls, gap_s)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--gap-ms", type=float, default=1000.0)
    args = parser.parse_args()
    results = anyio.run(run, args.calls, args.gap_ms / 1000)
    p50 = {mode: statistics.median(times) * 1000 for mode, times in results.items()}
    for mode, times in results.items():
        ordered = sorted(times)
        print(f"{mode}: calls={len(times)} p50_ms={p50[mode]:.2f} "
              f"p90_ms={ordered[int(len(ordered) * 0.9) - 1] * 1000:.2f}")
    print(f"python_tool_call inprocess_p50_ms={p50['inprocess']:.3f} "
          f"warm_p50_ms={p50['warm']:.3f} cold_p50_ms={p50['cold']:.3f} "
          f"back_to_back_p50_ms={p50['back_to_back']:.3f} "
          f"warm_overhead_ms={p50['warm'] - p50['inprocess']:.3f}")


if __name__ == "__main__":
    main()
