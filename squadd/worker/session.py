"""What a worker gives `AgentSession` so that the coordinator keeps its transcript and applies
its squad tools.

`ForwardingSink` is the session's `TranscriptSink`: making its records durable sends them to
the coordinator and returns once it has fsynced them, so the loop advances exactly as it does on
one host; the records that end the session are the exception: they ride in the end request
(`ending`), one request instead of two, and `EndEvents` holds the session's end event until
the coordinator has them. `SquadToolProxy` forwards a squad-tool call (decide,
memory, skill, route, status) to the coordinator's invocation pipeline. Every request carries
the lease epoch; a refused one (`StaleLease`) stops the session without another word from this
worker. `Running` is what the worker keeps of each job it runs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.from_thread
from pydantic import BaseModel, ConfigDict

from squadd.cluster.jobs import Delivery
from squadd.cluster.requests import SentIds
from squadd.cluster.wire import Reply
from squadd.contracts.events import AgentCompleted, AgentError, BaseEvent, EventSink
from squadd.contracts.messages import ToolSpec
from squadd.errors import ClusterError
from squadd.errors import StaleLease as StaleLease
from squadd.state.transcripts import Riding
from squadd.tools.base import Tool, ToolContext, ToolResult

Send = Callable[[str, str, dict[str, Any]], Awaitable[Reply]]
"""Send one request (kind, request-id suffix, body) for the session; returns the reply."""
ENDED = frozenset({"completed", "error"})
"""The states a session's last flush records: its records go with the end request."""


def checked(reply: Reply) -> Reply:
    """`reply`, or `StaleLease` when the coordinator refused the epoch or cancelled."""
    if reply.refused == "stale_epoch":
        raise StaleLease(reply.error or "stale lease epoch")
    return reply


@dataclass(eq=False)
class Running:
    """A job this worker runs now."""

    delivery: Delivery
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    epoch: int = 0
    lost: bool = False
    """Another worker took the job over: stop, acknowledge nothing, report nothing."""
    unleased: bool = False
    """Redis lost the job: it runs on, with no lease left to renew."""
    acking: bool = False
    """Its acknowledgement is on its way: a lease renewal that finds the job gone from now on
    saw the acknowledgement, not a loss."""
    acked: bool = False
    """The coordinator acknowledged the job with its reply to the session's end."""
    sink: ForwardingSink | None = None
    """The session's transcript sink: the end request carries the records it holds."""
    events: EndEvents | None = None
    handed: bool = False
    """Started from its job's hand-over, without a claim: each request names this host, and
    the coordinator records the holder at the first."""
    held: bool = False
    """A request of this run was answered: the coordinator knows this worker holds it."""
    sent: SentIds = field(default_factory=SentIds)
    """The ids of the session's requests sent so far: a new one goes out marked `first` (the
    coordinator has no reply to look up for it)."""


class ForwardingSink:
    """A worker's session's `TranscriptSink`: records are buffered, numbered in order, and
    made durable by the coordinator (`commit` sends them and waits for its fsync). System
    prompts go inline: the coordinator keeps its own prompt files.

    A commit whose records end the session (a state in `ENDED`) sends nothing: they stay
    pending, and the worker's end request carries them (`ending`, then `ended`). Until the
    coordinator has them they are not durable; a worker that dies before its end is sent
    loses them, and the worker that takes the job over runs the last turn again, as after
    a death during a model call."""

    def __init__(self, send: Send, on_cancel: Callable[[], None], stopping: anyio.Event):
        self._send = send
        self._stopping = stopping
        self._on_cancel = on_cancel
        self._records: list[dict[str, Any]] = []
        self._next = 1
        self.holding = False
        """The session's last records wait here for the end request."""

    def add(self, kind: str, **fields: Any) -> None:
        # A JSON round trip now: the record is what a local transcript would hold.
        record = json.loads(json.dumps({"kind": kind, **fields}, ensure_ascii=False,
                                       default=str))
        record["n"] = self._next
        self._next += 1
        self._records.append(record)

    def system_fields(self, text: str) -> dict[str, Any]:
        return {"message": {"role": "system", "content": text}}

    @property
    def pending(self) -> int:
        return len(self._records)

    @property
    def written(self) -> int:
        return self._next - 1 - len(self._records)

    def flush(self) -> None:
        """Send what is pending and wait for the coordinator's fsync (from a worker thread)."""
        if self._records:
            anyio.from_thread.run(self.commit)

    async def send_ahead(self, on_error: Callable[[], None]) -> Riding:
        """The records go before the request does (the coordinator's fsync is one round trip
        the request would wait for anyway): durable when this returns."""
        with anyio.CancelScope(shield=True):
            await self.commit()
        return _SENT

    def ending(self) -> list[dict[str, Any]]:
        """The records the end request carries: every one not yet confirmed."""
        return list(self._records)

    def ended(self, count: int) -> None:
        """The coordinator confirmed the end carrying the first `count` pending records."""
        del self._records[:count]
        self.holding = False

    async def commit(self) -> None:
        """Send what is pending and wait for the coordinator's fsync (from the event loop);
        the session's last records are kept for the end request instead."""
        if not self._records:
            return
        if self.holding or any(r.get("kind") == "state" and r.get("state") in ENDED
                               for r in self._records):
            self.holding = True
            return
        records = list(self._records)
        first, last = records[0]["n"], records[-1]["n"]
        # The loop waits for this flush shielded from cancellation (a transcript line must not
        # be half-sent); a worker that stops ends the wait here instead.
        replies: list[Reply] = []
        try:
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    await self._stopping.wait()
                    tg.cancel_scope.cancel()
                tg.start_soon(watch)
                replies.append(await self._send("records", f"r{first}-{last}",
                                                {"records": records}))
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # the send's own failure (StaleLease, ClusterError)
            failure = group.exceptions[0] if len(group.exceptions) == 1 else None
            if isinstance(failure, Exception):
                raise failure from None
            raise
        if not replies:
            raise ClusterError("the worker is stopping; the coordinator did not confirm the "
                               "transcript records, so the session's lease will move it on")
        reply = checked(replies[0])
        if not reply.ok:
            raise ClusterError(f"the coordinator did not store the transcript records: "
                               f"{reply.error}")
        del self._records[:len(records)]
        if reply.cancelled:
            self._on_cancel()


class EndEvents:
    """The session's event sink on a worker: its end event (`agent.completed`, `agent.error`)
    waits while the sink holds the records that end it, and is published once the
    coordinator has them (`release`): the bus tells of an end once it is durable."""

    def __init__(self, bus: EventSink, sink: ForwardingSink):
        self._bus = bus
        self._sink = sink
        self._held: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        if self._sink.holding and isinstance(event, AgentCompleted | AgentError):
            self._held.append(event)
        else:
            self._bus.publish(event)

    def release(self) -> None:
        """Publish the held end events (the coordinator has the session's end)."""
        held, self._held = self._held, []
        for event in held:
            self._bus.publish(event)


class _Sent:
    """Records already durable when `send_ahead` returned."""

    async def finished(self) -> None:
        return None


_SENT = _Sent()


class _AnyArgs(BaseModel):
    """The coordinator validates a squad tool's arguments; here they pass as given."""

    model_config = ConfigDict(extra="allow")


class SquadToolProxy(Tool[_AnyArgs]):
    """A squad tool whose calls the coordinator applies (one writer of `.squad/`)."""

    args_model = _AnyArgs
    squad_tool = True

    def __init__(self, spec: ToolSpec, send: Send, on_cancel: Callable[[], None],
                 around: Callable[[str], Any] | None = None):
        self.name = spec.name
        self.description = spec.description
        self._parameters = spec.parameters
        self._spec = spec
        self._send = send
        self._on_cancel = on_cancel
        self._around = around
        """For `squad_route`: an async context manager factory that gives the worker's slot
        back while the child route runs (as a waiting parent does on one host)."""

    def parameters_schema(self) -> dict[str, Any]:
        return dict(self._parameters)

    def spec(self) -> ToolSpec:
        """The spec the claim carried, the very object: the worker gives every job's proxy
        the one object per distinct spec (`SpecsSeen`), so a provider encodes it once."""
        return self._spec

    async def run(self, args: _AnyArgs, ctx: ToolContext) -> ToolResult:
        call = {"id": ctx.call_id, "name": self.name, "arguments": args.model_dump()}
        if self._around is not None:
            async with self._around(self.name):
                reply = await self._send("tool", f"t{ctx.call_id}", {"call": call})
        else:
            reply = await self._send("tool", f"t{ctx.call_id}", {"call": call})
        checked(reply)
        if reply.cancelled:
            self._on_cancel()
        if not reply.ok:
            return ToolResult.failure(reply.error or "the coordinator refused the call")
        return ToolResult.model_validate(reply.body.get("result", {}))
