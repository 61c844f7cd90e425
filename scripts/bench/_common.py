"""What the pool benchmarks share: a realistic squad, percentiles, the peer frameworks' venv.

The peers (openai-agents, pydantic-ai) are not squadd dependencies: `scripts/bench/setup` puts
them in `.bench-venv/`. A benchmark imports them when it runs there, or else runs its peer part
in that venv, in a process kept up between rounds (`Peers`); when neither works it says so and
prints its own numbers only.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
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


@contextlib.asynccontextmanager
async def events_drained(runtime: Any) -> AsyncIterator[None]:
    """One subscriber reading every event `runtime`'s bus publishes while the block runs, as
    `squadd events` or the dashboard would (the route benchmarks measure with one)."""
    import anyio

    subscription = runtime.bus.subscribe(buffer=4096)

    async def drain() -> None:
        async for _ in subscription:
            pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        try:
            yield
        finally:
            subscription.close()


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
    the temp folder (`SQUADD_BENCH_DIR` is made when missing); removed when the benchmark is
    done, unless `SQUADD_BENCH_KEEP` is set.

    `report.py` sets both: every benchmark of a run keeps its files in one folder, removed
    after the last. On ext4 without a journal (the file system of the machine the figures in
    docs/benchmarks.md come from), creating a file skips over every inode of its block group
    deleted in the last minute or more, so removing one benchmark's thousands of files would
    charge the next one's file creations for it (see "File creation after deletions" in
    docs/benchmark-notes.md).
    """
    base = os.environ.get(DIR_ENV) or None
    if base is not None:
        Path(base).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
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


PEER_REPLY = "peer-reply "
"""How the peers' process marks its answers on stdout (anything else there is skipped)."""
Handler = Callable[[dict[str, Any]], dict[str, Any]]


class Peers:
    """The peer frameworks, asked for one round of runs at a time, so that a benchmark can
    alternate rounds of squadd and of the peers and compare runs made at the same moment.

    They run in this interpreter when it has them, else in `.bench-venv` in a process of their
    own that stays up between rounds (`--peers-serve`: one JSON request a line on its stdin,
    one answer a line on its stdout). `missing` says why there are none.
    """

    def __init__(self, script: Path, args: list[str], handlers: dict[str, Handler], *,
                 modules: tuple[str, ...], timeout: float = 900):
        self.handlers = handlers
        self.timeout = timeout
        self.missing: str | None = None
        self._proc: subprocess.Popen[str] | None = None
        if have(*modules):
            return
        if not BENCH_PYTHON.exists():
            self.missing = "no .bench-venv: run scripts/bench/setup to install the peers"
            return
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self._proc = subprocess.Popen(
            [str(BENCH_PYTHON), str(script), "--peers-serve", *args], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env, bufsize=1)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name="peers-reader", daemon=True).start()

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """One round: `handlers[request["run"]](request)`, here or in the peers' process."""
        if self._proc is None:
            return self.handlers[request["run"]](request)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.close()
            raise SystemExit(f"the peers' process gave no answer to {request} "
                             f"(within {self.timeout:.0f} s, or it ended)")
        reply: dict[str, Any] = json.loads(line.removeprefix(PEER_REPLY))
        return reply

    def _read(self) -> None:
        """The peers' answers, from their stdout (a thread: every wait in `ask` has a timeout);
        None when it ends."""
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(PEER_REPLY):
                self._lines.put(line)
        self._lines.put(None)

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.returncode != 0:
            say(f"! the peers' process ended with exit {proc.returncode} (its stderr is above)")

    def __enter__(self) -> Peers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_peers(handlers: dict[str, Handler]) -> None:
    """The peers' side of `Peers`: answer each request read from stdin until it ends."""
    for line in sys.stdin:
        if line.strip():
            request = json.loads(line)
            reply = handlers[request["run"]](request)
            print(PEER_REPLY + json.dumps(reply), flush=True)


@dataclass(frozen=True)
class Spread:
    """Per-round values of one figure: their median, lowest, highest, and in how many rounds
    its target was met (None: it has none)."""

    median: float
    low: float
    high: float
    met: int | None

    @classmethod
    def of(cls, values: list[float], target: float | None = None,
           better: str = "lower") -> Spread:
        kept = [v for v in values if not math.isnan(v)]
        if not kept:
            return cls(math.nan, math.nan, math.nan, None if target is None else 0)
        met = None if target is None else sum(
            1 for v in kept if (v <= target if better == "lower" else v >= target))
        return cls(statistics.median(kept), min(kept), max(kept), met)

    def fields(self, key: str) -> str:
        """`key=median key_min=… key_max=…` and, with a target, `key_rounds_met=…`, for a
        benchmark's last line."""
        met = "" if self.met is None else f" {key}_rounds_met={self.met}"
        return f"{key}={fmt(self.median)} {key}_min={fmt(self.low)} {key}_max={fmt(self.high)}{met}"


READY_TIMEOUT_S = 60.0
"""How long a process a benchmark starts may take to say it is ready."""


def wait_for_line(path: Path, text: str, name: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Return once `text` appears in the output file `path` of the process `name`; exit the
    benchmark with that output when it does not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} did not start: {path.read_text(errors='replace')}")
        time.sleep(0.05)
