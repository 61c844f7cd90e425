"""A claim hands the new holder the real results of squad-tool calls the coordinator applied
for a holder that died before recording them; calls that never arrived get the stand-in; and
the earlier holder is refused from then on. A real redis-server and a real runtime."""

from __future__ import annotations

from pathlib import Path

from squadd.cluster import keys
from squadd.cluster.wire import Reply, Request
from squadd.contracts.messages import AssistantMessage, ToolCall, message_record
from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT
from squadd.runtime.opening import record_acceptance
from squadd.runtime.session_info import SessionInfo
from squadd.state.transcripts import TranscriptWriter
from squadd.tools.base import ToolResult
from tests.support.coordinator import coordinator_on_redis, give_job


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
