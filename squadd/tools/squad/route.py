"""`squad_route`: hand work to another Squad agent through the session pool.

Its arguments are `squadd.contracts.routes.RouteRequest`, the body of `POST /v1/route` too. It
spawns (or continues) a session through the runtime's `SquadService`. With `waitForResult` it
returns the agent's final answer; without, the session id to collect it with `squad_status`.
An unknown agent, a full pool, a too-deep route or a cycle is a failure that says why; so is a
route whose worktree did not land (its answer, then the landing's state, detail and next step,
and `landing` in the details).
The Squad SDK's priorities are accepted too: `low` and `normal` run as normal, `high` and
`critical` as urgent (the pool has two levels: urgent tasks are admitted before normal ones).
"""

from __future__ import annotations

from squadd.contracts.routes import RouteOrigin, RouteRequest, SquadService
from squadd.tools.base import Tool, ToolContext, ToolResult

LANDING_DETAIL_CHARS = 2000
"""Of a refused landing's detail (a check's output tail), what the calling model reads."""


class SquadRoute(Tool[RouteRequest]):
    name = "squad_route"
    label = "Route"
    description = (
        "Route work to another Squad agent. Creates an agent session with their charter and "
        "context and sends the task. Returns the agent's answer, or (waitForResult=false) a "
        "session ID whose answer squad_status returns once the agent is done."
    )
    args_model = RouteRequest
    squad_tool = True

    def __init__(self, service: SquadService):
        self.service = service

    async def run(self, args: RouteRequest, ctx: ToolContext) -> ToolResult:
        # who asks is the calling session's agent, whatever the arguments said
        return await route_for(self.service, args.model_copy(update={"requested_by": ctx.agent}),
                               ctx)


async def route_for(service: SquadService, request: RouteRequest, ctx: ToolContext) -> ToolResult:
    """Route `request` on behalf of the calling session `ctx`; the outcome as a tool result."""
    origin = RouteOrigin(session_id=ctx.session_id, agent=ctx.agent, depth=ctx.depth,
                         lineage=ctx.lineage)
    result = await service.route(request, origin=origin)
    details = result.model_dump(exclude_none=True, exclude={"message", "answer"})
    landing = result.landing
    if landing is not None and landing.state not in ("landed", "skipped"):
        told = [result.message, "", f"Landing: {landing.state}"]
        if landing.broke:
            told.append(f"Broke: {', '.join(landing.broke)}")
        if landing.detail:
            told.append(landing.detail[-LANDING_DETAIL_CHARS:])
        if landing.next:
            told.append(f"Next: {landing.next}")
        return ToolResult.failure("\n".join(told), **details)
    if result.ok:
        return ToolResult.success(result.message, **details)
    return ToolResult.failure(result.message, **details)
