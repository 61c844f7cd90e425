"""What the pool benchmarks share: a realistic squad, percentiles, the peer frameworks' venv.

The peers (openai-agents, pydantic-ai) are not squadd dependencies: `scripts/bench/setup` puts
them in `.bench-venv/`. A benchmark imports them when it runs there, or else runs its peer part
in that venv as a subprocess; when neither works it says so and prints its own numbers only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from squadd.state.layout import SquadLayout

REPO = Path(__file__).resolve().parent.parent.parent
BENCH_PYTHON = REPO / ".bench-venv" / "bin" / "python"
AGENTS = ("fenster", "hockney", "keaton", "mcmanus")
T = TypeVar("T")


DIR_ENV = "SQUADD_BENCH_DIR"
"""Where benchmarks make their folders (unset: the temp folder)."""
KEEP_ENV = "SQUADD_BENCH_KEEP"
"""Set (by `report.py`): a benchmark leaves its files for the run's end to remove."""


def cpu_s() -> float:
    """This process's CPU time so far, user + system, all threads (to the µs: `os.times`
    counts whole clock ticks)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


CREATE_PROBE_FILES = 1000


def create_cost_us(folder: Path) -> float:
    """The CPU time (user + system, µs) this process spends creating one empty file in a new
    folder in `folder`, over `CREATE_PROBE_FILES` of them (left there, so as not to add
    deletions of its own). Creating a file costs about 20 µs on a file system at rest; on ext4
    without a journal it costs many times that within a minute or more of deletions nearby,
    and the figures that create files move with it."""
    probe = Path(tempfile.mkdtemp(prefix="create-probe-", dir=folder))
    started = cpu_s()
    for index in range(CREATE_PROBE_FILES):
        os.close(os.open(probe / str(index), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    return (cpu_s() - started) / CREATE_PROBE_FILES * 1e6


@contextlib.contextmanager
def bench_folder(prefix: str = "squadd-bench-") -> Iterator[Path]:
    """A new folder for one benchmark's files, in `SQUADD_BENCH_DIR` when it is set, else in
    the temp folder; removed when the benchmark is done, unless `SQUADD_BENCH_KEEP` is set.

    `report.py` sets both: every benchmark of a run keeps its files in one folder, removed
    after the last. On ext4 without a journal (the file system of the machine the figures in
    docs/benchmarks.md come from), creating a file skips over every inode of its block group
    deleted in the last minute or more, so removing one benchmark's thousands of files would
    charge the next one's file creations for it (see "File creation after deletions" in
    docs/benchmark-notes.md).
    """
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get(DIR_ENV)))
    try:
        yield folder
    finally:
        if not os.environ.get(KEEP_ENV):
            shutil.rmtree(folder, ignore_errors=True)


def make_squad(repo: Path, agents: tuple[str, ...] = AGENTS) -> SquadLayout:
    """A squad with charters, histories and a decisions.md of realistic size."""
    root = repo / ".squad"
    (root / "decisions" / "inbox").mkdir(parents=True)
    for agent in agents:
        folder = root / "agents" / agent
        folder.mkdir(parents=True)
        (folder / "charter.md").write_text(
            f"# {agent}\n\n## Identity\n- **Role:** Core developer\n\n## What I Own\n"
            + "- the runtime and its tests\n" * 40 + "\n## Model\nPreferred: auto\n",
            encoding="utf-8")
        (folder / "history.md").write_text(
            "# Project Context\n\n## Learnings\n\n"
            + "".join(f"- **[technical]** learning number {i} about the parser\n"
                      for i in range(150)), encoding="utf-8")
    (root / "decisions.md").write_text(
        "# Decisions\n\n" + "".join(
            f"### 2026-11-{1 + i % 28:02d}: Decision {i}\n\n**By:** fenster\n"
            f"**Category:** architecture\n\nWe decided thing {i} because of reasons.\n\n"
            for i in range(120)), encoding="utf-8")
    (root / "routing.md").write_text(
        "# Routing\n\n| Work Type | Route To | Examples |\n|---|---|---|\n"
        "| Backend | fenster | add an endpoint |\n", encoding="utf-8")
    return SquadLayout.at(root)


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return math.nan
    index = min(len(sorted_values) - 1, max(0, math.ceil(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def have(*modules: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in modules)


def run_in_bench_venv(script: Path, args: list[str], *, timeout: float = 900) -> dict[str, Any]:
    """Run `script --peers-only ...` in .bench-venv and return the JSON of its last line."""
    if not BENCH_PYTHON.exists():
        return {"missing": "no .bench-venv: run scripts/bench/setup to install the peers"}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([str(BENCH_PYTHON), str(script), "--peers-only", *args],
                          capture_output=True, text=True, timeout=timeout, env=env, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"missing": f"the peer run failed (exit {done.returncode}): "
                           f"{done.stderr.strip()[-500:]}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def fmt(value: float) -> str:
    return "nan" if math.isnan(value) else f"{value:.3f}"


def say(message: str) -> None:
    print(message, file=sys.stderr if message.startswith("!") else sys.stdout, flush=True)


def serve_like_squadd() -> None:
    """Give this process the garbage-collector settings `squadd serve` runs with
    (`squadd.gc_tuning`): every framework a benchmark compares runs with them."""
    from squadd.gc_tuning import tune_for_serving

    tune_for_serving()


def run_like_squadd(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`func(*args)` on the event loop `squadd serve` runs on (`squadd.serving.run_serving`):
    every framework a benchmark compares runs on it too."""
    from squadd.serving import run_serving

    return run_serving(func, *args)
