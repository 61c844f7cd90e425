"""Noticing a stalled event loop: a thread that sees the loop has not run for a while.

The loop beats (`LoopWatch.beat`, a task); a watcher thread reports a stall once per stall,
through a callback that runs in that thread. The daemon logs which tools were running in its
process; a Python tool's worker tells the daemon, which names the tool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio
import anyio.abc


class LoopWatch:
    """Reports, through `report(seconds)` (called in its thread), an event loop that has not
    run for `after_s`: once per stall."""

    def __init__(self, report: Callable[[float], None], after_s: float):
        self.report = report
        self.after_s = after_s
        self.last = time.monotonic()
        self._stop = threading.Event()

    async def beat(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                   ) -> None:
        """Beat until cancelled; watching from the moment it has started."""
        self.last = time.monotonic()
        self._stop.clear()
        threading.Thread(target=self._watch, name="loop-watch", daemon=True).start()
        task_status.started()
        try:
            while True:
                self.last = time.monotonic()
                await anyio.sleep(self.after_s / 4)
        finally:
            self._stop.set()

    def _watch(self) -> None:
        reported = False
        while not self._stop.wait(self.after_s / 4):
            lag = time.monotonic() - self.last
            if lag >= self.after_s and not reported:
                reported = True
                self.report(lag)
            elif lag < self.after_s:
                reported = False
