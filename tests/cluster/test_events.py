"""The cluster's event stream: a worker's forwarder sends the events that come while it gathers
in one round trip, and the coordinator's reader reads those that arrive while it gathers in one,
each published with its worker named and in the stream's order; a forwarder stopped while it
gathers sends what it holds first. A real redis-server."""

from __future__ import annotations

import functools
from typing import Any

import anyio
import pytest
from anyio.streams.memory import MemoryObjectSendStream

from squadd.cluster import events as cluster_events
from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.cluster.events import publish_events, relay_events
from squadd.cluster.wire import EventEnvelope
from squadd.contracts.events import AgentCompleted, BaseEvent, SessionMessage


def _gate() -> tuple[list[float], anyio.Event, anyio.Event, Any]:
    """A gathering pause the test holds open: what it was asked, whether it began, and
    the event that ends it."""
    asked: list[float] = []
    began, go_on = anyio.Event(), anyio.Event()

    async def pause(seconds: float) -> None:
        asked.append(seconds)
        began.set()
        await go_on.wait()

    return asked, began, go_on, pause


def _envelope(worker: str, event: BaseEvent) -> str:
    return EventEnvelope(worker=worker, event=event.model_dump(mode="json")).dump()


def _forwarder(guard: RedisGuard, pause: Any
               ) -> tuple[Any, MemoryObjectSendStream[BaseEvent], list[BaseEvent]]:
    """`publish_events` for worker w1 (0.5 s gathers, through `pause`), the stream its next
    event comes from, and the list its `ready` takes the events at hand from."""
    send, receive = anyio.create_memory_object_stream[BaseEvent](16)
    at_hand: list[BaseEvent] = []

    def ready() -> list[BaseEvent]:
        found = list(at_hand)
        at_hand.clear()
        return found

    run = functools.partial(publish_events, guard, "w1", receive.receive, maxlen=1000,
                            ready=ready, gather_s=0.5, pause=pause)
    return run, send, at_hand


def _sent(entries: Any) -> list[EventEnvelope]:
    return [EventEnvelope.model_validate_json(fields["data"]) for _, fields in entries]


async def test_the_reader_reads_the_events_that_came_while_it_gathered_in_one_round_trip(
        guard: RedisGuard) -> None:
    client = guard.client
    reads: list[int] = []
    real_xread = client.xread

    async def xread(*args: Any, **kwargs: Any) -> Any:
        result = await real_xread(*args, **kwargs)
        reads.append(sum(len(entries) for _, entries in result or []))
        return result

    client.xread = xread  # this client's own, for this test
    asked, began, go_on, pause = _gate()
    published: list[BaseEvent] = []
    all_three = anyio.Event()

    def publish(event: BaseEvent) -> None:
        published.append(event)
        if len(published) == 3:
            all_three.set()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(functools.partial(relay_events, guard, publish, start="0-0",
                                            gather_s=0.5, pause=pause))
            await client.xadd(keys.EVENTS, {"data": _envelope("w1", SessionMessage(
                session_id="s1", agent="lead", role="assistant", content="first"))})
            await began.wait()  # the first read found one: the reader gathers now
            await client.xadd(keys.EVENTS, {"data": _envelope("w2", SessionMessage(
                session_id="s2", agent="lead", role="assistant", content="second"))})
            await client.xadd(keys.EVENTS, {"data": _envelope("w1", AgentCompleted(
                session_id="s1", agent="lead", turns=1))})
            go_on.set()
            await all_three.wait()
            tg.cancel_scope.cancel()
    assert asked[0] == 0.5
    assert reads[:2] == [1, 2]  # the two that came meanwhile: one round trip
    assert [(type(e).__name__, e.session_id, e.worker) for e in published] == [
        ("SessionMessage", "s1", "w1"), ("SessionMessage", "s2", "w2"),
        ("AgentCompleted", "s1", "w1")]


async def test_the_forwarder_sends_the_events_that_came_while_it_gathered_in_one_round_trip(
        guard: RedisGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[int] = []
    real_publish = cluster_events._publish

    done = anyio.Event()

    async def counted(client: Any, data: list[str], maxlen: int) -> None:
        sent.append(len(data))
        await real_publish(client, data, maxlen)
        done.set()

    monkeypatch.setattr(cluster_events, "_publish", counted)
    asked, began, go_on, pause = _gate()
    run, send, at_hand = _forwarder(guard, pause)
    first = SessionMessage(session_id="s1", agent="lead", role="assistant", content="first")
    rest = [SessionMessage(session_id="s1", agent="lead", role="assistant", content="second"),
            AgentCompleted(session_id="s1", agent="lead", turns=1)]
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await send.send(first)
            await began.wait()  # it has the first: it gathers now
            at_hand.extend(rest)  # the session's next events, at hand when the pause ends
            go_on.set()
            await done.wait()
            tg.cancel_scope.cancel()
    assert asked == [0.5] and sent == [3]
    envelopes = _sent(await guard.client.xrange(keys.EVENTS))
    assert [(e.worker, e.event["type"], e.event.get("content")) for e in envelopes] == [
        ("w1", "session.message", "first"), ("w1", "session.message", "second"),
        ("w1", "agent.completed", None)]


async def test_a_forwarder_stopped_while_it_gathers_sends_what_it_holds_first(
        guard: RedisGuard) -> None:
    asked, began, _go_on, pause = _gate()  # never let go: the stop ends the pause
    run, send, at_hand = _forwarder(guard, pause)
    at_hand.append(SessionMessage(session_id="s1", agent="lead", role="assistant",
                                  content="done"))
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await send.send(AgentCompleted(session_id="s1", agent="lead", turns=1))
            await began.wait()
            tg.cancel_scope.cancel()  # the worker stops
    envelopes = _sent(await guard.client.xrange(keys.EVENTS))
    assert [e.event["type"] for e in envelopes] == ["agent.completed", "session.message"]
    assert asked == [0.5]
