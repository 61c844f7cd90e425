"""Worker heartbeats: each worker keeps a key with a TTL saying who it is and how busy; a key
that expired is a worker gone. The coordinator's status and `squadd doctor` list them.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.cluster.wire import WorkerBeat

BEATS_PER_TTL = 3
"""A worker's key outlives this many missed heartbeats."""


async def beat(guard: RedisGuard, info: WorkerBeat, *, every_s: float) -> None:
    client = guard.client
    ttl_ms = max(1000, int(every_s * BEATS_PER_TTL * 1000))
    await guard.run(lambda: client.set(keys.worker(info.name), info.dump(), px=ttl_ms))


async def forget(guard: RedisGuard, name: str) -> None:
    client = guard.client
    await guard.run(lambda: client.delete(keys.worker(name)))


async def live_workers(guard: RedisGuard) -> list[WorkerBeat]:
    """The workers whose heartbeat key has not expired, by name."""
    client = guard.client

    async def scan() -> list[str]:
        return [str(k) async for k in client.scan_iter(match=keys.WORKER_PREFIX + "*",
                                                      count=500)]
    names = await guard.run(scan)
    if not names:
        return []
    values: Any = await guard.run(lambda: client.mget(names))
    beats: list[WorkerBeat] = []
    for value in values or []:
        if not value:
            continue
        try:
            beats.append(WorkerBeat.model_validate_json(value))
        except ValidationError:
            continue
    return sorted(beats, key=lambda b: b.name)
