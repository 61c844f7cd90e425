"""Worker heartbeats: the live workers are listed from the set of their names in two commands,
however many other keys Redis holds; a worker whose key expired is dropped from the list and
its name from the set; one that stops is forgotten at once. A real redis-server."""

from __future__ import annotations

from typing import Any

import pytest

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.cluster.wire import WorkerBeat
from squadd.cluster.workers import beat, forget, live_workers


def _beat(name: str, slots: int = 2) -> WorkerBeat:
    return WorkerBeat(name=name, host="h", pid=1, version="0", slots=slots, busy=0,
                      started="2026-11-29T00:00:00+00:00")


async def _commands(guard: RedisGuard) -> int:
    stats: Any = await guard.client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


async def test_the_live_workers_are_listed_in_two_commands_whatever_else_redis_holds(
        guard: RedisGuard) -> None:
    client = guard.client
    async with client.pipeline(transaction=False) as pipe:  # stored replies, as routes leave them
        for n in range(5000):
            pipe.set(keys.reply(f"r{n}"), "{}", ex=3600)
        await pipe.execute()
    for name in ("w2", "w1", "w3"):
        await beat(guard, _beat(name), every_s=60)
    await forget(guard, "w3")
    await client.config_resetstat()
    before = await _commands(guard)
    listed = await live_workers(guard)
    # SMEMBERS and MGET, and the first INFO (counted once it has run).
    assert await _commands(guard) - before == 3
    assert [w.name for w in listed] == ["w1", "w2"]
    assert await client.smembers(keys.WORKERS) == {"w1", "w2"}


async def test_a_worker_whose_key_expired_is_dropped_and_put_back_by_its_next_beat(
        guard: RedisGuard) -> None:
    await beat(guard, _beat("w1"), every_s=60)
    await beat(guard, _beat("w2"), every_s=60)
    await guard.client.delete(keys.worker("w2"))  # as its TTL would, with no beat since
    assert [w.name for w in await live_workers(guard)] == ["w1"]
    assert await guard.client.smembers(keys.WORKERS) == {"w1"}
    await beat(guard, _beat("w2", slots=4), every_s=60)
    assert [(w.name, w.slots) for w in await live_workers(guard)] == [("w1", 2), ("w2", 4)]


async def test_a_beat_that_comes_while_its_expired_name_is_taken_out_keeps_it_listed(
        guard: RedisGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's key had expired when the keys were read, and it beat again (key and name)
    before its name was taken out: the name is put back, and the worker listed."""
    await beat(guard, _beat("w1"), every_s=60)
    await guard.client.delete(keys.worker("w1"))  # expired
    run = guard.run
    calls = 0

    async def beat_after_the_read(send: Any) -> Any:
        nonlocal calls
        result = await run(send)
        calls += 1
        if calls == 2:  # SMEMBERS, then MGET: w1's key was missing; now it beats
            await run(lambda: guard.client.set(keys.worker("w1"), _beat("w1", 3).dump()))
            await run(lambda: guard.client.sadd(keys.WORKERS, "w1"))
        return result

    monkeypatch.setattr(guard, "run", beat_after_the_read)
    assert [(w.name, w.slots) for w in await live_workers(guard)] == [("w1", 3)]
    assert await guard.client.smembers(keys.WORKERS) == {"w1"}


async def test_no_worker_has_beaten_yet(guard: RedisGuard) -> None:
    assert await live_workers(guard) == []
