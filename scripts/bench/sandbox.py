"""Benchmark: what the sandbox adds to a `bash` call, through the whole invocation pipeline.

The same call (`bash -c true` in a git repository with a squad) runs unsandboxed (no policy: the
process-group runner alone) and under each mechanism this machine has (bwrap; Landlock; `off`,
which still puts the call in its pids cgroup), the variants interleaved call by call so a busy
machine slows them alike. Prints each p50, and as its last line `sandbox unsandboxed_p50_ms=…
bwrap_p50_ms=… added_p50_ms=… ratio=… landlock_p50_ms=… landlock_added_ms=… off_p50_ms=…`
(`added_p50_ms` and `ratio`: bwrap against unsandboxed; a mechanism missing here is left out).

    .venv/bin/python scripts/bench/sandbox.py [--repeat 60]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder

from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.errors import SandboxError
from squadd.sandbox import mechanism_for
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from squadd.tools.builtin import bash as bash_module
from squadd.tools.builtin import workspace_tools
from squadd.tools.invoke import CallOrigin, ToolInvoker

COMMAND = "true"


def make_repo(repo: Path) -> SquadLayout:
    (repo / ".squad" / "decisions" / "inbox").mkdir(parents=True)
    (repo / "app.py").write_text("print('app')\n", encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return SquadLayout.at(repo / ".squad")


class Variant:
    def __init__(self, layout: SquadLayout, mode: str | None):
        self.mode = mode
        settings = Settings.model_validate({
            "sandbox": {"mode": mode or "off"},
            "tools": {"approvals": {"bash": "allow"}}})
        self.invoker = ToolInvoker(layout, settings)
        self.tools = ToolSet(workspace_tools(settings))
        self.samples: list[float] = []

    async def once(self, index: int) -> None:
        call = ToolCall(id=f"{self.mode}-{index}", name="bash", arguments={"command": COMMAND})
        original = bash_module.call_policy
        if self.mode is None:  # unsandboxed: the tool runs its command with no policy
            bash_module.call_policy = lambda *args, **kwargs: None  # type: ignore[assignment]
        try:
            started = time.perf_counter()
            result = await self.invoker.invoke(self.tools, call,
                                               CallOrigin(session_id="bench", agent="b"))
            self.samples.append(time.perf_counter() - started)
        finally:
            bash_module.call_policy = original
        assert result.ok, result.text
        sandbox = result.details.get("sandbox")
        assert (sandbox is None) == (self.mode is None), result.details
        if sandbox is not None:
            assert sandbox["mechanism"] == self.mode, sandbox

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.samples) * 1000


def available(mode: str) -> bool:
    try:
        return mechanism_for(mode) == mode  # type: ignore[arg-type]
    except SandboxError:
        return False


async def main(repeat: int) -> None:
    with bench_folder() as folder:
        layout = make_repo(Path(folder) / "repo")
        variants = [Variant(layout, None)] + [
            Variant(layout, mode) for mode in ("bwrap", "landlock", "off") if available(mode)]
        for variant in variants:  # warm up: first probes, imports, page cache
            await variant.once(-1)
            variant.samples.clear()
        for index in range(repeat):
            for variant in variants:
                await variant.once(index)
        base = variants[0].p50_ms
        figures = {"unsandboxed_p50_ms": base}
        for variant in variants[1:]:
            name = variant.mode
            print(f"{name}: p50 {variant.p50_ms:.2f} ms, +{variant.p50_ms - base:.2f} ms, "
                  f"{variant.p50_ms / base:.2f}x unsandboxed ({base:.2f} ms)")
            figures[f"{name}_p50_ms"] = variant.p50_ms
            if name == "bwrap":
                figures["added_p50_ms"] = variant.p50_ms - base
                figures["ratio"] = variant.p50_ms / base
            else:
                figures[f"{name}_added_ms"] = variant.p50_ms - base
        print("sandbox " + " ".join(f"{key}={value:.2f}" for key, value in figures.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=60)
    args = parser.parse_args()
    anyio.run(main, args.repeat)
