"""Keeping a conversation acceptable to the model APIs: unique tool call ids, and every call
answered by a result right after the message that made it.

Some providers send no call ids (or the same ones every turn); a session then names its calls
`call_t{turn}_{index}`, so results and spill files never mix. A conversation read back from a
transcript after a crash may hold a call without a result: it gets a stand-in result before
anything else is said, since the real APIs reject an unanswered call. Results are durable one
by one, so of a turn's unanswered calls only the first can have run ("interrupted, effect
unknown"); the others never started.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from squadd.contracts.messages import AssistantMessage, Message, ToolCall, ToolMessage

CALL_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
"""A call id squadd keeps as given (it names the call's spill file); others are renamed."""
INTERRUPTED_TOOL_TEXT = (
    "interrupted: squadd stopped before this tool call finished; its effect is unknown. "
    "Check before repeating it."
)
NOT_STARTED_TOOL_TEXT = (
    "not run: squadd stopped before this tool call started (an earlier call of the same turn "
    "was interrupted). Call it again if it is still needed."
)


def used_call_ids(messages: Iterable[Message]) -> set[str]:
    return {call.id for message in messages if isinstance(message, AssistantMessage)
            for call in message.tool_calls}


def name_calls(calls: Sequence[ToolCall], turn: int, used: set[str]) -> list[ToolCall]:
    """`calls` with ids unique in the session: a missing, malformed or repeated id becomes
    `call_t{turn}_{index}` (with a suffix should even that be taken). `used` grows."""
    named: list[ToolCall] = []
    for index, call in enumerate(calls):
        call_id = call.id
        if not CALL_ID_RE.fullmatch(call_id) or call_id in used or call_id.strip(".") == "":
            call_id = base = f"call_t{turn}_{index}"
            extra = 1
            while call_id in used:
                call_id, extra = f"{base}_{extra}", extra + 1
        used.add(call_id)
        named.append(call if call_id == call.id else call.model_copy(update={"id": call_id}))
    return named


def stand_in(call: ToolCall, *, started: bool = True) -> ToolMessage:
    return ToolMessage(tool_call_id=call.id, name=call.name, is_error=True,
                       content=INTERRUPTED_TOOL_TEXT if started else NOT_STARTED_TOOL_TEXT)


def paired(messages: Sequence[Message]) -> tuple[list[Message], list[ToolMessage]]:
    """The conversation with each assistant message's calls answered right after it.

    Results are matched to calls by position: those after an assistant message answer its
    calls, in any order. A call with no result gets a stand-in; a result answering no call
    there is moved to the earliest unanswered call with its id (a stand-in an earlier resume
    appended at the end), or dropped. Returns the conversation and the stand-ins made.
    """
    blocks: list[tuple[AssistantMessage, list[ToolCall], dict[str, ToolMessage]]] = []
    plain: list[Message | int] = []  # messages, and indexes of assistant blocks
    stray: list[ToolMessage] = []
    current: int | None = None
    for message in messages:
        if isinstance(message, ToolMessage):
            block = blocks[current] if current is not None else None
            call_id = message.tool_call_id or ""
            if block is not None and any(c.id == call_id for c in block[1]) \
                    and call_id not in block[2]:
                block[2][call_id] = message
            else:
                stray.append(message)
            continue
        if isinstance(message, AssistantMessage) and message.tool_calls:
            current = len(blocks)
            blocks.append((message, list(message.tool_calls), {}))
            plain.append(current)
        else:
            current = None
            plain.append(message)
    for message in stray:
        call_id = message.tool_call_id or ""
        for _, calls, answers in blocks:
            if any(c.id == call_id for c in calls) and call_id not in answers:
                answers[call_id] = message
                break
    fixed: list[Message] = []
    made: list[ToolMessage] = []
    for item in plain:
        if not isinstance(item, int):
            fixed.append(item)
            continue
        assistant, calls, answers = blocks[item]
        fixed.append(assistant)
        # A turn with a message id made its results durable one by one, each before the next
        # call started: of its unanswered calls only the first can have run. An older turn
        # promised nothing, so each of its unanswered calls may have.
        interrupted = False
        for call in calls:
            answer = answers.get(call.id)
            if answer is None:
                answer = stand_in(call, started=not (interrupted and assistant.id is not None))
                interrupted = True
                made.append(answer)
            fixed.append(answer)
    return fixed, made
