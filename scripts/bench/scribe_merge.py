"""Benchmark: the Scribe's merge, on real files with real fsyncs.

1. Bulk: 10,000 inbox files merged into a 1 MB decisions.md in one pass (target: under 2 s).
2. Cost follows new work: 100 new inbox files merged into a 20 MB decisions.md and into a 100 KB
   one, the index already built by earlier merges (target: times within 1.5x of each other).

The archive gate is set out of reach so that only the merge is timed. Prints `bulk_s=…` and, as
its last line, `scribe_merge files_per_s=… big_vs_small_ratio=…`.

    .venv/bin/python scripts/bench/scribe_merge.py [--files 10000] [--repeat 9]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder

from squadd.config import ScribeSettings, Settings
from squadd.scribe import merge_inbox
from squadd.state.decisions import format_entry, write_inbox_entry
from squadd.state.layout import SquadLayout

SETTINGS = Settings(scribe=ScribeSettings(archive_soft_bytes=10**15, archive_hard_bytes=10**15))
BODY = ("We decided this after comparing the options on cost, speed and how well the team "
        "knows them; the runner-up stays documented in the design notes. ") * 2


def make_squad(repo: Path, decisions_bytes: int) -> SquadLayout:
    """A squad dir whose decisions.md holds about `decisions_bytes` of realistic entries."""
    root = repo / ".squad"
    (root / "decisions" / "inbox").mkdir(parents=True)
    parts = ["# Decisions\n\n"]
    size, i = 0, 0
    while size < decisions_bytes:
        day = dt.date(2024, 1, 1) + dt.timedelta(days=i % 700)
        entry = format_entry(title=f"Existing decision {i}", body=f"{BODY} (#{i})",
                             agent=f"agent{i % 7}", category="architecture", date=day)
        parts.append(entry + "\n")
        size += len(entry) + 1
        i += 1
    (root / "decisions.md").write_text("".join(parts), encoding="utf-8")
    return SquadLayout.at(root)


def fill_inbox(layout: SquadLayout, count: int, tag: str) -> None:
    for i in range(count):
        write_inbox_entry(layout, agent=f"agent{i % 7}", title=f"{tag} decision {i}",
                          body=f"{BODY} ({tag} {i})", category="process")


def timed_merge(layout: SquadLayout, expected: int) -> float:
    os.sync()  # the setup's own writes must not be flushed on the merge's time
    started = time.perf_counter()
    report = merge_inbox(layout, SETTINGS)
    elapsed = time.perf_counter() - started
    if report.merged != expected or report.rejected:
        raise SystemExit(f"merge went wrong: merged {report.merged} of {expected}, "
                         f"rejected {len(report.rejected)}")
    return elapsed


def bulk(files: int) -> float:
    with bench_folder() as tmp:
        layout = make_squad(Path(tmp) / "repo", 1024 * 1024)
        fill_inbox(layout, files, "bulk")
        return timed_merge(layout, files)


def hundred_new(repeat: int) -> tuple[float, float]:
    """Median times to merge 100 new files into a 100 KB and into a 20 MB decisions.md.

    The rounds alternate between the two, so that whatever else the machine is doing weighs on
    both alike; each index is warm from an earlier merge, as it is in a running squad.
    """
    with bench_folder() as tmp:
        layouts = [make_squad(Path(tmp) / "small", 100 * 1024),
                   make_squad(Path(tmp) / "big", 20 * 1024 * 1024)]
        for layout in layouts:
            fill_inbox(layout, 1, "warm-up")
            timed_merge(layout, 1)  # builds the index, as any earlier merge would have
        times: list[list[float]] = [[], []]
        for round_ in range(repeat):
            for which, layout in enumerate(layouts):
                fill_inbox(layout, 100, f"round {round_}")
                times[which].append(timed_merge(layout, 100))
        return statistics.median(times[0]), statistics.median(times[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    bulk_s = bulk(args.files)
    print(f"bulk_s={bulk_s:.3f} ({args.files} files into a 1 MB decisions.md)")
    small, big = hundred_new(args.repeat)
    print(f"hundred_small_ms={small * 1000:.2f} hundred_big_ms={big * 1000:.2f}")
    print(f"scribe_merge files_per_s={args.files / bulk_s:.0f} "
          f"big_vs_small_ratio={big / small:.2f}")


if __name__ == "__main__":
    main()
