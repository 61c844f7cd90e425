"""Benchmark: the workspace tools through the whole invocation pipeline, on real files.

A git repository of 2,000 source files (200 lines each, about 16 MB) is searched by `grep` with
`rg` and with the Python engine (same results, checked), then `read` pages a file and `edit`
replaces a line (atomic write with fsyncs). Prints p50s, and as its last line
`workspace_tools grep_rg_ms=… grep_python_ms=… read_p50_ms=… edit_p50_ms=…` (grep_rg_ms is
absent when rg is not on PATH).

    .venv/bin/python scripts/bench/workspace_tools.py [--files 2000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder

from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.invoke import CallOrigin, ToolInvoker


def make_repo(repo: Path, files: int) -> SquadLayout:
    (repo / ".squad" / "decisions" / "inbox").mkdir(parents=True)
    for n in range(files):
        folder = repo / "src" / f"pkg{n % 40}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"def function_{n}_{i}(value):  # line {i}\n    return value * {i}\n"
                 for i in range(100)]
        if n % 100 == 0:
            lines.append("# FIXME: the needle is here\n")
        (folder / f"module_{n}.py").write_text("".join(lines), encoding="utf-8")
    (repo / ".gitignore").write_text("build/\n", encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return SquadLayout.at(repo / ".squad")


async def timed(invoker: ToolInvoker, tools: ToolSet, name: str, repeat: int,
                arguments: Any) -> tuple[float, ToolResult]:
    samples: list[float] = []
    result: ToolResult | None = None
    for index in range(repeat):
        call = ToolCall(id=f"{name}-{index}", name=name, arguments=arguments(index))
        started = time.perf_counter()
        result = await invoker.invoke(tools, call, CallOrigin(session_id="bench", agent="b"))
        samples.append(time.perf_counter() - started)
        assert result.ok, result.text
    assert result is not None
    return statistics.median(samples) * 1000, result


async def main(files: int, repeat: int) -> None:
    with bench_folder() as folder:
        layout = make_repo(Path(folder) / "repo", files)
        figures: dict[str, float] = {}
        texts: dict[str, str] = {}
        for engine in ("rg", "python"):
            if engine == "rg" and shutil.which("rg") is None:
                print("rg is not on PATH: grep_rg_ms not measured")
                continue
            settings = Settings.model_validate({"workspace_tools": {"grep": engine}})
            invoker = ToolInvoker(layout, settings)
            tools = ToolSet(workspace_tools(settings))
            ms, result = await timed(invoker, tools, "grep", repeat,
                                     lambda i: {"pattern": r"FIXME: the \w+ is here"})
            figures[f"grep_{engine}_ms"] = ms
            texts[engine] = result.text
            print(f"grep over {files} files with {engine}: p50 {ms:.1f} ms "
                  f"({result.details['matches']} matches)")
        if len(texts) == 2:
            assert texts["rg"] == texts["python"], "rg and Python disagree"
        settings = Settings()
        invoker = ToolInvoker(layout, settings)
        tools = ToolSet(workspace_tools(settings))
        figures["read_p50_ms"], _ = await timed(
            invoker, tools, "read", repeat,
            lambda i: {"path": "src/pkg1/module_1.py", "offset": 50, "limit": 100})
        figures["edit_p50_ms"], _ = await timed(
            invoker, tools, "edit", repeat,
            lambda i: {"path": "src/pkg2/module_2.py", "old": f"return value * {i}\n",
                       "new": f"return value * {i} + 0\n"})
        print("workspace_tools " + " ".join(f"{k}={v:.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    anyio.run(main, options.files, options.repeat)
