"""The attribute names and values of OpenTelemetry's GenAI semantic conventions that squadd
sets, as the specification spells them (`opentelemetry-semantic-conventions`' `gen_ai`
attributes), and content in the conventions' message format (only when capture is on).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
USAGE_INPUT = "gen_ai.usage.input_tokens"
USAGE_OUTPUT = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"

INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"

SQUAD_NAME = "squadd.squad.name"
"""squadd's own: the squad (its repository's folder name)."""
PARENT_SESSION = "squadd.session.parent_id"
ROUTE_DEPTH = "squadd.route.depth"
PRIORITY = "squadd.route.priority"

FINISH_REASONS = {"end": "stop", "tool_calls": "tool_calls", "max_tokens": "length",
                  "other": "other"}
"""squadd's stop reasons as the conventions' finish reasons."""
MAX_CONTENT_CHARS = 65536
"""Characters of one captured content attribute (the rest is cut, and says so)."""


def bounded(text: str) -> str:
    if len(text) <= MAX_CONTENT_CHARS:
        return text
    return text[:MAX_CONTENT_CHARS] + f"…[{len(text) - MAX_CONTENT_CHARS} more characters]"


def _parts(message: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    role = getattr(message, "role", "")
    content = getattr(message, "content", "") or ""
    if role == "tool":
        parts.append({"type": "tool_call_response",
                      "id": getattr(message, "tool_call_id", ""), "response": content})
        return parts
    if content:
        parts.append({"type": "text", "content": content})
    for call in getattr(message, "tool_calls", []) or []:
        parts.append({"type": "tool_call", "id": call.id, "name": call.name,
                      "arguments": call.arguments})
    return parts


def messages_json(messages: Sequence[Any], *, finish_reason: str | None = None) -> str:
    """`gen_ai.input.messages` / `gen_ai.output.messages`: role and parts of each message
    (the system prompt goes to `gen_ai.system_instructions` instead)."""
    shown: list[dict[str, Any]] = []
    for message in messages:
        if getattr(message, "role", "") == "system":
            continue
        entry: dict[str, Any] = {"role": message.role, "parts": _parts(message)}
        if finish_reason is not None:
            entry["finish_reason"] = finish_reason
        shown.append(entry)
    return json.dumps(shown, default=str, ensure_ascii=False)


def system_json(messages: Sequence[Any]) -> str | None:
    texts = [m.content for m in messages if getattr(m, "role", "") == "system" and m.content]
    if not texts:
        return None
    return json.dumps([{"type": "text", "content": text} for text in texts],
                      ensure_ascii=False)


def arguments_json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, default=str, ensure_ascii=False)
