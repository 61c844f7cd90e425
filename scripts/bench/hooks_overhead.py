"""Benchmark: what hooks cost a tool call, through the real invocation pipeline.

The same no-op tool is called N times (each p50 over the run, per call):
- `none`: no `.squad/hooks.json` (what every squad without hooks pays: one stat);
- `unmatched`: a hooks.json whose PreToolUse hook matches another tool only;
- `one_hook`: one PreToolUse command hook (`true`) on the tool: a process per call;
- `python_hook`: one PreToolUse hook in Python that reads its JSON (Claude Code's examples).

Prints `hooks_overhead none_us=… unmatched_us=… one_hook_ms=… python_hook_ms=…` as its last
line.

    .venv/bin/python scripts/bench/hooks_overhead.py [--calls 2000] [--spawned 100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from pydantic import BaseModel

from squadd.config import Settings
from squadd.contracts.events import NullSink
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.tools.base import Tool, ToolContext, ToolOutput, ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker


class NoArgs(BaseModel):
    pass


class Noop(Tool[NoArgs]):
    name = "noop"
    description = "Do nothing"
    args_model = NoArgs

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutput:
        return "ok"


def _hooks(layout: SquadLayout, matcher: str, command: str) -> None:
    layout.hooks_json.write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]}}))


async def _p50(invoker: ToolInvoker, calls: int) -> float:
    tools = ToolSet([Noop()])
    origin = CallOrigin(session_id="bench", agent="lead")
    times: list[float] = []
    for n in range(calls):
        started = time.perf_counter()
        result = await invoker.invoke(tools, ToolCall(id=f"c{n}", name="noop", arguments={}),
                                      origin)
        times.append(time.perf_counter() - started)
        assert result.ok, result.text
    return statistics.median(times)


async def main(calls: int, spawned: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        layout = SquadLayout.at(init_squad(Path(folder)).squad_dir)
        invoker = ToolInvoker(layout, Settings(), NullSink())
        none = await _p50(invoker, calls)
        _hooks(layout, "Bash", "true")
        unmatched = await _p50(invoker, calls)
        _hooks(layout, "noop", "true")
        one = await _p50(invoker, spawned)
        script = Path(folder) / "hook.py"
        script.write_text("import json, sys\njson.load(sys.stdin)\n")
        _hooks(layout, "noop", f"{sys.executable} {script}")
        python = await _p50(invoker, spawned)
    print(f"calls={calls} spawned={spawned}")
    print(f"hooks_overhead none_us={none * 1e6:.1f} unmatched_us={unmatched * 1e6:.1f} "
          f"one_hook_ms={one * 1e3:.2f} python_hook_ms={python * 1e3:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--spawned", type=int, default=100)
    arguments = parser.parse_args()
    anyio.run(main, arguments.calls, arguments.spawned)
