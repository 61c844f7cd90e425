"""`squad_route`: hand work to another Squad agent through the session pool.

It spawns (or continues) a session through the runtime's `SquadService`. With `waitForResult`
it returns the agent's final answer; without, the session id to collect it with `squad_status`.
An unknown agent, a full pool, a too-deep route or a cycle is a failure that says why.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from squadd.contracts.routes import (
    MAX_ROUTE_TIMEOUT_S,
    MAX_TASK_CHARS,
    RouteOrigin,
    RouteRequest,
    SquadService,
)
from squadd.tools.base import Tool, ToolContext, ToolResult


class RouteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    targetAgent: str = Field(
        "auto", min_length=1, max_length=65,
        description="Name of the agent to route work to (e.g. 'fenster'); 'auto' lets an "
                    "@name in the task, then routing.md's rules, choose")
    task: str = Field(min_length=1, max_length=MAX_TASK_CHARS,
                      description="Description of the work to be done")
    context: str | None = Field(None, description="Additional context from the requesting agent")
    priority: Literal["normal", "urgent"] = Field("normal", description="Task priority")
    waitForResult: bool = Field(
        True, description="If true, block until the agent completes and return its answer. If "
                          "false, return at once with the session ID (collect the answer with "
                          "squad_status).")
    model: str | None = Field(None, description="Model override for the target agent's session")
    sessionId: str | None = Field(
        None, description="Continue this idle session (from an earlier route) instead of "
                          "spawning a new one")
    availableTools: list[str] | None = Field(
        None, description="Tool names (or globs) the agent may use; default: all")
    timeoutSeconds: float | None = Field(
        None, gt=0, le=MAX_ROUTE_TIMEOUT_S,
        description="Seconds the task may run (default: route.timeout_s)")

    @field_validator("timeoutSeconds", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        if isinstance(value, bool):  # lax parsing would read true as 1 second
            raise ValueError("must be a number of seconds, not true or false")
        return value


class SquadRoute(Tool[RouteArgs]):
    name = "squad_route"
    label = "Route"
    description = (
        "Route work to another Squad agent. Creates an agent session with their charter and "
        "context and sends the task. Returns the agent's answer, or (waitForResult=false) a "
        "session ID whose answer squad_status returns once the agent is done."
    )
    args_model = RouteArgs
    squad_tool = True

    def __init__(self, service: SquadService):
        self.service = service

    async def run(self, args: RouteArgs, ctx: ToolContext) -> ToolResult:
        request = RouteRequest(
            task=args.task, target_agent=args.targetAgent, context=args.context,
            priority=args.priority, wait_for_result=args.waitForResult, model=args.model,
            session_id=args.sessionId, available_tools=args.availableTools,
            timeout_s=args.timeoutSeconds, requested_by=ctx.agent,
        )
        origin = RouteOrigin(session_id=ctx.session_id, agent=ctx.agent, depth=ctx.depth,
                             lineage=ctx.lineage)
        result = await self.service.route(request, origin=origin)
        details = result.model_dump(exclude_none=True, exclude={"message", "answer"})
        if result.ok:
            return ToolResult.success(result.message, **details)
        return ToolResult.failure(result.message, **details)
