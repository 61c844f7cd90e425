"""What a conversation read back from its transcript looks like to the model on resume.

A turn's tool calls whose results never reached the transcript get stand-in results, in call
order. Results are durable one by one (each before the next call starts), so of a turn's
unanswered calls only the first can have run: its effect is unknown; the others never started.
"""

from __future__ import annotations

from collections.abc import Sequence

from squadd.contracts.messages import AssistantMessage, Message, ToolMessage

INTERRUPTED_TOOL_TEXT = (
    "interrupted: squadd stopped before this tool call finished; its effect is unknown. "
    "Check before repeating it."
)
NOT_STARTED_TOOL_TEXT = (
    "not run: squadd stopped before this tool call started (an earlier call of the same turn "
    "was interrupted). Call it again if it is still needed."
)


def answer_unfinished(messages: Sequence[Message]) -> tuple[list[Message], list[ToolMessage]]:
    """The conversation with every turn's results in call order, and the stand-ins it needed
    (to be appended to the transcript).

    A turn written before assistant messages had ids made no promise that results were durable
    one by one: all of its unanswered calls read as interrupted."""
    fixed: list[Message] = []
    stand_ins: list[ToolMessage] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        fixed.append(message)
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            continue
        results: dict[str | None, ToolMessage] = {}
        while index < len(messages):
            answer = messages[index]
            if not isinstance(answer, ToolMessage):
                break
            results.setdefault(answer.tool_call_id, answer)
            index += 1
        interrupted = False
        durable_per_call = message.id is not None
        for call in message.tool_calls:
            result = results.pop(call.id, None)
            if result is None:
                text = (NOT_STARTED_TOOL_TEXT if interrupted and durable_per_call
                        else INTERRUPTED_TOOL_TEXT)
                interrupted = True
                result = ToolMessage(tool_call_id=call.id, name=call.name, content=text,
                                     is_error=True)
                stand_ins.append(result)
            fixed.append(result)
        fixed.extend(results.values())  # results of no call of this turn: kept, at the end
    return fixed, stand_ins
