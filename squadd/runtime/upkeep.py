"""A runtime's background upkeep: idle sessions reaped, spare files made ahead."""

from __future__ import annotations

import anyio
import structlog

from squadd.runtime.pool import SessionPool
from squadd.state.spare_files import SpareFiles

log = structlog.get_logger("squadd.runtime")

SPARE_CHECK_S = 0.1
"""How often the spare files are counted (in memory; no I/O when enough)."""


async def reap_idle(pool: SessionPool, interval_s: float) -> None:
    """Reap the pool's idle sessions every `interval_s`, until cancelled."""
    while True:
        await anyio.sleep(interval_s)
        pool.reap()


async def keep_spare_files(spares: SpareFiles, wanted: int) -> None:
    """Keep new transcripts' and orchestration entries' files made ahead, off the routes'
    path (see `SpareFiles`): at least half of `wanted`, until cancelled."""
    while spares.usable:
        if len(spares) < wanted // 2:
            try:
                await anyio.to_thread.run_sync(spares.refill, wanted)
            except OSError as exc:  # a full disk: sessions create their own files
                log.warning("spare files not made", error=str(exc))
                await anyio.sleep(5)
        await anyio.sleep(SPARE_CHECK_S)
