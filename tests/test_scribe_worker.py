"""The Scribe worker: merges on inbox changes, debounces, polls when watching fails, never dies."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
import structlog
import structlog.testing

from squadd.config import ScribeSettings, Settings
from squadd.contracts.events import BaseEvent, ScribeMerged, ScribeRejected
from squadd.scribe import worker as scribe_worker
from squadd.scribe.worker import run_scribe_worker
from squadd.state.decisions import parse_decisions, write_inbox_entry
from squadd.state.layout import SquadLayout
from tests._helpers import run_together

FAST = Settings(scribe=ScribeSettings(debounce_ms=100, poll_interval_s=0.2))
STOP_BOUND_S = 30.0


class ListSink:
    """The worker's events, kept; `until` waits on them (the worker publishes on the loop)."""

    def __init__(self) -> None:
        self.events: list[BaseEvent] = []
        self._published = anyio.Event()

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)
        self._published.set()

    async def next_event(self) -> None:
        """Return once the worker publishes its next event."""
        self._published = anyio.Event()
        await self._published.wait()

    def merged(self) -> int:
        return sum(e.merged for e in self.events if isinstance(e, ScribeMerged))


@asynccontextmanager
async def worker(layout: SquadLayout, settings: Settings = FAST) -> AsyncIterator[ListSink]:
    """A running worker, ready (watching, its first pass done) when the block starts."""
    sink = ListSink()
    stop = anyio.Event()
    stopped = anyio.Event()

    async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        await run_scribe_worker(layout, settings, sink, stop=stop, task_status=task_status)
        stopped.set()

    async with anyio.create_task_group() as group:
        await group.start(run)
        try:
            yield sink
        finally:
            stop.set()
            # It must stop once told to, not only when cancelled: a bounded wait for it.
            with anyio.fail_after(STOP_BOUND_S):
                await stopped.wait()


async def until(condition: Callable[[], bool], sink: ListSink, *, within: float = 20.0) -> None:
    """Wait until `condition` holds: checked now, then after each event the worker publishes.
    What the conditions read (decisions.md, the inbox, the events) changes only in a pass that
    merges or rejects something, and such a pass publishes its events once it is done."""
    with anyio.fail_after(within):
        while not condition():
            await sink.next_event()


async def until_logged(logged: list[dict[str, Any]], event: str, *, within: float = 20.0) -> None:
    """Wait until `event` is logged: a pass that fails publishes nothing, only its log says so
    (read every 20 ms, bounded)."""
    with anyio.fail_after(within):
        while not any(e["event"] == event for e in logged):  # noqa: ASYNC110 - a log line
            await anyio.sleep(0.02)


def titles(layout: SquadLayout) -> Counter[str]:
    """Titles in decisions.md and decisions-archive.md together (the archive gate may run)."""
    return Counter(e.title for path in (layout.decisions_md, layout.decisions_archive)
                   for e in parse_decisions(path).entries)


def inbox_left(layout: SquadLayout) -> list[str]:
    return [p.name for p in layout.inbox_dir.iterdir() if not p.name.startswith(".")]


async def test_a_decision_written_while_the_worker_runs_is_merged(squad: SquadLayout) -> None:
    async with worker(squad) as sink:
        write_inbox_entry(squad, agent="lead", title="Watched", body="Seen by the watcher.")
        await until(lambda: titles(squad)["Watched"] == 1, sink)
        await until(lambda: sink.merged() == 1, sink)
    assert inbox_left(squad) == []


async def test_files_left_before_the_start_are_merged_at_once(squad: SquadLayout) -> None:
    write_inbox_entry(squad, agent="lead", title="Waiting", body="Written before the worker.")
    async with worker(squad) as sink:
        await until(lambda: titles(squad)["Waiting"] == 1, sink)


async def test_a_burst_of_files_is_merged_in_one_pass(squad: SquadLayout) -> None:
    # The five files land within the debounce window (no await between them), so one pass
    # takes them all, however slow this machine is.
    settings = Settings(scribe=ScribeSettings(debounce_ms=2000, poll_interval_s=5))
    async with worker(squad, settings) as sink:
        for i in range(5):
            text = f"### 2025-01-01: Burst {i}\n\n**By:** lead\n\nb\n"
            (squad.inbox_dir / f"lead-burst-{i}.md").write_text(text)
        await until(lambda: sink.merged() == 5, sink)
        merges = [e for e in sink.events if isinstance(e, ScribeMerged)]
    assert len(merges) == 1 and merges[0].merged == 5


async def test_when_watching_fails_the_worker_polls(
    squad: SquadLayout, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_awatch(*args: Any, **kwargs: Any) -> Any:
        raise OSError(28, "inotify watch limit reached")

    monkeypatch.setattr(scribe_worker.watchfiles, "awatch", broken_awatch)
    async with worker(squad) as sink:
        write_inbox_entry(squad, agent="lead", title="Polled", body="Found by a scan.")
        await until(lambda: titles(squad)["Polled"] == 1, sink)


async def test_a_bad_file_or_a_failing_pass_does_not_stop_the_worker(
    squad: SquadLayout,
) -> None:
    squad.decisions_md.unlink()
    squad.decisions_md.mkdir()  # every pass fails until this is fixed
    with structlog.testing.capture_logs() as logged:
        async with worker(squad) as sink:
            (squad.inbox_dir / "lead-binary.md").write_bytes(b"\x00\x01")
            write_inbox_entry(squad, agent="lead", title="Survivor", body="Still merged.")
            await until_logged(logged, "scribe.pass_failed")
            squad.decisions_md.rmdir()
            await until(lambda: squad.decisions_md.is_file() and titles(squad)["Survivor"] == 1,
                        sink)
            await until(lambda: any(isinstance(e, ScribeRejected) for e in sink.events), sink)
    assert (squad.rejected_dir / "lead-binary.md").exists()


@pytest.mark.slow
async def test_twenty_writer_processes_and_the_worker_merge_each_decision_exactly_once(
    squad: SquadLayout, tmp_path: Path,
) -> None:
    writers, each = 20, 50
    code = f"""
import random
from pathlib import Path
from squadd.state.decisions import write_inbox_entry
from squadd.state.layout import SquadLayout
layout = SquadLayout.at(Path({str(squad.root)!r}))
rng = random.Random(INDEX)
for i in range({each}):
    write_inbox_entry(layout, agent=f"w{{INDEX}}", title=f"W{{INDEX}} decision {{i}}",
                      body=f"Writer {{INDEX}} says {{i}}.")
    time.sleep(rng.random() * 0.004)
"""
    async with worker(squad) as sink:
        results = await anyio.to_thread.run_sync(
            lambda: run_together(code, writers, tmp_path / "barrier"))
        assert [r.stderr for r in results if r.returncode != 0] == []
        expected = {f"W{w} decision {i}" for w in range(writers) for i in range(each)}
        await until(lambda: not inbox_left(squad) and len(
            expected & set(titles(squad))) == len(expected), sink, within=60)
    counts = titles(squad)
    assert [t for t in expected if counts[t] != 1] == []
    assert sink.merged() == writers * each
