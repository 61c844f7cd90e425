"""The EventBus: typed events, bounded subscribers, overflow reports, filters, never blocking."""

from __future__ import annotations

import json
import os
import threading
import time

import anyio
import pytest

from squadd.contracts.events import (
    EVENT_TYPES,
    AgentIdle,
    AgentSpawned,
    BusOverflow,
    PoolEmpty,
    ToolsLoadFailed,
    ToolStarted,
    ToolUpdated,
    parse_event,
)
from squadd.runtime.events import EventBus


def _tool_started(session: str, n: int = 0) -> ToolStarted:
    return ToolStarted(session_id=session, agent="fenster", tool="squad_decide", call_id=f"c{n}")


def test_every_design_event_name_has_a_model() -> None:
    names = {
        "daemon.started", "daemon.stopping", "route.queued", "agent.spawned", "agent.idle",
        "agent.completed", "agent.error", "session.message", "tool.started", "tool.updated",
        "tool.completed", "pool.at_capacity", "pool.empty", "provider.retry", "scribe.merged",
        "scribe.rejected", "scribe.archived", "approval.requested", "approval.resolved",
        "tools.load_failed", "bus.overflow",
    }
    assert names <= set(EVENT_TYPES)


def test_events_round_trip_through_json_by_their_type() -> None:
    event = AgentSpawned(session_id="s1", agent="fenster", task="write tests", model="m")
    again = parse_event(event.model_dump_json())
    assert isinstance(again, AgentSpawned) and again == event
    with pytest.raises(ValueError, match="type"):
        parse_event({"type": "no.such.event"})


async def test_subscriber_receives_events_in_order_with_growing_seq() -> None:
    bus = EventBus()
    with bus.subscribe() as sub:
        for n in range(5):
            bus.publish(_tool_started("s1", n))
        got = [await sub.get(within=1) for _ in range(5)]
    assert [e.call_id for e in got if isinstance(e, ToolStarted)] == [f"c{n}" for n in range(5)]
    seqs = [e.seq for e in got if e is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5 and seqs[0] >= 1


async def test_filters_by_type_glob_and_session() -> None:
    bus = EventBus()
    tools = bus.subscribe(types=["tool.*"])
    idle = bus.subscribe(types=["agent.idle"])
    one_session = bus.subscribe(session_id="s2")
    bus.publish(_tool_started("s1"))
    bus.publish(ToolUpdated(session_id="s2", tool="t", call_id="c", message="half"))
    bus.publish(AgentIdle(session_id="s2", agent="fenster"))
    bus.publish(PoolEmpty())
    assert [e.type for e in _drain(tools)] == ["tool.started", "tool.updated"]
    assert [e.type for e in _drain(idle)] == ["agent.idle"]
    assert [e.type for e in _drain(one_session)] == ["tool.updated", "agent.idle"]


def _drain(sub: object) -> list[object]:
    out = []
    while (event := sub.get_nowait()) is not None:  # type: ignore[attr-defined]
        out.append(event)
    return out


async def test_slow_subscriber_never_slows_publishing_and_is_told_what_it_lost() -> None:
    bus = EventBus()
    stuck = bus.subscribe(buffer=16)          # never reads until the end
    events = [_tool_started("s1", n) for n in range(20_000)]

    for event in events:  # publish is synchronous: a full buffer costs a counter, never a wait
        bus.publish(event)

    assert stuck.lost == 20_000 - 16
    first = stuck.get_nowait()
    assert isinstance(first, BusOverflow) and first.lost == 20_000 - 16
    kept = _drain(stuck)
    assert [e.call_id for e in kept] == [f"c{n}" for n in range(16)]  # type: ignore[attr-defined]


async def test_overflow_is_reported_again_after_new_losses() -> None:
    bus = EventBus()
    sub = bus.subscribe(buffer=2)
    for n in range(5):
        bus.publish(_tool_started("s", n))
    assert isinstance(overflow := sub.get_nowait(), BusOverflow) and overflow.lost == 3
    _drain(sub)
    for n in range(4):
        bus.publish(_tool_started("s", n))
    again = sub.get_nowait()
    assert isinstance(again, BusOverflow) and again.lost == 2 and sub.lost == 5


async def test_waiting_subscriber_wakes_on_publish_and_ends_on_close() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    received: list[str] = []

    async def reader() -> None:
        async for event in sub:
            received.append(event.type)

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await anyio.wait_all_tasks_blocked()  # the reader waits inside the subscription
        bus.publish(PoolEmpty())
        await anyio.wait_all_tasks_blocked()  # the reader took the event and waits again
        sub.close()
    assert received == ["pool.empty"]
    assert bus.subscriber_count == 0
    assert await sub.get(within=0.01) is None


async def test_get_gives_up_after_within_seconds() -> None:
    bus = EventBus()
    with bus.subscribe() as sub:
        started = time.monotonic()
        assert await sub.get(within=0.05) is None
        assert time.monotonic() - started >= 0.05


async def test_publishing_from_another_thread_wakes_the_subscriber_at_once() -> None:
    bus = EventBus()
    with bus.subscribe() as sub:
        publisher = threading.Timer(0.05, bus.publish, args=(PoolEmpty(),))
        publisher.start()
        try:
            # A subscriber not woken from the other thread would sleep out `within` and get None.
            event = await sub.get(within=60)
        finally:
            publisher.join()
    assert isinstance(event, PoolEmpty)


def test_listeners_see_every_event_synchronously() -> None:
    bus = EventBus()
    seen: list[int] = []
    bus.add_listener(lambda event: seen.append(event.seq))
    for _ in range(3):
        bus.publish(PoolEmpty())
    assert seen == [1, 2, 3]


def test_an_event_published_again_is_a_copy_with_its_own_seq() -> None:
    bus = EventBus()
    seen: list[tuple[object, int]] = []
    bus.add_listener(lambda event: seen.append((event, event.seq)))
    event = PoolEmpty()
    bus.publish(event)
    bus.publish(event)  # e.g. an event another bus stamped, handed on
    (first, first_seq), (second, second_seq) = seen
    assert (first_seq, second_seq) == (1, 2)
    assert first is event and second is not event  # the first stamp stays what it was
    assert (event.seq, json.loads(event.model_dump_json(exclude_unset=True))["seq"]) == (1, 1)


def test_text_that_is_not_utf8_is_mended_so_the_event_still_serializes() -> None:
    failed = ToolsLoadFailed(file=os.fsdecode(b"/squad/tools/\xff.py"), reason="r \ud800")
    started = ToolStarted(tool="t", call_id="c", arguments={"k": ["\udcfe"]})
    assert failed.file == "/squad/tools/\ufffd.py" and failed.reason == "r \ufffd"
    assert json.loads(failed.model_dump_json())["file"] == "/squad/tools/\ufffd.py"
    assert json.loads(started.model_dump_json())["arguments"] == {"k": ["\ufffd"]}


async def test_a_bound_bus_runs_publishes_from_worker_threads_on_the_loop() -> None:
    bus = EventBus()
    bus.bind()
    loop_thread = threading.get_ident()
    ran_on: list[int] = []
    bus.add_listener(lambda event: ran_on.append(threading.get_ident()))
    called_on: list[int] = []

    def work() -> int:
        bus.publish(PoolEmpty())
        bus.on_loop(lambda _: called_on.append(threading.get_ident()), None)
        return threading.get_ident()

    worker = await anyio.to_thread.run_sync(work)
    assert worker != loop_thread
    assert ran_on == [loop_thread] and called_on == [loop_thread]


def test_an_unbound_bus_publishes_in_the_callers_thread() -> None:
    bus = EventBus()
    ran_on: list[int] = []
    bus.add_listener(lambda event: ran_on.append(threading.get_ident()))
    thread = threading.Thread(target=bus.publish, args=(PoolEmpty(),))
    thread.start()
    thread.join(timeout=10)
    assert ran_on == [thread.ident]
