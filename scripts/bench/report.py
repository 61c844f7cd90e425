"""Run every benchmark under scripts/bench/ and rewrite docs/benchmarks.md from that one run.

Each benchmark prints its result as a last line of `name key=value ...`; this script reads those
lines, compares each figure with its target and with the peers measured in the same run, and
writes a table. A missed target is said plainly. Run it through `scripts/bench/all`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DIR_ENV, KEEP_ENV, create_cost_us

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "bench"


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    target: float
    better: str
    """"lower" or "higher": which way the figure improves."""
    unit: str = ""
    peers: tuple[tuple[str, str], ...] = ()
    """(key in the same line, label) of peers measured in the same run."""


@dataclass(frozen=True)
class Bench:
    script: str
    args: tuple[str, ...]
    figures: tuple[Figure, ...]


BENCHES = (
    Bench("session_overhead.py", (), (
        Figure("p50_ms", "one-turn session, in-process (p50)", 1.0, "lower", "ms"),
    )),
    Bench("route_overhead.py", (), (
        Figure("p50_ms", "one route through the pool (p50)", 0.9, "lower", "ms",
               (("openai_agents_p50_ms", "openai-agents"), ("pydantic_ai_p50_ms", "pydantic-ai"),
                ("openai_agents_sqlite_p50_ms", "openai-agents + SQLiteSession"))),
        Figure("ratio_vs_best_peer", "route p50 / best non-durable peer p50 (median of "
               "alternating rounds)", 1.0, "lower"),
        Figure("ratio_vs_durable_peer", "route p50 / durable peer p50 (openai-agents + "
               "SQLiteSession on a file; median of alternating rounds)", 0.2, "lower"),
        Figure("floor_ratio", "route p50 / plain-Python floor p50 (median of rounds)", 1.6,
               "lower"),
    )),
    Bench("pool_throughput.py", (), (
        Figure("fraction_of_bound", "pool throughput / bound (5,000 routes, 32 slots, 50 ms; "
               "median of rounds)",
               0.85, "higher", "", (("pydantic_ai_fraction_of_bound", "pydantic-ai"),)),
        Figure("cpu_ms_per_route", "CPU per route in the pool run (user + system)", 1.4,
               "lower", "ms", (("pydantic_ai_cpu_ms_per_route", "pydantic-ai"),)),
    )),
    Bench("pool_memory.py", (), (
        Figure("rss_mb", "RSS with 10,000 queued + 1,000 idle", 300.0, "lower", "MB"),
    )),
    Bench("scribe_merge.py", (), (
        Figure("bulk_s", "merge 10,000 inbox files into a 1 MB decisions.md", 2.0, "lower", "s"),
        Figure("big_vs_small_ratio", "100 files into 20 MB vs 100 KB decisions.md", 1.5,
               "lower"),
    )),
    Bench("health_under_load.py", (), (
        Figure("p95_ms", "`/v1/health` while 500 routes fill the pool (p95)", 100.0, "lower",
               "ms"),
    )),
    Bench("python_tool_call.py", (), (
        Figure("warm_p50_ms", "Python tool call in its own worker process, spare ready (p50)",
               50.0, "lower", "ms", (("inprocess_p50_ms", "same tool in-process"),)),
    )),
    Bench("workspace_tools.py", (), (
        Figure("grep_rg_ms", "grep over 2,000 files (16 MB) with rg (p50)", 1000.0, "lower", "ms",
               (("grep_python_ms", "Python engine"),)),
        Figure("edit_p50_ms", "edit one line, atomic write with fsyncs (p50)", 50.0, "lower",
               "ms"),
    )),
    Bench("cli_latency.py", (), (
        Figure("p50_ms", "`squadd status` wall time against a daemon (p50)", 150.0, "lower",
               "ms", (("python_p50_ms", "`python -c pass`"),)),
        Figure("ratio_vs_python", "`squadd status` p50 / `python -c pass` p50", 3.0, "lower"),
    )),
    Bench("sandbox.py", (), (
        Figure("added_p50_ms", "sandbox (bwrap) added to a `bash` call (p50)", 15.0, "lower",
               "ms", (("unsandboxed_p50_ms", "same call unsandboxed"),)),
    )),
    Bench("workspace.py", (), (
        Figure("create_p50_ms", "worktree session, 10,000-file repo (p50)", 150.0, "lower",
               "ms", (("git_create_p50_ms", "git worktree add"),)),
        Figure("land_p50_ms", "land a one-file change, 10,000-file repo (p50)", 300.0,
               "lower", "ms", (("git_land_p50_ms", "git rebase + merge --ff-only"),)),
        Figure("cli_land_ratio", "`squadd land` with a daemon, less `squadd --version`, / "
               "git rebase + merge --ff-only (p50s)", 3.0, "lower"),
    )),
)


def parse_line(line: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for part in line.split()[1:]:
        key, _, raw = part.partition("=")
        try:
            values[key] = float(raw)
        except ValueError:
            continue
    return values


def run(bench: Bench, python: str, folder: Path) -> tuple[dict[str, float], str, float]:
    """Run one benchmark with its files in `folder`, left there for the run's end (see
    `_common.bench_folder`): its figures, its last line, and how long it took."""
    started = time.monotonic()
    env = {**os.environ, DIR_ENV: str(folder), KEEP_ENV: "1"}
    result = subprocess.run([python, str(BENCH / bench.script), *bench.args], cwd=ROOT,
                            capture_output=True, text=True, timeout=1800,
                            stdin=subprocess.DEVNULL, env=env)
    elapsed = time.monotonic() - started
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    name = bench.script.removesuffix(".py")
    wanted = [line for line in lines if line.startswith(name + " ")]
    if result.returncode != 0 or not wanted:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        return {}, f"failed (exit {result.returncode}): " + " | ".join(tail), elapsed
    values = parse_line(wanted[-1])
    # Some benchmarks print supporting figures on earlier lines (e.g. `bulk_s=`).
    for line in lines:
        for key, value in parse_line("x " + line).items():
            values.setdefault(key, value)
    return values, wanted[-1], elapsed


def verdict(figure: Figure, value: float) -> str:
    met = value <= figure.target if figure.better == "lower" else value >= figure.target
    return "met" if met else "**MISSED**"


def readable(value: float) -> str:
    """A figure as the table shows it (three significant digits); the benchmarks' last lines
    use `_common.fmt`."""
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def files_where() -> str:
    """Where the benchmarks' files lived, and that folder's file system (the figures that
    write files depend on it)."""
    folder = os.environ.get(DIR_ENV)
    path = os.path.realpath(folder or tempfile.gettempdir())
    kind, best = "unknown", ""
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                point = fields[1]
                if (path == point or path.startswith(point.rstrip("/") + "/")) \
                        and len(point) >= len(best):
                    kind, best = fields[2], point
    except OSError:
        pass
    where = "`SQUADD_BENCH_DIR`" if folder else "the default temp folder"
    return f"Their files lived in {where}, on {kind}."


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text()
                          .splitlines() if line.startswith("MemTotal")))
        memory = f"{mem_kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "unknown memory"
    return (f"{os.cpu_count()} cores ({cpu}), {memory}, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def run_one(bench: Bench, python: str, folder: Path, rows: list[str],
            raw: list[str]) -> list[str]:
    """Run `bench`, add its table rows and raw line; the labels of the targets it missed."""
    missed: list[str] = []
    print(f"running {bench.script} ...", flush=True)
    values, line, elapsed = run(bench, python, folder)
    raw.append(f"- `{bench.script}` ({elapsed:.0f} s): `{line}`")
    print(f"  {line}", flush=True)
    for figure in bench.figures:
        if figure.key not in values:
            rows.append(f"| {figure.label} | not measured | {figure.target:g} {figure.unit} "
                        "| | | **MISSED** (no figure) |")
            missed.append(figure.label)
            continue
        value = values[figure.key]
        peers = []
        ratios = []
        for key, label in figure.peers:
            if key in values and values[key] > 0:
                peers.append(f"{label} {readable(values[key])} {figure.unit}".strip())
                ratios.append(f"{readable(value / values[key])}× {label}")
            else:
                peers.append(f"{label}: not installed (run scripts/bench/setup)")
        mark = verdict(figure, value)
        if mark != "met":
            missed.append(figure.label)
        met_in = values.get(f"{figure.key}_rounds_met")
        if met_in is not None and "rounds" in values:  # the median of alternating rounds
            mark += f" (in {met_in:.0f} of {values['rounds']:.0f} rounds)"
        op = "≤" if figure.better == "lower" else "≥"
        rows.append(f"| {figure.label} | {readable(value)} {figure.unit} | {op} {figure.target:g} "
                    f"{figure.unit} | {'; '.join(peers)} | {'; '.join(ratios)} | {mark} |")
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--only", nargs="*", help="run only these benchmark scripts")
    args = parser.parse_args()
    bench_python = ROOT / ".bench-venv" / "bin" / "python"
    python = str(bench_python) if bench_python.exists() else sys.executable
    rows: list[str] = []
    raw: list[str] = []
    missed: list[str] = []
    run_folder = Path(tempfile.mkdtemp(prefix="squadd-bench-run-",
                                       dir=os.environ.get(DIR_ENV)))
    try:
        create_before = create_cost_us(run_folder)
        print(f"creating a file costs {create_before:.0f} µs of CPU here now", flush=True)
        for bench in BENCHES:
            if args.only and bench.script.removesuffix(".py") not in args.only \
                    and bench.script not in args.only:
                continue
            missed += run_one(bench, python, run_folder, rows, raw)
        create_after = create_cost_us(run_folder)
    finally:
        shutil.rmtree(run_folder, ignore_errors=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks",
        "",
        f"Measured {stamp} on {machine()}, by one run of:",
        "",
        "```",
        "scripts/bench/setup   # once: the peers' bench venv (.bench-venv/)",
        "scripts/bench/all     # runs every benchmark and rewrites this file",
        "```",
        "",
        files_where(),
        f"Creating an empty file there cost {create_before:.0f} µs of CPU before the first "
        f"benchmark and {create_after:.0f} µs after the last (`create_cost_us`: it moves "
        "the figures that create files; see \"File creation after deletions\" below). Each "
        "benchmark's files stay until the run ends, so none pays for another's removal.",
        "",
        "| figure | measured | target | peers, same run | ratio | verdict |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        ("Every target was met." if not missed else
         "Targets missed in this run: " + "; ".join(missed) + "."),
        "",
        "## Raw last lines",
        "",
        *raw,
        "",
    ]
    notes = ROOT / "docs" / "benchmark-notes.md"
    if notes.exists():  # the hand-written analysis of the figures follows the generated table
        body = notes.read_text(encoding="utf-8").split("\n", 1)[1].lstrip("\n")
        body = "\n".join(line for line in body.splitlines()
                         if "copies this file below" not in line)
        lines += ["## Analysis", "", body.replace("\n## ", "\n### ").lstrip(), ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines), encoding="utf-8")
    shown = args.output.resolve()
    print(f"wrote {shown.relative_to(ROOT) if shown.is_relative_to(ROOT) else shown}")


if __name__ == "__main__":
    main()
