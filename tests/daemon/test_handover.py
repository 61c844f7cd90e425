"""A claim hands the new holder the real results of squad-tool calls the coordinator applied
for a holder that died before recording them; calls that never arrived get the stand-in; and
the earlier holder is refused from then on. A real redis-server and a real runtime."""

from __future__ import annotations

from pathlib import Path

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard, connect
from squadd.cluster.wire import Reply, Request
from squadd.config import load_settings
from squadd.contracts.messages import AssistantMessage, ToolCall, message_record
from squadd.daemon.coordinator import Coordinator
from squadd.providers.replay import ReplayProvider, ReplayScript
from squadd.runtime.acceptance import record_acceptance
from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session_info import SessionInfo
from squadd.state.transcripts import TranscriptWriter
from squadd.tools.base import ToolResult
from tests.support.daemon_process import make_repo
from tests.support.redis_server import RedisServer


async def test_a_claim_recovers_applied_results_and_fences_the_earlier_holder(
        tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    settings = load_settings(layout.root, environ={})
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        guard = RedisGuard(client, url=server.url, down_s=10)
        runtime = SquadRuntime(layout, settings, ReplayProvider(ReplayScript()))
        coordinator = Coordinator(runtime, settings.cluster, guard)
        # The holder at epoch 1 asked for two calls: the first was applied (its reply is
        # stored), the second never reached the coordinator; then it died.
        info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
        record_acceptance(layout, info, None)
        writer = TranscriptWriter(layout.transcript("s1"))
        writer.add("message", message=message_record(AssistantMessage(content="", tool_calls=[
            ToolCall(id="c1", name="squad_decide", arguments={}),
            ToolCall(id="c2", name="squad_status", arguments={})])))
        writer.flush()
        await client.set(keys.epoch("s1"), 1)
        applied = ToolResult.success("Decision written to the inbox")
        await client.set(keys.reply("s1:1:tc1"), Reply(
            request_id="s1:1:tc1", ok=True,
            body={"result": applied.model_dump(mode="json")}).dump())
        try:
            async with runtime:
                claim = await coordinator.handle(Request(
                    request_id="claim-1", kind="claim", session_id="s1", worker="w2"))
                late = await coordinator.handle(Request(
                    request_id="s1:1:tc2", kind="tool", session_id="s1", worker="w1", epoch=1,
                    body={"call": {"id": "c2", "name": "squad_status", "arguments": {}}}))
        finally:
            await client.aclose()
    assert claim.ok and claim.body["epoch"] == 2
    results = {m["tool_call_id"]: m["content"] for m in claim.body["messages"]
               if m["role"] == "tool"}
    assert results == {"c1": "Decision written to the inbox", "c2": INTERRUPTED_TOOL_TEXT}
    assert late.ok is False and late.refused == "stale_epoch"
