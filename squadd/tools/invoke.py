"""The one invocation pipeline every tool call goes through, whoever makes it.

lookup -> validate args -> variables -> approval -> run (timeout, cancel) -> redact secrets ->
truncate + spill -> events -> ToolResult. Nothing raises out of `ToolInvoker.invoke` but
cancellation: every failure becomes a ``result_type="failure"`` result the model can read.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio
import structlog
from pydantic import BaseModel, ValidationError

from squadd.config import Settings
from squadd.contracts.events import EventSink, NullSink, ToolCompleted, ToolStarted, ToolUpdated
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import (
    CancelSignal,
    ConfirmFn,
    Tool,
    ToolContext,
    ToolOutput,
    ToolResult,
    ToolSet,
    VariableSpec,
)
from squadd.tools.truncate import cut, limit_output

log = structlog.get_logger("squadd.tools")

NOTE_ALLOWANCE_BYTES = 1024
NOTE_ALLOWANCE_LINES = 8
"""Room left for the truncation note in a result whose tool already spilled its output."""


class VariablesMissing(Exception):
    """Raised by a resolver when a required variable has no value (message says where to set it)."""


@dataclass(frozen=True)
class ResolvedVariables:
    values: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    """Secret variable name -> value, for redaction."""


class VariableResolver(Protocol):
    def resolve(self, specs: tuple[VariableSpec, ...]) -> ResolvedVariables: ...


class ApprovalGate(Protocol):
    async def check(self, tool: Tool[Any], arguments: Mapping[str, Any], ctx: ToolContext,
                    secrets: Mapping[str, str]) -> ToolResult | None:
        """None when the call may run, else the failure result that tells the model why not."""

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn: ...


class EnvironmentVariables:
    """Resolve declared variables from the process environment only."""

    def resolve(self, specs: tuple[VariableSpec, ...]) -> ResolvedVariables:
        values: dict[str, str] = {}
        secrets: dict[str, str] = {}
        for spec in specs:
            value = os.environ.get(spec.name)
            if value is None:
                if spec.required:
                    raise VariablesMissing(
                        f"required variable {spec.name} is not set: export {spec.name}=... "
                        "in the environment squadd runs in"
                    )
                continue
            values[spec.name] = value
            if spec.type == "secret":
                secrets[spec.name] = value
        return ResolvedVariables(values, secrets)


@dataclass
class CallOrigin:
    """Who is calling: the session (or outside caller) a tool call belongs to."""

    session_id: str
    agent: str
    depth: int = 0
    lineage: tuple[str, ...] = ()
    cancel: CancelSignal = field(default_factory=CancelSignal)
    workspace_dir: Path | None = None
    """The session's working directory when it is not the repository root (its worktree)."""


def redact(text: str, secrets: Mapping[str, str]) -> str:
    """Replace every secret value in `text` with `[secret:NAME]` (longest values first)."""
    for name, value in sorted(secrets.items(), key=lambda item: -len(item[1])):
        if value:
            text = text.replace(value, f"[secret:{name}]")
    return text


def redact_any(value: Any, secrets: Mapping[str, str]) -> Any:
    """`redact` applied through strings nested in dicts and lists."""
    if not secrets:
        return value
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: redact_any(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_any(v, secrets) for v in value]
    return value


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
    ):
        self.layout = layout
        self.settings = settings
        self.sink = sink or NullSink()
        self.variables = variables or EnvironmentVariables()
        self.approvals = approvals

    async def invoke(self, tools: ToolSet, call: ToolCall, origin: CallOrigin) -> ToolResult:
        """Run `call` against `tools`; always returns a result, never raises (but cancellation)."""
        started = time.monotonic()
        tool = tools.get(call.name)
        secrets: dict[str, str] = {}
        announced: list[bool] = []

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
            if call.arguments_error is not None:
                result = ToolResult.failure(
                    f"arguments were not valid JSON: {call.arguments_error}. "
                    f"Call {call.name} again with a JSON object of arguments."
                )
            elif tool is None:
                available = ", ".join(sorted(tools.names)) or "none"
                result = ToolResult.failure(
                    f"unknown tool {call.name!r}: the tools available are {available}"
                )
            else:
                result, secrets = await self._run(tool, call, origin, announce)
        except Exception as exc:  # the pipeline's promise: a tool never raises into the loop
            log.exception("tool pipeline failed", tool=call.name, call_id=call.id)
            result = ToolResult.failure(f"{call.name} failed: {type(exc).__name__}: {exc}")
        finally:
            announce(secrets)
        result = self._finish(tool, call, origin, result, secrets)
        self.sink.publish(ToolCompleted(
            session_id=origin.session_id, agent=origin.agent, tool=call.name, call_id=call.id,
            result_type=result.result_type, summary=result.text[:200],
            duration_s=round(time.monotonic() - started, 6),
        ))
        return result

    async def _run(self, tool: Tool[Any], call: ToolCall, origin: CallOrigin,
                   announce: Callable[[Mapping[str, str]], None],
                   ) -> tuple[ToolResult, dict[str, str]]:
        try:
            args: BaseModel = tool.args_model.model_validate(call.arguments)
        except ValidationError as exc:
            return ToolResult.failure(describe_validation_error(tool, exc)), {}
        try:
            resolved = self.variables.resolve(tool.variables)
        except VariablesMissing as exc:
            return ToolResult.failure(f"{tool.name} cannot run: {exc}"), {}
        announce(resolved.secrets)
        # The call's own signal: a timeout stops this call without cancelling the session.
        cancel = origin.cancel.child()
        ctx = ToolContext(
            session_id=origin.session_id, call_id=call.id, agent=origin.agent,
            repo_dir=self.layout.repo, squad_dir=self.layout.root, cancel=cancel,
            variables=resolved.values, depth=origin.depth, lineage=origin.lineage,
            workspace_dir=origin.workspace_dir or self.layout.repo,
            _progress=self._progress_fn(tool, call, origin, resolved.secrets),
        )
        if self.approvals is not None:
            ctx._confirm = self.approvals.confirm_fn(tool, ctx)
            denial = await self.approvals.check(tool, call.arguments, ctx, resolved.secrets)
            if denial is not None:
                return denial, resolved.secrets
        timeout = tool.timeout_s
        if timeout is None and not tool.squad_tool:
            timeout = self.settings.tools.timeout_s
        try:
            with anyio.fail_after(timeout):
                output = await tool.run(args, ctx)
        except TimeoutError:
            cancel.set()
            return ToolResult.failure(
                f"{tool.name} timed out after {timeout:g}s and was stopped"
            ), resolved.secrets
        except anyio.get_cancelled_exc_class():
            cancel.set()
            origin.cancel.set()
            raise
        except Exception as exc:
            return ToolResult.failure(
                f"{tool.name} failed: {type(exc).__name__}: {exc}"
            ), resolved.secrets
        return _to_result(output), resolved.secrets

    def _progress_fn(self, tool: Tool[Any], call: ToolCall, origin: CallOrigin,
                     secrets: Mapping[str, str]) -> Any:
        def progress(message: str, fraction: float | None) -> None:
            self.sink.publish(ToolUpdated(
                session_id=origin.session_id, agent=origin.agent, tool=tool.name,
                call_id=call.id, message=redact(str(message), secrets)[:500],
                fraction=None if fraction is None else max(0.0, min(1.0, float(fraction))),
            ))
        return progress

    def _finish(self, tool: Tool[Any] | None, call: ToolCall, origin: CallOrigin,
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
            return ToolResult(result_type=result.result_type, text=piece.text, details=details)
        try:
            view, path = limit_output(
                self.layout, origin.session_id, call.id, text,
                max_lines=limits.max_output_lines, max_bytes=max_bytes,
            )
        except Exception as exc:  # a bad id or a full disk must still give the model a result
            log.warning("could not spill tool output", error=str(exc))
            piece = cut(text, max_lines=limits.max_output_lines, max_bytes=max_bytes)
            view, path = piece.text, None
            if piece.truncated:
                view += (f"\n[output truncated: showing {piece.kept_lines} of "
                         f"{piece.total_lines} lines; the full output could not be saved]")
        if path is not None:
            details = {**details, "full_output": str(path)}
        return ToolResult(result_type=result.result_type, text=view, details=details)


def _preview_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments as shown in events: long strings are shortened."""
    preview: dict[str, Any] = {}
    for key, value in list(arguments.items())[:20]:
        if isinstance(value, str) and len(value) > 200:
            value = value[:200] + "…"
        preview[str(key)[:64]] = value
    return preview
