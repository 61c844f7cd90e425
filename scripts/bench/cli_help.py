"""Benchmark: `squadd X --help` for every command X against `squadd --version`, fresh processes.

Each round runs `python -m squadd --version` once and `python -m squadd X --help` once for
every command, in a shuffled order, each a new process timed from fork to exit; the median of
`--runs` rounds is taken for each. squadd's bytecode is compiled first, as a wheel install has
it. Prints one line per command (median ms and the ratio to `--version`), then as its last line:

    cli_help version_ms=… worst=COMMAND worst_ratio=… over_1.5=N

Target: every ratio <= 1.5 (a command's help costs no more than half again the bare start).

    .venv/bin/python scripts/bench/cli_help.py [--runs 15]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import squadd
from squadd.cli.app import COMMANDS

TARGET = 1.5


def timed(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "squadd", *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    package = Path(squadd.__file__).resolve().parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True,
                   stdout=subprocess.DEVNULL)
    calls = {"--version": ["--version"]} | {name: [name, "--help"] for name in COMMANDS}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.runs):
        order = list(calls)
        random.shuffle(order)
        for name in order:
            times[name].append(timed(calls[name]))
    version = statistics.median(times.pop("--version"))
    ratios = {name: statistics.median(found) / version for name, found in times.items()}
    for name, ratio in sorted(ratios.items(), key=lambda item: -item[1]):
        mark = "" if ratio <= TARGET else "  over"
        print(f"{name:12s} {statistics.median(times[name]):7.1f} ms  {ratio:5.2f}x{mark}")
    worst = max(ratios, key=lambda name: ratios[name])
    over = sum(ratio > TARGET for ratio in ratios.values())
    print(f"cli_help version_ms={version:.1f} worst={worst} worst_ratio={ratios[worst]:.2f} "
          f"over_1.5={over}")


if __name__ == "__main__":
    main()
