"""Benchmark: starting a short command from a process the size of a daemon, as squadd's
process runner does it (`squadd.procs.run_group`) and as `anyio.open_process` would, on
uvloop (as `squadd serve` runs) and on asyncio's own loop.

The parent first touches `--rss-mb` megabytes (a daemon with sessions holds 80-200 MB), then
runs `git --version` `--runs` times each way, alternating; the wall time of each start to its
exit, median. A fork copies the parent's page tables, so its cost grows with the parent's
memory; a vfork does not.

Prints, as its last line:
    spawn rss_mb=… runner_uvloop_ms=… open_process_uvloop_ms=… open_process_asyncio_ms=…
        ratio=…   (open_process on uvloop ÷ the runner on uvloop)

    .venv/bin/python scripts/bench/spawn.py [--rss-mb 100] [--runs 30]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio

from squadd.procs import Command, run_group


class _Drop:
    async def write(self, data: bytes) -> None:
        return None


async def _runner(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        outcome = await run_group(Command(("git", "--version"), None, None), _Drop(),
                                  deadline=anyio.current_time() + 30)
        times.append(time.perf_counter() - started)
        assert outcome.exit_code == 0
    return times


async def _open_process(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = await anyio.run_process(["git", "--version"], start_new_session=True,
                                       stderr=subprocess.STDOUT)
        times.append(time.perf_counter() - started)
        assert done.returncode == 0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rss-mb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    held = [bytearray(1 << 20) for _ in range(args.rss_mb)]
    for block in held:  # touched, so the pages are really the process's
        block[::4096] = b"x" * len(block[::4096])
    uvloop = {"use_uvloop": True}
    figures: dict[str, list[float]] = {"runner_uvloop": [], "open_process_uvloop": [],
                                       "open_process_asyncio": []}
    for _ in range(3):  # alternating rounds
        figures["runner_uvloop"] += anyio.run(_runner, args.runs, backend_options=uvloop)
        figures["open_process_uvloop"] += anyio.run(_open_process, args.runs,
                                                    backend_options=uvloop)
        figures["open_process_asyncio"] += anyio.run(_open_process, args.runs)
    ms = {name: statistics.median(values) * 1000 for name, values in figures.items()}
    print(f"spawn rss_mb={args.rss_mb} runner_uvloop_ms={ms['runner_uvloop']:.2f} "
          f"open_process_uvloop_ms={ms['open_process_uvloop']:.2f} "
          f"open_process_asyncio_ms={ms['open_process_asyncio']:.2f} "
          f"ratio={ms['open_process_uvloop'] / ms['runner_uvloop']:.2f}")


if __name__ == "__main__":
    main()
