"""Catch callbacks that block the event loop: asyncio's debug mode times every callback step
and logs the ones slower than `slow_callback_duration`; this collects those reports.

    async with loop_blocks(0.5) as blocks:
        ...  # the work under test
    assert blocks == []
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

BLOCK_BOUND_S = 0.5
"""Longer than any scheduling hiccup of a loaded machine, far shorter than real blocking
(a blocking fsync on a busy disk, a regex that backtracks, a `time.sleep` in a tool)."""


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reports: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing "):
            self.reports.append(message)


@asynccontextmanager
async def loop_blocks(bound_s: float = BLOCK_BOUND_S) -> AsyncIterator[list[str]]:
    """The reports of callbacks that held the running loop longer than `bound_s` meanwhile."""
    loop = asyncio.get_running_loop()
    logger = logging.getLogger("asyncio")
    handler = _Collect()
    saved = (loop.get_debug(), loop.slow_callback_duration, logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    loop.set_debug(True)
    loop.slow_callback_duration = bound_s
    try:
        await asyncio.sleep(0)  # the loop checks debug mode per step: begin a new one
        yield handler.reports
    finally:
        loop.set_debug(saved[0])
        loop.slow_callback_duration = saved[1]
        logger.setLevel(saved[2])
        logger.removeHandler(handler)
