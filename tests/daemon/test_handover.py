"""A claim hands the new holder the real results of squad-tool calls the coordinator applied
for a holder that died before recording them; calls that never arrived get the stand-in; and
the earlier holder is refused from then on; a new session's claim opens it on the event loop
once its prompt is known; a claim whose records could not be made durable is refused as one
to try again, and one that failed otherwise ends its route at once. A real redis-server and a
real runtime."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from squadd.cluster import keys
from squadd.cluster.wire import Reply, Request
from squadd.contracts.messages import AssistantMessage, ToolCall, message_record
from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT
from squadd.runtime.opening import record_acceptance
from squadd.runtime.session_info import SessionInfo
from squadd.state.transcripts import TranscriptWriter
from squadd.tools.base import ToolResult
from tests.support.coordinator import (
    CoordinatorHere,
    coordinator_on_redis,
    give_job,
    submit_remote,
)


async def three_claims(here: CoordinatorHere, member: str,
                       held_of: Callable[[Reply], str]) -> list[Reply]:
    """Claims of three new sessions by w1, naming under `member` first nothing held, then
    what `held_of` finds in the first reply, then an id nothing has."""
    replies: list[Reply] = []
    for n, held in enumerate(([], None, ["0" * 32]), start=1):
        sid = f"s{n}"
        info = SessionInfo(session_id=sid, agent="lead", model="m", task="t")
        record_acceptance(here.layout, info, None)
        await give_job(here, sid, "w1")
        names = held if held is not None else [held_of(replies[0])]
        replies.append(await here.coordinator.handle(Request(
            request_id=f"claim-{sid}", kind="claim", session_id=sid, worker="w1",
            body={member: names})))
    assert all(r.ok for r in replies), replies
    return replies


async def test_a_claim_recovers_applied_results_and_fences_the_earlier_holder(
        tmp_path: Path) -> None:
    async with coordinator_on_redis(tmp_path) as here:
        client = here.client
        # The holder at epoch 1 asked for two calls: the first was applied (its reply is
        # stored), the second never reached the coordinator; then it died.
        info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
        record_acceptance(here.layout, info, None)
        writer = TranscriptWriter(here.layout.transcript("s1"))
        writer.add("message", message=message_record(AssistantMessage(content="", tool_calls=[
            ToolCall(id="c1", name="squad_decide", arguments={}),
            ToolCall(id="c2", name="squad_status", arguments={})])))
        writer.flush()
        await client.set(keys.epoch("s1"), 1)
        applied = ToolResult.success("Decision written to the inbox")
        await client.set(keys.reply("s1:1:tc1"), Reply(
            request_id="s1:1:tc1", ok=True,
            body={"result": applied.model_dump(mode="json")}).dump())
        async with here.runtime:
            await give_job(here, "s1", "w2")
            claim = await here.coordinator.handle(Request(
                request_id="claim-1", kind="claim", session_id="s1", worker="w2"))
            late = await here.coordinator.handle(Request(
                request_id="s1:1:tc2", kind="tool", session_id="s1", worker="w1", epoch=1,
                body={"call": {"id": "c2", "name": "squad_status", "arguments": {}}}))
    assert claim.ok and claim.body["epoch"] == 2
    results = {m["tool_call_id"]: m["content"] for m in claim.body["messages"]
               if m["role"] == "tool"}
    assert results == {"c1": "Decision written to the inbox", "c2": INTERRUPTED_TOOL_TEXT}
    assert late.ok is False and late.refused == "stale_epoch"


async def test_a_new_sessions_claim_opens_it_on_the_loop_once_its_prompt_is_known(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first claim reads the prompt's files in a worker thread; a later new session of
    the same agent is opened from the cached files, with the same records in the same order,
    and all of a claim's records are durable (one group commit) before its reply."""
    from squadd.daemon.cluster_requests import WorkerRequests
    from squadd.state.transcripts import read_transcript

    threaded: list[str] = []
    hand_over = WorkerRequests._hand_over

    def counted(self: WorkerRequests, info: SessionInfo, *args: object) -> object:
        threaded.append(info.session_id)
        return hand_over(self, info, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(WorkerRequests, "_hand_over", counted)
    async with coordinator_on_redis(tmp_path) as here:
        replies = []
        async with here.runtime:
            for sid in ("s1", "s2"):
                info = SessionInfo(session_id=sid, agent="lead", model="m", task=f"task {sid}")
                record_acceptance(here.layout, info, None)
                await give_job(here, sid, "w1")
                replies.append(await here.coordinator.handle(Request(
                    request_id=f"claim-{sid}", kind="claim", session_id=sid, worker="w1")))
        transcripts = {sid: read_transcript(here.layout.transcript(sid))
                       for sid in ("s1", "s2")}
        squad_specs = [tool.spec().model_dump(mode="json") for tool in here.runtime.tools
                       if tool.squad_tool]
    assert [r.ok for r in replies] == [True, True], replies
    assert threaded == ["s1"]
    for sid, reply in zip(("s1", "s2"), replies, strict=True):
        messages = reply.body["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        assert messages[1]["content"] == f"task {sid}"
        assert "lead" in messages[0]["content"]
        kinds = [(r["kind"], r.get("state") or r.get("message", {}).get("role"))
                 for r in transcripts[sid].records]
        assert kinds == [("meta", None), ("state", "queued"), ("meta", None),
                         ("message", "system"), ("message", "user"), ("state", "active"),
                         ("meta", None), ("state", "active")], kinds
        assert transcripts[sid].records[-1]["worker"] == "w1"
    assert replies[0].body["messages"][0] == replies[1].body["messages"][0]
    assert squad_specs and all(r.body["squad_specs"] == squad_specs for r in replies)


async def test_a_claim_that_names_the_specs_it_holds_is_not_sent_them_again(
        tmp_path: Path) -> None:
    """The reply names the squad tools' spec list by its id; it carries the list only when
    the claim did not name that id among those its worker holds."""
    from squadd.cluster.wire import specs_id

    async with coordinator_on_redis(tmp_path) as here:
        async with here.runtime:
            replies = await three_claims(here, "specs_held",
                                         lambda first: first.body["squad_specs_id"])
        squad_specs = [tool.spec().model_dump(mode="json") for tool in here.runtime.tools
                       if tool.squad_tool]
    first, named, other = replies
    assert first.body["squad_specs"] == squad_specs
    assert first.body["squad_specs_id"] == specs_id(squad_specs)
    assert "squad_specs" not in named.body
    assert named.body["squad_specs_id"] == first.body["squad_specs_id"]
    assert other.body["squad_specs"] == squad_specs  # an id it does not hold


async def test_a_claim_whose_records_cannot_be_made_durable_is_refused_as_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fails the claim's group commit: the worker hears "failed" (its job stays
    pending, to be claimed again), not "invalid" (which drops the job and leaves the route to
    wait out its bound); the next claim hands the session over once, under a new epoch."""
    from squadd.state.transcripts import read_transcript

    async def disk_full(writer: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    async with coordinator_on_redis(tmp_path) as here:
        info = SessionInfo(session_id="s1", agent="lead", model="m", task="the task")
        record_acceptance(here.layout, info, None)
        async with here.runtime:
            await give_job(here, "s1", "w1")
            with monkeypatch.context() as patch:
                patch.setattr(here.runtime.commits, "commit", disk_full)
                failed = await here.coordinator.handle(Request(
                    request_id="claim-1", kind="claim", session_id="s1", worker="w1"))
            again = await here.coordinator.handle(Request(
                request_id="claim-2", kind="claim", session_id="s1", worker="w1"))
        transcript = read_transcript(here.layout.transcript("s1"))
    assert not failed.ok and failed.refused == "failed", failed
    assert "No space left on device" in (failed.error or "")
    assert again.ok and again.body["epoch"] == 2, again
    assert [m["role"] for m in again.body["messages"]] == ["system", "user"]
    assert [m["role"] for m in transcript.messages] == ["system", "user"]
    claims = [(s.get("worker"), s.get("epoch")) for s in transcript.states
              if s["state"] == "active" and "worker" in s]
    assert claims == [("w1", 2)], transcript.states


async def test_a_claim_that_fails_otherwise_ends_its_route_now_with_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim that raised something no retry mends drops the job (the worker hears
    "invalid"), so the route waiting for it hears the error now, not at its bound."""
    from squadd.daemon.cluster_requests import WorkerRequests
    from squadd.runtime.session import SessionOutcome

    def broken(*args: object) -> object:
        raise RuntimeError("the hand-over broke")

    monkeypatch.setattr(WorkerRequests, "_hand_over", broken)
    monkeypatch.setattr(WorkerRequests, "_hand_over_known", broken)
    outcomes: list[SessionOutcome] = []
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
        record_acceptance(here.layout, info, None)
        async with here.runtime:
            charter = await here.runtime.planner.charter("lead")
            # The route's own bound is twice 600 s plus the lease: it must end long before.
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:  # (its end waits for the route)
                    submit_remote(here, tg, info, charter, outcomes)
                    while not await here.coordinator.jobs.held_by("w1", "s1"):
                        await here.coordinator.jobs.take("w1", block_s=0.05)
                    claim = await here.coordinator.handle(Request(
                        request_id="claim-1", kind="claim", session_id="s1", worker="w1"))
    assert not claim.ok and claim.refused == "invalid", claim
    [outcome] = outcomes
    assert outcome.status == "error"
    assert "RuntimeError: the hand-over broke" in (outcome.error or "")
    assert "'w1'" in (outcome.error or "")


async def test_an_end_has_the_job_it_names_acknowledged_with_its_reply_when_it_is_the_sessions(
        tmp_path: Path) -> None:
    """A worker's end names its job: the coordinator's reply acknowledges it in the same
    transaction (`job_done`, and `acked` in the body) when it is a job submitted for that
    session, and leaves it to the worker otherwise."""
    from squadd.cluster.jobs import Delivery
    from squadd.runtime.session import SessionOutcome

    outcomes: list[SessionOutcome] = []
    replies: dict[str, Reply] = {}
    jobs: dict[str, tuple[str, str]] = {}
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        coordinator = here.coordinator
        async with here.runtime:
            charter = await here.runtime.planner.charter("lead")
            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for sid in ("s1", "s2"):
                        info = SessionInfo(session_id=sid, agent="lead", model="m", task="t")
                        record_acceptance(here.layout, info, None)
                        submit_remote(here, tg, info, charter, outcomes)
                        delivery: Delivery | None = None
                        while delivery is None:
                            delivery = await coordinator.jobs.take("w1", block_s=0.05)
                        claim = await coordinator.handle(Request(
                            request_id=f"claim-{sid}", kind="claim", session_id=sid,
                            worker="w1"))
                        assert claim.ok, claim
                        entry = delivery.entry_id if sid == "s1" else "1-1"  # s2: not its job
                        replies[sid] = await coordinator.handle(Request(
                            request_id=f"{sid}:end", kind="end", session_id=sid, worker="w1",
                            epoch=claim.body["epoch"], body={
                                "status": "completed", "answer": "ok", "records": [],
                                "job": {"stream": delivery.stream, "entry": entry}}))
                        jobs[sid] = (delivery.stream, delivery.entry_id)
    assert replies["s1"].ok and replies["s1"].body == {"acked": True}
    assert replies["s1"].job_done == jobs["s1"]
    assert replies["s2"].ok and replies["s2"].body == {"acked": False}
    assert replies["s2"].job_done is None
    assert sorted(o.status for o in outcomes) == ["completed", "completed"]


async def test_a_claim_that_names_the_prompt_it_holds_is_sent_its_digest_not_its_text(
        tmp_path: Path) -> None:
    """The reply's system message names the prompt by the digest the transcripts name it by
    when the claim says its worker holds it, and carries the text otherwise."""
    from squadd.state.transcripts import prompt_digest

    async with coordinator_on_redis(tmp_path) as here, here.runtime:
        replies = await three_claims(
            here, "prompts_held",
            lambda first: prompt_digest(first.body["messages"][0]["content"]))
    first, named, other = (r.body["messages"] for r in replies)
    prompt = first[0]["content"]
    assert first[0]["role"] == "system" and "lead" in prompt
    assert named[0] == {"role": "system", "prompt": prompt_digest(prompt)}
    assert named[1:] == first[1:]
    assert other == first  # a digest it does not hold
