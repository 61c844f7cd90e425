"""The request channel: one answer per request id, and a half-applied call never applied again;
a request sent for the first time is not looked up for a stored reply, a repeat is; a request
is marked `held` only by Redis, when its worker has the job pending."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from squadd.cluster import keys
from squadd.cluster.connection import ClusterError, RedisGuard
from squadd.cluster.jobs import JobQueue
from squadd.cluster.requests import (
    HEADROOM,
    INTERRUPTED,
    MIN_CONCURRENCY,
    RequestServer,
    SentIds,
    _whole,
    send,
)
from squadd.cluster.wire import Job, Reply, Request


def request(rid: str, kind: str = "tool") -> Request:
    return Request(request_id=rid, kind=kind, session_id="s1", worker="w", epoch=1,  # type: ignore[arg-type]
                   body={"n": rid})


def _counting() -> tuple[list[str], Callable[[Request], Awaitable[Reply]]]:
    """A handler that records the ids it applied and answers with how many it has."""
    applied: list[str] = []

    async def handler(req: Request) -> Reply:
        applied.append(req.request_id)
        return Reply(request_id=req.request_id, ok=True, body={"count": len(applied)})

    return applied, handler


async def test_a_repeated_request_gets_the_stored_reply_and_is_applied_once(
        guard: RedisGuard) -> None:
    applied, handler = _counting()
    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        first = await send(guard, request("r1"), timeout_s=5, attempts=3)
        again = await send(guard, request("r1"), timeout_s=5, attempts=3)
        other = await send(guard, request("r2"), timeout_s=5, attempts=3)
        tg.cancel_scope.cancel()
    assert applied == ["r1", "r2"]
    assert first.body == again.body == {"count": 1}
    assert other.body == {"count": 2}


async def test_a_request_sent_first_is_not_looked_up_and_its_repeat_gets_the_stored_reply(
        guard: RedisGuard) -> None:
    applied, handler = _counting()
    client = guard.client
    looked_up: list[list[str]] = []
    real_mget = client.mget

    async def mget(names: list[str], *args: object) -> object:
        looked_up.append(list(names))
        return await real_mget(names, *args)

    client.mget = mget  # this client's own, for this test
    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=("records",))
    sent = SentIds()
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        first = await send(guard, request("r1", "records"), timeout_s=5, attempts=3, sent=sent)
        assert looked_up == []  # sent for the first time: no reply to look up
        again = await send(guard, request("r1", "records"), timeout_s=5, attempts=3, sent=sent)
        tg.cancel_scope.cancel()
    assert looked_up == [[keys.reply("r1")]]  # the repeat was looked up, and found
    assert applied == ["r1"] and first.body == again.body == {"count": 1}


async def test_only_a_requests_first_send_is_marked_first(guard: RedisGuard) -> None:
    """No coordinator answers: the request goes out once per attempt, and only the first of
    those, from a process that never sent its id, says it is new."""
    sent = SentIds()
    with pytest.raises(ClusterError):
        await send(guard, request("r1", "records"), timeout_s=0.2, attempts=2, sent=sent)
    with pytest.raises(ClusterError):  # sent before by this process: a repeat from the start
        await send(guard, request("r1", "records"), timeout_s=0.2, attempts=1, sent=sent)
    with pytest.raises(ClusterError):  # no record of what was sent: never marked first
        await send(guard, request("r2", "records"), timeout_s=0.2, attempts=1)
    entries = await guard.client.xrange(keys.REQUESTS)
    sends = [Request.model_validate_json(fields["data"]) for _, fields in entries]
    assert [(r.request_id, r.first) for r in sends] == [
        ("r1", True), ("r1", False), ("r1", False), ("r2", False)]


async def send_raw(guard: RedisGuard, req: Request, **fields: str) -> Reply:
    """`req` added with `fields` of its own beside its data, as any writer of the stream could;
    its reply, waited for (bounded)."""
    await guard.client.xadd(keys.REQUESTS, {"data": req.dump(), **fields})
    with anyio.fail_after(10):
        popped = await guard.client.blpop([keys.reply_box(req.request_id)], timeout=10)
    assert popped, f"no reply to {req.request_id}"
    return Reply.model_validate_json(popped[1])


async def test_a_request_is_marked_held_only_while_redis_has_its_job_pending_for_its_worker(
        guard: RedisGuard) -> None:
    queue = JobQueue(guard)
    await queue.ensure()
    await queue.submit(Job(session_id="s1", agent="lead", timeout_s=60))
    await queue.submit(Job(session_id="s2", agent="lead", timeout_s=60))
    mine = await queue.take("w", block_s=0.1)
    theirs = await queue.take("other", block_s=0.1)
    assert mine is not None and theirs is not None
    seen: dict[str, tuple[str, str] | None] = {}
    forged_seen = anyio.Event()

    async def handler(req: Request) -> Reply:
        seen[req.request_id] = req.held
        if req.request_id == "r4":
            forged_seen.set()
        return Reply(request_id=req.request_id, ok=True)

    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        await send(guard, request("r1"), timeout_s=5, attempts=3,
                   held=(mine.stream, mine.entry_id))
        await send(guard, request("r2"), timeout_s=5, attempts=3,
                   held=(theirs.stream, theirs.entry_id))  # pending for another worker
        await send(guard, request("r3"), timeout_s=5, attempts=3)  # not asked
        # A mark in the request's own JSON is not Redis's: it counts for nothing.
        forged = {**request("r4").model_dump(mode="json"),
                  "held": [mine.stream, mine.entry_id], "_held": [mine.stream, mine.entry_id]}
        await guard.client.xadd(keys.REQUESTS, {"data": json.dumps(forged)})
        with anyio.fail_after(10):
            await forged_seen.wait()
        # A `held` field that names no job (junk in the entry): unmarked, and answered.
        junk = await send_raw(guard, request("r6"), held="junk-without-an-entry")
        assert junk.ok
        # The job's stream gone (Redis lost it): the request goes out all the same, unmarked.
        await guard.client.delete(mine.stream)
        await send(guard, request("r5"), timeout_s=5, attempts=3,
                   held=(mine.stream, mine.entry_id))
        tg.cancel_scope.cancel()
    assert seen == {"r1": (mine.stream, mine.entry_id), "r2": None, "r3": None, "r4": None,
                    "r5": None, "r6": None}


async def test_where_redis_refuses_scripts_a_request_goes_out_unmarked_and_is_answered(
        guard: RedisGuard, no_scripts: RedisGuard) -> None:
    client = no_scripts.client
    queue = JobQueue(no_scripts)
    await queue.ensure()
    await queue.submit(Job(session_id="s1", agent="lead", timeout_s=60))
    mine = await queue.take_some("w", room=2, block_s=0.1)  # no script on this path
    assert len(mine) == 1 and no_scripts.scripts is None
    tried: list[str] = []
    real_eval = client.eval

    async def counted(*args: Any) -> Any:
        tried.append("eval")
        return await real_eval(*args)

    client.eval = counted  # type: ignore[method-assign]
    seen: dict[str, tuple[str, str] | None] = {}

    async def handler(req: Request) -> Reply:
        seen[req.request_id] = req.held
        return Reply(request_id=req.request_id, ok=True)

    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=())
    job = (mine[0].stream, mine[0].entry_id)
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        with anyio.fail_after(30):
            first = await send(no_scripts, request("r1"), timeout_s=5, attempts=1, held=job)
            again = await send(no_scripts, request("r2"), timeout_s=5, attempts=1, held=job)
            assert tried == ["eval"]  # refused once, not tried again
            # Scripts refused after they ran (an ACL changed): that send is made plainly.
            no_scripts.scripts = True
            late = await send(no_scripts, request("r3"), timeout_s=5, attempts=1, held=job)
        tg.cancel_scope.cancel()
    assert first.ok and again.ok and late.ok
    assert seen == {"r1": None, "r2": None, "r3": None} and no_scripts.scripts is False


def test_the_ids_sent_are_remembered_within_a_bound() -> None:
    sent = SentIds(kept=2)
    assert sent.first("a") and sent.first("b")
    assert not sent.first("a")
    assert sent.first("c")  # "a" is forgotten now: the oldest
    assert sent.first("a") and not sent.first("c")


async def test_a_call_found_half_applied_after_a_restart_is_answered_interrupted(
        guard: RedisGuard) -> None:
    # As a coordinator killed mid-call leaves it: the write-ahead mark, no stored reply.
    await guard.client.hset(keys.APPLYING, "r-crashed", "1-0")
    applied: list[str] = []

    async def handler(req: Request) -> Reply:
        applied.append(req.request_id)
        return Reply(request_id=req.request_id, ok=True)

    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=("records",))
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        tool = await send(guard, request("r-crashed"), timeout_s=5, attempts=3)
        # An idempotent kind is simply done again.
        await guard.client.hset(keys.APPLYING, "r-records", "1-0")
        records = await send(guard, request("r-records", "records"), timeout_s=5, attempts=3)
        tg.cancel_scope.cancel()
    assert tool.ok is False and tool.refused == "interrupted" and tool.error == INTERRUPTED
    assert records.ok is True
    assert applied == ["r-records"]


async def test_requests_left_pending_by_a_dead_coordinator_are_served_on_restart(
        guard: RedisGuard) -> None:
    served: list[str] = []
    both = anyio.Event()

    async def handler(req: Request) -> Reply:
        served.append(req.request_id)
        if len(served) == 2:
            both.set()
        return Reply(request_id=req.request_id, ok=True)

    # A coordinator read two requests into its group, then died before answering.
    first = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=("records",))
    async with anyio.create_task_group() as tg:
        await tg.start(first.run)
        tg.cancel_scope.cancel()
    for rid in ("p1", "p2"):
        await guard.client.xadd(keys.REQUESTS, {"data": request(rid, "records").dump()})
    taken = await guard.client.xreadgroup(keys.COORDINATOR_GROUP, keys.COORDINATOR_CONSUMER,
                                          {keys.REQUESTS: ">"}, count=10)
    assert len(taken[0][1]) == 2
    restarted = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=("records",))
    async with anyio.create_task_group() as tg:
        await tg.start(restarted.run)
        with anyio.fail_after(30):
            await both.wait()
        for _ in range(1500):  # the replies are stored and the entries acknowledged next
            pending = await guard.client.xpending(keys.REQUESTS, keys.COORDINATOR_GROUP)
            if pending["pending"] == 0:
                break
            await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert served == ["p1", "p2"]
    assert pending["pending"] == 0


async def test_a_request_that_waits_on_another_session_leaves_room_for_that_sessions_requests(
        guard: RedisGuard) -> None:
    parent_waiting, child_served = anyio.Event(), anyio.Event()

    async def handler(req: Request) -> Reply:
        if req.request_id == "parent":  # as a squad_route waits for the session it started
            parent_waiting.set()
            await child_served.wait()
        else:
            child_served.set()
        return Reply(request_id=req.request_id, ok=True)

    # One place only, as if the floor were all taken by waiting parents; then the coordinator
    # makes room for the sessions its workers can run.
    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=(), concurrency=1)
    server.fit(sessions=2)
    assert server.concurrency == 2 + HEADROOM
    replies: list[Reply] = []
    parent_answered = anyio.Event()

    async def send_parent() -> None:
        replies.append(await send(guard, request("parent"), timeout_s=30, attempts=1))
        parent_answered.set()

    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        tg.start_soon(send_parent)
        with anyio.fail_after(30):
            await parent_waiting.wait()
            child = await send(guard, request("child", "records"), timeout_s=30, attempts=1)
            await parent_answered.wait()
        tg.cancel_scope.cancel()
    assert child.ok and [r.request_id for r in replies] == ["parent"]


def test_room_follows_the_sessions_but_never_drops_below_the_floor(guard: RedisGuard) -> None:
    server = RequestServer(guard, lambda req: None, reply_ttl_s=60, redo_safe=())  # type: ignore[arg-type,return-value]
    assert server.concurrency == MIN_CONCURRENCY
    server.fit(sessions=200)
    assert server.concurrency == 200 + HEADROOM
    server.fit(sessions=3)
    assert server.concurrency == MIN_CONCURRENCY


async def test_a_call_is_answered_its_mark_cleared_and_its_entry_acknowledged_in_one_transaction(
        guard: RedisGuard) -> None:
    async def handler(req: Request) -> Reply:
        return Reply(request_id=req.request_id, ok=True)

    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        await guard.client.config_resetstat()
        reply = await send(guard, request("r1"), timeout_s=5, attempts=1)
        # The answer was pushed in the transaction that acknowledged the entry.
        pending = await guard.client.xpending(keys.REQUESTS, keys.COORDINATOR_GROUP)
        stats = await guard.client.info("commandstats")
        tg.cancel_scope.cancel()
    assert reply.ok and pending["pending"] == 0
    assert stats["cmdstat_exec"]["calls"] == 1
    assert await guard.client.hlen(keys.APPLYING) == 0
    assert await guard.client.get(keys.reply("r1")) == reply.dump()


async def test_an_end_reply_that_names_its_job_acknowledges_it_in_the_same_transaction(
        guard: RedisGuard) -> None:
    """The job a worker holds is acknowledged (and deleted) by the transaction that answers
    its end; what the job's worker reads of the reply does not name it."""
    from squadd.cluster.jobs import JobQueue
    from squadd.cluster.wire import Job

    jobs = JobQueue(guard)
    await jobs.ensure()
    await jobs.submit(Job(session_id="s1", agent="lead", timeout_s=60))
    delivery = await jobs.take("w", block_s=1)
    assert delivery is not None
    job = (delivery.stream, delivery.entry_id)

    async def handler(req: Request) -> Reply:
        return Reply(request_id=req.request_id, ok=True, body={"acked": True}, job_done=job)

    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=("end",))
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        before = await guard.client.xpending(delivery.stream, keys.WORKERS_GROUP)
        await guard.client.config_resetstat()
        reply = await send(guard, request("s1:1:end", kind="end"), timeout_s=5, attempts=1)
        stats = await guard.client.info("commandstats")
        tg.cancel_scope.cancel()
    after = await guard.client.xpending(delivery.stream, keys.WORKERS_GROUP)
    assert before["pending"] == 1 and after["pending"] == 0
    assert await guard.client.xlen(delivery.stream) == 0
    assert stats["cmdstat_exec"]["calls"] == 1
    assert reply.ok and reply.body == {"acked": True} and reply.job_done is None
    assert "job_done" not in (await guard.client.get(keys.reply("s1:1:end")) or "")


async def test_a_claims_conversation_is_kept_once_in_redis_and_reaches_the_worker_whole(
        guard: RedisGuard) -> None:
    """The stored copy of a reply that hands over a conversation leaves the conversation out
    (the box has the whole reply); a worker that looks for the stored copy first, its reply
    already waiting, still gets the whole reply from the box."""
    conversation = [{"role": "system", "content": "You are lead. " * 200}]

    async def handler(req: Request) -> Reply:
        return Reply(request_id=req.request_id, ok=True,
                     body={"epoch": 3, "messages": conversation})

    server = RequestServer(guard, handler, reply_ttl_s=60, redo_safe=("claim",))
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        first = await send(guard, request("c1", "claim"), timeout_s=5, attempts=3)
        stored = Reply.model_validate_json(await guard.client.get(keys.reply("c1")))
        # As a worker whose wait ended just before the answer came finds it: the whole
        # answer in the box, and the stored copy, which it reads first.
        await guard.client.xadd(keys.REQUESTS, {"data": request("c2", "claim").dump()})
        for _ in range(6000):  # until answered (bounded)
            if await guard.client.exists(keys.reply("c2")):
                break
            await anyio.sleep(0.01)
        copy = Reply.model_validate_json(await guard.client.get(keys.reply("c2")))
        late = await _whole(guard, copy, keys.reply_box("c2"))
        tg.cancel_scope.cancel()
    assert first.body == {"epoch": 3, "messages": conversation} and not first.boxed
    assert stored.boxed and "messages" not in stored.body and stored.body["epoch"] == 3
    assert late.body == {"epoch": 3, "messages": conversation}
    assert "You are lead" not in (await guard.client.get(keys.reply("c1")))


async def test_a_stored_claim_reply_whose_box_is_gone_is_a_clear_cluster_error(
        guard: RedisGuard) -> None:
    """The whole reply taken and lost (or expired): the worker is told plainly, and its job's
    lease moves it on, rather than running a session without its conversation."""
    compact = Reply(request_id="c9", ok=True, body={"epoch": 1, "messages": []}).stored()
    assert compact is not None
    await guard.client.set(keys.reply("c9"), compact)
    server = RequestServer(guard, lambda req: None, reply_ttl_s=60,  # type: ignore[arg-type,return-value]
                           redo_safe=("claim",))
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        with pytest.raises(ClusterError, match="gone from its reply box"):
            await send(guard, request("c9", "claim"), timeout_s=5, attempts=2)
        tg.cancel_scope.cancel()
