"""AgentSession: one agent's conversation and the agent loop that drives it.

Ask the provider; run the tool calls it returns one after another, in order, through the one
invoker; add every message to the transcript's one sink and make it durable before the next
step: the calls before the first runs, each result before the next call starts. A request goes
out while the records it carries are being made durable; a reply back first is recorded at once
(its records go with them when they have not left yet: one sync for both), but what it makes
happen (a tool call, the session's end and its event, the caller's answer) waits until all are
durable. When they cannot be, the session fails with the disk's error. Ends on final text,
`max_turns`, the route timeout, or cancellation. Between tasks a session keeps no message list
in memory: continuing it re-reads its transcript. Its first records are `runtime.opening`'s.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import structlog

from squadd import telemetry
from squadd.contracts.events import AgentCompleted, AgentError, EventSink, SessionMessage
from squadd.contracts.messages import (
    AssistantMessage,
    Completion,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Usage,
    UserMessage,
    message_record,
    parse_message,
)
from squadd.errors import NotCached, ProviderError, SquaddError
from squadd.providers.base import CompletionRequest
from squadd.runtime.conversation import name_calls, paired, used_call_ids
from squadd.runtime.opening import first_records, pending_task
from squadd.runtime.prompt import build_system_prompt, gather, gather_known, workspace_note
from squadd.runtime.services import SessionServices, ToolSource
from squadd.runtime.session_info import SessionInfo, route_intent, session_meta
from squadd.runtime.tracing import traced_completion
from squadd.state.owner import current_owner
from squadd.state.transcripts import (
    Riding,
    Transcript,
    TranscriptSink,
    now_iso,
    read_transcript,
)
from squadd.tools.base import CancelSignal, ToolSet
from squadd.tools.invoke import CallOrigin
from squadd.tools.rich import bounded_details

log = structlog.get_logger("squadd.session")

Outcome = Literal["completed", "error", "interrupted", "cancelled"]


def new_message_id() -> str:
    """Unique within its session, not secret (see `new_session_id`)."""
    return f"msg-{random.getrandbits(48):012x}"


@dataclass
class SessionOutcome:
    session_id: str
    agent: str
    status: Outcome
    answer: str = ""
    error: str | None = None
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    duration_s: float = 0.0
    model: str = ""


class AgentSession:
    """A conversation with one agent, persisted through its transcript's sink."""

    def __init__(self, info: SessionInfo, services: SessionServices, *, sink: TranscriptSink,
                 events: EventSink, tools: ToolSource, workspace_dir: Path | None = None,
                 worktree: bool | None = None,
                 on_deadline: Callable[[anyio.CancelScope | None], None] = lambda _: None,
                 on_ended: Callable[[], None] | None = None):
        self.info = info
        self.services = services
        self.sink = sink
        """Where every record of the transcript goes (the route's one sink)."""
        self.events = events
        self._source = tools
        self.workspace_dir = workspace_dir
        """The session's git worktree (None: it works in the repository root)."""
        self.worktree = workspace_dir is not None if worktree is None else worktree
        """Whether the session works in a git worktree, which its prompt then says (a
        coordinator's session is run by a worker, in a worktree of the worker's clone)."""
        self.on_deadline = on_deadline
        """Told the scope of the route timeout while the task runs (to pause it while parked)."""
        self.on_ended = on_ended
        """Called when a task's conversation is over (no model or tool call follows), before
        its end records are durable: the runner may give the slot back there."""
        self.usage = Usage()
        self.turns = 0
        self._rerun: list[ToolCall] = []
        """Dangling calls of the last turn a person answered since: run first on resume."""
        self._riding: Riding | None = None
        """Records a model request carried, on their way and not known durable yet: the next
        flush waits for them (the reply's records ride with them when they have not gone)."""

    @property
    def tools(self) -> ToolSet:
        """The session's tool set (found by its opening, or in its first worker-thread trip)."""
        return self._source.find()

    @property
    def session_id(self) -> str:
        return self.info.session_id

    @property
    def agent(self) -> str:
        return self.info.agent

    async def start(self, task: str, context: str | None, *,
                    cancel: CancelSignal | None = None,
                    timeout_s: float | None = None) -> SessionOutcome:
        """A new session made outside a route (no acceptance, nothing cached): its first
        records added in a worker thread, then its task run."""
        messages = await anyio.to_thread.run_sync(self._open, task, context)
        return await self.run_opened(messages, cancel=cancel, timeout_s=timeout_s)

    def _open(self, task: str, context: str | None) -> list[Message]:
        meta = {**session_meta(self.info), "task": task, "created": now_iso()}
        return first_records(self.sink, self.tools, self._system_prompt(context), task, meta)

    async def run_opened(self, messages: list[Message], *, cancel: CancelSignal | None = None,
                         timeout_s: float | None = None) -> SessionOutcome:
        """Run a new session from its first `messages`, which its opening added to the sink
        (they are made durable while the first request is out)."""
        for message in messages:
            self._publish(message)
        return await self._run(messages, None, cancel, timeout_s, prepared=True)

    async def run_from(self, messages: list[Message], *, cancel: CancelSignal | None = None,
                       timeout_s: float | None = None) -> SessionOutcome:
        """Run the loop from `messages`, which the session's sink already holds, the session
        marked active (a worker's session: its coordinator wrote them when the job was
        claimed)."""
        return await self._run(messages, None, cancel, timeout_s, prepared=True)

    async def continue_with(self, task: str | None, *,
                            cancel: CancelSignal | None = None,
                            timeout_s: float | None = None) -> SessionOutcome:
        """Continue from the transcript: with a new task, or (None) resuming an interrupted one.
        A session accepted but never started (its daemon stopped while it was queued) starts
        from its recorded task and context."""
        messages, prepared, pending = await anyio.to_thread.run_sync(self._load_or_open)
        await self._flush()
        if prepared:
            for message in messages:
                self._publish(message)
        if task is None and pending is not None:  # resuming a continuation that never started
            task = pending
        return await self._run(messages, task, cancel, timeout_s, prepared=prepared)

    def conversation(self, transcript: Transcript | None = None) -> list[Message]:
        """The conversation a session run elsewhere continues from, as `continue_with` reads
        it (blocking): an accepted session's prompt and task are added now, a call a crash
        cut off gets its stand-in result, and a continuation accepted but never started its
        task. What is added is in the sink, not durable yet: the caller commits the sink
        (with records of its own). `transcript`: the session's, when the caller has just read
        it (else it is read here)."""
        messages, _, pending = self._load_or_open(transcript)
        if pending is not None:
            user = UserMessage(content=pending)
            messages.append(user)
            self.sink.add("message", message=message_record(user))
        return messages

    def opening_known(self, transcript: Transcript, kept: Callable[[str], bool],
                      ) -> list[Message]:
        """`conversation` of a session accepted and not started (`transcript` holds no
        message), without reading or writing a file (the event loop may call it): its prompt
        from the cached files, one `kept` already. `NotCached` when a file must be."""
        if transcript.messages:
            raise NotCached("a started session's conversation is read in a worker thread")
        return self._open_recorded(transcript, kept)

    def _load_or_open(self, transcript: Transcript | None = None,
                      ) -> tuple[list[Message], bool, str | None]:
        """The conversation so far, whether it was just started from its recorded task (its
        first records added now), and the task of a continuation accepted but never started
        (blocking: the tools are found and, unless given, the transcript read)."""
        self._source.find()  # found here, in the caller's worker thread, not later on the loop
        if transcript is None:
            transcript = read_transcript(self.services.layout.transcript(self.session_id))
        if transcript.messages:
            return self._load_messages(transcript), False, pending_task(transcript.records)
        return self._open_recorded(transcript), True, None

    def _open_recorded(self, transcript: Transcript,
                       kept: Callable[[str], bool] | None = None) -> list[Message]:
        """The first records of a session from its recorded task and context, added to the
        sink. Without `kept`, its prompt's files are read (blocking); with it, only the cached
        ones are used, and `NotCached` says when that is not enough or the prompt is not kept."""
        meta = transcript.meta
        context = meta.get("context") if isinstance(meta.get("context"), str) else None
        if kept is None:
            system = self._system_prompt(context)
        else:
            services = self.services
            parts = gather_known(services.layout, self.agent, context, services.files,
                                 services.summaries)
            system = build_system_prompt(self.agent, parts, services.settings.prompt,
                                         workspace=self._workspace_note())
            if not kept(system):
                raise NotCached("a system prompt this process has not kept yet")
        return first_records(self.sink, self.tools, system,
                             str(meta.get("task") or self.info.task), {})

    def _system_prompt(self, context: str | None) -> str:
        """The session's system prompt from the current files (blocking)."""
        services = self.services
        parts = gather(services.layout, self.agent, context, services.files, services.summaries)
        return build_system_prompt(self.agent, parts, services.settings.prompt,
                                   workspace=self._workspace_note())

    def _workspace_note(self) -> str:
        return workspace_note(worktree=self.worktree,
                              sandbox=self.services.settings.sandbox.mode)

    def _load_messages(self, transcript: Transcript) -> list[Message]:
        """The conversation so far, every call answered (a stand-in, recorded, for a call a
        crash cut off), as the provider must see it. A last turn's calls that waited on a
        person who has answered since are kept aside to run first (`_rerun`)."""
        loaded = [parse_message(m) for m in transcript.messages]
        loaded, self._rerun = self._answered_tail(loaded)
        messages, stand_ins = paired(loaded)
        for message in stand_ins:
            self._record(message)
        if transcript.lost_prompt and messages and isinstance(messages[0], SystemMessage):
            # its kept file is gone or damaged: the model gets today's prompt, not a note
            log.warning("system prompt lost; built anew from the current files",
                        session_id=self.session_id, agent=self.agent)
            context = transcript.meta.get("context")
            messages[0] = SystemMessage(content=self._system_prompt(
                context if isinstance(context, str) else None))
        return messages

    def _answered_tail(self, loaded: list[Message]) -> tuple[list[Message], list[ToolCall]]:
        """When the conversation ends in a turn whose first unanswered call waited on a
        person (an approval, a question) who answered it since, the conversation without that
        turn's unanswered calls' part, and those calls (none had started: the wait comes
        before the run)."""
        last = next((i for i in range(len(loaded) - 1, -1, -1)
                     if not isinstance(loaded[i], ToolMessage)), None)
        if last is None:
            return loaded, []
        assistant = loaded[last]
        if not isinstance(assistant, AssistantMessage) or not assistant.tool_calls:
            return loaded, []
        answered = {m.tool_call_id for m in loaded[last + 1:] if isinstance(m, ToolMessage)}
        dangling = [c for c in assistant.tool_calls if c.id not in answered]
        if not dangling or not self.services.guard.answered_later(self.session_id, dangling[0].id):
            return loaded, []
        kept = assistant.model_copy(update={"tool_calls": [
            c for c in assistant.tool_calls if c.id in answered]})
        return [*loaded[:last], kept, *loaded[last + 1:]], dangling

    def _record(self, message: Message, **extra: Any) -> None:
        self.sink.add("message", message=message_record(message), **extra)
        self._publish(message)

    def _publish(self, message: Message) -> None:
        self.events.publish(SessionMessage(
            session_id=self.session_id, agent=self.agent, role=message.role,
            content=message.content[:500],
            tool_calls=([c.name for c in message.tool_calls]
                        if isinstance(message, AssistantMessage) else []),
        ))

    async def _flush(self) -> None:
        """Make every record so far durable (what writing them raised, when they could not
        be): what a reply does beyond the transcript and the bus waits for this."""
        riding, self._riding = self._riding, None
        if riding is None and not self.sink.pending:
            return
        with anyio.CancelScope(shield=True):
            if riding is not None:
                await riding.finished()  # takes the records added since, if unsent
            if self.sink.pending:
                await self.sink.commit()

    def mark(self, state: str, **fields: Any) -> None:
        """Record a state change in the transcript (flushed with the next write)."""
        self.sink.add("state", state=state, **fields)

    async def _run(self, messages: list[Message], task: str | None,
                   cancel: CancelSignal | None, timeout_s: float | None, *,
                   prepared: bool = False) -> SessionOutcome:
        started = time.monotonic()
        cancel = cancel or CancelSignal()
        if task is not None:
            user = UserMessage(content=task)
            messages.append(user)
            self._record(user)
        if not prepared:  # `start` has written the task and this state already
            # This process runs the session now (and its tools may have changed), for the
            # route that asked (where it works, whether it lands: a resume does the same).
            self.sink.add("meta", tools=self.tools.names, owner=current_owner(),
                          **route_intent(self.info))
            self.mark("active")
        try:
            with anyio.move_on_after(timeout_s) as scope:
                self.on_deadline(scope)
                try:
                    outcome = await self._loop(messages, cancel)
                finally:
                    self.on_deadline(None)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            with anyio.CancelScope(shield=True):
                self.mark("interrupted", reason="cancelled while running")
                await self._flush()
            raise
        if scope.cancelled_caught:
            cancel.set()
            outcome = self._outcome(
                "error", error=f"timed out after {timeout_s:g}s (route.timeout_s) and was "
                               "stopped; the transcript has the work so far")
        outcome.duration_s = time.monotonic() - started
        await self._finish(outcome)
        return outcome

    async def _finish(self, outcome: SessionOutcome) -> None:
        usage = {"input_tokens": outcome.usage.input_tokens,
                 "output_tokens": outcome.usage.output_tokens}
        if outcome.status == "completed":
            self.mark("completed", answer=outcome.answer, turns=outcome.turns, **usage)
        else:
            self.mark(outcome.status, error=outcome.error, turns=outcome.turns, **usage)
        if self.on_ended is not None:
            self.on_ended()
        await self._flush()  # the bus tells of the end once it is durable (and it may fail)
        if outcome.status == "completed":
            self.events.publish(AgentCompleted(
                session_id=self.session_id, agent=self.agent, answer=outcome.answer[:2000],
                turns=outcome.turns, duration_s=round(outcome.duration_s, 6), **usage,
            ))
        else:
            self.events.publish(AgentError(session_id=self.session_id, agent=self.agent,
                                         error=outcome.error or outcome.status,
                                         state=outcome.status))

    async def _loop(self, messages: list[Message], cancel: CancelSignal) -> SessionOutcome:
        info = self.info
        origin = CallOrigin(session_id=info.session_id, agent=info.agent, depth=info.depth,
                            lineage=(*info.lineage, info.agent), cancel=cancel,
                            workspace_dir=self.workspace_dir)
        settings = self.services.settings
        max_turns = settings.session.max_turns
        specs = self.tools.specs()
        if self._rerun:
            await self._run_answered(messages, origin)
        for _ in range(max_turns):
            request = CompletionRequest(
                messages=messages, tools=specs, model=info.model or None,
                max_tokens=settings.provider.max_tokens, agent=info.agent,
                session_id=info.session_id,
                cwd=str(self.workspace_dir) if self.workspace_dir is not None else None,
            )
            # may park until a person allows the call
            stopped = await self.services.guard.before_call(info, request)
            if stopped is not None:
                return self._outcome("error", error=stopped)
            completion = await self._ask_durably(request)
            if isinstance(completion, SessionOutcome):  # the provider failed: the session ends
                return completion
            message_id = new_message_id()
            cost = {"cost_usd": await self.services.guard.after_call(info, request, completion,
                                                                     message_id)}
            self.turns += 1
            self.usage = self.usage + completion.usage
            turn = sum(1 for m in messages if isinstance(m, AssistantMessage)) + 1
            calls = name_calls(completion.tool_calls, turn, used_call_ids(messages))
            assistant = AssistantMessage(content=completion.text, tool_calls=calls,
                                         id=message_id)
            messages.append(assistant)
            usage = completion.usage
            cached = {k: v for k, v in (("cache_read_tokens", usage.cache_read_tokens),
                                        ("cache_write_tokens", usage.cache_write_tokens)) if v}
            self._record(assistant, input_tokens=usage.input_tokens,
                         output_tokens=usage.output_tokens, **cached, **cost)
            if not calls:
                return self._outcome("completed", answer=completion.text)
            await self._flush()  # the calls are on disk before any of them has an effect
            in_turn = dataclasses.replace(origin, message_id=assistant.id or "")
            for call in calls:
                messages.append(await self._call(call, in_turn))
                # Its result is on disk before the next call starts: a crash from here on
                # never makes a finished call look interrupted (one fsync per call; the last
                # one also serves the next provider request).
                await self._flush()
        return self._outcome(
            "error",
            error=f"stopped after {max_turns} turns without a final answer "
                  "(session.max_turns); the transcript has the work so far",
        )

    async def _run_answered(self, messages: list[Message], origin: CallOrigin) -> None:
        """Run the calls a person answered while the session was away (`_rerun`), in order,
        after the turn they belong to; their answer is found where they wait for it."""
        calls, self._rerun = self._rerun, []
        assistant = next((m for m in reversed(messages) if isinstance(m, AssistantMessage)),
                         None)
        in_turn = dataclasses.replace(origin, message_id=(assistant.id or "")
                                      if assistant is not None else "")
        if assistant is not None:
            index = messages.index(assistant)
            messages[index] = assistant.model_copy(update={
                "tool_calls": [*assistant.tool_calls, *calls]})
            # the turn's answered results follow it: the new ones go after them
        for call in calls:
            messages.append(await self._call(call, in_turn))
            await self._flush()

    async def park(self, reason: str, **fields: Any) -> None:
        """Record that the session waits on a person (state `parked`), durably."""
        self.mark("parked", reason=reason, **fields)
        await self._flush()

    async def unpark(self) -> None:
        self.mark("active")
        await self._flush()

    async def _ask_durably(self, request: CompletionRequest) -> Completion | SessionOutcome:
        """The provider's reply to `request` (or the session's end, when it failed), asked for
        while the records not yet durable (the messages it carries) are on their way
        (`TranscriptSink.send_ahead`: the group commit's next batch). The reply may come first:
        its own records then go in the same batch when it has not left yet, and everything the
        reply makes happen beyond the transcript and the bus (a tool call, the session's end,
        the caller's answer) waits for the next `_flush`, which waits for them all. When the
        records cannot be made durable, the request is cancelled (if still out) and the
        error raised, there or at that flush, as a failed flush raises."""
        if not self.sink.pending:
            return await self._ask(request)
        with anyio.CancelScope() as asking:
            riding = await self.sink.send_ahead(on_error=asking.cancel)
            try:
                reply = await self._ask(request)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await riding.finished()  # the disk's error, when it cancelled us
                raise
            self._riding = riding
            return reply
        raise RuntimeError("the request was cancelled for a commit that did not fail")

    async def _ask(self, request: CompletionRequest) -> Completion | SessionOutcome:
        """The provider's reply, or the session's end when the provider failed."""
        provider = self.services.provider
        try:
            if not telemetry.active():
                return await provider.complete(request)
            return await traced_completion(provider, request, self.agent, self.session_id)
        except (ProviderError, SquaddError) as exc:
            return self._outcome("error", error=str(exc))
        except Exception as exc:  # a provider bug must end this session, not the pool
            log.exception("provider crashed", session_id=self.session_id)
            return self._outcome("error", error=f"provider crashed: {type(exc).__name__}: {exc}")

    async def _call(self, call: ToolCall, origin: CallOrigin) -> Message:
        result = await self.services.invoker.invoke(self.tools, call, origin)
        message = ToolMessage(tool_call_id=call.id, name=call.name, content=result.text,
                              is_error=not result.ok, images=list(result.images))
        extra: dict[str, Any] = {"result_type": result.result_type}
        if result.details:  # for people and tools reading the transcript, not for the model
            extra["details"] = bounded_details(result.details)
        self._record(message, **extra)
        return message

    def _outcome(self, status: Outcome, *, answer: str = "",
                 error: str | None = None) -> SessionOutcome:
        return SessionOutcome(session_id=self.session_id, agent=self.agent, status=status,
                              answer=answer, error=error, turns=self.turns, usage=self.usage,
                              model=self.info.model)
