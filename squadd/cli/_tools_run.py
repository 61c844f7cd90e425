"""What `squadd tools` does (its click commands, in `cli/tools.py`, import this only when one
runs): list, show, call, test and scaffold custom tools, in this process.

`call` and `test` run through the same pipeline as the daemon (variables, approvals, timeout,
redaction, truncation). An `ask` tool is asked about on the terminal; with no terminal to ask
on, it counts as denied.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import click

from squadd.cli._output import print_json, print_table
from squadd.cli._squad import find_layout, show_path
from squadd.config import Settings, load_settings
from squadd.contracts.events import BaseEvent, ToolUpdated
from squadd.errors import ToolDefinitionError, UntrustedInputError
from squadd.fsio import TEAM_FILE, create_exclusive
from squadd.state.layout import SquadLayout
from squadd.tools.approvals import Decision, denial_text, secrets_of
from squadd.tools.base import ConfirmFn, Tool, ToolContext, ToolResult, ToolSet
from squadd.tools.discovery import Discovery, discover_tools
from squadd.tools.gates import Unattended
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.naming import check_tool_name
from squadd.tools.policy import approval_policy
from squadd.tools.redaction import redact, redact_any
from squadd.tools.secrets import SecretRegistry
from squadd.tools.variables import SquadVariables
from squadd.tools.yaml import ShellTool, ToolTestOutcome, run_tool_tests, yaml_details
from squadd.untrusted import parse_json, shown_name


def _load(directory: Path | None
          ) -> tuple[SquadLayout, Settings, list[Tool[Any]], Discovery, SecretRegistry]:
    """The squad, its settings, the built-in and the discovered tools, and the registry whose
    secrets this command's log lines are redacted of (its invoker's resolver fills it)."""
    from squadd.logs import configure_logging
    from squadd.tools.builtin import WORKSPACE_TOOL_NAMES, workspace_tools
    from squadd.tools.squad import SQUAD_TOOL_NAMES, file_tools

    # Load failures are listed by the commands themselves; log lines would only repeat them.
    known_secrets = SecretRegistry()
    configure_logging(redact=known_secrets.redact_log_event, console_level="error")
    layout = find_layout(directory)
    settings = load_settings(layout.root)
    builtins = [*file_tools(layout, settings), *workspace_tools(settings)]
    # All five squad tools and the workspace tools shadow a custom tool of their name, as in
    # the daemon, though only the squad tools that need no pool can run here.
    found = discover_tools(layout, settings,
                           builtin_names=(*SQUAD_TOOL_NAMES, *WORKSPACE_TOOL_NAMES))
    return layout, settings, builtins, found, known_secrets


def _rows(builtins: list[Tool[Any]], found: Discovery) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def row(tool: Tool[Any], status: str, **extra: Any) -> dict[str, Any]:
        return {"name": tool.name, "label": tool.label or tool.name, "source": tool.source,
                "kind": tool.kind, "file": str(tool.file) if tool.file else None,
                "status": status, "shadowed": False, "shadowed_by": None, "error": None,
                "warnings": list(getattr(tool, "warnings", ())), **extra}

    rows += [row(t, "ok") for t in builtins]
    rows += [row(t, "ok") for t in found.tools]
    for item in found.shadowed:
        rows.append(row(item.tool, "shadowed", shadowed=True, shadowed_by=(
            "builtin" if item.by is None else str(item.by.file)), error=None))
    for skip in found.skipped:
        rows.append({"name": skip.name, "label": skip.name, "source": skip.source,
                     "kind": "yaml", "file": str(skip.file), "status": "unavailable",
                     "shadowed": False, "shadowed_by": None, "error": skip.reason,
                     "warnings": []})
    for failure in found.failures:
        rows.append({"name": None, "label": None, "source": failure.source, "kind": None,
                     "file": shown_name(str(failure.file)), "status": "error", "shadowed": False,
                     "shadowed_by": None, "error": failure.reason, "warnings": []})
    return rows


def list_tools(as_json: bool, directory: Path | None) -> None:
    """`squadd tools list` (see `cli/tools.py`)."""
    _, _, builtins, found, _ = _load(directory)
    rows = _rows(builtins, found)
    if as_json:
        print_json({"tools": rows, "dirs": [
            {"path": str(d.path), "source": d.source} for d in found.dirs]})
        return
    table = []
    for item in rows:
        if item["status"] == "shadowed":
            status = f"shadowed by {item['shadowed_by']}"
        elif item["status"] == "unavailable":
            status = f"unavailable on this platform: {item['error']}"
        elif item["error"]:
            status = f"{item['status']}: {item['error']}"
        else:
            status = item["status"]
        if item["warnings"]:
            count = len(item["warnings"])
            status += f" ({count} warning{'' if count == 1 else 's'}: " + \
                "; ".join(item["warnings"]) + ")"
        shown = show_path(Path(item["file"])) if item["file"] else "-"
        table.append([item["name"] or "?", item["source"], item["kind"] or "-", shown, status])
    print_table(["name", "source", "kind", "file", "status"], table)


def show(name: str, directory: Path | None) -> None:
    """`squadd tools show` (see `cli/tools.py`)."""
    _, settings, builtins, found, _ = _load(directory)
    tool = _find(name, builtins, found)
    policy = approval_policy(tool, settings.tools.approvals)
    shown = {
        "name": tool.name, "label": tool.label or tool.name, "description": tool.description,
        "source": tool.source, "kind": tool.kind, "file": str(tool.file) if tool.file else None,
        "approval": policy.approval,
        "variables": [v.model_dump() for v in tool.variables],
        "parameters": tool.parameters_schema(),
    }
    if isinstance(tool, ShellTool):
        shown.update(yaml_details(tool))
    print_json(shown)


def _find(name: str, builtins: list[Tool[Any]], found: Discovery) -> Tool[Any]:
    for tool in [*builtins, *found.tools]:
        if tool.name == name:
            return tool
    known = ", ".join(sorted(t.name for t in [*builtins, *found.tools])) or "none"
    raise click.ClickException(f"no tool named {name!r} (tools: {known})")


def parse_arguments(tool: Tool[Any], pairs: tuple[str, ...], raw_json: str | None
                    ) -> dict[str, Any]:
    """`--arg k=v` pairs: a value is JSON unless the parameter is a string."""
    arguments: dict[str, Any] = {}
    if raw_json:
        try:
            given = parse_json(raw_json)
        except UntrustedInputError as exc:
            raise click.BadParameter(f"not valid JSON: {exc}", param_hint="--args") from None
        if not isinstance(given, dict):
            raise click.BadParameter("must be a JSON object", param_hint="--args")
        arguments.update(given)
    properties = tool.parameters_schema().get("properties", {})
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--arg")
        if _is_string(properties.get(key, {})):
            arguments[key] = value
        else:
            try:
                arguments[key] = parse_json(value)
            except UntrustedInputError:
                arguments[key] = value
    return arguments


def _is_string(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") == "string":
        return True
    return any(option.get("type") == "string" for option in schema.get("anyOf", []))


class TerminalApprovals:
    """The `ApprovalGate` of an in-process call: asks y/N on the terminal, if there is one."""

    def __init__(self, settings: Settings):
        self.rules = settings.tools.approvals
        self.timeout_s = settings.tools.approval_timeout_s

    async def check(self, tool: Tool[Any], arguments: Mapping[str, Any], ctx: ToolContext,
                    secrets: Mapping[str, str], *, reason: str | None = None
                    ) -> ToolResult | None:
        policy = approval_policy(tool, self.rules)
        if policy.approval == "allow" and reason is None:
            return None
        if policy.approval == "deny":
            return ToolResult.failure(f"{tool.name} was not run: denied by the approval policy")
        shown = json.dumps(redact_any(dict(arguments), secrets), ensure_ascii=False)[:500]
        why = "" if reason is None else f" ({reason}: it will be executed later)"
        decision = await self._ask(f"Run {tool.name} with {shown}?{why}", tool.name)
        if decision.approved:
            return None
        return ToolResult.failure(decision.reason if decision.reason.startswith(tool.name)
                                  else denial_text(tool.name, decision, self.timeout_s))

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn:
        async def confirm(question: str) -> bool:
            decision = await self._ask(redact(question, secrets_of(tool, ctx)), tool.name)
            return decision.approved

        return confirm

    async def _ask(self, question: str, name: str) -> Decision:
        if not sys.stdin.isatty():
            return Decision(False, f"{name} was not run: it needs approval and stdin is not a "
                                   "terminal to ask on (allow it with tools.approvals = "
                                   f'{{ "{name}" = "allow" }})')
        with anyio.move_on_after(self.timeout_s):
            answer = await anyio.to_thread.run_sync(
                lambda: click.confirm(click.style(question, fg="yellow"), default=False,
                                      err=True), abandon_on_cancel=True)
            return Decision(bool(answer))
        return Decision(False, "no answer", timed_out=True)


class _Progress:
    def publish(self, event: BaseEvent) -> None:
        if isinstance(event, ToolUpdated):
            share = f" ({event.fraction:.0%})" if event.fraction is not None else ""
            click.echo(click.style(f"  … {event.message}{share}", fg="cyan"), err=True)


def _invoker(layout: SquadLayout, settings: Settings, known_secrets: SecretRegistry, *,
             approvals: bool) -> ToolInvoker:
    # Without asking (`tools test`), running the tool's own tests is what the person asked
    # for: its `ask` calls run, `deny` still refuses.
    gate = TerminalApprovals(settings) if approvals else Unattended(settings, approve_asks=True)
    return ToolInvoker(layout, settings, _Progress(),
                       variables=SquadVariables(layout, settings, registry=known_secrets),
                       approvals=gate)


def call(name: str, pairs: tuple[str, ...], raw_json: str | None, as_json: bool,
         directory: Path | None) -> None:
    from squadd.contracts.messages import ToolCall

    layout, settings, builtins, found, known_secrets = _load(directory)
    tool = _find(name, builtins, found)
    arguments = parse_arguments(tool, pairs, raw_json)
    session = "cli-" + time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    toolset = ToolSet(builtins).merged(found.tools)
    invoker = _invoker(layout, settings, known_secrets, approvals=True)
    result = anyio.run(invoker.invoke, toolset, ToolCall(id="call-1", name=name,
                                                         arguments=arguments),
                       CallOrigin(session_id=session, agent="cli"))
    if as_json:
        print_json(result.model_dump())
    else:
        click.echo(result.text)
        for image in result.images:
            click.echo(click.style(f"[image: {image.mime_type}, {image.size} bytes; --json "
                                   "shows its data]", dim=True))
    if not result.ok:
        sys.exit(1)


def test(name: str | None, directory: Path | None) -> None:
    """`squadd tools test` (see `cli/tools.py`)."""
    layout, settings, builtins, found, known_secrets = _load(directory)
    if name is not None:
        chosen = _find(name, builtins, found)
        if not isinstance(chosen, ShellTool):
            raise click.ClickException(f"{name} is a {chosen.kind} tool: only YAML tools have "
                                       "tests: sections")
        targets = [chosen]
    else:
        targets = [t for t in found.tools if isinstance(t, ShellTool) and t.definition.tests]
    targets = [t for t in targets if t.definition.tests]
    if not targets:
        click.echo("No YAML tool here has tests: add a 'tests:' section to one.")
        return
    invoker = _invoker(layout, settings, known_secrets, approvals=False)

    def report(outcome: ToolTestOutcome) -> None:
        mark = click.style("PASS", fg="green") if outcome.passed else \
            click.style("FAIL", fg="red")
        click.echo(f"{mark} {outcome.tool}: {outcome.test}")
        for problem in outcome.problems:
            click.echo(f"     {problem}")

    async def run_all() -> list[ToolTestOutcome]:
        outcomes: list[ToolTestOutcome] = []
        for target in targets:
            outcomes += await run_tool_tests(target, invoker, on_result=report)
        return outcomes

    outcomes = anyio.run(run_all)
    failed = [o for o in outcomes if not o.passed]
    click.echo(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed")
    if failed:
        sys.exit(1)


PYTHON_TEMPLATE = '''"""The {name} tool of this squad.

Try it with: squadd tools call {name} --arg text=hello
"""

from typing import Annotated

from pydantic import Field

from squadd import ToolContext, tool


@tool
def {function}(
    text: str,
    repeat: Annotated[int, Field(ge=1, le=10)] = 1,
    ctx: ToolContext | None = None,
) -> str:
    """Echo a text back, repeated.

    Args:
        text: The text to echo.
        repeat: How many times to repeat it (1 to 10).
    """
    if ctx is not None:
        ctx.progress(f"echoing {{len(text)}} characters", 0.5)
    return " ".join([text] * repeat)
'''

YAML_TEMPLATE = '''# The {name} tool of this squad.
# Try it with: squadd tools call {name} --arg TEXT="one two"
# Run its tests with: squadd tools test {name}
description: Count the words in a text.
tags: [read]
parameters:
  TEXT:
    type: string
    description: The text whose words to count.
bash: printf '%s\\n' {{TEXT}} | wc -w
tests:
  - name: counts three words
    parameters:
      TEXT: "one two three"
    expected:
      exit-code: 0
      output-contains: "3"
'''


def new(name: str, kind: str, directory: Path | None) -> None:
    """`squadd tools new` (see `cli/tools.py`)."""
    layout = find_layout(directory)
    try:
        check_tool_name(name, where="squadd tools new")
    except ToolDefinitionError as exc:
        raise click.ClickException(str(exc)) from None
    folder = layout.tools_dir
    if kind == "python":
        function = name.replace("-", "_")
        if not function.isidentifier() or function[0].isdigit():
            raise click.ClickException(f"{name!r} cannot name a Python function: use letters, "
                                       "digits and '_' and start with a letter")
        path, text = folder / f"{name}.py", PYTHON_TEMPLATE.format(name=name, function=function)
    else:
        path, text = folder / f"{name}.yaml", YAML_TEMPLATE.format(name=name)
    taken = [p for p in (folder / f"{name}.py", folder / f"{name}.yaml",
                         folder / f"{name}.yml") if p.exists()]
    if taken or not create_exclusive(path, text, mode=TEAM_FILE):
        raise click.ClickException(f"{show_path((taken or [path])[0])} already exists")
    click.echo(f"Created {show_path(path)}")
    example = "--arg text=hello" if kind == "python" else '--arg TEXT="one two"'
    click.echo(f"Try it: squadd tools call {name} {example}")
