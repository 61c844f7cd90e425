"""What travels through Redis: a session job, a worker's request and the coordinator's reply
(with the request id that makes a repeated request harmless and the lease epoch that fences a
worker whose job has moved on), and the envelope of a relayed event (naming its worker).

Each model is stored as one JSON field (`data`) of a stream entry or as a string value.
`SpecsSeen` turns the squad tools' specs a claim's reply carries back into spec objects, and
keeps each list under its id (`specs_id`): a claim names the ids its worker holds, and the
reply carries the list only when the worker lacks it. `PromptsSeen` does the same for system
prompts, by the digest the transcripts name them by.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from squadd.contracts.messages import ToolSpec
from squadd.errors import ClusterError
from squadd.state.transcripts import prompt_digest

SPECS_KEPT = 256
"""Distinct tool specs a worker keeps (`SpecsSeen`)."""
PROMPTS_KEPT = 32
"""System prompts a worker keeps by digest (`PromptsSeen`)."""
PROMPT_BYTES_KEPT = 16 * 1024 * 1024
"""Characters of system prompts a worker keeps in all (`PromptsSeen`)."""
SPEC_SETS_KEPT = 16
"""Lists of squad-tool specs a worker keeps by their id (`SpecsSeen.claimed`); a coordinator
keeps as many by the tools they came from."""

RequestKind = Literal["claim", "records", "tool", "end"]
Refusal = Literal["stale_epoch", "unknown_session", "invalid", "interrupted", "failed"]
"""Why a request was refused. "failed": the coordinator's disk (or another OS call) failed while
it applied the request, so nothing of it is known durable; the worker may try again later (a
claim's job stays pending and moves on after its lease)."""


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    def dump(self) -> str:
        return self.model_dump_json()


class Job(_Wire):
    """One session to run: the coordinator has written its opening to the transcript."""

    session_id: str
    agent: str
    priority: Literal["urgent", "normal"] = "normal"
    timeout_s: float = Field(gt=0)
    nonce: str = Field("", max_length=64)
    """The coordinator's mark of a job it submitted (a claim must hold a job with it)."""
    traceparent: str | None = Field(None, max_length=256)
    """The W3C trace context of the route that started the session (its `invoke_agent` span
    on the coordinator): the worker's spans for the session are its children."""
    handed: dict[str, Any] | None = None
    """A new session's hand-over, made when the job was submitted: what a claim's reply would
    carry under lease epoch 1, its system prompt named by digest and its squad tools' specs by
    id. A worker that holds both (and took the job fresh, not reclaimed) starts the session
    without a claim; its first request carries its `host`, and the coordinator records it as
    the holder then, once it has checked the job is that worker's. Any other worker claims."""


class Request(_Wire):
    """A worker's request to the coordinator.

    `claim` (a job delivered to this worker: the coordinator raises the session's epoch and
    answers with the conversation so far), `records` (transcript records to persist before the
    worker moves on), `tool` (a squad-tool call to apply), `end` (the session's outcome, with
    the transcript records that end it in `records`: one request, not two).
    """

    request_id: str = Field(min_length=1, max_length=512)
    kind: RequestKind
    session_id: str
    worker: str
    epoch: int = Field(0, ge=0)
    """The lease epoch the worker holds (0 for a claim, which gets a new one; 1 for a session
    started from its job's `handed`)."""
    body: dict[str, Any] = Field(default_factory=dict)
    first: bool = False
    """Sent for the first time (not a repeat after a timeout): no reply can be stored for it
    yet, so the coordinator does not look one up when it reads it new (`RequestServer`).
    False from a worker that does not say."""
    _held: tuple[str, str] | None = PrivateAttr(None)

    @property
    def held(self) -> tuple[str, str] | None:
        """The job (stream, entry id) Redis found pending for this worker when the request was
        added (`ADD_HELD`, in the same script): set from the stream entry, never from the
        request's own JSON. None when not checked so."""
        return self._held

    def marked_held(self, mark: str | None) -> Request:
        """This request with the `held` mark of its stream entry ("STREAM ENTRY")."""
        stream, _, entry = (mark or "").partition(" ")
        self._held = (stream, entry) if stream and entry else None
        return self


class Reply(_Wire):
    """The coordinator's answer to one request, stored under its id and pushed to its box."""

    request_id: str
    ok: bool
    refused: Refusal | None = None
    error: str | None = None
    body: dict[str, Any] = Field(default_factory=dict)
    cancelled: bool = False
    """The coordinator cancelled the session: the worker stops it."""
    job_done: tuple[str, str] | None = Field(None, exclude=True)
    """The job (stream, entry id) the reply's transaction acknowledges for its worker (an
    end's, which says so in its body: `acked`); kept here, never sent."""

    def stored(self) -> str | None:
        """The copy kept under the request id for a repeat, when it is not the reply itself
        (None). A claim's conversation (its system prompt the largest part) is not in it: the
        same transaction puts the whole reply in the box, where the waiting worker takes it
        (`boxed` says so)."""
        if "messages" not in self.body:
            return None
        body = {k: v for k, v in self.body.items() if k != "messages"}
        return self.model_copy(update={"body": {**body, "boxed": True}}).dump()

    @property
    def boxed(self) -> bool:
        """A stored copy whose whole reply went to the box only."""
        return bool(self.body.get("boxed"))


class EventEnvelope(_Wire):
    """An event a worker published, as the coordinator's bus relays it."""

    worker: str
    event: dict[str, Any]


class WorkerBeat(_Wire):
    """A worker's heartbeat value: who it is and how busy."""

    name: str
    host: str
    pid: int
    version: str
    slots: int
    busy: int
    started: str
    """ISO time the worker started."""


SESSION_REFS = "refs/squad/sessions"


def session_ref(session_id: str, epoch: int) -> str:
    """The ref in the coordinator's repository that holds a worktree session's work as the
    holder of lease `epoch` pushed it (epoch 0: where it starts, set by the coordinator)."""
    return f"{SESSION_REFS}/{session_id}/{epoch}"


class SpecsSeen:
    """The squad tools' specs a worker got in claims, one `ToolSpec` object per distinct spec
    (at most `SPECS_KEPT`, the oldest dropped first).

    Every claim carries the specs anew; built afresh for each job, they would be new objects
    each time, and a provider, which encodes a request's `tools` member once per set of spec
    objects (`ToolsJson`), would encode every schema again for every job's first turn.
    """

    def __init__(self) -> None:
        self._kept: dict[str, ToolSpec] = {}
        self._sets: dict[str, list[ToolSpec]] = {}
        """Lists of specs by their id, oldest first."""

    @property
    def held(self) -> list[str]:
        """The ids of the lists kept, for a claim to name (`specs_held`)."""
        return list(self._sets)

    def claimed(self, body: dict[str, Any]) -> list[ToolSpec]:
        """The squad tools' specs of a claim's reply `body`: the list it carries (kept under
        its id), else the list kept under the id it names (the claim said it was held here).
        `ClusterError` when it names a list not kept (it fell out meanwhile): the job is
        claimed again, naming what is kept then."""
        sid = body.get("squad_specs_id")
        if "squad_specs" in body:
            specs = [self(spec) for spec in body["squad_specs"]]
            if isinstance(sid, str):
                self._sets.pop(sid, None)
                if len(self._sets) >= SPEC_SETS_KEPT:
                    del self._sets[next(iter(self._sets))]
                self._sets[sid] = specs
            return specs
        kept = self._sets.get(sid) if isinstance(sid, str) else None
        if kept is None:
            raise ClusterError(f"the claim's reply names squad tool specs {str(sid)[:64]!r}, "
                               "which this worker does not hold")
        return kept

    def __call__(self, spec: Any) -> ToolSpec:
        key = json.dumps(spec, sort_keys=True, separators=(",", ":"))
        found = self._kept.get(key)
        if found is None:
            found = ToolSpec.model_validate(spec)
            if len(self._kept) >= SPECS_KEPT:
                del self._kept[next(iter(self._kept))]
            self._kept[key] = found
        return found


def specs_id(specs: list[dict[str, Any]]) -> str:
    """The id of a list of squad-tool specs (as JSON data): the same list has the same id on
    every host and in every version, so a worker's word that it holds it is enough."""
    text = json.dumps(specs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class PromptsSeen:
    """The system prompts a worker got in claims, by their digest (at most `PROMPTS_KEPT`,
    and `PROMPT_BYTES_KEPT` characters in all, the oldest dropped first).

    A claim names the digests held here (`held`); its reply's system message then names its
    prompt by digest instead of carrying the text, which can be tens of kilobytes. A text
    that arrives is kept under the digest computed here, so a coordinator cannot make a name
    stand for another text."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, str] = OrderedDict()
        """Texts by digest, the least used first."""
        self._size = 0

    @property
    def held(self) -> list[str]:
        """The digests of the prompts kept, for a claim to name (`prompts_held`)."""
        return list(self._kept)

    def filled(self, records: list[Any]) -> list[Any]:
        """`records` (a claim's messages) with every system message's text: kept here when
        it carries one, put back from here when it names one. `ClusterError` when it names
        one not kept (it fell out meanwhile): the job is claimed again."""
        out: list[Any] = []
        for record in records:
            if isinstance(record, dict) and record.get("role") == "system":
                named = record.get("prompt")
                if named is None:
                    text = record.get("content")
                    if isinstance(text, str) and text:
                        self._keep(prompt_digest(text), text)
                else:
                    text = self._kept.get(named) if isinstance(named, str) else None
                    if text is None:
                        raise ClusterError(f"the claim's reply names system prompt "
                                           f"{str(named)[:64]!r}, which this worker does not "
                                           "hold")
                    self._keep(str(named), text)
                    record = {**{k: v for k, v in record.items() if k != "prompt"},
                              "content": text}
            out.append(record)
        return out

    def _keep(self, digest: str, text: str) -> None:
        """Keep `text` under `digest` as the most recently used, within the bounds."""
        if digest in self._kept:
            self._kept.move_to_end(digest)
            return
        self._kept[digest] = text
        self._size += len(text)
        while len(self._kept) > PROMPTS_KEPT or self._size > PROMPT_BYTES_KEPT:
            self._size -= len(self._kept.popitem(last=False)[1])


def held_hand_over(handed: dict[str, Any] | None, specs: SpecsSeen, prompts: PromptsSeen,
                   ) -> tuple[dict[str, Any], list[Any]] | None:
    """A job's hand-over (`Job.handed`) and its conversation with the prompts filled in, when
    the worker holds every spec list and prompt it names; else None, and the job is claimed."""
    if handed is None:
        return None
    try:
        specs.claimed(handed)
        return handed, prompts.filled(list(handed.get("messages") or []))
    except ClusterError:
        return None
