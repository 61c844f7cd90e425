"""`squad_ask`: a question from the agent to a person. The session parks in the inbox (holding
no slot) until someone answers (`squadd inbox answer ID "..."`, the dashboard or MCP); the
answer is the tool's result. Without an inbox (`squadd run`) the call fails, saying so."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from squadd.tools.base import Tool, ToolContext, ToolResult
from squadd.tools.people import PersonQueue, PersonRequest


class AskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=4000,
                          description="What you need a person to decide or tell you")
    context: str = Field("", max_length=8000,
                         description="What the person needs to know to answer (optional)")


class SquadAsk(Tool[AskArgs]):
    name = "squad_ask"
    label = "Ask a person"
    description = (
        "Ask a person a question and wait for the answer (it may take hours: your session "
        "pauses meanwhile). Use it when you cannot go on without a human decision or fact; "
        "the answer comes back as this tool's result."
    )
    args_model = AskArgs
    squad_tool = True

    def __init__(self, people: PersonQueue | None):
        self.people = people

    async def run(self, args: AskArgs, ctx: ToolContext) -> ToolResult:
        if self.people is None:
            return ToolResult.failure("squad_ask needs the daemon's inbox (squadd serve); no "
                                      "person can be asked here")
        answer = await self.people.ask_person(PersonRequest(
            kind="question", session_id=ctx.session_id, agent=ctx.agent, call_id=ctx.call_id,
            reason=args.question[:500], actions=("answer", "dismiss"),
            details={"question": args.question, "context": args.context}))
        if answer.action != "answer":
            why = f" ({answer.reason})" if answer.reason else ""
            return ToolResult.failure(f"no answer: the question was dismissed{why}; go on "
                                      "without it or ask differently", item=answer.item_id)
        return ToolResult.success(f"Answer from {answer.by or 'a person'}: {answer.answer}",
                                  item=answer.item_id, answer=answer.answer)
