"""`squad_status`: the sessions of the pool, or one session's state and final answer.

Lists sessions as `- **{agent}** [{state}] session={id} age={s}s idle={s}s ...` followed by
`Pool: {running}/{max} running, {queued} queued`. With `sessionId` it shows that session and,
once its task has ended, the answer: how a `waitForResult=false` route is collected.
The Squad SDK's `status` (a state to keep; `completed` means every ended state) and `verbose`
(each session's detail: its answer or error) are accepted too.
"""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from squadd.contracts.routes import SquadService
from squadd.contracts.sessions import LIVE_STATES, PoolTotals, SessionState, SessionView
from squadd.tools.base import Tool, ToolContext, ToolResult

_TASK_SHOWN = 80
ENDED_WORDS = frozenset({"completed", "complete", "done", "ended"})
"""Squad SDK status filters that mean "every session whose task has ended"."""


class StatusArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agentName: str | None = Field(None, max_length=64,
                                  description="Only this agent's sessions; omit for all agents")
    includeDestroyed: bool = Field(False, description="Include ended (destroyed) sessions")
    sessionId: str | None = Field(
        None, max_length=128,
        description="One session: its state, and its final answer once it has ended")
    status: SkipJsonSchema[str | None] = Field(None, max_length=32)
    """Squad SDK: keep only sessions in this state (`completed`: every ended state)."""
    verbose: SkipJsonSchema[bool] = False
    """Squad SDK: show each session's detail (its answer or error once it has ended)."""

    @field_validator("status")
    @classmethod
    def _known_status(cls, value: str | None) -> str | None:
        if value is None:
            return None
        lowered = value.strip().lower()
        known = set(get_args(SessionState)) | ENDED_WORDS
        if lowered not in known:
            raise ValueError(f"unknown status {value!r}: use one of {', '.join(sorted(known))}")
        return lowered

    def keeps(self, view: SessionView) -> bool:
        if self.status is None:
            return True
        if self.status in ENDED_WORDS:
            return view.state not in LIVE_STATES
        return view.state == self.status


def pool_line(pool: PoolTotals) -> str:
    return f"Pool: {pool.running}/{pool.max_concurrent} running, {pool.queued} queued"


def session_line(view: SessionView) -> str:
    task = " ".join(view.task.split())
    if len(task) > _TASK_SHOWN:
        task = task[:_TASK_SHOWN - 1] + "…"
    parent = f" parent={view.parent_session_id}" if view.parent_session_id else ""
    return (f"- **{view.agent}** [{view.state}] session={view.session_id} "
            f"age={round(view.age_s)}s idle={round(view.idle_s)}s tokens={view.tokens}"
            f'{parent} task="{task}"')


def session_detail(view: SessionView) -> str:
    lines = [session_line(view)]
    if view.state in LIVE_STATES:
        lines.append(f"Still working ({view.state}): check again later for the answer.")
    elif view.answer is not None:
        lines.append("Final answer:")
        lines.append(view.answer or "(the agent returned no text)")
    elif view.error is not None:
        lines.append(f"Ended without an answer: {view.error}")
    else:
        lines.append(f"No task has ended in this session yet ({view.state}).")
    return "\n".join(lines)


class SquadStatus(Tool[StatusArgs]):
    name = "squad_status"
    label = "Status"
    description = (
        "Query the status of Squad agent sessions: IDs, agents, states (queued, active, "
        "waiting, idle, error, ...), timing and tokens, plus the pool's load. Pass sessionId to "
        "get one session's state and, once it has ended, its final answer."
    )
    args_model = StatusArgs
    squad_tool = True

    def __init__(self, service: SquadService):
        self.service = service

    async def run(self, args: StatusArgs, ctx: ToolContext) -> ToolResult:
        if args.sessionId is not None:
            report = await self.service.status(session_id=args.sessionId)
            if not report.sessions:
                return ToolResult.failure(
                    f"no session {args.sessionId}: check the id (squad_status lists sessions)")
            view = report.sessions[0]
            ended = view.state not in LIVE_STATES
            return ToolResult.success(
                session_detail(view) + "\n" + pool_line(report.pool),
                session_id=view.session_id, agent=view.agent, state=view.state, ended=ended,
                answer=view.answer, error=view.error,
            )
        wants_ended = args.status is not None and (args.status in ENDED_WORDS
                                                   or args.status == "destroyed")
        report = await self.service.status(
            agent=args.agentName.lower() if args.agentName else None,
            include_destroyed=args.includeDestroyed or wants_ended)
        sessions = [view for view in report.sessions if args.keeps(view)]
        if not sessions:
            head = (f'No active sessions for agent "{args.agentName}".' if args.agentName
                    else "No active agent sessions.")
            return ToolResult.success(f"{head}\n{pool_line(report.pool)}", sessions=0)
        show = session_detail if args.verbose else session_line
        body = "\n".join(show(v) for v in sessions)
        return ToolResult.success(
            f"**Active Sessions ({len(sessions)}):**\n{body}\n{pool_line(report.pool)}",
            sessions=len(sessions), running=report.pool.running, queued=report.pool.queued,
        )
