"""Where the tool hooks meet the invocation pipeline: PreToolUse after the approval gate (deny,
ask through the approval flow, `updatedInput` validated again), PostToolUse on a call that
succeeded (what the hooks say goes to the model with its result)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from squadd.tools.base import Tool, ToolContext, ToolResult
from squadd.tools.hooks.events import post_tool_use, pre_tool_use
from squadd.tools.hooks.runner import Hooks

Describe = Callable[[Tool[Any], ValidationError], str]


async def gate_call(hooks: Hooks, tool: Tool[Any], arguments: Mapping[str, Any],
                    args: BaseModel, ctx: ToolContext, describe: Describe,
                    ) -> tuple[BaseModel, Mapping[str, Any]] | ToolResult:
    """The PreToolUse hooks' say on a call the approval gate let through: a denial (the model
    reads the hook's reason), an `ask` put to the approval flow (`ctx.confirm`), or the
    arguments the call runs with (a hook's `updatedInput`, validated again; `describe` says
    what was wrong with it)."""
    verdict = await pre_tool_use(hooks, tool.name, arguments, ctx)
    if verdict.blocked:
        return ToolResult.failure(
            f"{tool.name} was not run: blocked by a PreToolUse hook: {verdict.reason}",
            approval="deny", hook="PreToolUse")
    if verdict.decision == "ask":
        why = f" ({verdict.reason})" if verdict.reason else ""
        if not await ctx.confirm(f"Run {tool.name}? A PreToolUse hook asks{why}"):
            return ToolResult.failure(
                f"{tool.name} was not run: a PreToolUse hook asked for approval{why} and it "
                "was not given", approval="denied", hook="PreToolUse")
    if verdict.updated_input is None:
        return args, arguments
    try:
        return tool.args_model.model_validate(verdict.updated_input), verdict.updated_input
    except ValidationError as exc:
        return ToolResult.failure(
            f"{tool.name} was not run: a PreToolUse hook changed its arguments into ones it "
            f"cannot take. {describe(tool, exc)}", hook="PreToolUse")


async def tell_model(hooks: Hooks, tool: Tool[Any], ctx: ToolContext,
                     arguments: Mapping[str, Any], result: ToolResult) -> ToolResult:
    """The PostToolUse hooks of a call that succeeded: what they tell the model (a block's
    reason, additional context) is added to its result."""
    verdict = await post_tool_use(hooks, tool.name, arguments, result.text, result.ok,
                                  result.details, ctx)
    notes = [f"[PostToolUse hook: {verdict.reason}]" if verdict.blocked else "",
             f"[PostToolUse hook context: {verdict.context}]" if verdict.context else ""]
    added = "\n".join(note for note in notes if note)
    if not added:
        return result
    return result.model_copy(update={"text": f"{result.text}\n{added}"})
