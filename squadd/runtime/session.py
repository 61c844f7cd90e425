"""AgentSession: one agent's conversation and the agent loop that drives it.

Ask the provider; run the tool calls it returns one after another, in order, through the one
invoker; append every message to the transcript and fsync it before the next step: the calls
before the first runs, each result before the next call starts. A request goes out while the
records it carries are being made durable; a reply back first is recorded at once (its records
go with them when they have not left yet: one sync for both), but what it makes happen (a tool
call, the session's end and its event, the caller's answer) waits until all are durable. When
they cannot be, the session fails with the disk's error. Ends on final text, `max_turns`, the
route timeout, or cancellation. Between tasks a session keeps no message list in memory:
continuing it re-reads its transcript.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import anyio
import structlog

from squadd import telemetry
from squadd.config import Settings
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
from squadd.errors import ProviderError, SquaddError
from squadd.providers.base import CompletionRequest, Provider
from squadd.runtime.conversation import name_calls, paired, used_call_ids
from squadd.runtime.prompt import PromptParts, build_system_prompt, gather
from squadd.runtime.session_info import SessionInfo, session_meta
from squadd.statcache import NotCached, StatCache
from squadd.state.journal import GroupCommit, Pending
from squadd.state.layout import SquadLayout
from squadd.state.owner import current_owner
from squadd.state.transcripts import (
    PromptFiles,
    SpareFiles,
    Transcript,
    TranscriptWriter,
    now_iso,
    read_transcript,
)
from squadd.telemetry import genai
from squadd.tools.base import CancelSignal, ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker
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


def pending_task(transcript: Transcript) -> str | None:
    """The task of a continuation that was accepted and never started: a `queued` state with a
    task after the last message, not ended since (by a timeout or an error)."""
    pending: str | None = None
    for record in transcript.records:
        kind = record.get("kind")
        if kind == "message":
            pending = None
        elif kind == "state":
            state = record.get("state")
            if state == "queued" and isinstance(record.get("task"), str):
                pending = record["task"]
            elif state in ("error", "completed"):
                pending = None
    return pending


class ToolsSource(Protocol):
    """Makes a session's tool set; with `cached_only`, without reading a file (`NotCached`
    when it would have to)."""

    def __call__(self, cached_only: bool = False) -> ToolSet: ...


class AgentSession:
    """A conversation with one agent, persisted in its transcript."""

    def __init__(
        self,
        info: SessionInfo,
        *,
        layout: SquadLayout,
        settings: Settings,
        provider: Provider,
        invoker: ToolInvoker,
        tools: ToolSet,
        sink: EventSink,
        files: StatCache[str] | None = None,
        summaries: StatCache[str] | None = None,
        spares: SpareFiles | None = None,
        prompts: PromptFiles | None = None,
        workspace_dir: Path | None = None,
        tools_source: ToolsSource | None = None,
        commits: GroupCommit | None = None,
        writer: TranscriptWriter | None = None,
    ):
        self.info = info
        self.files = files
        """The owner's cache of the prompt's files (None: read them each time)."""
        self.summaries = summaries
        """The owner's cache of the skills' index lines (None: read them each time)."""
        self.commits = commits
        """The owner's group-commit writer (None: each flush syncs by itself)."""
        self._tools_source = tools_source
        """Makes the session's tool set (custom tools are discovered on disk): called once,
        when the session starts (on the loop when no tool file must be read, else in its first
        worker-thread trip), before `tools` is used."""
        self.spares = spares
        self.prompts = prompts
        """Where the owner keeps each system prompt once (None: in each transcript)."""
        self.workspace_dir = workspace_dir
        """The session's git worktree (None: it works in the repository root)."""
        self.layout = layout
        self.settings = settings
        self.provider = provider
        self.invoker = invoker
        self.tools = tools
        self.sink = sink
        self.usage = Usage()
        self.turns = 0
        self._transcript = writer
        """Where the transcript's records go: given (a worker's session forwards them to its
        coordinator), else the session's own file, made on first use."""
        self._specs = tools.specs()
        self._riding: Pending | None = None
        """Records a model request carried, begun with the group commit and not known durable
        yet: the next flush waits for them (the reply's records ride with them when they have
        not gone yet)."""

    @property
    def _writer(self) -> TranscriptWriter:
        # Made on first use: its path check stats a few folders (no read), so a warm `start`
        # makes it on the loop; a cold one and `continue_with` in their worker thread.
        if self._transcript is None:
            self._transcript = TranscriptWriter(self.layout.transcript(self.info.session_id),
                                                self.spares, self.prompts)
        return self._transcript

    @property
    def session_id(self) -> str:
        return self.info.session_id

    @property
    def agent(self) -> str:
        return self.info.agent

    async def start(self, task: str, context: str | None, *,
                    cancel: CancelSignal | None = None,
                    timeout_s: float | None = None,
                    accepted: bool = False) -> SessionOutcome:
        """A new session: write its meta (unless the route's acceptance did), system prompt
        and task, then run it (they are made durable while the first request is out).

        When the group commit makes the records durable and every file the prompt and the
        tools need is cached and unchanged (a `stat` each), the records are made here on the
        loop; a file to read sends the work to a worker thread."""
        messages: list[Message] | None = None
        if self.commits is not None:
            with contextlib.suppress(NotCached):
                messages = self._first_prepare(task, context, accepted, cached_only=True)
        if messages is None:
            messages = await anyio.to_thread.run_sync(self._first_prepare, task, context,
                                                      accepted)
        for message in messages:
            self._publish(message)
        return await self._run(messages, None, cancel, timeout_s, prepared=True)

    async def run_from(self, messages: list[Message], *, cancel: CancelSignal | None = None,
                       timeout_s: float | None = None) -> SessionOutcome:
        """Run the loop from `messages`, which the session's writer already holds, the session
        marked active (a worker's session: its coordinator wrote them when the job was
        claimed)."""
        return await self._run(messages, None, cancel, timeout_s, prepared=True)

    def _resolve_tools(self, cached_only: bool = False) -> None:
        """The tool set from `tools_source`, if it has one (blocking: it reads tool files;
        with `cached_only` it only stats them, or raises `NotCached`)."""
        source = self._tools_source
        if source is not None:
            self.tools = source(cached_only)
            self._tools_source = None
            self._specs = self.tools.specs()

    def _first_prepare(self, task: str, context: str | None, accepted: bool, *,
                       cached_only: bool = False) -> list[Message]:
        self._resolve_tools(cached_only)
        if self._transcript is None and not accepted:
            # A new session's own file: no older copy to look for, nothing to open first.
            self._transcript = TranscriptWriter(self.layout.new_transcript(self.session_id),
                                                self.spares, self.prompts, new=True)
        parts = gather(self.layout, self.agent, context, self.files, self.summaries,
                       cached_only=cached_only)
        if accepted:  # this process wrote the whole transcript since: it ends with a newline
            self._writer.ends_clean()
        return self._prepare(task, context, accepted, parts, cached_only=cached_only)

    def _prepare(self, task: str, context: str | None, accepted: bool,
                 parts: PromptParts | None = None, *, cached_only: bool = False) -> list[Message]:
        """Read the prompt's files (unless `parts` has them), then write and fsync all the
        provider is about to see (blocking: one trip to a worker thread; with `cached_only`
        a prompt not kept yet raises `NotCached` before any record is added)."""
        info = self.info
        if parts is None:
            parts = gather(self.layout, info.agent, context, self.files, self.summaries)
        system = SystemMessage(content=build_system_prompt(info.agent, parts, self.settings.prompt))
        user = UserMessage(content=task)
        writer = self._writer
        opening = writer.system_fields(system.content, cached_only=cached_only)
        if accepted:  # the meta is on disk since the route was accepted; add what is new
            writer.add("meta", tools=self.tools.names, owner=current_owner())
        else:
            writer.add("meta", **{**session_meta(info), "task": task},
                       tools=self.tools.names, created=now_iso(), owner=current_owner())
        writer.add("message", **opening)
        writer.add("message", message=message_record(user))
        writer.add("state", state="active")
        if self.commits is None:  # else the caller commits them with other sessions' records
            writer.flush()
        return [system, user]

    async def continue_with(self, task: str | None, *,
                            cancel: CancelSignal | None = None,
                            timeout_s: float | None = None) -> SessionOutcome:
        """Continue from the transcript: with a new task, or (None) resuming an interrupted one.
        A session accepted but never started (its daemon stopped while it was queued) starts
        from its recorded task and context."""
        messages, prepared, pending = await anyio.to_thread.run_sync(self._load_or_prepare)
        await self._flush()
        if prepared:
            for message in messages:
                self._publish(message)
        if task is None and pending is not None:  # resuming a continuation that never started
            task = pending
        return await self._run(messages, task, cancel, timeout_s, prepared=prepared)

    def conversation(self) -> list[Message]:
        """The conversation a session run elsewhere continues from, as `continue_with` reads
        it (blocking): an accepted session's prompt and task are written now, a call a crash
        cut off gets its stand-in result, and a continuation accepted but never started its
        task; all of it fsynced."""
        messages, _, pending = self._load_or_prepare()
        if pending is not None:
            user = UserMessage(content=pending)
            messages.append(user)
            self._writer.add("message", message=message_record(user))
        self._writer.flush()
        return messages

    def _load_or_prepare(self) -> tuple[list[Message], bool, str | None]:
        """The conversation so far, whether it was just started from its recorded task, and
        the task of a continuation accepted but never started."""
        self._resolve_tools()
        writer = self._writer  # made here, off the loop: its path check touches the disk
        transcript = read_transcript(writer.path)
        if transcript.messages:
            return self._load_messages(transcript), False, pending_task(transcript)
        meta = transcript.meta
        context = meta.get("context")
        return self._prepare(str(meta.get("task") or self.info.task),
                             context if isinstance(context, str) else None, True), True, None

    def _load_messages(self, transcript: Transcript) -> list[Message]:
        """The conversation so far, every call answered (a stand-in, recorded, for a call a
        crash cut off), as the provider must see it."""
        messages, stand_ins = paired([parse_message(m) for m in transcript.messages])
        for message in stand_ins:
            self._record(message)
        if transcript.lost_prompt and messages and isinstance(messages[0], SystemMessage):
            # its kept file is gone or damaged: the model gets today's prompt, not a note
            log.warning("system prompt lost; built anew from the current files",
                        session_id=self.session_id, agent=self.agent)
            context = transcript.meta.get("context")
            parts = gather(self.layout, self.agent, context if isinstance(context, str) else None,
                           self.files, self.summaries)
            messages[0] = SystemMessage(
                content=build_system_prompt(self.agent, parts, self.settings.prompt))
        return messages

    def _record(self, message: Message, **extra: Any) -> None:
        self._writer.add("message", message=message_record(message), **extra)
        self._publish(message)

    def _publish(self, message: Message) -> None:
        self.sink.publish(SessionMessage(
            session_id=self.session_id, agent=self.agent, role=message.role,
            content=message.content[:500],
            tool_calls=([c.name for c in message.tool_calls]
                        if isinstance(message, AssistantMessage) else []),
        ))

    async def _flush(self) -> None:
        """Make every record so far durable (what writing them raised, when they could not
        be): what a reply does beyond the transcript and the bus waits for this."""
        riding, self._riding = self._riding, None  # only ever set with a group commit
        if riding is None and not self._writer.pending:
            return
        with anyio.CancelScope(shield=True):
            if self.commits is None:
                await anyio.to_thread.run_sync(self._writer.flush)
                return
            if riding is not None:
                await self.commits.finish(riding)  # takes the records added since, if unsent
            if self._writer.pending:
                await self.commits.commit(self._writer)

    def mark(self, state: str, **fields: Any) -> None:
        """Record a state change in the transcript (flushed with the next write)."""
        self._writer.add("state", state=state, **fields)

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
            # This process runs the session now (and its tools may have changed).
            self._writer.add("meta", tools=self.tools.names, owner=current_owner())
            self.mark("active")
        try:
            with anyio.move_on_after(timeout_s) as scope:
                outcome = await self._loop(messages, cancel)
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
        await self._flush()  # the bus tells of the end once it is durable (and it may fail)
        if outcome.status == "completed":
            self.sink.publish(AgentCompleted(
                session_id=self.session_id, agent=self.agent, answer=outcome.answer[:2000],
                turns=outcome.turns, duration_s=round(outcome.duration_s, 6), **usage,
            ))
        else:
            self.sink.publish(AgentError(session_id=self.session_id, agent=self.agent,
                                         error=outcome.error or outcome.status,
                                         state=outcome.status))

    async def _loop(self, messages: list[Message], cancel: CancelSignal) -> SessionOutcome:
        info = self.info
        origin = CallOrigin(session_id=info.session_id, agent=info.agent, depth=info.depth,
                            lineage=(*info.lineage, info.agent), cancel=cancel,
                            workspace_dir=self.workspace_dir)
        max_turns = self.settings.session.max_turns
        for _ in range(max_turns):
            request = CompletionRequest(
                messages=messages, tools=self._specs, model=info.model or None,
                max_tokens=self.settings.provider.max_tokens, agent=info.agent,
                session_id=info.session_id,
                cwd=str(self.workspace_dir) if self.workspace_dir is not None else None,
            )
            completion = await self._ask_durably(request)
            if isinstance(completion, SessionOutcome):  # the provider failed: the session ends
                return completion
            self.turns += 1
            self.usage = Usage(
                input_tokens=self.usage.input_tokens + completion.usage.input_tokens,
                output_tokens=self.usage.output_tokens + completion.usage.output_tokens,
            )
            turn = sum(1 for m in messages if isinstance(m, AssistantMessage)) + 1
            calls = name_calls(completion.tool_calls, turn, used_call_ids(messages))
            assistant = AssistantMessage(content=completion.text, tool_calls=calls,
                                         id=new_message_id())
            messages.append(assistant)
            self._record(assistant, input_tokens=completion.usage.input_tokens,
                         output_tokens=completion.usage.output_tokens)
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

    async def _ask_durably(self, request: CompletionRequest) -> Completion | SessionOutcome:
        """The provider's reply to `request` (or the session's end, when it failed), asked for
        while the records not yet durable (the messages it carries) go with the group
        commit's next batch. The reply may come first: its own records then go in the same
        batch when it has not left yet, and everything the reply makes happen beyond the
        transcript and the bus (a tool call, the session's end, the caller's answer) waits
        for the next `_flush`, which waits for them all. When the records cannot be made
        durable, the request is cancelled (if still out) and the commit's error raised, there
        or at that flush, as a failed flush raises."""
        commits = self.commits
        if not self._writer.pending:
            return await self._ask(request)
        if commits is None or not commits.running:
            await self._flush()
            return await self._ask(request)
        with anyio.CancelScope() as asking:
            pending = commits.begin(self._writer, on_error=asking.cancel)
            try:
                reply = await self._ask(request)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await commits.finish(pending)  # the disk's error, when it cancelled us
                raise
            self._riding = pending
            return reply
        raise RuntimeError("the request was cancelled for a commit that did not fail")

    async def _ask(self, request: CompletionRequest) -> Completion | SessionOutcome:
        """The provider's reply, or the session's end when the provider failed."""
        try:
            if not telemetry.active():
                return await self.provider.complete(request)
            return await self._ask_traced(request)
        except (ProviderError, SquaddError) as exc:
            return self._outcome("error", error=str(exc))
        except Exception as exc:  # a provider bug must end this session, not the pool
            log.exception("provider crashed", session_id=self.session_id)
            return self._outcome("error", error=f"provider crashed: {type(exc).__name__}: {exc}")

    async def _ask_traced(self, request: CompletionRequest) -> Completion:
        """`provider.complete` as a `chat {model}` span (GenAI conventions)."""
        model = request.model or self.provider.default_model
        with telemetry.span(f"{genai.CHAT} {model}".strip(), {
                genai.OPERATION: genai.CHAT, genai.PROVIDER: self.provider.name,
                genai.REQUEST_MODEL: model or None,
                genai.REQUEST_MAX_TOKENS: request.max_tokens,
                genai.AGENT_NAME: self.agent, genai.CONVERSATION_ID: self.session_id,
        }, kind="client") as span:
            if telemetry.capture_content():
                span.set(genai.INPUT_MESSAGES, genai.bounded(telemetry.redact(
                    genai.messages_json(request.messages))))
                span.set(genai.SYSTEM_INSTRUCTIONS, genai.system_json(request.messages))
            completion = await self.provider.complete(request)
            usage = completion.usage
            span.set(genai.RESPONSE_MODEL, completion.model or model or None)
            finish = genai.FINISH_REASONS.get(completion.stop_reason, completion.stop_reason)
            span.set(genai.RESPONSE_FINISH_REASONS, [finish])
            span.set(genai.USAGE_INPUT, usage.input_tokens)
            span.set(genai.USAGE_OUTPUT, usage.output_tokens)
            span.set(genai.USAGE_CACHE_READ, usage.cache_read_input_tokens)
            span.set(genai.USAGE_CACHE_CREATION, usage.cache_creation_input_tokens)
            if telemetry.capture_content():
                reply = AssistantMessage(content=completion.text,
                                         tool_calls=completion.tool_calls)
                span.set(genai.OUTPUT_MESSAGES, genai.bounded(telemetry.redact(
                    genai.messages_json([reply], finish_reason=finish))))
            return completion

    async def _call(self, call: ToolCall, origin: CallOrigin) -> Message:
        result = await self.invoker.invoke(self.tools, call, origin)
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
