"""A turn at something one process at a time does, in this process and across processes:
an in-process lock, then a `flock` other squadd processes take too (the landing queue's
``run/landing.lock``, the worktrees' ``run/worktrees.lock``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from squadd.fsio import try_lock

LOCK_POLL_S = 0.05
"""How often a lock another process holds is tried again."""


@asynccontextmanager
async def turn(lock: anyio.Lock, path: Path, timeout_s: float) -> AsyncIterator[None]:
    """This process's `lock`, then the `flock` on `path` that other processes take too, polled
    (`TimeoutError` after `timeout_s` in all)."""
    fd = None
    with anyio.fail_after(timeout_s):
        await lock.acquire()
        try:
            while fd is None:
                fd = await anyio.to_thread.run_sync(try_lock, path)
                if fd is None:
                    await anyio.sleep(LOCK_POLL_S)
        except BaseException:
            lock.release()
            raise
    try:
        yield
    finally:
        os.close(fd)
        lock.release()
