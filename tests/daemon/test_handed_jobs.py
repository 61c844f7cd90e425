"""A new session's job carries its hand-over: the worker that takes it starts under lease
epoch 1 without a claim, and its first request makes it the holder, once the coordinator has
checked the group gave it the job. Others are refused; a reclaim fences it as a claim does;
a coordinator started again after the job went out still checks and records the holder. A
real redis-server and a real runtime."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from squadd.cluster import keys
from squadd.cluster.jobs import Delivery
from squadd.cluster.wire import Request
from squadd.contracts.events import BaseEvent, SessionClaimed
from squadd.contracts.messages import AssistantMessage, message_record
from squadd.daemon.coordinator import Coordinator
from squadd.runtime.session import SessionOutcome
from squadd.runtime.session_info import SessionInfo
from squadd.state.spending import SpendingLedger
from squadd.state.transcripts import prompt_digest, read_transcript
from tests.support.coordinator import CoordinatorHere, coordinator_on_redis, submit_remote


async def _routed(here: CoordinatorHere, tg: anyio.abc.TaskGroup, sid: str,
                  outcomes: list[SessionOutcome]) -> Delivery:
    """`sid`'s route started through the coordinator, and its job as w1 takes it."""
    info = SessionInfo(session_id=sid, agent="lead", model="m", task=f"task {sid}")
    submit_remote(here, tg, info, await here.runtime.planner.charter("lead"), outcomes,
                  new=True)
    while (delivery := await here.coordinator.jobs.take("w1", block_s=0.05)) is None:
        pass
    return delivery


@asynccontextmanager
async def _handing(tmp_path: Path, overrides: dict[str, Any] | None = None,
                   ) -> AsyncIterator[tuple[CoordinatorHere, anyio.abc.TaskGroup]]:
    """A coordinator on Redis with no local slots, its runtime up, and a task group for its
    routes, all within 30 s."""
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}, overrides) as here, \
            here.runtime:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                yield here, tg


def _count_holder_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sessions whose holder the coordinator reads back from their transcript."""
    from squadd.daemon import cluster_requests
    read: list[str] = []
    real = cluster_requests.recorded_holder

    def counted(path: Path) -> tuple[str, int] | None:
        read.append(path.stem)
        return real(path)

    monkeypatch.setattr(cluster_requests, "recorded_holder", counted)
    return read


def _end(sid: str, worker: str, epoch: int, **body: Any) -> Request:
    answer = AssistantMessage(content="done")
    return Request(request_id=f"{sid}:{epoch}:end-{worker}", kind="end", session_id=sid,
                   worker=worker, epoch=epoch, body={
                       "status": "completed", "answer": "done", "turns": 1, **body,
                       "records": [{"kind": "message", "message": message_record(answer),
                                    "n": 1},
                                   {"kind": "state", "state": "completed", "n": 2}]})


def _end_with_call(input_tokens: int, output_tokens: int) -> Request:
    """s1's end from w1 carrying one model call (message id `msg-worker-1`), as a worker
    sends it: with no cost (a worker prices nothing)."""
    answer = AssistantMessage(content="done", id="msg-worker-1")
    return Request(request_id="s1:1:end", kind="end", session_id="s1", worker="w1", epoch=1,
                   body={"status": "completed", "answer": "done", "turns": 1, "host": "h1",
                         "records": [{"kind": "message", "message": message_record(answer),
                                      "input_tokens": input_tokens,
                                      "output_tokens": output_tokens, "cost_usd": None, "n": 1},
                                     {"kind": "state", "state": "completed", "n": 2}]})


async def test_a_new_session_s_job_is_handed_over_and_its_first_request_makes_the_holder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcomes: list[SessionOutcome] = []
    events: list[BaseEvent] = []
    holders_read = _count_holder_reads(monkeypatch)
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        coordinator = here.coordinator
        async with here.runtime:
            here.runtime.bus.add_listener(events.append)
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    delivery = await _routed(here, tg, "s1", outcomes)
                    handed = delivery.job.handed
                    assert handed is not None
                    before = read_transcript(here.layout.transcript("s1"))
                    stored_epoch = await here.client.get(keys.epoch("s1"))
                    # Anyone else, under the handed epoch: refused, and nothing recorded.
                    stolen = await coordinator.handle(_end("s1", "w2", 1, host="h2"))
                    end = await coordinator.handle(_end("s1", "w1", 1, host="h1"))
        transcript = read_transcript(here.layout.transcript("s1"))
    prompt = before.messages[0]["content"]
    assert handed["epoch"] == 1 and handed["workspace"] is None
    assert handed["messages"] == [{"role": "system", "prompt": prompt_digest(prompt)},
                                  {"role": "user", "content": "task s1"}]
    assert "squad_specs" not in handed and handed["squad_specs_id"]
    assert "squad_status" in handed["tools"]
    assert int(stored_epoch) == 1
    # The opening was durable before the job went out, with the epoch, and no worker.
    assert [m["role"] for m in before.messages] == ["system", "user"]
    assert before.states[-1] == {**before.states[-1], "state": "active", "epoch": 1}
    assert "worker" not in before.states[-1]
    assert not stolen.ok and stolen.refused == "invalid", stolen
    assert "'w2' holds no job of session s1" in (stolen.error or "")
    assert end.ok, end
    [outcome] = outcomes
    assert outcome.status == "completed" and outcome.answer == "done"
    # The holder is recorded before the worker's records, and told of as a claim is.
    kinds = [(r["kind"], r.get("state") or (r.get("message") or {}).get("role"),
              r.get("worker")) for r in transcript.records[len(before.records):]]
    assert kinds == [("meta", None, None), ("state", "active", "w1"),
                     ("message", "assistant", None), ("state", "completed", None)], kinds
    assert transcript.records[len(before.records)]["owner"] == {"worker": "w1", "epoch": 1}
    assert transcript.states[-2]["host"] == "h1"
    claims = [e for e in events if isinstance(e, SessionClaimed)]
    assert [(e.session_id, e.worker, e.host, e.epoch) for e in claims] == [
        ("s1", "w1", "h1", 1)]
    # The coordinator handed it: it knew no holder was recorded without reading the file.
    assert holders_read == []


async def test_a_first_request_redis_marked_held_makes_the_holder_without_asking_redis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Redis marked the request `held` as it added it (the job pending for its worker): the
    coordinator takes the mark for a job it submitted for the session when the request carries
    that session's job nonce, and asks Redis itself (`held_by`) for anything less: a mark of
    another session's job, no nonce, a nonce that is not the session's."""
    from squadd.cluster.jobs import JobQueue
    asked: list[str] = []
    real = JobQueue.held_by

    async def counted(self: JobQueue, consumer: str, session_id: str,
                      *args: Any, **kwargs: Any) -> bool:
        asked.append(f"{consumer}/{session_id}")
        return await real(self, consumer, session_id, *args, **kwargs)

    monkeypatch.setattr(JobQueue, "held_by", counted)
    outcomes: list[SessionOutcome] = []
    async with _handing(tmp_path) as (here, tg):
        coordinator = here.coordinator
        first = await _routed(here, tg, "s1", outcomes)
        second = await _routed(here, tg, "s2", outcomes)
        third = await _routed(here, tg, "s3", outcomes)
        mark = f"{first.stream} {first.entry_id}"
        # s2's request marked with s1's job (and s1's nonce): asked.
        wrong = await coordinator.handle(_end(
            "s2", "w1", 1, host="h1", nonce=first.job.nonce).marked_held(mark))
        assert asked == ["w1/s2"] and wrong.ok, wrong
        # s3's own job's mark, but no nonce, then another session's: asked.
        own = f"{third.stream} {third.entry_id}"
        bare = await coordinator.handle(_end("s3", "w2", 1).marked_held(own))
        alien = await coordinator.handle(_end(
            "s3", "w2", 1, nonce=first.job.nonce).marked_held(own))
        assert asked == ["w1/s2", "w2/s3", "w2/s3"]
        assert not bare.ok and not alien.ok  # w2 was never given s3's job
        end = await coordinator.handle(_end(
            "s1", "w1", 1, host="h1", nonce=first.job.nonce).marked_held(mark))
        # s3 ends through its real worker, asked for again (it has no mark).
        last = await coordinator.handle(_end("s3", "w1", 1, host="h1"))
    assert end.ok and last.ok, (end, last)
    assert asked == ["w1/s2", "w2/s3", "w2/s3", "w1/s3"]  # s1: the mark, not asked
    assert second.job.session_id == "s2"
    assert sorted(o.session_id for o in outcomes) == ["s1", "s2", "s3"]
    assert all(o.status == "completed" for o in outcomes)


async def test_a_workers_call_is_charged_once_even_after_the_ledger_is_rebuilt(
        tmp_path: Path) -> None:
    """A worker's model call reaches the coordinator's ledger under its message's id, so the
    ledger rebuilt at the next start (which adds the calls of recent transcripts it lacks)
    does not count it again."""
    outcomes: list[SessionOutcome] = []
    async with _handing(tmp_path) as (here, tg):
        await _routed(here, tg, "s1", outcomes)
        end = await here.coordinator.handle(_end_with_call(11, 7))
    assert end.ok, end

    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for path in here.layout.spend_dir.glob("*.jsonl")
                for line in path.read_text(encoding="utf-8").splitlines()]

    [charged] = lines()
    rebuilt = SpendingLedger(here.layout)
    rebuilt.load()  # as a coordinator started again does
    assert lines() == [charged]  # nothing added: the transcript's call was found charged
    assert charged["message_id"] == "msg-worker-1" and charged["input_tokens"] == 11


async def test_a_workers_call_is_priced_in_the_transcript_as_a_local_one_is(
        tmp_path: Path) -> None:
    """The coordinator writes a worker's call into the transcript with its cost at the
    coordinator's prices (a worker sends none, and one it sent is replaced), so a ledger
    rebuilt from the transcript alone knows what was spent."""
    outcomes: list[SessionOutcome] = []
    prices = {"provider": {"kind": "openai"},
              "pricing": {"openai/m": {"input": 2.0, "output": 10.0}}}
    async with _handing(tmp_path, prices) as (here, tg):
        await _routed(here, tg, "s1", outcomes)
        request = _end_with_call(1000, 100)
        request.body["records"][0]["cost_usd"] = 0.0  # a worker's own figure is not taken
        end = await here.coordinator.handle(request)
        assert end.ok, end
    cost = (1000 * 2.0 + 100 * 10.0) / 1_000_000
    [call] = [r for r in read_transcript(here.layout.transcript("s1")).records
              if r.get("kind") == "message" and r.get("input_tokens")]
    assert call["cost_usd"] == pytest.approx(cost)
    for path in here.layout.spend_dir.glob("*.jsonl"):
        path.unlink()  # the ledger lost: rebuilt from the transcripts at the next start
    rebuilt = SpendingLedger(here.layout)
    rebuilt.load()
    assert rebuilt.session("s1").cost == pytest.approx(cost)


@pytest.mark.parametrize("tokens", ["lots", -500, 1.5, True])
async def test_a_call_with_counts_that_are_not_token_counts_is_refused_whole(
        tmp_path: Path, tokens: Any) -> None:
    """Nothing of the request is appended (so a repeat is refused again, not taken as done),
    the error names the field, and the end the worker sends right is then taken."""
    outcomes: list[SessionOutcome] = []
    async with _handing(tmp_path) as (here, tg):
        await _routed(here, tg, "s1", outcomes)
        bad = _end_with_call(11, 7)
        bad.body["records"][0]["input_tokens"] = tokens
        for _ in range(2):
            refused = await here.coordinator.handle(bad)
            assert not refused.ok and refused.refused == "invalid", refused
            assert "input_tokens" in (refused.error or "")
        assert not [r for r in read_transcript(here.layout.transcript("s1")).records
                    if "cluster" in r]
        assert (await here.coordinator.handle(_end_with_call(11, 7))).ok
    assert [o.status for o in outcomes] == ["completed"]
    assert here.runtime.ledger.session("s1").tokens == 18


async def test_a_handed_job_reclaimed_by_another_worker_fences_the_first(
        tmp_path: Path) -> None:
    """The job moved on before its first worker said anything: the new holder's claim gets
    epoch 2, and the first worker's requests under the handed epoch are stale."""
    outcomes: list[SessionOutcome] = []
    async with _handing(tmp_path) as (here, tg):
        coordinator = here.coordinator
        delivery = await _routed(here, tg, "s1", outcomes)
        [moved] = await coordinator.jobs.reclaim("w2", lease_s=0.0, count=1)
        assert moved.entry_id == delivery.entry_id and moved.reclaimed
        claim = await coordinator.handle(Request(
            request_id="claim-w2", kind="claim", session_id="s1", worker="w2"))
        late = await coordinator.handle(_end("s1", "w1", 1, host="h1"))
        end = await coordinator.handle(_end("s1", "w2", 2))
    transcript = read_transcript(here.layout.transcript("s1"))
    assert claim.ok and claim.body["epoch"] == 2, claim
    # The conversation the hand-over opened, once: the claim continues from it.
    assert [m["role"] for m in claim.body["messages"]] == ["system", "user"]
    assert [m["role"] for m in transcript.messages] == ["system", "user", "assistant"]
    assert not late.ok and late.refused == "stale_epoch", late
    assert end.ok, end
    assert [o.status for o in outcomes] == ["completed"]
    holders = [(s["worker"], s["epoch"]) for s in transcript.states if "worker" in s]
    assert holders == [("w2", 2)], transcript.states


async def test_a_coordinator_started_again_records_the_holder_of_a_handed_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator that handed the job is gone before the worker's first request: the
    one started after it checks the group gave that worker the job (it knows no entry of
    its own) and records the holder, and a second worker is still refused."""
    outcomes: list[SessionOutcome] = []
    holders_read = _count_holder_reads(monkeypatch)
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        async with here.runtime:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    await _routed(here, tg, "s1", outcomes)
                    tg.cancel_scope.cancel()  # its route's caller is gone
            later = Coordinator(here.runtime, here.runtime.settings.cluster, here.guard)
            with anyio.fail_after(30):
                stolen = await later.handle(_end("s1", "w2", 1, host="h2"))
                records = await later.handle(Request(
                    request_id="s1:1:r", kind="records", session_id="s1", worker="w1",
                    epoch=1, body={"host": "h1", "records": [
                        {"kind": "note", "text": "working", "n": 1}]}))
                again = await later.handle(_end("s1", "w2", 1, host="h2"))
        transcript = read_transcript(here.layout.transcript("s1"))
    assert not stolen.ok and stolen.refused == "invalid", stolen
    assert records.ok, records
    assert not again.ok and again.refused == "invalid", again
    holders = [(s["worker"], s["epoch"]) for s in transcript.states if "worker" in s]
    assert holders == [("w1", 1)], transcript.states
    assert transcript.records[-1]["kind"] == "note"
    # It handed nothing: it read the holder (none yet) back from the transcript, for each
    # request until one made the holder.
    assert holders_read == ["s1", "s1"]


async def test_a_hand_over_that_fails_leaves_the_job_to_a_claim_with_its_acceptance_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The opening breaks while the hand-over is made (its acceptance already in the route's
    sink): the job goes out without one, the acceptance is made durable once, and the claim
    opens the session under epoch 1."""
    from squadd.daemon import cluster_requests

    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the opening broke")

    monkeypatch.setattr(cluster_requests, "open_new", broken)
    outcomes: list[SessionOutcome] = []
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        async with here.runtime:
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    delivery = await _routed(here, tg, "s1", outcomes)
                    monkeypatch.undo()  # the claim opens it as usual
                    claim = await here.coordinator.handle(Request(
                        request_id="claim-w1", kind="claim", session_id="s1", worker="w1"))
                    end = await here.coordinator.handle(_end("s1", "w1", 1))
        transcript = read_transcript(here.layout.transcript("s1"))
    assert delivery.job.handed is None
    assert claim.ok and claim.body["epoch"] == 1, claim
    assert end.ok, end
    assert [o.status for o in outcomes] == ["completed"]
    queued = [s for s in transcript.states if s["state"] == "queued"]
    assert len(queued) == 1, transcript.states
    assert [m["role"] for m in transcript.messages] == ["system", "user", "assistant"]
