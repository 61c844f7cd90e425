"""What a claim's reply hands a worker besides the lease: the squad tools' specs and the
conversation, each without what the worker already holds.

A claim names the spec lists (`specs_held`, by `specs_id`) and the system prompts
(`prompts_held`, by the digest the transcripts name them by) its worker keeps; the reply names
those instead of carrying them again (a test squad's specs are about 7 KB, its prompts over
20 KB, on every claim). The worker's side is `SpecsSeen` and `PromptsSeen` in `cluster.wire`.
A job handed over at submission names them all (`named`).
"""

from __future__ import annotations

from typing import Any

from squadd.cluster.wire import PROMPTS_KEPT, SPEC_SETS_KEPT, specs_id
from squadd.contracts.messages import Message, SystemMessage, message_record
from squadd.state.transcripts import PromptFiles
from squadd.tools.base import Tool, ToolSet


class ClaimReplies:
    """One coordinator's claim replies: the spec lists it made, by the tools they came from."""

    def __init__(self, prompts: PromptFiles):
        self._prompts = prompts
        self._spec_sets: dict[tuple[Tool[Any], ...], tuple[str, list[dict[str, Any]]]] = {}

    def specs(self, tools: ToolSet, held: Any) -> dict[str, Any]:
        """The reply's members for the squad tools' specs: the list's id, and the list unless
        the worker holds it (`held`: the claim's `specs_held`)."""
        named, specs = self._spec_set(tools)
        if isinstance(held, list) and named in held[:SPEC_SETS_KEPT]:
            return {"squad_specs_id": named}
        return {"squad_specs_id": named, "squad_specs": specs}

    def _spec_set(self, tools: ToolSet) -> tuple[str, list[dict[str, Any]]]:
        """The squad tools' spec list and its id, made once per set of tool objects."""
        squad = tuple(tool for tool in tools if tool.squad_tool)
        found = self._spec_sets.get(squad)
        if found is None:
            specs = [tool.spec_json() for tool in squad]
            found = (specs_id(specs), specs)
            if len(self._spec_sets) >= SPEC_SETS_KEPT:
                self._spec_sets.clear()
            self._spec_sets[squad] = found
        return found

    def named(self, tools: ToolSet, messages: list[Message]) -> dict[str, Any] | None:
        """A job's hand-over of the specs and the conversation: the specs by their list's id
        and every system prompt by its digest, as for a worker that holds them all (a worker
        that does not claims instead). None when a prompt is not kept by digest here."""
        records = []
        for message in messages:
            if isinstance(message, SystemMessage):
                if not self._prompts.kept(message.content):
                    return None
                records.append({"role": "system",
                                "prompt": self._prompts.keep(message.content)})
            else:
                records.append(message_record(message))
        return {"squad_specs_id": self._spec_set(tools)[0], "messages": records}

    def messages(self, messages: list[Message], held: Any) -> list[dict[str, Any]]:
        """The conversation as the reply carries it: a system prompt the worker holds (`held`:
        the claim's `prompts_held`) named by its digest, not carried."""
        names = {n for n in held[:PROMPTS_KEPT] if isinstance(n, str)} \
            if isinstance(held, list) else set()
        records = []
        for message in messages:
            record = message_record(message)
            if names and isinstance(message, SystemMessage) \
                    and self._prompts.kept(message.content):
                digest = self._prompts.keep(message.content)  # known: no file is touched
                if digest in names:
                    record = {"role": "system", "prompt": digest}
            records.append(record)
        return records
