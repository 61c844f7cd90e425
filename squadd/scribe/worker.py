"""The Scribe worker: runs a Scribe pass whenever the decisions inbox changes.

It watches the inbox with watchfiles (falling back to polling when watching fails), waits for
`scribe.debounce_ms` of quiet, and runs each pass in a worker thread so the event loop never
blocks. A failing pass is logged (in full the first time, in one line while the same failure
repeats) and retried after a wait that doubles with each failure in a row, up to
`scribe.max_backoff_s`; the worker itself only stops when told to. The worker's `ScribeMemory`
keeps a bad file from being reported on every pass until it changes. Started with
`TaskGroup.start`, it reports ready once the inbox is watched and the pass every start makes
is done.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import anyio
import anyio.abc
import structlog
import watchfiles

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.events import BaseEvent, EventSink
from squadd.scribe import ScribeMemory, ScribeReport, merge_inbox
from squadd.state.inbox import scan_inbox
from squadd.state.layout import SquadLayout
from squadd.telemetry.genai import SQUAD_NAME

log = structlog.get_logger("squadd.scribe")

MAX_DEBOUNCE_WAITS = 10
"""A steady stream of changes delays a pass by at most this many debounce periods."""
WATCH_TIMEOUT_MS = 1000
"""How long the watcher thread blocks at a time: bounds how long a cancelled worker lingers."""


class _ListSink:
    """Collects the events of a pass run in a thread, to publish them on the event loop."""

    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)


class _Wake:
    """Set when the inbox changed; remembers when it last did (for the debounce)."""

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.last = 0.0

    def poke(self) -> None:
        self.last = time.monotonic()
        self.event.set()

    def reset(self) -> None:
        self.event = anyio.Event()


async def run_scribe_worker(
    layout: SquadLayout,
    settings: Settings,
    sink: EventSink,
    *,
    stop: anyio.Event | None = None,
    current: Callable[[], Settings] | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run Scribe passes on inbox changes until `stop` is set (or the task is cancelled).
    With `current` (the daemon's live settings), each pass reads `[scribe]` from it, so a
    change on disk applies from the next pass."""
    stop = stop or anyio.Event()
    layout.inbox_dir.mkdir(parents=True, exist_ok=True)
    wake = _Wake()
    wake.poke()  # one pass at start: files may have arrived while nothing watched
    async with anyio.create_task_group() as group:
        # The watcher starts watching before its first await, so before the first pass begins.
        group.start_soon(_watch, layout, settings, wake, stop)
        await group.start(functools.partial(_merge_loop, layout, settings, sink, wake, stop,
                                            current=current))
        task_status.started()
        await stop.wait()
        group.cancel_scope.cancel()


async def _watch(layout: SquadLayout, settings: Settings, wake: _Wake, stop: anyio.Event) -> None:
    inbox = layout.inbox_dir

    def relevant(change: watchfiles.Change, path: str) -> bool:
        name = path.rsplit("/", 1)[-1]
        return change != watchfiles.Change.deleted and not name.startswith(".")

    try:
        async for _changes in watchfiles.awatch(
            inbox, watch_filter=relevant, stop_event=stop, recursive=False,
            debounce=max(settings.scribe.debounce_ms, 50), step=50,
            rust_timeout=WATCH_TIMEOUT_MS,
        ):
            wake.poke()
    except Exception as exc:  # watching is a convenience: polling does the same job
        log.warning("scribe.watch_failed", inbox=str(inbox), error=str(exc),
                    polling_every_s=settings.scribe.poll_interval_s)
    if not stop.is_set():
        await _poll(layout, settings, wake, stop)


async def _poll(layout: SquadLayout, settings: Settings, wake: _Wake, stop: anyio.Event) -> None:
    while not stop.is_set():
        await anyio.sleep(settings.scribe.poll_interval_s)
        try:
            waiting = await anyio.to_thread.run_sync(scan_inbox, layout)
        except OSError as exc:
            log.warning("scribe.list_failed", inbox=str(layout.inbox_dir), error=str(exc))
            continue
        if waiting:
            wake.poke()


async def _merge_loop(
    layout: SquadLayout, settings: Settings, sink: EventSink, wake: _Wake, stop: anyio.Event,
    *, current: Callable[[], Settings] | None = None,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    retry_after: float | None = None
    first = True
    memory = ScribeMemory()
    failures = _Failures(settings.scribe.poll_interval_s, settings.scribe.max_backoff_s)
    while not stop.is_set():
        with anyio.move_on_after(retry_after):
            await wake.event.wait()
        if current is not None:
            settings = current()
            failures.base_s = settings.scribe.poll_interval_s
            failures.max_s = settings.scribe.max_backoff_s
        debounce = settings.scribe.debounce_ms / 1000
        deadline = time.monotonic() + debounce * MAX_DEBOUNCE_WAITS
        while (quiet := wake.last + debounce - time.monotonic()) > 0:
            if time.monotonic() >= deadline:
                break
            await anyio.sleep(min(quiet, deadline - time.monotonic()))
        wake.reset()
        report = await _run_pass(layout, settings, sink, memory, failures)
        if first:
            first = False
            task_status.started()
        # Files still being written get another look without a new change; a failed pass
        # gets one after its back-off.
        if report is None:
            retry_after = failures.wait
        else:
            retry_after = settings.scribe.poll_interval_s if report.deferred else None
    if first:  # stopped before the first pass: nothing to wait for
        task_status.started()


class _Failures:
    """Failed passes in a row, for the back-off, and the last failure, to log it once."""

    def __init__(self, base_s: float, max_s: float) -> None:
        self.count = 0
        self.last = ""
        self.base_s = base_s
        self.max_s = max_s

    @property
    def wait(self) -> float:
        return float(min(self.max_s, self.base_s * 2 ** max(0, self.count - 1)))

    def failed(self, exc: BaseException) -> bool:
        """Count a failure; True when it differs from the last one (log it in full)."""
        self.count += 1
        what = f"{type(exc).__name__}: {exc}"
        new = what != self.last
        self.last = what
        return new

    def succeeded(self) -> None:
        self.count = 0
        self.last = ""


async def _run_pass(layout: SquadLayout, settings: Settings, sink: EventSink,
                    memory: ScribeMemory | None, failures: _Failures) -> ScribeReport | None:
    collected = _ListSink()
    try:
        with telemetry.span("squadd.scribe_pass", {SQUAD_NAME: layout.repo.name}) as span:
            report = await anyio.to_thread.run_sync(
                functools.partial(merge_inbox, layout, settings, collected, memory=memory))
            span.set("squadd.scribe.merged", report.merged)
            span.set("squadd.scribe.rejected", len(report.rejected))
            span.set("squadd.scribe.archived", report.archived)
    except Exception as exc:
        if failures.failed(exc):
            log.exception("scribe.pass_failed", retry_in_s=failures.wait)
        else:
            log.warning("scribe.pass_failed_again", in_a_row=failures.count,
                        error=failures.last, retry_in_s=failures.wait)
        report = None
    else:
        failures.succeeded()
    for event in collected.events:
        sink.publish(event)
    return report
