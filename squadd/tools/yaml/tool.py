"""YAML shell tools (seed 003): `ShellTool`, and linking aliases and `use-tool` steps (a file's
own `tests:` run in `self_tests`).

A `ShellTool` runs its plan (`run`), streams output to part files and returns the cut
view; when the model cannot see everything it assembles the spill file itself and says so in
``details["full_output"]``, which the invoker then leaves alone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import structlog
from pydantic import BaseModel, ValidationError

from squadd.config import Settings
from squadd.errors import (
    SandboxError,
    ShellToolError,
    TemplateError,
    ToolDefinitionError,
)
from squadd.sandbox import mechanism_for
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolResult, ToolSource
from squadd.tools.commands.output import model_view, part_id
from squadd.tools.commands.process import DRAIN_S, KILL_GRACE_S
from squadd.tools.naming import check_tool_name, default_label
from squadd.tools.sandboxing import call_policy
from squadd.tools.yaml.checks import tool_warnings
from squadd.tools.yaml.files import load_shell_file
from squadd.tools.yaml.keys import InteractiveOptions
from squadd.tools.yaml.run import CLEANUP_S, CallPlace, PlanReport, PlanRunner
from squadd.tools.yaml.schema import (
    SECURITY_TAGS,
    ParameterSpec,
    ShellToolFile,
    parameters_model,
)
from squadd.tools.yaml.template import PLACEHOLDER_RE, substitute_text

log = structlog.get_logger("squadd.tools")

_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}


class ShellTool(Tool[BaseModel]):
    """A tool described by a YAML file: one command or steps, with quoted `{PARAM}`s."""

    kind = "yaml"

    def __init__(self, definition: ShellToolFile, *, name: str, file: Path | None,
                 source: ToolSource, settings: Settings):
        check_tool_name(name, where=str(file or name))
        self.definition = definition
        """The file as written."""
        self.plan = definition
        """What runs: the file itself, or for an alias the base tool's definition."""
        self.name = name
        self.file = file
        self.source = source
        self.settings = settings
        self.label = definition.label or default_label(name)
        self.description = definition.description or ""
        self.tags = tuple(definition.tags)
        self.default_approval = "allow" if set(self.tags) & set(SECURITY_TAGS) else "ask"
        if definition.security.execution_privilege == "elevated":
            self.default_approval = "ask"
        self.warnings = tuple(tool_warnings(definition))
        """Keys of the file that squadd knows but cannot honour here (shown by tools list)."""
        self._base: ShellTool | None = None
        self.variables = tuple(definition.variables)
        self.parameters: dict[str, ParameterSpec] = dict(definition.parameters)
        self._links: dict[str, ShellTool] = {}
        self._set_timeout(definition.timeout_s or settings.tools.timeout_s)
        self.args_model = parameters_model(f"{name}_args", self.parameters)

    def _set_timeout(self, seconds: float) -> None:
        self.run_timeout_s = seconds
        # The invoker's limit is a backstop: the tool stops its processes itself, in time.
        cleanups = sum(1 for c in self.plan.resources.cleanup if c.final_command is not None)
        self.timeout_s = seconds + (1 + cleanups) * (KILL_GRACE_S + 2 * DRAIN_S + 1.0) + \
            cleanups * CLEANUP_S

    @property
    def is_alias(self) -> bool:
        return self.definition.type == "alias"

    def uses(self) -> list[str]:
        """Names of the tools this one needs: its base tool and its `use-tool` steps."""
        names = [self.definition.base_tool] if self.definition.base_tool else []
        names += [s.use_tool for s in self.definition.steps or () if s.use_tool is not None]
        return names

    def linked_copy(self, found: Mapping[str, ShellTool]) -> ShellTool:
        """This tool bound to the (already linked) tools it uses."""
        clone = ShellTool.__new__(ShellTool)
        clone.__dict__.update(self.__dict__)
        clone.__dict__.pop("_spec", None)
        clone._links = {name: found[name] for name in self.uses()
                        if name != self.definition.base_tool}
        variables = {v.name: v for v in self.variables}
        if self.is_alias:
            base = found[self.definition.base_tool or ""]
            clone.plan = base.plan
            clone._links = dict(base._links)
            clone.description = self.definition.description or base.description
            if not self.definition.tags:
                clone.tags = base.tags
                clone.default_approval = base.default_approval
            clone._base = base
            clone.parameters = {**_own_parameters(self.definition, base, self.name),
                                **_with_defaults(base.parameters,
                                                 self.definition.default_parameters, self.name)}
            clone.args_model = parameters_model(f"{self.name}_args", clone.parameters)
            clone._set_timeout(self.definition.timeout_s or base.run_timeout_s)
        for other in (*clone._links.values(), *([found[self.definition.base_tool]]
                                                if self.is_alias and self.definition.base_tool
                                                else [])):
            for spec in other.variables:
                known = variables.get(spec.name)
                if known is None or (spec.type == "secret" and known.type != "secret"):
                    variables[spec.name] = spec
        clone.variables = tuple(variables.values())
        # Running this tool runs the tools it uses: it asks whenever one of them would.
        for other in clone._links.values():
            if _STRICTNESS[other.default_approval] > _STRICTNESS[clone.default_approval]:
                clone.default_approval = other.default_approval
        return clone

    def linked(self, name: str) -> ShellTool:
        return self._links[name]

    def plan_values(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validated parameter values by name (raises pydantic's `ValidationError`).

        For an alias, a `default-parameters` value not given in `arguments` has its `{NAME}`s
        replaced by the call's values, and the result is checked by the base tool."""
        values = self.args_model.model_validate(dict(arguments)).model_dump(by_alias=True)
        if self._base is None:
            return values
        for key, default in self.definition.default_parameters.items():
            if key not in arguments and isinstance(default, str) and \
                    PLACEHOLDER_RE.search(default):
                values[key] = substitute_text(default, values)
        own = set(self.definition.parameters)
        return self._base.plan_values({k: v for k, v in values.items() if k not in own})

    async def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        if self.definition.interactive or self.plan.interactive:
            refused = await self._confirm(ctx, args.model_dump(by_alias=True))
            if refused is not None:
                return refused
        try:
            values = (self.plan_values(args.model_dump(by_alias=True, exclude_unset=True))
                      if self._base is not None else args.model_dump(by_alias=True))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                                 for e in exc.errors())
            return ToolResult.failure(f"{self.name} cannot run: its default-parameters give "
                                      f"{self.definition.base_tool} bad values: {problems}")
        layout = SquadLayout.at(ctx.squad_dir)
        session = part_id(ctx.session_id, "session id")
        call = part_id(ctx.call_id, "tool call id")
        secrets = {**ctx.known_secrets,
                   **{s.name: ctx.variables[s.name] for s in self.variables
                      if s.type == "secret" and s.name in ctx.variables}}
        place = CallPlace(
            layout=layout, session_id=session, call_id=call, secrets=secrets,
            head_bytes=self.settings.tools.max_output_bytes,
            deadline=anyio.current_time() + self.run_timeout_s, cancel=ctx.cancel,
            variables=ctx.variables, repo=ctx.workspace, progress=ctx.progress,
            hidden=ctx.hidden_variables, sandbox=call_policy(self.settings, ctx))
        try:
            try:
                runner = PlanRunner(self, values, place)
                report = await runner.run()
                report.blocks += await runner.cleanup()
            except (FileNotFoundError, TemplateError, ValueError) as exc:
                return ToolResult.failure(f"{self.name} cannot run: {exc}")
            except SandboxError as exc:
                return ToolResult.failure(f"{self.name} refused: {exc}")
            return await self._result(report, place)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(_discard, place)

    async def _result(self, report: PlanReport, place: CallPlace) -> ToolResult:
        view, full_output = await model_view(report.blocks, place.layout, place.session_id,
                                             place.call_id, self.settings.tools)
        details: dict[str, Any] = {
            "exit_code": report.exit_code,
            "steps": [{"name": s.name, "status": s.status, "exit_code": s.exit_code}
                      for s in report.steps],
        }
        if full_output is not None:
            details["full_output"] = str(full_output)
        if place.sandbox is not None:
            with contextlib.suppress(SandboxError):
                details["sandbox"] = place.sandbox.describe(mechanism_for(place.sandbox.mode))
        body = view.rstrip("\n") if view.strip() else "(no output)"
        status = self._status(report)
        text = f"{body}\n{status}" if status else body
        log.debug("shell tool finished", tool=self.name, call_id=place.call_id,
                  exit_code=report.exit_code, output_bytes=sum(s.total_bytes for s in place.parts),
                  spilled="full_output" in details)
        if report.ok:
            return ToolResult.success(text, **details)
        return ToolResult.failure(text, **details)

    async def _confirm(self, ctx: ToolContext, arguments: Mapping[str, Any]
                       ) -> ToolResult | None:
        """Ask before an `interactive` tool runs; None when it may run."""
        options = (self.definition.interactive_options or self.plan.interactive_options
                   or InteractiveOptions())
        wait_s = (self.definition.confirm_timeout_s or self.plan.confirm_timeout_s
                  or self.settings.tools.approval_timeout_s)
        default = "yes" if options.default_yes else "no"
        shown = json.dumps(dict(arguments), ensure_ascii=False, default=str)
        shown = shown if len(shown) <= 300 else shown[:299] + "…"
        question = (f"{self.name} asks before it runs (interactive). Run it now with "
                    f"{shown}? (no answer within {wait_s:g} s counts as {default})")
        with anyio.move_on_after(wait_s):
            if await ctx.confirm(question):
                return None
            return ToolResult.failure(f"{self.name} was not run: the confirmation it asks for "
                                      "was declined")
        if options.default_yes:
            return None
        return ToolResult.failure(f"{self.name} was not run: no answer to its confirmation "
                                  f"within {wait_s:g} s, and its default response is no")

    def _status(self, report: PlanReport) -> str:
        if report.timed_out:
            return (f"[{self.name} timed out after {self.run_timeout_s:g}s: its processes "
                    "were stopped]")
        if report.cancelled:
            return f"[{self.name} was cancelled: its processes were stopped]"
        if report.steps:
            counts = {status: sum(1 for s in report.steps if s.status == status)
                      for status in ("ok", "failed", "skipped", "not-run")}
            summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            count = len(report.steps)
            return f"[{count} step{'' if count == 1 else 's'}: {summary}]"
        if not report.ok:
            return f"[exit code {report.exit_code}]"
        if report.exit_code not in (0, None):
            return f"[exit code {report.exit_code}, ignored: ignore-errors]"
        return ""


def _discard(place: CallPlace) -> None:
    for sink in place.parts:
        sink.discard()


def _with_defaults(parameters: Mapping[str, ParameterSpec], defaults: Mapping[str, Any],
                   name: str) -> dict[str, ParameterSpec]:
    unknown = sorted(set(defaults) - set(parameters))
    if unknown:
        raise ShellToolError(f"alias {name}: default-parameters names {', '.join(unknown)}, "
                             f"which the base tool does not have (it has: "
                             f"{', '.join(parameters) or 'none'})")
    merged = dict(parameters)
    for key, value in defaults.items():
        merged[key] = parameters[key].model_copy(update={"default": value, "required": False})
    return merged


def _own_parameters(definition: ShellToolFile, base: ShellTool, name: str
                    ) -> dict[str, ParameterSpec]:
    """An alias's own parameters: values its `default-parameters` may use as `{NAME}`."""
    own = dict(definition.parameters)
    clash = sorted(set(own) & set(base.parameters))
    if clash:
        raise ShellToolError(f"alias {name}: parameters {', '.join(clash)} are already "
                             "parameters of the base tool: set them in default-parameters")
    known = set(own) | set(base.parameters)
    for key, value in definition.default_parameters.items():
        for match in PLACEHOLDER_RE.finditer(value if isinstance(value, str) else ""):
            if match.group(1) not in known:
                raise ShellToolError(
                    f"alias {name}: default-parameters.{key} uses {{{match.group(1)}}}, which "
                    f"is not a parameter of the alias or of {definition.base_tool} (declare it "
                    "under the alias's parameters)")
    return own


def load_shell_tool(path: Path, *, source: ToolSource, settings: Settings,
                    data: bytes | None = None) -> ShellTool:
    """Load a YAML tool file, or its bytes `data` already read (`ShellToolError` when it
    cannot be)."""
    definition = load_shell_file(path, content=data)
    name = definition.name or path.stem
    try:
        return ShellTool(definition, name=name, file=path, source=source, settings=settings)
    except ShellToolError:
        raise
    except ToolDefinitionError as exc:
        raise ShellToolError(str(exc)) from None
    except Exception as exc:
        raise ShellToolError(f"{path}: {exc}") from None


def link_shell_tools(tools: Mapping[str, Tool[Any]]) -> tuple[dict[str, ShellTool],
                                                               dict[str, str]]:
    """Bind every shell tool among `tools` to the tools it uses.

    Returns the linked tools by name and, for those that cannot be linked (a missing or
    non-YAML base tool, a cycle), the reason.
    """
    linked: dict[str, ShellTool] = {}
    failed: dict[str, str] = {}

    def visit(name: str, chain: tuple[str, ...]) -> ShellTool | None:
        if name in linked:
            return linked[name]
        if name in failed:
            return None
        tool = tools.get(name)
        assert isinstance(tool, ShellTool)
        found: dict[str, ShellTool] = {}
        for used in tool.uses():
            if used in chain or used == name:
                failed[name] = f"uses {used}, which uses {name} again (a cycle: " \
                               f"{' -> '.join((*chain, name, used))})"
                return None
            other = tools.get(used)
            if not isinstance(other, ShellTool):
                what = "no tool" if other is None else f"a {other.kind} tool, not a YAML tool"
                failed[name] = f"uses {used!r}, which is {what}"
                return None
            done = visit(used, (*chain, name))
            if done is None:
                failed[name] = f"uses {used}, which failed to load: {failed.get(used, '?')}"
                return None
            found[used] = done
        try:
            linked[name] = tool.linked_copy(found)
        except ShellToolError as exc:
            failed[name] = str(exc)
            return None
        return linked[name]

    for name, tool in tools.items():
        if isinstance(tool, ShellTool):
            visit(name, ())
    return linked, failed
