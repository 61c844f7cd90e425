"""The job streams: urgent first, one job per free slot (one free: both streams in one script;
two free: both in one read), reclaim after the lease."""

from __future__ import annotations

from typing import Any

import anyio

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.cluster.jobs import JobQueue
from squadd.cluster.wire import Job


def job(sid: str, priority: str = "normal") -> Job:
    return Job(session_id=sid, agent="lead", priority=priority, timeout_s=60)  # type: ignore[arg-type]


async def test_urgent_jobs_are_taken_before_normal_ones_first_come_first_served(
        guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    for sid, priority in (("n1", "normal"), ("n2", "normal"), ("u1", "urgent"),
                          ("u2", "urgent")):
        await queue.submit(job(sid, priority))
    taken = []
    for _ in range(4):
        delivery = await queue.take("w1", block_s=0.1)
        assert delivery is not None
        taken.append(delivery.job.session_id)
    assert taken == ["u1", "u2", "n1", "n2"]
    assert await queue.take("w1", block_s=0.1) is None


async def test_with_room_for_two_one_read_takes_from_both_streams_urgent_first(
        guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    client = guard.client
    reads: list[list[str]] = []
    real_read = client.xreadgroup

    async def xreadgroup(group: str, consumer: str, streams: dict[str, str],
                         *args: Any, **kwargs: Any) -> Any:
        reads.append(list(streams))
        return await real_read(group, consumer, streams, *args, **kwargs)

    client.xreadgroup = xreadgroup  # this client's own, for this test
    real_script = client.evalsha

    async def evalsha(sha: str, numkeys: int, *args: Any) -> Any:
        reads.append(["script", *args[:numkeys]])
        return await real_script(sha, numkeys, *args)

    client.evalsha = evalsha  # type: ignore[method-assign]
    for sid, priority in (("n1", "normal"), ("n2", "normal"), ("u1", "urgent")):
        await queue.submit(job(sid, priority))
    both = await queue.take_some("w1", room=2, block_s=0.1)
    assert [d.job.session_id for d in both] == ["u1", "n1"]  # urgent first, one of each
    assert reads == [[keys.JOBS_URGENT, keys.JOBS_NORMAL]]  # in one round trip
    reads.clear()
    one = await queue.take_some("w1", room=1, block_s=0.1)
    assert [d.job.session_id for d in one] == ["n2"]
    # Room for one: the urgent stream, then the normal one, in one script.
    assert reads == [["script", keys.JOBS_URGENT, keys.JOBS_NORMAL]]
    # Waiting with room for two, an urgent job that comes meanwhile is taken at once.
    async with anyio.create_task_group() as tg:
        async def later() -> None:
            await anyio.sleep(0.05)
            await queue.submit(job("u2", "urgent"))
        tg.start_soon(later)
        with anyio.fail_after(10):
            waited = await queue.take_some("w2", room=2, block_s=5)
    assert [d.job.session_id for d in waited] == ["u2"]
    assert await queue.take_some("w1", room=2, block_s=0.05) == []


async def test_a_job_idle_past_its_lease_moves_to_another_worker(guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    await queue.submit(job("s1"))
    first = await queue.take("w1", block_s=0.1)
    assert first is not None
    # Within the lease the job stays w1's: nobody can claim it.
    assert await queue.reclaim("w2", lease_s=3600) == []
    # Past a lease of 1 ms for certain (Redis counts idle time in whole milliseconds, and the
    # take and the first scan can both come back within one).
    await anyio.sleep(0.01)
    [moved] = await queue.reclaim("w2", lease_s=0.001)
    assert moved.reclaimed and moved.job.session_id == "s1"
    assert moved.entry_id == first.entry_id
    # w1 learns another worker holds the job, and renewing does not take it back.
    assert await queue.keep("w1", [first]) == ([first], [])
    assert await queue.keep("w2", [moved]) == ([], [])
    await queue.ack(moved.stream, moved.entry_id)
    # Done with: nobody holds it now (the worker tells this from Redis losing it).
    assert await queue.keep("w1", [first]) == ([], [first])
    assert await queue.reclaim("w3", lease_s=0.001) == []
    lags = await queue.lags()
    assert all(entry["pending"] == 0 for entry in lags.values())


async def test_with_room_for_one_a_script_takes_urgent_first_then_waits_on_the_normal_stream(
        guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    client = guard.client
    calls: list[str] = []
    real_read, real_script = client.xreadgroup, client.evalsha

    async def xreadgroup(group: str, consumer: str, streams: dict[str, str],
                         *args: Any, **kwargs: Any) -> Any:
        calls.append("block" if kwargs.get("block") else "read")
        return await real_read(group, consumer, streams, *args, **kwargs)

    async def evalsha(sha: str, numkeys: int, *args: Any) -> Any:
        calls.append("script")
        return await real_script(sha, numkeys, *args)

    client.xreadgroup = xreadgroup
    client.evalsha = evalsha  # type: ignore[method-assign]
    for sid, priority in (("n1", "normal"), ("u1", "urgent"), ("n2", "normal")):
        await queue.submit(job(sid, priority))
    taken = [d.job.session_id for _ in range(3)
             for d in await queue.take_some("w1", room=1, block_s=0.1)]
    assert taken == ["u1", "n1", "n2"]
    assert calls == ["script"] * 3  # one round trip a job
    # The script forgotten (Redis restarted, say): loaded again, nothing lost.
    await client.script_flush()
    await queue.submit(job("n3"))
    assert [d.job.session_id for d in await queue.take_some("w1", room=1)] == ["n3"]
    # Nothing waits: the script finds none, then a blocking read waits for the next job.
    calls.clear()
    async with anyio.create_task_group() as tg:
        async def later() -> None:
            await anyio.sleep(0.05)
            await queue.submit(job("n4"))
        tg.start_soon(later)
        with anyio.fail_after(10):
            waited = await queue.take_some("w1", room=1, block_s=5)
    assert [d.job.session_id for d in waited] == ["n4"]
    assert calls == ["script", "block"]


async def test_a_redis_that_refuses_scripts_is_read_one_stream_at_a_time(
        no_scripts: RedisGuard) -> None:
    client = no_scripts.client
    queue = JobQueue(no_scripts)
    await queue.ensure()
    for sid, priority in (("n1", "normal"), ("u1", "urgent")):
        await queue.submit(job(sid, priority))
    refused: list[str] = []
    real_script = client.evalsha

    async def evalsha(sha: str, numkeys: int, *args: Any) -> Any:
        refused.append(sha)
        return await real_script(sha, numkeys, *args)

    client.evalsha = evalsha  # type: ignore[method-assign]
    taken = [d.job.session_id for _ in range(3)
             for d in await queue.take_some("w1", room=1, block_s=0.05)]
    assert taken == ["u1", "n1"]  # urgent first still, and nothing lost
    assert len(refused) == 1  # refused once: not asked again


async def test_an_entry_that_is_no_job_is_dropped_not_handed_out_again(
        guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    # Not a job: a worker that took it would fail on it every time it came back.
    await guard.client.xadd(keys.JOBS_NORMAL, {"data": '{"session_id": "bad"}'})
    await guard.client.xadd(keys.JOBS_URGENT, {"other": "field"})
    await queue.submit(job("good"))
    assert await queue.take("w1", block_s=0.1) is None  # the urgent non-job
    assert await queue.take("w1", block_s=0.1) is None  # the normal one without timeout_s
    delivery = await queue.take("w1", block_s=0.1)
    assert delivery is not None and delivery.job.session_id == "good"
    # Neither stays pending, so nobody reclaims them after the lease.
    await queue.ack(delivery.stream, delivery.entry_id)
    assert await queue.reclaim("w2", lease_s=0.001) == []
    lags = await queue.lags()
    assert all(entry["pending"] == 0 for entry in lags.values()), lags


async def test_jobs_are_taken_again_after_redis_lost_the_group(guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    await guard.client.flushdb()  # as a Redis restarted without its data leaves it
    await queue.submit(job("after"))
    delivery = await queue.take("w1", block_s=0.1)
    assert delivery is not None and delivery.job.session_id == "after"
    await guard.client.flushdb()
    assert await queue.reclaim("w2", lease_s=0.001) == []
    await queue.submit(job("later"))
    delivery = await queue.take("w2", block_s=0.1)
    assert delivery is not None and delivery.job.session_id == "later"


async def test_lags_leave_out_a_stream_redis_does_not_hold(guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    assert await queue.lags() == {}  # nothing made yet (as `squadd doctor` may find it)
    await queue.ensure()
    await queue.submit(job("s1"))
    await guard.client.delete(keys.JOBS_URGENT)
    assert await queue.lags() == {keys.JOBS_NORMAL: {"lag": 1, "pending": 0}}


async def test_one_scan_reclaims_as_many_stale_jobs_as_asked_urgent_first(
        guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    for n in range(6):
        await queue.submit(job(f"n{n}"))
    await queue.submit(Job(session_id="u0", agent="lead", priority="urgent", timeout_s=60))
    held = [await queue.take("dead", block_s=0.1) for _ in range(7)]
    for delivery in held:
        assert delivery is not None
        # The dead worker's jobs have gone without a renewal for a long time (set in Redis,
        # not waited for): a lease of 1,000 s finds them stale, and a fresh claim not.
        await guard.client.xclaim(delivery.stream, keys.WORKERS_GROUP, "dead", 0,
                                  [delivery.entry_id], idle=10_000_000, justid=True)
    # A worker with five free slots takes five in one scan, the urgent one first...
    first = await queue.reclaim("w2", lease_s=1000, count=5)
    assert [d.job.session_id for d in first][:1] == ["u0"]
    assert len(first) == 5 and all(d.reclaimed for d in first)
    # ...and the two left are another's, whole; w2's fresh claims are not stale.
    rest = await queue.reclaim("w3", lease_s=1000, count=8)
    assert len(rest) == 2
    assert sorted(d.job.session_id for d in first[1:] + rest) == [f"n{n}" for n in range(6)]
    backlog = await queue.backlog(now_ms=0)
    assert backlog["pending_per_worker"] == {"w2": 5, "w3": 2}
    assert backlog["streams"]["normal"]["queued"] == 0
    assert backlog["streams"]["normal"]["pending"] == 6


async def test_backlog_shows_the_oldest_job_no_worker_took(guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    entry = await queue.submit(job("waiting"))
    submitted_ms = int(entry.split("-")[0])
    backlog = await queue.backlog(now_ms=submitted_ms + 4_000)
    assert backlog["streams"]["normal"] == {"queued": 1, "pending": 0,
                                            "oldest_unclaimed_s": 4.0}
    assert await queue.sessions_queued() == {"waiting"}
    await queue.take("w1", block_s=0.1)
    backlog = await queue.backlog(now_ms=submitted_ms + 4_000)
    assert backlog["streams"]["normal"]["oldest_unclaimed_s"] is None
    assert backlog["pending_per_worker"] == {"w1": 1}
