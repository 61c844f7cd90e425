"""Agent tools and prompt tools: YAML tool files with `type: agent` or `type: prompt`.

An agent tool hands a task, rendered from its `prompt` template, to another Squad agent through
the same route path as `squad_route` (the pool, its depth and cycle rules), and returns that
agent's answer. A prompt tool returns its rendered template to the calling model as the result.
Templates use `{NAME}` for a parameter or a declared text variable; `{{` and `}}` are braces.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from squadd.contracts.routes import MAX_ROUTE_TIMEOUT_S, RouteRequest, SquadService
from squadd.errors import ShellToolError, UntrustedInputError
from squadd.tools.base import Tool, ToolContext, ToolResult, ToolSource, VariableSpec
from squadd.tools.naming import check_tool_name, default_label
from squadd.tools.squad.route import route_for
from squadd.tools.yaml.durations import Bounds, parse_duration
from squadd.tools.yaml.files import parse_yaml
from squadd.tools.yaml.schema import (
    MAX_FILE_BYTES,
    ParameterSpec,
    parameters_model,
    problem_text,
)
from squadd.untrusted import check_document

KINDS = ("agent", "prompt")
_KIND_RE = re.compile(r"^type\s*:\s*['\"]?(agent|prompt)['\"]?\s*(?:#.*)?$", re.MULTILINE)
_PLACEHOLDER_RE = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
TRUTHY = ("true", "1", "yes")
ROUTE_TIMEOUT = Bounds(0.0, MAX_ROUTE_TIMEOUT_S)
"""An agent tool's `timeout`: how long the routed task may run."""
MAX_DOCUMENT_VALUES = 20_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class AgentToolFile(_Strict):
    """One `type: agent` or `type: prompt` tool file, as written."""

    type: Literal["agent", "prompt"]
    name: str | None = None
    label: str | None = None
    description: str = Field(min_length=1)
    version: str | int | float | None = None
    prompt: str = Field(min_length=1)
    """The template: the task for an agent tool, the result of a prompt tool."""
    parameters: dict[str, ParameterSpec] = Field(default_factory=dict)
    variables: list[VariableSpec] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    optional: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The tool exists only while this environment variable is true, 1 or yes."""
    # Agent tools only.
    agent: str | None = None
    """The agent routed to; `{NAME}` lets an argument choose it."""
    context: str | None = None
    blocking: StrictBool = True
    """False: return at once with the session id (collect the answer with squad_status)."""
    resumable: StrictBool = False
    """True: the tool takes a `sessionId` argument that continues an earlier session."""
    model: str | None = None
    available_tools: list[str] | None = Field(None, alias="available-tools")
    priority: Literal["normal", "urgent"] = "normal"
    timeout: float | int | str | None = None
    """How long the routed task may run: a bare number is milliseconds, or "30s", "2m"."""

    @field_validator("timeout")
    @classmethod
    def _a_duration(cls, value: float | int | str | None) -> float | int | str | None:
        if value is not None:
            parse_duration(value, key="timeout", bounds=ROUTE_TIMEOUT)
        return value

    @property
    def timeout_s(self) -> float | None:
        if self.timeout is None:
            return None
        return parse_duration(self.timeout, key="timeout", bounds=ROUTE_TIMEOUT)


_AGENT_ONLY = ("agent", "context", "blocking", "resumable", "model", "available-tools",
               "priority", "timeout")


def is_agent_tool_text(text: str) -> bool:
    """Whether a YAML tool file's text declares `type: agent` or `type: prompt` at top level
    (a cheap look before parsing, so shell tool files are parsed once)."""
    return _KIND_RE.search(text) is not None


def render(template: str, values: Mapping[str, Any]) -> str:
    """`template` with each `{NAME}` replaced by its value's text; `{{`, `}}` become braces."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return match.group(0)[0]
        value = values.get(name)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return value if isinstance(value, str) else yaml.safe_dump(
            value, default_flow_style=True, allow_unicode=True).strip()

    return _PLACEHOLDER_RE.sub(replace, template)


def _placeholders(template: str) -> set[str]:
    return {m.group(1) for m in _PLACEHOLDER_RE.finditer(template) if m.group(1)}


def _check(spec: AgentToolFile, present: Iterable[str]) -> None:
    if spec.type == "agent" and not spec.agent:
        raise ValueError("a type: agent tool needs 'agent': the Squad agent it routes to")
    if spec.type == "prompt":
        misplaced = [key for key in _AGENT_ONLY if key in present]
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)} only apply to a type: agent tool")
    secret = {v.name for v in spec.variables if v.type == "secret"}
    known = set(spec.parameters) | {v.name for v in spec.variables}
    for key, template in (("prompt", spec.prompt), ("context", spec.context or ""),
                          ("agent", spec.agent or "")):
        for name in sorted(_placeholders(template)):
            if name in secret:
                raise ValueError(f"{key}: {{{name}}} is a secret variable: a prompt would show "
                                 "it to a model")
            if name not in known:
                hint = difflib.get_close_matches(name, sorted(known), n=1)
                raise ValueError(
                    f"{key}: {{{name}}} is neither a parameter nor a declared variable"
                    + (f" (did you mean {{{hint[0]}}}?)" if hint else "")
                    + "; write {{ and }} for literal braces")


def _describe(exc: ValidationError) -> str:
    known = [info.alias or name for name, info in AgentToolFile.model_fields.items()]
    problems = []
    for error in exc.errors()[:8]:
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            hint = difflib.get_close_matches(where, known, n=1)
            problems.append(f"unknown key '{where}'" + (f" (did you mean '{hint[0]}'?)"
                                                           if hint else ""))
        elif error["type"] == "missing":
            problems.append(f"'{where}' is required")
        else:
            problems.append(f"'{where}': {problem_text(error)}")
    return "; ".join(problems)


def load_agent_tool_file(path: Path, text: str) -> AgentToolFile:
    """Parse and check a `type: agent|prompt` file; `ShellToolError` names the file and key."""
    data = parse_yaml(path, text)
    if not isinstance(data, dict):
        raise ShellToolError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    try:
        check_document(data, max_values=MAX_DOCUMENT_VALUES)
        spec = AgentToolFile.model_validate(data)
        _check(spec, data)
    except UntrustedInputError as exc:
        raise ShellToolError(f"{path}: {exc}") from None
    except ValidationError as exc:
        raise ShellToolError(f"{path}: {_describe(exc)}") from None
    except ValueError as exc:
        raise ShellToolError(f"{path}: {exc}") from None
    return spec


class PromptTool(Tool[BaseModel]):
    """A `type: prompt` tool: its result is its template, rendered with the call's arguments."""

    kind = "prompt"

    def __init__(self, spec: AgentToolFile, *, name: str, file: Path | None,
                 source: ToolSource):
        check_tool_name(name, where=str(file or name))
        self.spec_file = spec
        self.name = name
        self.file = file
        self.source = source
        self.label = spec.label or default_label(name)
        self.description = spec.description
        self.variables = tuple(spec.variables)
        self.args_model = self._arguments_model()

    def _arguments_model(self) -> type[BaseModel]:
        return parameters_model(f"{self.name}_args", dict(self.spec_file.parameters))

    def values(self, args: BaseModel, ctx: ToolContext) -> dict[str, Any]:
        values: dict[str, Any] = dict(ctx.variables)
        values.update(args.model_dump(by_alias=True))
        return values

    async def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        return ToolResult.success(render(self.spec_file.prompt, self.values(args, ctx)))


class AgentTool(PromptTool):
    """A `type: agent` tool: a route to its agent, as `squad_route` makes one."""

    kind = "agent"

    def __init__(self, spec: AgentToolFile, *, name: str, file: Path | None,
                 source: ToolSource):
        super().__init__(spec, name=name, file=file, source=source)
        self.service: SquadService | None = None
        self.default_approval = "allow"

    def _arguments_model(self) -> type[BaseModel]:
        parameters = dict(self.spec_file.parameters)
        if self.spec_file.resumable:
            parameters.setdefault("sessionId", ParameterSpec(
                description="Continue this idle session of the agent (from an earlier call) "
                            "instead of starting a new one", required=False))
        return parameters_model(f"{self.name}_args", parameters)

    def bound(self, service: SquadService) -> AgentTool:
        """A copy that routes through `service` (the running squad)."""
        clone = copy.copy(self)
        clone.service = service
        return clone

    async def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        if self.service is None:
            return ToolResult.failure(
                f"{self.name} routes to the agent {self.spec_file.agent}, which needs the "
                "running squad: call it from a session or through the daemon "
                "('squadd serve'), not with 'squadd tools call' alone")
        spec = self.spec_file
        values = self.values(args, ctx)
        session_id = values.get("sessionId") if spec.resumable else None
        target = render(spec.agent or "", values).strip()
        request = RouteRequest(
            task=render(spec.prompt, values), target_agent=target or "auto",
            context=render(spec.context, values) if spec.context else None,
            priority=spec.priority, wait_for_result=spec.blocking, model=spec.model,
            session_id=session_id if isinstance(session_id, str) and session_id else None,
            available_tools=spec.available_tools, timeout_s=spec.timeout_s,
            requested_by=ctx.agent)
        return await route_for(self.service, request, ctx)


def enabled(spec: AgentToolFile, environ: Mapping[str, str] | None = None) -> bool:
    """False when the tool is `optional` and its flag is not true, 1 or yes."""
    if spec.optional is None:
        return True
    env = os.environ if environ is None else environ
    return env.get(spec.optional, "").strip().lower() in TRUTHY


def load_agent_tool(path: Path, *, source: ToolSource,
                    text: str | None = None) -> PromptTool | None:
    """The agent or prompt tool a YAML file defines; None when it is another kind of tool file
    (or `optional` and switched off: see `enabled`). `ShellToolError` when it cannot load."""
    if text is None:
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                return None  # the shell tool loader reports the size
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None  # the shell tool loader reports it
    if not is_agent_tool_text(text):
        return None
    spec = load_agent_tool_file(path, text)
    name = spec.name or path.stem
    if spec.type == "agent":
        return AgentTool(spec, name=name, file=path, source=source)
    return PromptTool(spec, name=name, file=path, source=source)


def bind_agent_tools(tools: Iterable[Tool[Any]], service: SquadService) -> list[Tool[Any]]:
    """`tools`, with every agent tool routing through `service`."""
    return [tool.bound(service) if isinstance(tool, AgentTool) else tool for tool in tools]
