"""What a session's new holder is handed besides its transcript: the results of squad-tool
calls the coordinator applied for an earlier holder that died before recording them.

A claim raises the lease epoch first, so the earlier holder's requests are refused from then on:
a call of its with a stored reply was applied (and gets that reply as its result), one without
never will be (and gets the usual stand-in, "interrupted, effect unknown").
"""

from __future__ import annotations

from typing import Any

from squadd.cluster import keys
from squadd.cluster.connection import RedisGuard
from squadd.cluster.wire import Reply
from squadd.contracts.messages import ToolMessage
from squadd.tools.base import ToolResult


async def recovered_results(guard: RedisGuard, messages: list[dict[str, Any]],
                            session_id: str, epoch: int) -> list[ToolMessage]:
    """Results of the squad-tool calls an earlier holder made, that were applied here, but
    that it did not live to record (they are recorded now instead of a stand-in)."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    dangling = [call for m in messages if m.get("role") == "assistant"
                for call in m.get("tool_calls") or []
                if isinstance(call, dict) and call.get("id") not in answered]
    client = guard.client
    found: list[ToolMessage] = []
    for call in dangling:
        # The reply the latest earlier holder got, if any: one round trip for all the epochs.
        names = [keys.reply(f"{session_id}:{earlier}:t{call['id']}")
                 for earlier in range(epoch - 1, 0, -1)]
        if not names:
            continue
        stored: Any = await guard.run(lambda n=names: client.mget(n))  # type: ignore[misc]
        latest = next((value for value in stored or [] if value), None)
        if latest is None:
            continue
        reply = Reply.model_validate_json(latest)
        if reply.ok and isinstance(reply.body.get("result"), dict):
            result = ToolResult.model_validate(reply.body["result"])
            found.append(ToolMessage(tool_call_id=str(call["id"]),
                                     name=str(call.get("name", "")),
                                     content=result.text, is_error=not result.ok))
    return found
