"""The session pool under load: the concurrency bound, priority, nesting, admission, crashes."""

from __future__ import annotations

import errno
import threading
from collections import Counter
from typing import Any

import anyio
import pytest

from squadd.contracts.events import AgentStateChanged
from squadd.contracts.messages import ToolCall
from squadd.contracts.routes import RouteRequest, RouteResult
from squadd.contracts.sessions import SessionView
from squadd.runtime import runner as runner_module
from squadd.runtime.pool import SessionPool, SessionRecord
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session_info import SessionInfo
from squadd.state.journal.writer import Batch, JournalWriter
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Appended, TranscriptWriter, read_transcript
from squadd.tools.base import ToolResult
from squadd.tools.invoke import CallOrigin
from tests.runtime.scripted import (
    Gauge,
    Recorder,
    add_agent,
    call,
    eventually,
    script,
    settings,
    text,
)


async def _route_all(runtime: SquadRuntime, requests: list[RouteRequest]) -> list[RouteResult]:
    results: list[RouteResult | None] = [None] * len(requests)

    async def one(index: int, request: RouteRequest) -> None:
        results[index] = await runtime.route(request)

    async with anyio.create_task_group() as tg:
        for index, request in enumerate(requests):
            tg.start_soon(one, index, request)
    return [r for r in results if r is not None]


async def test_concurrency_bound_never_exceeds_max_concurrent(layout: SquadLayout) -> None:
    # Turns wait until two run at once, so the bound is reached however slow the machine.
    release = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"*": release})
    async with SquadRuntime(layout, settings(max_concurrent=2), gauge) as runtime:
        async def release_at_the_bound() -> None:
            await eventually(lambda: gauge.active == 2)
            release.set()

        async with anyio.create_task_group() as group:
            group.start_soon(release_at_the_bound)
            results = await _route_all(runtime, [
                RouteRequest(target_agent="fenster", task=f"task {i}") for i in range(10)])
    assert [r.ok for r in results] == [True] * 10
    assert gauge.turns == 10
    assert gauge.max_active == 2  # the bound was reached, and never passed


async def test_urgent_route_starts_before_queued_normal_ones(layout: SquadLayout) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"blocker": release})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="blocker",
                                                 wait_for_result=False))
        await eventually(lambda: gauge.active)  # the blocker holds the only slot
        for i in range(5):
            queued = await runtime.route(RouteRequest(target_agent="fenster", task=f"normal {i}",
                                                      wait_for_result=False))
            assert queued.ok and queued.state == "queued"
        urgent = await runtime.route(RouteRequest(target_agent="fenster", task="urgent one",
                                                  priority="urgent", wait_for_result=False))
        assert first.ok and urgent.ok and urgent.state == "queued"
        release.set()
        assert await runtime.settle(timeout_s=30)
    assert [s.task for s in gauge.starts] == [
        "blocker", "urgent one", "normal 0", "normal 1", "normal 2", "normal 3", "normal 4"]


async def test_nested_routes_under_full_pool_complete_without_deadlock(
        layout: SquadLayout) -> None:
    add_agent(layout, "child")
    add_agent(layout, "grandchild")
    provider = script(
        lead=[call("squad_route", targetAgent="child", task="do the child part"),
              text("parent done")],
        child=[call("squad_route", targetAgent="grandchild", task="do the leaf part"),
               text("child done")],
        grandchild=[text("leaf done")],
    )
    gauge = Gauge(provider, delay_s=0.01)
    async with SquadRuntime(layout, settings(max_concurrent=2), gauge) as runtime:
        with anyio.fail_after(20):
            results = await _route_all(runtime, [
                RouteRequest(target_agent="lead", task=f"parent {i}") for i in range(4)])
        states = Counter(v.state for v in runtime.snapshot().sessions)
    assert [r.answer for r in results] == ["parent done"] * 4
    assert states == Counter({"idle": 12})  # 4 parents, 4 children, 4 grandchildren
    assert gauge.max_active <= 2


async def test_waiting_parent_takes_its_slot_back_before_new_work(layout: SquadLayout) -> None:
    provider = script(
        lead=[call("squad_route", targetAgent="fenster", task="child work"), text("lead done")],
        default=[text("done")],
    )
    release, release_early = anyio.Event(), anyio.Event()
    gauge = Gauge(provider, hold={"parent": release, "early work": release_early})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        parent = await runtime.route(RouteRequest(target_agent="lead", task="parent",
                                                  wait_for_result=False))
        await eventually(lambda: gauge.active)
        early = await runtime.route(RouteRequest(target_agent="hockney", task="early work",
                                                 wait_for_result=False))
        release.set()
        assert parent.ok and early.ok and parent.session_id is not None
        record = runtime.pool.get(parent.session_id)
        await eventually(lambda: record is not None and record.state == "waiting", 10)
        assert not record.holds_slot
        late = await runtime.route(RouteRequest(target_agent="hockney", task="late work",
                                                wait_for_result=False))
        assert late.ok and late.state == "queued"
        release_early.set()
        assert await runtime.settle(timeout_s=30)
        answer = (await runtime.status(session_id=parent.session_id)).sessions[0].answer
    # lead gives its slot up to wait on fenster; early work was in line before the child;
    # when the child ends, lead gets the slot back ahead of the late work queued meanwhile.
    assert gauge.log == [("lead", "user"), ("hockney", "user"), ("fenster", "user"),
                         ("lead", "tool"), ("hockney", "user")]
    assert [s.task for s in gauge.starts][-1] == "late work"
    assert answer == "lead done"
    assert gauge.max_active == 1


async def test_full_pool_rejects_with_structured_failure(layout: SquadLayout) -> None:
    release = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"*": release})
    results: list[RouteResult] = []
    async with SquadRuntime(layout, settings(max_concurrent=2, max_queued=3), gauge) as runtime:
        async def route_twenty() -> None:
            results.extend(await _route_all(runtime, [
                RouteRequest(target_agent="fenster", task=f"task {i}") for i in range(20)]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(route_twenty)
            await eventually(lambda: gauge.active == 2)
            totals = runtime.pool.totals()
            release.set()
    assert (totals.running, totals.queued) == (2, 3)
    ran = [r for r in results if r.ok]
    refused = [r for r in results if not r.ok]
    assert len(ran) == 5 and len(refused) == 15
    for failure in refused:
        assert failure.reason == "pool_full"
        assert failure.session_id is None
        assert failure.pool is not None
        assert (failure.pool.running, failure.pool.queued) == (2, 3)
        assert (failure.pool.max_concurrent, failure.pool.max_queued) == (2, 3)
        assert "2/2 sessions running" in failure.message and "3/3 routes queued" in failure.message
    assert gauge.turns == 5


async def test_provider_crash_ends_session_in_error_and_pool_keeps_serving(
        layout: SquadLayout) -> None:
    provider = script([text("fine")], hockney=[
        call("squad_memory", agentName="hockney", learning="the parser is slow"), text("never")])
    gauge = Gauge(provider, crash_agents=frozenset({"hockney"}), crash_from_turn=1)
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        crashed = await runtime.route(RouteRequest(target_agent="hockney", task="explode"))
        after = await runtime.route(RouteRequest(target_agent="fenster", task="still there?"))
    assert not crashed.ok and crashed.reason == "failed" and crashed.state == "error"
    assert crashed.error is not None and "model backend exploded for hockney" in crashed.error
    assert crashed.session_id is not None
    transcript = read_transcript(layout.transcript(crashed.session_id))
    assert transcript.last_state == "error"
    assert [m["role"] for m in transcript.messages] == ["system", "user", "assistant", "tool"]
    assert "the parser is slow" in layout.history("hockney").read_text(encoding="utf-8")
    assert after.ok and after.answer == "fine"
    assert runtime.pool.totals().running == 0


async def test_every_state_change_is_an_event(layout: SquadLayout) -> None:
    bus = Recorder()
    release = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"*": release})
    runtime = SquadRuntime(layout, settings(max_concurrent=1), gauge, bus=None)
    runtime.bus.add_listener(bus.publish)
    async with runtime:
        async def release_once_one_waits() -> None:
            await eventually(lambda: runtime.pool.totals().queued == 1)
            release.set()

        async with anyio.create_task_group() as group:
            group.start_soon(release_once_one_waits)
            results = await _route_all(runtime, [
                RouteRequest(target_agent="fenster", task=f"t{i}") for i in range(2)])
    # One slot: whichever route got it second waited in the queue first.
    histories = {r.session_id: [e.state for e in bus.of("agent.state")
                                if e.session_id == r.session_id] for r in results}
    queued = [sid for sid, states in histories.items() if states[:1] == ["queued"]]
    assert len(queued) == 1, histories
    second = queued[0]
    assert histories[second] == ["queued", "creating", "active", "idle"]
    kinds = [e.type for e in bus.events]
    for kind in ("route.queued", "agent.spawned", "agent.idle", "pool.at_capacity",
                 "pool.empty", "agent.completed", "session.message"):
        assert kind in kinds, kind
    previous = {e.session_id: e.previous for e in bus.of("agent.state")
                if isinstance(e, AgentStateChanged) and e.state == "idle"}
    assert previous[second] == "active"


async def test_idle_session_is_reaped_and_its_answer_kept(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("remember me")]))
    async with SquadRuntime(layout, settings(idle_timeout_s=0.2), gauge) as runtime:
        result = await runtime.route(RouteRequest(target_agent="fenster", task="t"))
        assert result.session_id is not None
        assert runtime.pool.get(result.session_id) is not None
        await eventually(lambda: runtime.pool.get(result.session_id) is None)
        view = (await runtime.status(session_id=result.session_id)).sessions[0]
    assert view.state == "destroyed" and view.answer == "remember me"


async def test_resting_sessions_are_bounded_by_max_idle(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("x")]))
    async with SquadRuntime(layout, settings(max_idle=3, ended_keep=2), gauge) as runtime:
        ids = []
        for i in range(6):
            result = await runtime.route(RouteRequest(target_agent="fenster", task=f"t{i}"))
            ids.append(result.session_id)
        totals = runtime.pool.totals()
        views = runtime.snapshot().sessions
    assert totals.idle == 3
    assert [v.session_id for v in views if v.state == "idle"] == ids[3:]
    assert [v.session_id for v in views if v.state == "destroyed"] == ids[1:3]


async def test_queued_route_times_out_with_a_reason(layout: SquadLayout) -> None:
    gauge = Gauge(script([text("slow")]), delay_s=60.0)
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        await runtime.route(RouteRequest(target_agent="fenster", task="hog",
                                         wait_for_result=False))
        await eventually(lambda: gauge.active == 1)  # the hog holds the only slot
        late = await runtime.route(RouteRequest(target_agent="hockney", task="late",
                                                timeout_s=0.1))
        assert runtime.pool.totals().queued == 0
    assert not late.ok and late.reason == "queue_timeout"
    assert "0.1s" in late.message


@pytest.mark.parametrize("wait", [True, False])
async def test_cancel_interrupts_a_running_session(layout: SquadLayout, wait: bool) -> None:
    gauge = Gauge(script([text("never")]), delay_s=5.0)
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        results: list[RouteResult] = []

        async def route() -> None:
            results.append(await runtime.route(RouteRequest(
                target_agent="fenster", task="long", wait_for_result=wait)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(route)
            await eventually(lambda: gauge.active)
            live = runtime.pool.live()
            assert len(live) == 1
            assert await runtime.cancel(live[0].session_id)
        assert await runtime.settle(timeout_s=30)
        record = runtime.pool.get(live[0].session_id)
    assert record is not None and record.state == "interrupted"
    transcript = read_transcript(layout.transcript(live[0].session_id))
    assert transcript.last_state == "interrupted"
    if wait:
        assert not results[0].ok and results[0].reason == "interrupted"
    assert not await runtime.cancel("no-such-session")


async def test_a_slot_granted_before_the_route_takes_it_is_given_back_at_the_end() -> None:
    pool = SessionPool(settings(max_concurrent=1).pool, Recorder())
    first = SessionRecord(info=SessionInfo(session_id="s-1", agent="lead", model="m", task="a"))
    second = SessionRecord(info=SessionInfo(session_id="s-2", agent="lead", model="m", task="b"))
    first_ticket = pool.admit(first, "normal")
    second_ticket = pool.admit(second, "normal")
    assert second.state == "queued"
    await pool.take_slot(first, first_ticket, 1)
    pool.finish(first, "idle")  # the slot passes to the second ticket before it is taken
    assert second_ticket.granted
    await pool.take_slot(second, second_ticket, 1)
    assert second.state == "creating" and pool.totals().running == 1
    pool.finish(second, "idle")
    assert pool.totals().running == 0


async def _route_from_session(runtime: SquadRuntime, parent_id: str, task: str) -> ToolResult:
    """A waited route made on behalf of a session from outside its task, as the daemon's
    tool API (and so `squadd mcp` under the command provider) makes it."""
    route = ToolCall(id="api-1", name="squad_route",
                     arguments={"targetAgent": "fenster", "task": task})
    return await runtime.invoker.invoke(runtime.tools, route,
                                        CallOrigin(session_id=parent_id, agent="lead"))


@pytest.mark.parametrize("ending", ["answer", "crash", "cancel", "timeout"])
async def test_a_parent_whose_turn_ends_while_its_child_runs_keeps_no_slot(
        layout: SquadLayout, ending: str) -> None:
    release_parent, release_child = anyio.Event(), anyio.Event()
    gauge = Gauge(script([text("done")]),
                  hold={"parent": release_parent, "child": release_child},
                  crash_agents=frozenset({"lead"} if ending == "crash" else ()))
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        parent = await runtime.route(RouteRequest(
            target_agent="lead", task="parent", wait_for_result=False,
            timeout_s=0.3 if ending == "timeout" else None))
        assert parent.ok and parent.session_id is not None
        record = runtime.pool.get(parent.session_id)
        assert record is not None
        await eventually(lambda: gauge.active)
        results: list[ToolResult] = []
        async with anyio.create_task_group() as tg:
            async def child() -> None:
                results.append(await _route_from_session(runtime, parent.session_id, "child"))
            tg.start_soon(child)
            await eventually(lambda: record.state == "waiting")
            await eventually(lambda: gauge.active == 2)  # the child runs on the parent's slot
            if ending == "cancel":
                assert await runtime.cancel(parent.session_id)
            elif ending != "timeout":
                release_parent.set()
            await eventually(lambda: record.state in ("idle", "error", "interrupted"))
            runtime.pool.check_invariants()
            release_child.set()
        assert results[0].ok
        runtime.pool.check_invariants()
        assert record.state in ("idle", "error", "interrupted") and not record.holds_slot
        assert runtime.pool.totals().running == 0 and runtime.pool.totals().waiting == 0
        # The one slot is free: a new route runs at once.
        after = await runtime.route(RouteRequest(target_agent="hockney", task="after",
                                                 timeout_s=5))
        assert after.ok, after.message
        release_parent.set()


class HeldCommits:
    """Holds the commit thread before it writes a batch, from `hold()` until `release()`
    (bounded: a failing test never leaves the thread stuck)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.holding = threading.Event()
        self.held = threading.Event()
        self.go = threading.Event()
        real = JournalWriter.commit

        def commit(writer: JournalWriter, batch: Batch) -> None:
            if self.holding.is_set():
                self.held.set()
                self.go.wait(timeout=60)
            real(writer, batch)

        monkeypatch.setattr(JournalWriter, "commit", commit)

    def hold(self) -> None:
        self.holding.set()

    def release(self) -> None:
        self.holding.clear()
        self.go.set()


async def test_the_next_route_starts_while_the_last_one_s_end_is_made_durable(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    # One slot. The first session's last turn ends while the commit thread is held: its end
    # records cannot reach the disk, yet the queued route gets the slot and asks the model.
    commits = HeldCommits(monkeypatch)
    release_first, release_second = anyio.Event(), anyio.Event()
    gauge = Gauge(script([text("done")]),
                  hold={"first": release_first, "second": release_second})
    results: dict[str, RouteResult] = {}
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        async def first() -> None:
            results["first"] = await runtime.route(RouteRequest(target_agent="fenster",
                                                                task="first"))
        async with anyio.create_task_group() as tg:
            try:  # within the group: a failure must not wait for the held thread
                tg.start_soon(first)
                await eventually(lambda: gauge.active == 1)
                second = await runtime.route(RouteRequest(
                    target_agent="hockney", task="second", wait_for_result=False))
                assert second.ok and second.state == "queued"
                commits.hold()
                release_first.set()
                await eventually(lambda: [s.task for s in gauge.starts] == ["first", "second"])
                first_id = gauge.starts[0].session_id
                assert commits.held.is_set() and "first" not in results
                # Nothing of its end is on disk yet, and the pool still counts it live.
                transcript = read_transcript(layout.transcript(first_id))
                assert transcript.last_state != "completed"
                record = runtime.pool.get(first_id)
                assert record is not None and record.state == "active"
                assert not record.holds_slot and runtime.pool.totals().running == 1
                runtime.pool.check_invariants()
            finally:
                commits.release()
                release_second.set()
        assert results["first"].ok and results["first"].answer == "done"
        assert read_transcript(layout.transcript(first_id)).last_state == "completed"
        await eventually(lambda: runtime.pool.totals().running == 0)


async def test_an_end_that_cannot_be_written_after_the_slot_went_back_fails_its_route_alone(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first session's end records cannot be written (a full disk) after its slot went to
    # the next route: its caller hears the failure, the next route runs, no slot is lost.
    failing: set[str] = set()
    real = TranscriptWriter.append_unsynced

    def append_unsynced(writer: TranscriptWriter) -> Appended | None:
        if writer.path.stem in failing:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(writer)

    monkeypatch.setattr(TranscriptWriter, "append_unsynced", append_unsynced)
    release_first = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"first": release_first})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        results: dict[str, RouteResult] = {}

        async def route(task: str) -> None:
            results[task] = await runtime.route(RouteRequest(target_agent="fenster", task=task))
        async with anyio.create_task_group() as tg:
            tg.start_soon(route, "first")
            await eventually(lambda: gauge.active == 1)
            failing.add(gauge.starts[0].session_id)
            tg.start_soon(route, "second")
            await eventually(lambda: runtime.pool.queued == 1)
            release_first.set()
        assert not results["first"].ok and "No space left" in (results["first"].error or "")
        assert results["second"].ok and results["second"].answer == "done"
        record = runtime.pool.get(gauge.starts[0].session_id)
        assert record is not None and record.state == "error" and not record.holds_slot
        assert runtime.pool.totals().running == 0
        runtime.pool.check_invariants()


async def test_a_child_whose_conversation_is_over_hands_its_slot_to_its_waiting_parent(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    commits = HeldCommits(monkeypatch)
    release_parent, release_child = anyio.Event(), anyio.Event()
    gauge = Gauge(script([text("done")]),
                  hold={"parent": release_parent, "child": release_child})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        parent = await runtime.route(RouteRequest(target_agent="lead", task="parent",
                                                  wait_for_result=False))
        assert parent.ok and parent.session_id is not None
        record = runtime.pool.get(parent.session_id)
        assert record is not None
        await eventually(lambda: gauge.active)
        results: list[ToolResult] = []

        async def child() -> None:
            results.append(await _route_from_session(runtime, parent.session_id, "child"))
        async with anyio.create_task_group() as tg:
            try:  # within the group: a failure must not wait for the held thread
                tg.start_soon(child)
                await eventually(lambda: gauge.active == 2)  # the child runs on the slot
                queued = await runtime.route(RouteRequest(
                    target_agent="hockney", task="queued", wait_for_result=False))
                assert queued.ok and queued.state == "queued"
                commits.hold()
                release_child.set()
                # The child's end is not durable, and its slot is the waiting parent's now,
                # not the queued route's.
                await eventually(lambda: record.holds_slot)
                assert record.state == "waiting" and not results
                assert "queued" not in [s.task for s in gauge.starts]
                runtime.pool.check_invariants()
            finally:
                commits.release()
        assert results[0].ok
        release_parent.set()
        await eventually(lambda: [s.task for s in gauge.starts][-1] == "queued")
        await eventually(lambda: runtime.pool.totals().running == 0)


@pytest.mark.parametrize("ending", ["queue_timeout", "cancelled"])
async def test_a_route_that_never_started_reads_as_its_transcript_says(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    """Asked while its end is being written, and after: the session's view never claims a
    stop the transcript does not record, and ends up saying what the transcript says."""
    writing, go_on = threading.Event(), threading.Event()
    real_end = runner_module.end_unstarted

    async def slow_end(*args: Any, **kwargs: Any) -> None:
        writing.set()
        await anyio.to_thread.run_sync(go_on.wait, 10)
        await real_end(*args, **kwargs)

    monkeypatch.setattr(runner_module, "end_unstarted", slow_end)
    release = anyio.Event()
    gauge = Gauge(script([text("done")]), hold={"hog": release})
    async with SquadRuntime(layout, settings(max_concurrent=1), gauge) as runtime:
        await runtime.route(RouteRequest(target_agent="fenster", task="hog",
                                         wait_for_result=False))
        await eventually(lambda: gauge.active)
        late = await runtime.route(RouteRequest(
            target_agent="hockney", task="late", wait_for_result=False,
            timeout_s=0.05 if ending == "queue_timeout" else 60))
        assert late.ok and late.session_id is not None
        if ending == "cancelled":
            assert await runtime.cancel(late.session_id)
        await anyio.to_thread.run_sync(writing.wait, 10)
        during = await runtime.session(late.session_id)
        go_on.set()
        await eventually(lambda: runtime.pool.get(late.session_id) is None)
        after = await runtime.session(late.session_id)
        release.set()
    transcript = read_transcript(layout.transcript(late.session_id))
    assert during is not None and after is not None
    assert during.error is None or "squadd stopped" not in during.error
    if ending == "queue_timeout":
        assert transcript.last_state == "error"
        assert after.error is not None and after.error.startswith("error: no slot came free")
    else:
        assert transcript.last_state == "interrupted"
        assert after.error == "interrupted: cancelled before it started"


def test_sessions_of_an_earlier_daemon_are_kept_behind_todays_within_the_bound() -> None:
    pool = SessionPool(settings(ended_keep=3).pool, Recorder())
    def view(session_id: str) -> SessionView:
        return SessionView(session_id=session_id, agent="lead", state="destroyed", task="t")
    pool.remember(view("today"))
    live = SessionRecord(info=SessionInfo(session_id="live", agent="lead", model="m", task="a"))
    pool.admit(live, "normal")
    pool.remember_past([view("old-1"), view("old-2"), view("old-3"), view("today"),
                        view("live")])
    assert [v.session_id for v in pool.views(include_destroyed=True)] == [
        "live", "old-2", "old-3", "today"]  # the live one, then the kept, oldest first
    pool.remember_past([view("older")])  # no room left: nothing of the past is pushed in
    assert "older" not in {v.session_id for v in pool.views(include_destroyed=True)}
