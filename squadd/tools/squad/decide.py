"""`squad_decide`: propose a team decision by writing it to the decisions inbox."""

from __future__ import annotations

from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.config import Settings
from squadd.errors import StateError
from squadd.state.decisions import write_inbox_entry
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolResult


class DecideArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=200,
                       description="Decision title (its slug names the inbox file)")
    body: str = Field(min_length=1, description="Full decision content in markdown")
    agentName: str = Field(min_length=1, max_length=64,
                           description="Name of the agent proposing this decision")
    category: Literal["architecture", "process", "security", "feature", "team", "general"] = (
        Field("general", description="Decision category")
    )


class SquadDecide(Tool[DecideArgs]):
    name = "squad_decide"
    label = "Decide"
    description = (
        "Propose a team decision. Writes it to the decisions inbox; the Scribe merges it into "
        "decisions.md. Use for architectural choices, process changes, or any decision that "
        "affects the team."
    )
    args_model = DecideArgs
    squad_tool = True

    def __init__(self, layout: SquadLayout, settings: Settings):
        self.layout = layout
        self.settings = settings

    async def run(self, args: DecideArgs, ctx: ToolContext) -> ToolResult:
        try:
            path = await anyio.to_thread.run_sync(lambda: write_inbox_entry(
                self.layout, agent=args.agentName, title=args.title, body=args.body,
                category=args.category, max_bytes=self.settings.limits.max_entry_bytes,
            ))
        except StateError as exc:
            return ToolResult.failure(f"decision not written: {exc}")
        return ToolResult.success(
            f'Decision "{args.title}" written to the inbox as {path.name}. '
            "The Scribe will merge it into decisions.md.",
            file=str(path.relative_to(self.layout.root)), title=args.title,
            agent=args.agentName.lower(), category=args.category,
        )
