"""The one invocation pipeline every tool call goes through, whoever makes it.

lookup -> validate args -> variables (a missing one may be asked for) -> approval -> PreToolUse
hooks -> run (timeout, cancel) -> redact secrets -> truncate + spill -> PostToolUse hooks ->
events -> ToolResult. Nothing raises
out of `ToolInvoker.invoke` but cancellation: every failure becomes a ``result_type="failure"``
result the model can read.

Redaction takes every secret the owner knows (`KnownSecrets`, and each secret any tool of the
call's set declares), not only the calling tool's own: whichever tool prints a secret, in
whichever of the common encodings (`squadd.tools.redaction`), it is replaced before the result
reaches the model, the transcript, an event or a squad tool's record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog
from pydantic import BaseModel, ValidationError

from squadd import telemetry
from squadd.config import Settings
from squadd.contracts.events import EventSink, NullSink, ToolCompleted, ToolStarted, ToolUpdated
from squadd.contracts.messages import ToolCall
from squadd.errors import VariablesMissing
from squadd.state.layout import SquadLayout
from squadd.telemetry import genai
from squadd.tools.base import (
    CancelSignal,
    Tool,
    ToolContext,
    ToolOutput,
    ToolResult,
    ToolSet,
    VariableSpec,
)
from squadd.tools.gates import (
    ApprovalGate,
    EnvironmentVariables,
    KnownSecrets,
    ResolvedVariables,
    Unattended,
    VariableGate,
    VariableResolver,
)
from squadd.tools.hooks import Hooks
from squadd.tools.hooks.gate import gate_call, tell_model
from squadd.tools.redaction import redact, redact_any
from squadd.tools.rich import RichResultError, bounded_details, is_rich, rich_result
from squadd.tools.truncate import cut, spill, truncation_note

log = structlog.get_logger("squadd.tools")

NOTE_ALLOWANCE_BYTES = 1024
NOTE_ALLOWANCE_LINES = 8
"""Room left for the truncation note in a result whose tool already spilled its output."""
MAX_SCOPED_NAMES = 4096
"""Scoped variable names an invoker remembers (names, never values)."""
INTERRUPTED_SUMMARY = (
    "interrupted: the session was cancelled while {tool} ran; its effect is unknown")
"""The `tool.completed` summary of a call its session's cancellation cut short."""


@dataclass
class _Ran:
    """What the tool ran with, once it ran (for the PostToolUse hooks)."""

    ctx: ToolContext | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class CallOrigin:
    """Who is calling: the session (or outside caller) a tool call belongs to."""

    session_id: str
    agent: str
    depth: int = 0
    lineage: tuple[str, ...] = ()
    cancel: CancelSignal = field(default_factory=CancelSignal)
    workspace_dir: Path | None = None
    """The session's working copy (None = the repository itself)."""
    message_id: str = ""
    """The assistant message whose tool calls these are ("" for calls from outside)."""


def describe_validation_error(tool: Tool[Any], exc: ValidationError) -> str:
    """One line per bad field: where, what was wrong, and what was given."""
    lines = [f"invalid arguments for {tool.name}:"]
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(arguments)"
        given = error.get("input")
        shown = json.dumps(given, default=str)[:80] if given is not None else "nothing"
        if error["type"] == "missing":
            lines.append(f"- {where}: required, but missing")
        else:
            lines.append(f"- {where}: {error['msg']} (got {shown})")
    properties = tool.parameters_schema().get("properties", {})
    if properties:
        lines.append(f"expected fields: {', '.join(properties)}")
    return "\n".join(lines)


def _to_result(output: ToolOutput) -> ToolResult:
    if isinstance(output, ToolResult):
        return output
    if isinstance(output, str):
        return ToolResult.success(output)
    if is_rich(output):
        assert isinstance(output, dict)
        return rich_result(output)
    if isinstance(output, dict):
        return ToolResult.success(json.dumps(output, indent=2, default=str), data=output)
    return ToolResult.success(str(output))


class ToolInvoker:
    """Runs tool calls for sessions, the daemon API and MCP, all in the same way."""

    def __init__(
        self,
        layout: SquadLayout,
        settings: Settings,
        sink: EventSink | None = None,
        *,
        variables: VariableResolver | None = None,
        approvals: ApprovalGate | None = None,
        secrets: KnownSecrets | None = None,
        hooks: Hooks | None = None,
    ):
        """`secrets`: the owner's registry of secret values (default: the resolver's
        `registry`, if it has one)."""
        self.layout = layout
        self.settings = settings
        self.sink = sink or NullSink()
        self.variables = variables or EnvironmentVariables()
        self.approvals: ApprovalGate = approvals if approvals is not None else Unattended(settings)
        self.hooks = hooks if hooks is not None else Hooks(layout, settings)
        """The squad's hooks (`.squad/hooks.json`): PreToolUse after the approval gate,
        PostToolUse on a call that ran and succeeded."""
        self.running: dict[str, str] = {}
        """Call id -> tool name of the calls running now (read by the daemon's loop watch)."""
        self._scoped: set[str] = set()
        registry = secrets if secrets is not None else getattr(self.variables, "registry", None)
        self.known: KnownSecrets | None = registry
        self._declared: set[VariableSpec] = set()
        """Secret declarations of every tool seen, resolved once so their values are known."""
        self._fallback: dict[str, str] = {}
        """The secrets found that way, when the owner keeps no registry."""

    def apply_settings(self, settings: Settings) -> None:
        """Run later calls with changed settings (`[tools]` limits, timeouts and approval
        rules); calls running now keep theirs."""
        self.settings = settings
        apply = getattr(self.approvals, "apply_settings", None)
        if callable(apply):
            apply(settings)

    async def invoke(self, tools: ToolSet, call: ToolCall, origin: CallOrigin) -> ToolResult:
        """Run `call` against `tools`; always returns a result, never raises (but cancellation).
        With tracing on, the call is an `execute_tool {tool}` span."""
        if not telemetry.active():
            return await self._invoke(tools, call, origin)
        tool = tools.get(call.name)
        with telemetry.span(f"{genai.EXECUTE_TOOL} {call.name}", {
                genai.OPERATION: genai.EXECUTE_TOOL, genai.TOOL_NAME: call.name,
                genai.TOOL_CALL_ID: call.id, genai.TOOL_TYPE: "function",
                genai.TOOL_DESCRIPTION: tool.description[:500] if tool is not None else None,
                genai.AGENT_NAME: origin.agent, genai.CONVERSATION_ID: origin.session_id,
        }) as span:
            if telemetry.capture_content():
                span.set(genai.TOOL_ARGUMENTS, genai.bounded(telemetry.redact(
                    genai.arguments_json(call.arguments))))
            result = await self._invoke(tools, call, origin)
            if telemetry.capture_content():
                span.set(genai.TOOL_RESULT, genai.bounded(telemetry.redact(result.text)))
            if not result.ok:
                span.fail("tool_failure", result.text[:200])
            return result

    async def _invoke(self, tools: ToolSet, call: ToolCall, origin: CallOrigin) -> ToolResult:
        started = time.monotonic()
        tool = tools.get(call.name)
        secrets: dict[str, str] = {}
        announced: list[bool] = []
        ran = _Ran()

        def announce(known_secrets: Mapping[str, str]) -> None:
            # tool.started goes out once the secrets are known, so its arguments can be redacted.
            if announced:
                return
            announced.append(True)
            self.sink.publish(ToolStarted(
                session_id=origin.session_id, agent=origin.agent, tool=call.name,
                call_id=call.id,
                arguments=redact_any(_preview_arguments(call.arguments), known_secrets),
            ))

        try:
            secrets = await self._all_secrets(tools, {})
            if call.arguments_error is not None:
                result = ToolResult.failure(
                    f"arguments were not valid JSON: {call.arguments_error}. "
                    f"Call {call.name} again with a JSON object of arguments."
                )
            elif tool is None:
                available = ", ".join(sorted(tools.names)) or "none"
                refusal = tools.refusal(call.name)
                broken = tools.unavailable.get(call.name)
                if refusal is not None:
                    result = ToolResult.failure(
                        f"{call.name} may not be used here: {refusal}. The tools available are "
                        f"{available}", refused=True)
                else:
                    result = ToolResult.failure(
                        f"tool {call.name!r} exists but failed to load, so it cannot run "
                        f"({broken}); the tools available are {available}"
                        if broken is not None
                        else f"unknown tool {call.name!r}: the tools available are {available}"
                )
            else:
                result, own = await self._run(tools, tool, call, origin, announce, secrets,
                                              ran)
                secrets = {**secrets, **own}
        except anyio.get_cancelled_exc_class():
            # The session is being cancelled: say the call ended, so no watcher sees a tool
            # still running, then let the cancellation go on.
            announce(secrets)
            self.sink.publish(ToolCompleted(
                session_id=origin.session_id, agent=origin.agent, tool=call.name,
                call_id=call.id, result_type="failure",
                summary=INTERRUPTED_SUMMARY.format(tool=call.name),
                duration_s=round(time.monotonic() - started, 6), details={"interrupted": True},
            ))
            raise
        except Exception as exc:  # the pipeline's promise: a tool never raises into the loop
            log.exception("tool pipeline failed", tool=call.name, call_id=call.id)
            result = ToolResult.failure(f"{call.name} failed: {type(exc).__name__}: {exc}")
        finally:
            announce(secrets)
        result = await self._finish(tool, call, origin, result, secrets)
        if ran.ctx is not None and tool is not None and result.ok:
            result = await tell_model(self.hooks, tool, ran.ctx, ran.arguments, result)
        self.sink.publish(ToolCompleted(
            session_id=origin.session_id, agent=origin.agent, tool=call.name, call_id=call.id,
            result_type=result.result_type, summary=result.text[:200],
            duration_s=round(time.monotonic() - started, 6),
            details=bounded_details(result.details),
        ))
        return result

    async def _all_secrets(self, tools: ToolSet, own: Mapping[str, str]) -> dict[str, str]:
        """Every secret value to redact from a call of `tools`: the owner's registry, the
        secrets any tool of the set declares (resolved once, where they have a value), and
        the call's own."""
        fresh = {spec.model_copy(update={"required": False}) for tool in tools
                 for spec in tool.variables if spec.type == "secret"} - self._declared
        if fresh and len(self._declared) < MAX_SCOPED_NAMES:
            self._declared |= fresh
            try:
                found = await anyio.to_thread.run_sync(self.variables.resolve, tuple(fresh))
            except Exception as exc:  # a broken secrets file: the call's own step says so
                log.warning("declared secrets not read for redaction", error=str(exc))
            else:
                if self.known is not None:
                    self.known.remember(found.secrets)
                else:
                    self._fallback.update(found.secrets)
        known = self.known.snapshot() if self.known is not None else dict(self._fallback)
        return {**known, **own}

    async def _run(self, tools: ToolSet, tool: Tool[Any], call: ToolCall, origin: CallOrigin,
                   announce: Callable[[Mapping[str, str]], None], known: Mapping[str, str],
                   ran: _Ran,
                   ) -> tuple[ToolResult, dict[str, str]]:
        try:
            args: BaseModel = tool.args_model.model_validate(call.arguments)
        except ValidationError as exc:
            return ToolResult.failure(describe_validation_error(tool, exc)), {}
        # The call's own signal: a timeout stops this call without cancelling the session.
        cancel = origin.cancel.child()
        ctx = ToolContext(
            session_id=origin.session_id, call_id=call.id, agent=origin.agent,
            repo_dir=self.layout.repo, squad_dir=self.layout.root, cancel=cancel,
            depth=origin.depth, lineage=origin.lineage, workspace_dir=origin.workspace_dir,
            message_id=origin.message_id, hidden_variables=self._hidden_variables(tools, tool),
        )
        resolved = await self._resolve(tool, ctx)
        if isinstance(resolved, ToolResult):
            return resolved, {}
        secrets = {**known, **resolved.secrets}
        announce(secrets)
        ctx.variables = resolved.values
        ctx.known_secrets = secrets
        ctx._progress = self._progress_fn(tool, call, origin, secrets)
        ctx._confirm = self.approvals.confirm_fn(tool, ctx)
        reason = await tool.approval_reason(args, ctx)
        denial = await self.approvals.check(tool, call.arguments, ctx, secrets, reason=reason)
        if denial is not None:
            return denial, resolved.secrets
        gated = await gate_call(self.hooks, tool, call.arguments, args, ctx,
                                describe_validation_error)
        if isinstance(gated, ToolResult):
            return gated, resolved.secrets
        args, arguments = gated
        if tool.squad_tool and secrets:
            # What a squad tool records (decisions, memory, a routed task) never holds a
            # secret, even one the model pieced together from a form redaction missed.
            args = type(args).model_validate(redact_any(args.model_dump(), secrets))
        ran.ctx, ran.arguments = ctx, arguments
        timeout = tool.timeout_s
        if timeout is None and not tool.squad_tool:
            timeout = self.settings.tools.timeout_s
        output: ToolOutput = ""
        key = f"{origin.session_id}/{call.id}"
        self.running[key] = tool.name
        try:
            # The cancel scope says whether the deadline struck: a TimeoutError the tool raises
            # itself is the tool's own failure, not this timeout.
            with anyio.move_on_after(timeout) as deadline:
                output = await tool.run(args, ctx)
        except anyio.get_cancelled_exc_class():
            cancel.set()
            origin.cancel.set()
            raise
        except Exception as exc:
            return ToolResult.failure(
                f"{tool.name} failed: {type(exc).__name__}: {exc}"
            ), resolved.secrets
        finally:
            self.running.pop(key, None)
        if deadline.cancelled_caught and timeout is not None:
            cancel.set()
            return ToolResult.failure(
                f"{tool.name} timed out after {timeout:g}s and was stopped"
            ), resolved.secrets
        try:
            return _to_result(output), resolved.secrets
        except RichResultError as exc:
            return ToolResult.failure(
                f"{tool.name} returned a result squadd cannot use: {exc}"), resolved.secrets

    def _hidden_variables(self, tools: ToolSet, tool: Tool[Any]) -> frozenset[str]:
        """Scoped variables of other tools (of this set, or any this invoker has seen, so a
        narrowed set still hides them), never `tool`'s own."""
        if len(self._scoped) < MAX_SCOPED_NAMES:
            self._scoped.update(spec.name for other in tools for spec in other.variables
                                if spec.scoped)
        own = {spec.name for spec in tool.variables}
        return frozenset(self._scoped - own)

    async def _resolve(self, tool: Tool[Any], ctx: ToolContext) -> ResolvedVariables | ToolResult:
        """The values of `tool`'s variables. A required one without a value is asked for
        (`variable.requested`) when the gate can wait for it; else the call fails at once."""
        try:
            return await self._read_variables(tool)
        except VariablesMissing as exc:
            gate = self.approvals
            if not exc.missing or not isinstance(gate, VariableGate):
                return ToolResult.failure(f"{tool.name} cannot run: {exc}")
            why_not = await gate.request_variables(tool, exc.missing, ctx)
            if why_not is not None:
                return ToolResult.failure(f"{tool.name} cannot run: {why_not}. {exc}",
                                          missing_variables=[s.name for s in exc.missing])
        try:  # the values were set: read them where they were stored
            return await self._read_variables(tool)
        except VariablesMissing as exc:
            return ToolResult.failure(f"{tool.name} cannot run: {exc}")

    async def _read_variables(self, tool: Tool[Any]) -> ResolvedVariables:
        # Resolving may stat, read and parse the secrets file: off the loop when there is any.
        if not tool.variables:
            return ResolvedVariables()
        return await anyio.to_thread.run_sync(self.variables.resolve, tool.variables)

    def _progress_fn(self, tool: Tool[Any], call: ToolCall, origin: CallOrigin,
                     secrets: Mapping[str, str]) -> Any:
        def progress(message: str, fraction: float | None) -> None:
            self.sink.publish(ToolUpdated(
                session_id=origin.session_id, agent=origin.agent, tool=tool.name,
                call_id=call.id, message=redact(str(message), secrets)[:500],
                fraction=None if fraction is None else max(0.0, min(1.0, float(fraction))),
            ))
        return progress

    async def _finish(self, tool: Tool[Any] | None, call: ToolCall, origin: CallOrigin,
                      result: ToolResult, secrets: Mapping[str, str]) -> ToolResult:
        text = redact(result.text, secrets)
        details = redact_any(result.details, secrets)
        limits = self.settings.tools
        max_bytes = limits.max_output_bytes
        if tool is not None and tool.squad_tool:
            max_bytes = min(max_bytes, limits.squad_result_bytes)
        if tool is not None and isinstance(details.get("full_output"), str):
            # The tool streamed its full output to the spill file itself (a shell tool that
            # printed 100 MB): its text is already the cut view plus the note; only cap it.
            piece = cut(text, max_lines=limits.max_output_lines + NOTE_ALLOWANCE_LINES,
                        max_bytes=max_bytes + NOTE_ALLOWANCE_BYTES)
            return ToolResult(result_type=result.result_type, text=piece.text, details=details,
                              images=result.images)
        piece = cut(text, max_lines=limits.max_output_lines, max_bytes=max_bytes)
        view, path = text, None
        if piece.truncated:
            try:
                # Spilling writes and fsyncs a file: in a worker thread, never on the loop.
                path = await anyio.to_thread.run_sync(
                    spill, self.layout, origin.session_id, call.id, text)
                view = piece.text + truncation_note(piece, path, self.layout)
            except Exception as exc:  # a bad id or a full disk must still give a result
                log.warning("could not spill tool output", error=str(exc))
                view = (piece.text + f"\n[output truncated: showing {piece.kept_lines} of "
                        f"{piece.total_lines} lines; the full output could not be saved]")
        if path is not None:
            details = {**details, "full_output": str(path)}
        return ToolResult(result_type=result.result_type, text=view, details=details,
                          images=result.images)


def _preview_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as shown in events: long strings are shortened."""
    preview: dict[str, Any] = {}
    for key, value in list(arguments.items())[:20]:
        if isinstance(value, str) and len(value) > 200:
            value = value[:200] + "…"
        preview[str(key)[:64]] = value
    return preview
