"""Benchmark: the group commit alone, how many records one journal sync makes durable.

`--sessions` tasks each commit `--commits` transcript records one after another (a session's
turn waits for its record), while `--logs` orchestration-log entries go in the background, on
the event loop `squadd serve` uses. Everything is real: the files, the journal, its
`fdatasync`. Prints, as its last line:

    group_commit commits_per_s=… p50_ms=… p99_ms=… syncs=… records_per_sync=… unsynced=…
        cpu_us_per_record=… loop_us_per_sync=… commit_us_per_sync=…

`syncs` is the journal syncs the writer made (`GroupCommit.batches`), `records_per_sync` the
session records and log entries each made durable; `unsynced` the batches of log entries
written ahead of a sync while the commit thread was idle. More records a sync is better.
`cpu_us_per_record` is the process's CPU time (every thread) over the run, a record: on a
shared machine it moves far less with the load than the wall-clock figures do.
`loop_us_per_sync` and `commit_us_per_sync` are the CPU time of the event loop's thread and
of the commit thread, a journal sync: what handing a batch over and back costs each side.

    .venv/bin/python scripts/bench/group_commit.py [--sessions 64] [--commits 50] [--logs 400]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, cpu_s, fmt, make_squad, percentile, run_like_squadd


async def measure(root: Path, sessions: int, commits: int, logs: int) -> dict[str, float]:
    from squadd.state.journal import COMMIT_THREAD, GroupCommit
    from squadd.state.layout import SquadLayout
    from squadd.state.transcripts import TranscriptWriter

    layout = SquadLayout.at(root)
    writer = GroupCommit(layout)
    waits: list[float] = []

    async def session(n: int) -> None:
        transcript = TranscriptWriter(layout.transcripts_dir / f"s{n}.jsonl")
        for turn in range(commits):
            transcript.add("message", message={"role": "assistant", "content": f"turn {turn}"})
            started = time.perf_counter()
            await writer.commit(transcript)
            waits.append(time.perf_counter() - started)

    async def log_entry(n: int) -> None:
        entry = TranscriptWriter(layout.transcripts_dir / f"log{n}.jsonl")
        entry.add("message", message={"role": "user", "content": f"entry {n}"})
        [error] = await writer.commit_all([entry], background=True)
        if error is not None:
            raise error

    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        committer = next(t for t in threading.enumerate() if t.name == COMMIT_THREAD)
        loop = threading.current_thread()
        started, cpu_started = time.perf_counter(), cpu_s()
        loop_started, commit_started = thread_cpu_s(loop), thread_cpu_s(committer)
        async with anyio.create_task_group() as work:
            for n in range(sessions):
                work.start_soon(session, n)
            for n in range(logs):
                work.start_soon(log_entry, n)
        elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu_started
        loop_cpu = thread_cpu_s(loop) - loop_started
        commit_cpu = thread_cpu_s(committer) - commit_started
        writer.close()
    waits.sort()
    records = sessions * commits + logs
    return {"commits_per_s": sessions * commits / elapsed,
            "p50_ms": percentile(waits, 0.5) * 1000, "p99_ms": percentile(waits, 0.99) * 1000,
            "syncs": float(writer.batches), "records_per_sync": records / max(writer.batches, 1),
            "unsynced": float(writer.unsynced_batches), "cpu_us_per_record": cpu / records * 1e6,
            "loop_us_per_sync": loop_cpu / max(writer.batches, 1) * 1e6,
            "commit_us_per_sync": commit_cpu / max(writer.batches, 1) * 1e6}


def thread_cpu_s(thread: threading.Thread) -> float:
    """CPU time of `thread` so far (it is running)."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--logs", type=int, default=400)
    args = parser.parse_args()
    with bench_folder() as tmp:
        layout = make_squad(Path(tmp) / "repo")
        found = run_like_squadd(measure, layout.root, args.sessions, args.commits, args.logs)
    print("group_commit " + " ".join(f"{key}={fmt(value)}" for key, value in found.items()))


if __name__ == "__main__":
    main()
