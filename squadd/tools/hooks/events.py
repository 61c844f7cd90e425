"""Each hook event's input, as Claude Code sends it, and the value its matcher is tried on.

`PreToolUse` / `PostToolUse` (tool name), `SessionStart` (source: `startup` or `resume`),
`UserPromptSubmit`, `Stop`, `SubagentStart` / `SubagentStop` (agent), `Notification`
(notification type), and squadd's own `PreLand` / `PostLand` (agent).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from squadd.tools.base import ToolContext
from squadd.tools.hooks.runner import NOTHING, Hooks, HookSession, Verdict
from squadd.tools.hooks.wire import claude_input, claude_name, claude_response, squadd_arguments


def _tool_session(hooks: Hooks, ctx: ToolContext) -> HookSession:
    return hooks.session(ctx.session_id, ctx.agent, ctx.workspace)


async def pre_tool_use(hooks: Hooks, tool: str, arguments: Mapping[str, Any],
                       ctx: ToolContext) -> Verdict:
    """The PreToolUse verdict on a call; its `updated_input` in squadd's argument names."""
    found = await hooks.matching("PreToolUse", claude_name(tool))
    if isinstance(found, Verdict) or not found:
        return found if isinstance(found, Verdict) else NOTHING
    verdict = await hooks.run("PreToolUse", found, _tool_session(hooks, ctx), {
        "tool_name": claude_name(tool),
        "tool_input": claude_input(tool, arguments, ctx.workspace),
        "tool_use_id": ctx.call_id}, cancel=ctx.cancel)
    if verdict.updated_input is None:
        return verdict
    return replace(verdict, updated_input=squadd_arguments(tool, verdict.updated_input,
                                                           ctx.workspace))


async def post_tool_use(hooks: Hooks, tool: str, arguments: Mapping[str, Any], text: str,
                        ok: bool, details: Mapping[str, Any], ctx: ToolContext) -> Verdict:
    """The PostToolUse verdict on a call that ran: `deny` (exit 2, `decision: block`) carries
    the feedback for the model."""
    found = await hooks.matching("PostToolUse", claude_name(tool))
    if isinstance(found, Verdict) or not found:
        return found if isinstance(found, Verdict) else NOTHING
    return await hooks.run("PostToolUse", found, _tool_session(hooks, ctx), {
        "tool_name": claude_name(tool),
        "tool_input": claude_input(tool, arguments, ctx.workspace),
        "tool_response": claude_response(tool, arguments, text, ok, details, ctx.workspace),
        "tool_use_id": ctx.call_id}, cancel=ctx.cancel)


async def session_start(hooks: Hooks, session: HookSession, *, resumed: bool,
                        model: str) -> Verdict:
    source = "resume" if resumed else "startup"
    return await hooks.fire("SessionStart", session, {
        "source": source, "model": model, "agent_type": session.agent}, match=source)


async def user_prompt_submit(hooks: Hooks, session: HookSession, prompt: str) -> Verdict:
    return await hooks.fire("UserPromptSubmit", session, {"prompt": prompt})


async def stop(hooks: Hooks, session: HookSession, *, status: str,
               last_message: str) -> Verdict:
    """A session's end (whatever ended it: `status` says). Its answer decides nothing."""
    return await hooks.fire("Stop", session, {
        "stop_hook_active": False, "last_assistant_message": last_message,
        "status": status})


async def subagent_start(hooks: Hooks, parent: HookSession, *, session_id: str,
                         agent: str) -> Verdict:
    """A routed session starting, seen from the session that routed to it."""
    return await hooks.fire("SubagentStart", parent, {
        "agent_id": session_id, "agent_type": agent}, match=agent)


async def subagent_stop(hooks: Hooks, parent: HookSession, *, session_id: str, agent: str,
                        status: str, last_message: str) -> Verdict:
    found = await hooks.matching("SubagentStop", agent)
    if isinstance(found, Verdict):
        return found
    return await hooks.run("SubagentStop", found, parent, {
        "agent_id": session_id, "agent_type": agent, "stop_hook_active": False,
        "last_assistant_message": last_message, "status": status,
        "agent_transcript_path": hooks.transcript_path(session_id) if found else ""})


async def notification(hooks: Hooks, session: HookSession, *, message: str,
                       notification_type: str, title: str = "squadd") -> Verdict:
    """A notification for a person (an inbox item): its hooks learn of it; they decide
    nothing."""
    return await hooks.fire("Notification", session, {
        "message": message, "title": title, "notification_type": notification_type},
        match=notification_type)


async def pre_land(hooks: Hooks, session: HookSession, *, branch: str,
                   target: str | None, commits: list[str]) -> Verdict:
    """Before a session's branch lands: `deny` (exit 2, `decision: block`) keeps it off the
    target, with the reason."""
    return await hooks.fire("PreLand", session, {
        "branch": branch, "target": target, "commits": commits}, match=session.agent)


async def post_land(hooks: Hooks, session: HookSession, *, branch: str, target: str | None,
                    outcome: Mapping[str, Any]) -> Verdict:
    return await hooks.fire("PostLand", session, {
        "branch": branch, "target": target, "outcome": dict(outcome)}, match=session.agent)
