"""Tool-call arguments as a model wrote them, turned into a dict or a readable parse error.

A model that writes broken JSON gets the error back as a failure tool result and can correct
itself, so a bad argument string is data here, never an exception.
"""

from __future__ import annotations

import json
from typing import Any

from squadd.contracts.messages import ToolCall
from squadd.errors import UntrustedInputError
from squadd.untrusted import check_json_value, mend, parse_json


def tool_call(call_id: str, name: str, raw: object) -> ToolCall:
    """A `ToolCall` from arguments given as a JSON string (OpenAI) or an object (Anthropic)."""
    if isinstance(raw, dict):
        try:
            check_json_value(raw, surrogates=False)
        except UntrustedInputError as exc:
            return ToolCall(id=call_id, name=name, raw_arguments="{...}",
                            arguments_error=str(exc))
        return ToolCall(id=call_id, name=name, arguments=mend(raw))
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ToolCall(id=call_id, name=name, arguments={})
    if not isinstance(raw, str):
        return ToolCall(id=call_id, name=name, raw_arguments=json.dumps(raw),
                        arguments_error=f"expected a JSON object, got {type(raw).__name__}")
    try:
        parsed: Any = parse_json(raw, mend_surrogates=True)
    except UntrustedInputError as exc:
        return ToolCall(id=call_id, name=name, raw_arguments=raw, arguments_error=str(exc))
    if not isinstance(parsed, dict):
        return ToolCall(id=call_id, name=name, raw_arguments=raw,
                        arguments_error=f"expected a JSON object, got {type(parsed).__name__}")
    return ToolCall(id=call_id, name=name, arguments=parsed)


def arguments_json(call: ToolCall) -> str:
    """The arguments as the model sent them: its raw text when it was not valid JSON."""
    if call.arguments_error is not None and call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments)
