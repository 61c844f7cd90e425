"""Worker heartbeats: each worker keeps a key with a TTL saying who it is and how busy, and
its name in the set of workers; a key that expired is a worker gone. The coordinator's status
and `squadd doctor` list them from that set (no scan of the keyspace).
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

    async def send() -> None:
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(keys.worker(info.name), info.dump(), px=ttl_ms)
            pipe.sadd(keys.WORKERS, info.name)
            await pipe.execute()

    await guard.run(send)


async def forget(guard: RedisGuard, name: str) -> None:
    client = guard.client

    async def send() -> None:
        async with client.pipeline(transaction=False) as pipe:
            pipe.delete(keys.worker(name))
            pipe.srem(keys.WORKERS, name)
            await pipe.execute()

    await guard.run(send)


async def live_workers(guard: RedisGuard) -> list[WorkerBeat]:
    """The workers whose heartbeat key has not expired, by name: the names in `keys.WORKERS`
    whose key is there (two commands, whatever else Redis holds). A name whose key expired is
    taken out of the set (a worker that beats again is put back by its beat, or here when
    its beat came while it was being taken out)."""
    client = guard.client
    names: Any = sorted(await guard.run(lambda: client.smembers(keys.WORKERS)) or ())
    if not names:
        return []
    values: Any = await guard.run(lambda: client.mget([keys.worker(n) for n in names]))
    beats = _parsed(names, values)
    gone = [name for name, value in zip(names, values or [None] * len(names), strict=True)
            if not value]
    if gone:
        beats += await _taken_out(guard, gone)
    return sorted(beats, key=lambda b: b.name)


def _parsed(names: list[str], values: Any) -> list[WorkerBeat]:
    beats: list[WorkerBeat] = []
    for value in values or [None] * len(names):
        if not value:
            continue
        try:
            beats.append(WorkerBeat.model_validate_json(value))
        except ValidationError:
            continue
    return beats


async def _taken_out(guard: RedisGuard, gone: list[str]) -> list[WorkerBeat]:
    """Take `gone` out of the set, then read their keys again (one round trip): a worker
    whose beat came between the first read and the removal is put back (its own `SADD` may
    have run before the removal), and is listed."""
    client = guard.client

    async def send() -> Any:
        async with client.pipeline(transaction=False) as pipe:
            pipe.srem(keys.WORKERS, *gone)
            pipe.mget([keys.worker(n) for n in gone])
            return (await pipe.execute())[1]

    values: Any = await guard.run(send)
    back = [name for name, value in zip(gone, values or [None] * len(gone), strict=True)
            if value]
    if back:
        await guard.run(lambda: client.sadd(keys.WORKERS, *back))
    return _parsed(gone, values)
