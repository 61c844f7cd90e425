"""The worker's job loop, in this process against a real redis-server: a job that fails in an
unexpected way ends with an error and the worker goes on to the next job."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog.testing

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.cluster.jobs import JobQueue
from squadd.cluster.requests import RequestServer
from squadd.cluster.wire import Job, Reply, Request
from squadd.config import load_settings
from squadd.contracts.events import AgentCompleted, BaseEvent, SessionMessage
from squadd.contracts.messages import UserMessage, message_record
from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedCall, ScriptedTurn
from squadd.runtime.session_info import SessionInfo, session_meta
from squadd.state.layout import SquadLayout
from squadd.worker.process import Worker
from squadd.worker.session import EndEvents, ForwardingSink, StaleLease, checked


def make_worker(guard: RedisGuard, repo: Path) -> Worker:
    settings = load_settings(None, overrides={"cluster": {
        "url": guard.url, "heartbeat_s": 0.1, "lease_s": 60.0, "request_timeout_s": 5.0}})
    return Worker(name="w1", slots=1, layout=SquadLayout.for_repo(repo), settings=settings,
                  provider=ReplayProvider(ReplayScript(default=[])), guard=guard)


async def run_s1_until(event: anyio.Event, guard: RedisGuard, worker: Worker,
                       coordinator: Callable[[Request], Awaitable[Reply]]) -> None:
    """`running_job_s1` until `event` is set (bounded)."""
    async with running_job_s1(guard, worker, coordinator):
        with anyio.fail_after(60):
            await event.wait()


def short_lease_worker(guard: RedisGuard, repo: Path, slots: int = 1,
                       turns: list[ScriptedTurn] | None = None) -> Worker:
    """A worker whose leases are renewed every 0.1 s, its sessions answered "done" (or
    `turns`)."""
    settings = load_settings(None, overrides={"cluster": {
        "url": guard.url, "heartbeat_s": 0.1, "lease_s": 0.3, "request_timeout_s": 30.0}})
    return Worker(name="w1", slots=slots, layout=SquadLayout.for_repo(repo), settings=settings,
                  guard=guard, provider=ReplayProvider(ReplayScript(
                      default=turns or [ScriptedTurn(text="done")])))


@contextlib.asynccontextmanager
async def running_job_s1(guard: RedisGuard, worker: Worker,
                         coordinator: Callable[[Request], Awaitable[Reply]]
                         ) -> AsyncIterator[None]:
    """`coordinator` answering requests and `worker` running, job s1 submitted; both are
    stopped at the end."""
    server = RequestServer(guard, coordinator, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        await tg.start(worker.run)
        await JobQueue(guard).submit(Job(session_id="s1", agent="lead", timeout_s=60))
        try:
            yield
        finally:
            worker.stopping.set()
            tg.cancel_scope.cancel()


async def two_jobs_in_turn(guard: RedisGuard, repo: Path,
                           coordinator: Callable[[Request], Awaitable[Reply]],
                           provider: Any) -> None:
    """Jobs s1 then s2 on a worker of one slot whose model is `provider`, `coordinator`
    answering their requests; returns once both have ended."""
    await jobs_in_turn(guard, repo, coordinator, provider,
                       [Job(session_id=sid, agent="lead", timeout_s=60) for sid in ("s1", "s2")])


async def jobs_in_turn(guard: RedisGuard, repo: Path,
                       coordinator: Callable[[Request], Awaitable[Reply]],
                       provider: Any, jobs: list[Job]) -> None:
    """`jobs` in turn on a worker of one slot whose model is `provider`, `coordinator`
    answering their requests; returns once all have ended."""
    ends: list[str] = []
    all_ended = anyio.Event()

    async def counted(request: Request) -> Reply:
        reply = await coordinator(request)
        if request.kind == "end":
            ends.append(request.session_id)
            if len(ends) == len(jobs):
                all_ended.set()
        return reply

    settings = load_settings(None, overrides={"cluster": {
        "url": guard.url, "heartbeat_s": 0.1, "lease_s": 60.0, "request_timeout_s": 30.0}})
    worker = Worker(name="w1", slots=1, layout=SquadLayout.for_repo(repo),
                    settings=settings, guard=guard, provider=provider)
    server = RequestServer(guard, counted, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        await tg.start(worker.run)
        for job in jobs:  # one slot: each job is taken after the one before ended
            await JobQueue(guard).submit(job)
        with anyio.fail_after(60):
            await all_ended.wait()
        worker.stopping.set()
        tg.cancel_scope.cancel()


def claimed(request: Request, info: SessionInfo) -> Reply:
    """The coordinator's answer to a claim of `info`'s session: epoch 1, its task so far."""
    return Reply(request_id=request.request_id, ok=True, body={
        "epoch": 1, "info": session_meta(info), "tools": [], "squad_specs": [],
        "messages": [message_record(UserMessage(content="t"))]})


async def test_a_job_that_fails_unexpectedly_is_ended_and_the_worker_takes_the_next(
        guard: RedisGuard, tmp_path: Path) -> None:
    seen: list[Request] = []
    later_claimed = anyio.Event()

    async def coordinator(request: Request) -> Reply:
        seen.append(request)
        if request.kind == "claim" and request.session_id == "broken":
            # A claim answer without the epoch: the worker cannot run the session.
            return Reply(request_id=request.request_id, ok=True, body={})
        if request.kind == "claim":
            later_claimed.set()
            return Reply(request_id=request.request_id, ok=False, refused="invalid",
                         error="cancelled")
        return Reply(request_id=request.request_id, ok=True)

    worker = make_worker(guard, tmp_path)
    queue = JobQueue(guard)
    server = RequestServer(guard, coordinator, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        await tg.start(worker.run)
        await queue.submit(Job(session_id="broken", agent="lead", timeout_s=60))
        await queue.submit(Job(session_id="later", agent="lead", timeout_s=60))
        with anyio.fail_after(60):
            await later_claimed.wait()
        tg.cancel_scope.cancel()
    ends = [r for r in seen if r.kind == "end"]
    assert [r.session_id for r in ends] == ["broken"]
    assert ends[0].body["status"] == "error"
    assert "KeyError" in ends[0].body["error"] and "w1" in ends[0].body["error"]
    # The broken session's job is done with (one slot: before the later one was taken), so
    # no other worker takes it up again.
    left = await guard.client.xrange(keys.JOBS_NORMAL)
    assert [Job.model_validate_json(fields["data"]).session_id for _, fields in left] \
        in (["later"], []), left


async def test_the_job_intake_goes_on_after_redis_refuses_a_read(
        guard: RedisGuard, tmp_path: Path) -> None:
    claimed = anyio.Event()

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            claimed.set()
        return Reply(request_id=request.request_id, ok=False, refused="invalid",
                     error="cancelled")

    worker = make_worker(guard, tmp_path)
    server = RequestServer(guard, coordinator, reply_ttl_s=60, redo_safe=())
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        await tg.start(worker.run)
        with structlog.testing.capture_logs() as logs:
            # Something else wrote the urgent stream's key: every read of it is refused.
            await guard.client.delete(keys.JOBS_URGENT)
            await guard.client.set(keys.JOBS_URGENT, "not a stream")
            for _ in range(6000):  # until the worker has met the refusal (bounded)
                if any(e["event"] == "no job taken; trying again" for e in logs):
                    break
                await anyio.sleep(0.01)
            await guard.client.delete(keys.JOBS_URGENT)
        assert any("WRONGTYPE" in str(e.get("error")) for e in logs), logs
        await JobQueue(guard).submit(Job(session_id="s1", agent="lead", timeout_s=60))
        with anyio.fail_after(60):
            await claimed.wait()
        tg.cancel_scope.cancel()


async def test_a_claim_the_coordinator_failed_to_store_is_taken_again_after_the_lease(
        guard: RedisGuard, tmp_path: Path) -> None:
    """A claim refused as "failed" (the coordinator's disk failed while it stored the hand-over)
    leaves the job pending: after its lease the worker takes it again, and the session runs to
    its end, so its route learns the outcome instead of waiting out its bound."""
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
    claims: list[Request] = []
    ends: list[Request] = []
    ended = anyio.Event()

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            claims.append(request)
            if len(claims) == 1:
                return Reply(request_id=request.request_id, ok=False, refused="failed",
                             error="OSError: [Errno 28] No space left on device")
            return claimed(request, info)
        if request.kind == "end":
            ends.append(request)
            ended.set()
        return Reply(request_id=request.request_id, ok=True)

    worker = short_lease_worker(guard, tmp_path)
    ack, acked = worker.jobs.ack, anyio.Event()

    async def watched_ack(stream: str, entry_id: str) -> None:
        await ack(stream, entry_id)
        acked.set()

    worker.jobs.ack = watched_ack  # type: ignore[method-assign]
    async with running_job_s1(guard, worker, coordinator):
        with anyio.fail_after(60):
            await ended.wait()
            await acked.wait()  # the job is acknowledged after the end's reply
    assert [c.body["reclaimed"] for c in claims] == [False, True]
    assert [e.body["status"] for e in ends] == ["completed"] and worker.finished == 1
    assert await guard.client.xlen(keys.JOBS_NORMAL) == 0  # acknowledged once it ended


async def test_an_end_the_coordinator_failed_to_store_leaves_the_job_for_the_next_claim(
        guard: RedisGuard, tmp_path: Path) -> None:
    """A job the worker gives up on before its session recorded anything sends an end with no
    records; refused as "failed", it must not be acknowledged, or the route would wait out its
    bound: the job is claimed again after its lease, and this time the session ends."""
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
    claims: list[Request] = []
    ends: list[Request] = []
    done = anyio.Event()

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            claims.append(request)
            if len(claims) == 1:  # an answer without its epoch: the worker gives up
                return Reply(request_id=request.request_id, ok=True, body={})
            return claimed(request, info)
        if request.kind == "end":
            ends.append(request)
            if len(ends) == 1:
                return Reply(request_id=request.request_id, ok=False, refused="failed",
                             error="OSError: [Errno 5] Input/output error")
            done.set()
        return Reply(request_id=request.request_id, ok=True)

    await run_s1_until(done, guard, short_lease_worker(guard, tmp_path), coordinator)
    assert ends[0].body["records"] == []
    assert [e.body["status"] for e in ends] == ["error", "completed"]
    assert [c.body["reclaimed"] for c in claims] == [False, True]


async def test_a_job_the_coordinator_acknowledged_with_its_end_is_not_acknowledged_again(
        guard: RedisGuard, tmp_path: Path) -> None:
    """The end names the worker's job; a reply that says the coordinator acknowledged it (in
    the reply's own transaction) spares the worker its own round trip, and a lease round that
    finds the job gone while the end is on its way takes that for its end, not a loss."""
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
    offered: list[dict[str, Any]] = []
    gone_seen, done = anyio.Event(), anyio.Event()

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            return claimed(request, info)
        if request.kind == "end":
            job = request.body["job"]
            offered.append(job)
            # The job goes first, and a lease round meets its going before the reply.
            await JobQueue(guard).ack(job["stream"], job["entry"])
            await gone_seen.wait()
            return Reply(request_id=request.request_id, ok=True, body={"acked": True},
                         job_done=(job["stream"], job["entry"]))
        return Reply(request_id=request.request_id, ok=True)

    worker = short_lease_worker(guard, tmp_path)
    keep, ack, worker_ack = worker.jobs.keep, worker.jobs.ack, worker._ack
    own_acks: list[str] = []

    async def watched_keep(*args: Any, **kwargs: Any) -> Any:
        found = await keep(*args, **kwargs)
        if offered and found[1]:  # the end is on its way, and the job is gone
            gone_seen.set()
        return found

    async def counted_ack(stream: str, entry_id: str) -> None:
        own_acks.append(entry_id)
        await ack(stream, entry_id)

    async def finished(running: Any) -> None:
        await worker_ack(running)
        done.set()

    worker.jobs.keep = watched_keep  # type: ignore[method-assign]
    worker.jobs.ack = counted_ack  # type: ignore[method-assign]
    worker._ack = finished  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        await run_s1_until(done, guard, worker, coordinator)
    assert len(offered) == 1 and offered[0]["stream"] == keys.JOBS_NORMAL
    assert own_acks == [] and worker.finished == 1
    assert await guard.client.xlen(keys.JOBS_NORMAL) == 0
    assert not [e for e in logs if e["event"].startswith(("job lost", "job taken over"))]


async def test_a_refused_transcript_flush_raises_stale_lease_itself() -> None:
    async def refuse(kind: str, suffix: str, body: dict[str, Any]) -> Reply:
        return checked(Reply(request_id=suffix, ok=False, refused="stale_epoch",
                             error="lease epoch 1 is stale"))

    writer = ForwardingSink(refuse, lambda: None, anyio.Event())
    writer.add("note", text="x")
    # The session's caller tells a lease that moved on from an outage by this type.
    with pytest.raises(StaleLease, match="stale"):
        await writer.commit()
    assert writer.pending == 1  # nothing was confirmed, so nothing is dropped


async def test_the_forwarding_sink_numbers_its_records_and_sends_them_ahead_of_a_request(
        ) -> None:
    """The records a model request carries are stored by the coordinator before
    `send_ahead` returns (a worker has no group commit to ride), in order and numbered;
    `written` counts only what the coordinator confirmed."""
    sent: list[dict[str, Any]] = []

    async def store(kind: str, suffix: str, body: dict[str, Any]) -> Reply:
        sent.append({"kind": kind, "suffix": suffix, "records": body["records"]})
        return Reply(request_id=suffix, ok=True)

    sink = ForwardingSink(store, lambda: None, anyio.Event())
    sink.add("message", **sink.system_fields("You are lead."))
    sink.add("state", state="active")
    assert (sink.pending, sink.written, sent) == (2, 0, [])
    riding = await sink.send_ahead(on_error=lambda: None)
    assert (sink.pending, sink.written) == (0, 2)
    [request] = sent
    assert request["suffix"] == "r1-2"
    assert [r["n"] for r in request["records"]] == [1, 2]
    assert request["records"][0]["message"] == {"role": "system", "content": "You are lead."}
    await riding.finished()  # already durable: nothing more is sent
    sink.add("note", text="between turns")
    await sink.commit()
    assert [r["suffix"] for r in sent] == ["r1-2", "r3-3"] and sink.written == 3


async def test_the_records_that_end_a_session_wait_for_the_end_request_and_so_does_its_event(
        ) -> None:
    """The last flush (a completed or error state among its records) sends nothing: the
    records stay pending for the end request to carry, and the session's end event is
    published only once the coordinator confirmed that end."""
    sent: list[str] = []

    async def store(kind: str, suffix: str, body: dict[str, Any]) -> Reply:
        sent.append(suffix)
        return Reply(request_id=suffix, ok=True)

    sink = ForwardingSink(store, lambda: None, anyio.Event())
    bus: list[BaseEvent] = []
    events = EndEvents(_ListSink(bus), sink)
    sink.add("message", message={"role": "assistant", "content": "done"})
    sink.add("state", state="completed", answer="done")
    await sink.commit()
    message = SessionMessage(session_id="s1", agent="lead", role="assistant", content="done")
    events.publish(message)
    completed = AgentCompleted(session_id="s1", agent="lead", answer="done")
    events.publish(completed)
    assert sent == [] and sink.holding and (sink.pending, sink.written) == (2, 0)
    assert bus == [message]  # the end waits; every other event goes at once
    await sink.commit()  # a second flush before the end sends nothing either
    ending = sink.ending()
    assert [(r["n"], r.get("state")) for r in ending] == [(1, None), (2, "completed")]
    sink.ended(len(ending))
    events.release()
    assert (sink.pending, sink.written, sink.holding) == (0, 2, False)
    assert bus == [message, completed] and sent == []


class _ListSink:
    def __init__(self, into: list[BaseEvent]):
        self.into = into

    def publish(self, event: BaseEvent) -> None:
        self.into.append(event)


async def test_a_finished_session_sends_its_last_records_with_its_end_in_one_request(
        guard: RedisGuard, tmp_path: Path) -> None:
    """A session run to its end on a worker: its final answer and completed state reach the
    coordinator in the end request (no records request carries them), and the worker's bus
    tells of the end only after the coordinator answered that request."""
    seen: list[Request] = []
    ended = anyio.Event()
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
    worker = short_lease_worker(guard, tmp_path)
    told_before_end: list[BaseEvent] = []

    async def coordinator(request: Request) -> Reply:
        seen.append(request)
        if request.kind == "claim":
            return claimed(request, info)
        if request.kind == "end":
            while (event := subscription.get_nowait()) is not None:
                told_before_end.append(event)
            ended.set()
        return Reply(request_id=request.request_id, ok=True)

    with worker.bus.subscribe(types=["agent.completed"]) as subscription:
        async with running_job_s1(guard, worker, coordinator):
            with anyio.fail_after(60):
                await ended.wait()
                told = await subscription.get(within=30)
    assert told_before_end == [] and isinstance(told, AgentCompleted), told
    assert (seen[0].kind, seen[-1].kind) == ("claim", "end")
    carried = [r.body.get("records") or [] for r in seen if r.kind in ("records", "end")]
    states = [[x.get("state") for x in batch if x.get("kind") == "state"] for batch in carried]
    assert states[-1] == ["completed"] and all("completed" not in s for s in states[:-1])
    end = seen[-1]
    assert end.body["status"] == "completed" and end.body["answer"] == "done"
    messages = [x["message"] for x in end.body["records"] if x.get("kind") == "message"]
    assert messages and messages[-1]["content"] == "done"
    numbers = [x["n"] for batch in carried for x in batch]
    assert numbers == list(range(1, len(numbers) + 1))  # none lost, none twice


async def test_a_session_whose_job_redis_lost_carries_on_to_its_end(
        guard: RedisGuard, tmp_path: Path) -> None:
    first_records, lease_checked, ended = anyio.Event(), anyio.Event(), anyio.Event()
    ends: list[Request] = []
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            return claimed(request, info)
        # The first turn's records go before the second model call: the session is mid-run
        # (its end, which may have the job acknowledged with its reply, is still to come).
        if request.kind == "records" and not first_records.is_set():
            first_records.set()
            await lease_checked.wait()  # the session is mid-run while Redis loses its job
        if request.kind == "end":
            ends.append(request)
            ended.set()
        return Reply(request_id=request.request_id, ok=True)

    # Two slots: the free one's intake makes the job streams' group again, as it would.
    worker = short_lease_worker(guard, tmp_path, slots=2, turns=[
        ScriptedTurn(tool_calls=[ScriptedCall(name="no_such_tool")]), ScriptedTurn(text="done")])
    with structlog.testing.capture_logs() as logs:
        async with running_job_s1(guard, worker, coordinator):
            try:
                with anyio.fail_after(60):
                    await first_records.wait()
                    # As a Redis restarted without its data leaves the job streams.
                    await guard.client.delete(*keys.JOB_STREAMS)
                    for _ in range(6000):  # until the lease keeper has met the loss (bounded)
                        if any(e["event"].startswith("job lost from Redis") for e in logs):
                            break
                        await anyio.sleep(0.01)
                    lease_checked.set()
                    await ended.wait()
            finally:  # a session's flush waits shielded: let it go
                lease_checked.set()
    assert ends[0].body["status"] == "completed" and ends[0].body["answer"] == "done"
    assert not any(e["event"].startswith("job taken over") for e in logs)


async def test_a_lease_renewal_that_meets_a_job_just_acknowledged_warns_of_nothing(
        guard: RedisGuard, tmp_path: Path) -> None:
    """The lease keeper asks Redis about a job in the moment the job is acknowledged (and so
    gone): that is the job's end, not "job lost from Redis"."""
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            return claimed(request, info)
        return Reply(request_id=request.request_id, ok=True)

    worker = short_lease_worker(guard, tmp_path)
    keep, ack = worker.jobs.keep, worker.jobs.ack
    found_gone, round_over, acked = anyio.Event(), anyio.Event(), anyio.Event()

    async def watched_keep(*args: Any, **kwargs: Any) -> Any:
        if found_gone.is_set():  # the keeper is done with the round that met the job gone
            round_over.set()
        found = await keep(*args, **kwargs)
        if found[1]:  # a job it renews is gone from Redis
            found_gone.set()
        return found

    async def slow_ack(stream: str, entry_id: str) -> None:
        await ack(stream, entry_id)  # gone from Redis now, still this worker's job
        # A keeper that took the job for lost stops renewing it, and no next round comes.
        with anyio.move_on_after(5):
            await round_over.wait()
        acked.set()

    worker.jobs.keep = watched_keep  # type: ignore[method-assign]
    worker.jobs.ack = slow_ack  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        async with running_job_s1(guard, worker, coordinator):
            with anyio.fail_after(60):
                await acked.wait()
    assert found_gone.is_set() and worker.finished == 1
    assert not [e for e in logs if e["event"].startswith(("job lost", "job taken over"))]


def test_the_squad_specs_of_every_claim_are_one_object_per_distinct_spec() -> None:
    """Each job's proxies hand the provider the same spec objects, so the encoded `tools`
    member a provider keeps by the specs' identities (`ToolsJson`) is made once."""
    from squadd.cluster.wire import SPECS_KEPT, SpecsSeen
    from squadd.providers.base import ToolsJson, tool_specs
    from squadd.worker.session import SquadToolProxy

    seen = SpecsSeen()
    route = {"name": "squad_route", "description": "Route a task.",
             "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}
    decide = {"name": "squad_decide", "description": "Record a decision.",
              "parameters": {"type": "object", "properties": {"title": {"type": "string"}}}}

    def proxies(specs: list[dict[str, object]]) -> list[SquadToolProxy]:
        return [SquadToolProxy(seen(spec), send=None, on_cancel=lambda: None)  # type: ignore[arg-type]
                for spec in specs]

    first, second = proxies([route, decide]), proxies([dict(route), dict(decide)])
    assert [p.spec() for p in first] == [p.spec() for p in second]
    assert all(a.spec() is b.spec() for a, b in zip(first, second, strict=True))
    encoded: list[object] = []
    tools_json = ToolsJson(lambda specs: encoded.append(specs) or tool_specs(specs))
    tools_json([p.spec() for p in first])
    tools_json([p.spec() for p in second])
    assert len(encoded) == 1
    changed = seen({**route, "description": "Route a task, now said otherwise."})
    assert changed is not first[0].spec() and changed.description.endswith("otherwise.")
    for n in range(SPECS_KEPT):  # a bounded keep: the oldest go first
        seen({**decide, "name": f"tool_{n}"})
    assert seen(route) is not first[0].spec()


def test_a_claim_names_the_spec_lists_it_holds_and_a_reply_may_name_one_instead() -> None:
    """A reply carrying squad specs keeps them under their id; one naming a held id gets the
    same spec objects back; one naming an id not held (it fell out) is a `ClusterError`, so
    the job is claimed again."""
    from squadd.cluster.wire import SPEC_SETS_KEPT, SpecsSeen, specs_id
    from squadd.errors import ClusterError

    seen = SpecsSeen()
    route = {"name": "squad_route", "description": "Route a task.",
             "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}
    first_id = specs_id([route])
    assert seen.held == []
    carried = seen.claimed({"squad_specs_id": first_id, "squad_specs": [route]})
    assert seen.held == [first_id] and [s.name for s in carried] == ["squad_route"]
    named = seen.claimed({"squad_specs_id": first_id})
    assert named == carried and all(a is b for a, b in zip(named, carried, strict=True))
    assert seen.claimed({"squad_specs": []}) == []  # a coordinator that names no id
    for n in range(SPEC_SETS_KEPT):  # a bounded keep: the oldest go first
        other = [{**route, "name": f"tool_{n}"}]
        seen.claimed({"squad_specs_id": specs_id(other), "squad_specs": other})
    assert first_id not in seen.held and len(seen.held) == SPEC_SETS_KEPT
    with pytest.raises(ClusterError, match="does not hold"):
        seen.claimed({"squad_specs_id": first_id})


async def test_a_job_whose_claim_names_held_specs_runs_with_them_unsent(
        guard: RedisGuard, tmp_path: Path) -> None:
    """The second job's claim names the spec list the first one's reply carried; the reply
    names it back without the specs, and the session still calls the squad tool through the
    coordinator."""
    from squadd.cluster.wire import specs_id
    from squadd.tools.base import ToolResult

    status = {"name": "squad_status", "description": "The squad's state.",
              "parameters": {"type": "object", "properties": {}}}
    held = specs_id([status])
    claims: list[Request] = []
    tool_calls: list[Request] = []

    async def coordinator(request: Request) -> Reply:
        sid = request.session_id
        if request.kind == "claim":
            claims.append(request)
            info = SessionInfo(session_id=sid, agent="lead", model="m", task="t")
            reply = claimed(request, info)
            body = {**reply.body, "squad_specs_id": held, "tools": ["squad_status"]}
            if held not in (request.body.get("specs_held") or []):
                body["squad_specs"] = [status]
            else:
                body.pop("squad_specs")
            return Reply(request_id=request.request_id, ok=True, body=body)
        if request.kind == "tool":
            tool_calls.append(request)
            return Reply(request_id=request.request_id, ok=True, body={
                "result": ToolResult.success("all idle").model_dump(mode="json")})
        return Reply(request_id=request.request_id, ok=True)

    await two_jobs_in_turn(guard, tmp_path, coordinator, ReplayProvider(ReplayScript(default=[
        ScriptedTurn(tool_calls=[ScriptedCall(name="squad_status")]), ScriptedTurn(text="done")])))
    assert [c.body["specs_held"] for c in claims] == [[], [held]]
    assert [c.session_id for c in tool_calls] == ["s1", "s2"]
    assert all(c.body["call"]["name"] == "squad_status" for c in tool_calls)


def test_a_claim_names_the_prompts_it_holds_and_a_reply_may_name_one_instead() -> None:
    """A system prompt a reply carries is kept under its digest (computed here); a reply
    naming a held digest gets that text back; one naming a digest not held is a
    `ClusterError`; the keep is bounded by count and by size, the least used going first."""
    from squadd.cluster import wire
    from squadd.cluster.wire import PromptsSeen
    from squadd.errors import ClusterError
    from squadd.state.transcripts import prompt_digest

    seen = PromptsSeen()
    prompt = "You are lead. " * 2000
    first = seen.filled([{"role": "system", "content": prompt}, {"role": "user", "content": "t"}])
    assert first[0]["content"] is prompt and seen.held == [prompt_digest(prompt)]
    named = seen.filled([{"role": "system", "prompt": prompt_digest(prompt)},
                         {"role": "user", "content": "u"}])
    assert named == [{"role": "system", "content": prompt}, {"role": "user", "content": "u"}]
    assert seen.filled([{"role": "system"}]) == [{"role": "system"}]  # an empty prompt
    with pytest.raises(ClusterError, match="does not hold"):
        seen.filled([{"role": "system", "prompt": "0" * 32}])
    for n in range(wire.PROMPTS_KEPT - 1):
        seen.filled([{"role": "system", "content": f"prompt {n}"}])
    seen.filled([{"role": "system", "prompt": prompt_digest(prompt)}])  # used: now the newest
    seen.filled([{"role": "system", "content": "one more"}])
    assert len(seen.held) == wire.PROMPTS_KEPT and prompt_digest(prompt) in seen.held
    assert prompt_digest("prompt 0") not in seen.held  # the least used went
    big = PromptsSeen()
    for n in range(3):
        big.filled([{"role": "system", "content": str(n) * (wire.PROMPT_BYTES_KEPT // 2)}])
    assert big.held == [prompt_digest(str(n) * (wire.PROMPT_BYTES_KEPT // 2)) for n in (1, 2)]


async def test_a_job_whose_claim_names_its_held_prompt_runs_with_that_prompt(
        guard: RedisGuard, tmp_path: Path) -> None:
    """The second job's claim names the prompt the first one's reply carried; the reply names
    it by digest, and the model is sent the same system prompt both times."""
    from squadd.state.transcripts import prompt_digest
    from tests.runtime.scripted import Gauge

    prompt = "You are lead, a Squad agent. " * 500
    claims: list[Request] = []

    async def coordinator(request: Request) -> Reply:
        sid = request.session_id
        if request.kind == "claim":
            claims.append(request)
            info = SessionInfo(session_id=sid, agent="lead", model="m", task=f"task {sid}")
            system: dict[str, Any] = {"role": "system", "content": prompt}
            if prompt_digest(prompt) in request.body["prompts_held"]:
                system = {"role": "system", "prompt": prompt_digest(prompt)}
            reply = claimed(request, info)
            return Reply(request_id=request.request_id, ok=True, body={
                **reply.body, "messages": [system, *reply.body["messages"]]})
        return Reply(request_id=request.request_id, ok=True)

    gauge = Gauge(ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")])))
    await two_jobs_in_turn(guard, tmp_path, coordinator, gauge)
    assert [c.body["prompts_held"] for c in claims] == [[], [prompt_digest(prompt)]]
    assert [r.messages[0].content for r in gauge.requests] == [prompt, prompt]
    assert [r.messages[0].role for r in gauge.requests] == ["system", "system"]


async def test_a_handed_job_runs_without_a_claim_only_where_its_prompt_and_specs_are_held(
        guard: RedisGuard, tmp_path: Path) -> None:
    """Three jobs handed over, each naming the prompt by digest and the specs by id: the
    first is claimed (this worker holds neither yet); the second runs under epoch 1 with no
    claim, its requests naming this host, marked held by Redis and carrying the job's nonce;
    the third names a prompt not held and is claimed."""
    import socket

    from squadd.cluster.wire import specs_id
    from squadd.state.transcripts import prompt_digest
    from tests.runtime.scripted import Gauge

    prompt = "You are lead, a Squad agent. " * 200
    status = {"name": "squad_status", "description": "The squad's state.",
              "parameters": {"type": "object", "properties": {}}}
    requests: list[Request] = []

    async def coordinator(request: Request) -> Reply:
        requests.append(request)
        if request.kind == "claim":
            info = SessionInfo(session_id=request.session_id, agent="lead", model="m",
                               task=f"task {request.session_id}")
            reply = claimed(request, info)
            return Reply(request_id=request.request_id, ok=True, body={
                **reply.body, "epoch": 2, "squad_specs_id": specs_id([status]),
                "squad_specs": [status], "tools": ["squad_status"],
                "messages": [{"role": "system", "content": prompt},
                             *reply.body["messages"]]})
        return Reply(request_id=request.request_id, ok=True)

    def handed(sid: str, digest: str) -> Job:
        info = SessionInfo(session_id=sid, agent="lead", model="m", task=f"task {sid}")
        return Job(session_id=sid, agent="lead", timeout_s=60, nonce=f"nonce-{sid}", handed={
            "epoch": 1, "info": session_meta(info), "tools": ["squad_status"],
            "workspace": None, "squad_specs_id": specs_id([status]),
            "messages": [{"role": "system", "prompt": digest},
                         {"role": "user", "content": f"task {sid}"}]})

    gauge = Gauge(ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")])))
    await jobs_in_turn(guard, tmp_path, coordinator, gauge, [
        handed("s1", prompt_digest(prompt)), handed("s2", prompt_digest(prompt)),
        handed("s3", "0" * 32)])
    assert [(r.session_id, r.kind, r.epoch) for r in requests] == [
        ("s1", "claim", 0), ("s1", "end", 2), ("s2", "end", 1), ("s3", "claim", 0),
        ("s3", "end", 2)]
    assert requests[2].body["host"] == socket.gethostname()
    assert "host" not in requests[1].body  # a claimed session's holder is known
    # The handed session's request went out marked by Redis (its job pending for this
    # worker), with the job's nonce; a claimed session's, neither.
    held = requests[2].held
    assert held is not None and held[0] == keys.JOBS_NORMAL and held[1]
    assert requests[2].body["nonce"] == "nonce-s2"
    assert requests[1].held is None and "nonce" not in requests[1].body
    assert [r.messages[0].content for r in gauge.requests] == [prompt] * 3
    # The claims' replies carry their own task ("t"); the hand-over, the job's.
    assert [r.messages[1].content for r in gauge.requests] == ["t", "task s2", "t"]
    assert all([t.name for t in r.tools] == ["squad_status"] for r in gauge.requests)


async def test_a_reply_naming_a_prompt_not_held_leaves_no_worktree_and_is_claimed_again(
        guard: RedisGuard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim's reply that cannot be run (it names a prompt this worker no longer holds) is
    found out before the session's worktree is made, so nothing is left behind; the job stays
    pending and its next claim runs it."""
    from squadd.worker import process

    opened: list[str] = []

    async def no_worktree(*args: Any, **kwargs: Any) -> Any:
        opened.append(kwargs["session_id"])
        raise AssertionError("a worktree for a reply that cannot be run")

    monkeypatch.setattr(process, "open_worktree", no_worktree)
    info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
    claims: list[Request] = []
    ended = anyio.Event()

    async def coordinator(request: Request) -> Reply:
        if request.kind == "claim":
            claims.append(request)
            reply = claimed(request, info)
            if len(claims) == 1:  # a prompt named that was never sent
                return Reply(request_id=request.request_id, ok=True, body={
                    **reply.body, "workspace": {"start_ref": "refs/squad/sessions/s1/0"},
                    "messages": [{"role": "system", "prompt": "0" * 32},
                                 *reply.body["messages"]]})
            return reply
        if request.kind == "end":
            ended.set()
        return Reply(request_id=request.request_id, ok=True)

    await run_s1_until(ended, guard, short_lease_worker(guard, tmp_path), coordinator)
    assert opened == [] and [c.body["reclaimed"] for c in claims] == [False, True]


async def test_a_jobs_custom_tools_are_read_from_disk_only_when_a_file_changed(
        guard: RedisGuard, team: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first job reads the tool files; the next ones find them on the event loop, with
    no worker-thread trip, until a file changes."""
    from squadd.worker import process

    team.tools_dir.mkdir(parents=True, exist_ok=True)
    (team.tools_dir / "hello.yaml").write_text(
        "description: Says hello\ntags: [read]\nbash: echo hello\n", encoding="utf-8")
    worker = make_worker(guard, team.repo)
    reads: list[str] = []
    discover = process.discover_tools

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append("read")
        return discover(*args, **kwargs)

    monkeypatch.setattr(process, "discover_tools", counted)
    body = {"squad_specs": [], "tools": ["hello", "bye"]}
    found = [await worker._tools(body, None, None) for _ in range(3)]
    (team.tools_dir / "bye.yaml").write_text(
        "description: Says bye\ntags: [read]\nbash: echo bye\n", encoding="utf-8")
    found.append(await worker._tools(body, None, None))
    assert [sorted(tools.names) for tools in found] == [["hello"]] * 3 + [["bye", "hello"]]
    assert reads == ["read", "read"]
