"""The session-level hooks of a route: `SessionStart`, `UserPromptSubmit` and `SubagentStart`
before its session runs, `Stop` and `SubagentStop` once it ended (whatever ended it), and
`PreLand` / `PostLand` around its landing. Tool hooks run in the invocation pipeline.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import structlog

from squadd.contracts.workspaces import LandingOutcome, WorkspaceView
from squadd.errors import ConfigError, NotCached
from squadd.runtime.planning import RoutePlan
from squadd.tools.hooks import Hooks, HookSession
from squadd.tools.hooks import events as hook_events
from squadd.tools.hooks.config import HookEvent

log = structlog.get_logger("squadd.hooks")

CANCELLED_BOUND_S = 5.0
"""Seconds the Stop hooks of a cancelled session may take (the daemon may be stopping)."""


@dataclasses.dataclass(frozen=True)
class RouteHooks:
    """A route's session and, for a routed one, the session that routed it."""

    hooks: Hooks
    session: HookSession
    parent: HookSession | None


def route_hooks(hooks: Hooks, plan: RoutePlan, workspace: str | None,
                parent_workspace: str | None) -> RouteHooks:
    info = plan.info
    session = hooks.session(info.session_id, info.agent, Path(workspace) if workspace else None)
    parent = None
    if info.parent_session_id:
        parent_agent = info.lineage[-1] if info.lineage else info.requested_by or ""
        parent = hooks.session(info.parent_session_id, parent_agent,
                               Path(parent_workspace) if parent_workspace else None)
    return RouteHooks(hooks, session, parent)


async def opening(route: RouteHooks, plan: RoutePlan) -> RoutePlan | str:
    """Fire SubagentStart (a routed session, seen from its parent), SessionStart and
    UserPromptSubmit (with the task). The plan to run,
    with what the hooks added for the model (in a new session's Additional Context, after a
    continuation's task), or why a UserPromptSubmit hook blocked the task."""
    hooks, session = route.hooks, route.session
    if route.parent is not None:
        await hook_events.subagent_start(hooks, route.parent, session_id=session.session_id,
                                         agent=session.agent)
    started = await hook_events.session_start(hooks, session, resumed=plan.continuing,
                                              model=plan.info.model)
    added = [started.context] if started.context else []
    task = plan.task if plan.task is not None else (None if plan.continuing else plan.info.task)
    if task is not None:
        submitted = await hook_events.user_prompt_submit(hooks, session, task)
        if submitted.blocked:
            return f"a UserPromptSubmit hook blocked the task: {submitted.reason}"
        if submitted.context:
            added.append(submitted.context)
    if not added:
        return plan
    extra = "\n\n".join(added)
    if plan.continuing and plan.task is not None:
        return dataclasses.replace(plan, task=f"{plan.task}\n\n{extra}")
    if plan.continuing:  # a resume sends no new message: nowhere to add it
        log.info("hook context not used: the session resumes without a new message",
                 session_id=session.session_id)
        return plan
    context = f"{plan.context}\n\n{extra}" if plan.context else extra
    return dataclasses.replace(plan, context=context)


async def closing(route: RouteHooks, *, status: str, answer: str, cancelled: bool) -> None:
    """Fire Stop, and SubagentStop for a routed session; never raises but cancellation."""
    if closing_hooks_absent(route):  # most squads: no scopes to open, nothing to match
        return
    bound = CANCELLED_BOUND_S if cancelled else None
    with anyio.CancelScope(shield=cancelled), anyio.move_on_after(bound):
        await hook_events.stop(route.hooks, route.session, status=status, last_message=answer)
        if route.parent is not None:
            await hook_events.subagent_stop(
                route.hooks, route.parent, session_id=route.session.session_id,
                agent=route.session.agent, status=status, last_message=answer)


def closing_hooks_absent(route: RouteHooks) -> bool:
    """Whether no Stop hook (nor, for a routed session, SubagentStop) is configured, as the
    hooks files were last read; False when a file must be read again (it changed) or cannot
    be. Cheap: it only stats them (the event loop calls it)."""
    events: tuple[HookEvent, ...] = ("Stop", "SubagentStop") if route.parent is not None \
        else ("Stop",)
    try:
        return not any(route.hooks.source.known_groups(event) for event in events)
    except (NotCached, ConfigError, OSError):
        return False


async def before_landing(route: RouteHooks, workspace: WorkspaceView) -> LandingOutcome | None:
    """PreLand: None when the branch may land, else the landing's outcome saying why not."""
    verdict = await hook_events.pre_land(route.hooks, route.session, branch=workspace.branch,
                                         target=workspace.target, commits=workspace.commits)
    if not verdict.blocked:
        return None
    return LandingOutcome(state="pending", detail=f"a PreLand hook blocked the landing: "
                                                  f"{verdict.reason}",
                          next=f"squadd land {workspace.session_id}")


async def after_landing(route: RouteHooks, workspace: WorkspaceView) -> None:
    outcome = workspace.outcome.model_dump() if workspace.outcome is not None else {}
    await hook_events.post_land(route.hooks, route.session, branch=workspace.branch,
                                target=workspace.target, outcome=outcome)
