"""The event loop a serving process runs on: `run_serving` (anyio on uvloop), for the daemon,
a cluster worker, and the benchmarks that measure them as they run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


def run_serving(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`anyio.run(func, *args)` on uvloop: libuv's loop, with cheaper wake-ups from other
    threads (the group commit's, worker threads) than asyncio's own."""
    return anyio.run(func, *args, backend_options={"use_uvloop": True})
