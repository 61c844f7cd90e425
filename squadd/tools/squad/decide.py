"""`squad_decide`: propose a team decision by writing it to the decisions inbox.

Takes PRD 2's arguments or the Squad SDK's (`summary`, `author`, `references`): see `aliases`.
The entry's `**By:**` line shows the team's display name for the agent (team.md's `EECOM`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from squadd.config import Settings
from squadd.errors import StateError
from squadd.state.decisions import write_inbox_entry
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolResult
from squadd.tools.squad.aliases import agent_folder, alias, refuse_both

MAX_REFERENCES = 50


class DecideArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=200, validation_alias=alias("title", "summary"),
                       description="Decision title (its slug names the inbox file)")
    body: str = Field(min_length=1, description="Full decision content in markdown")
    agentName: str = Field(min_length=1, max_length=64,
                           validation_alias=alias("agentName", "author"),
                           description="Name of the agent proposing this decision")
    category: Literal["architecture", "process", "security", "feature", "team", "general"] = (
        Field("general", description="Decision category")
    )
    references: SkipJsonSchema[list[str] | None] = Field(None, max_length=MAX_REFERENCES)
    """Squad SDK: related agents, PRDs or issues; written as a `**References:**` line."""

    @model_validator(mode="before")
    @classmethod
    def _one_name_each(cls, data: Any) -> Any:
        return refuse_both(data, ("title", "summary"), ("agentName", "author"))

    def full_body(self) -> str:
        refs = [" ".join(ref.split()) for ref in self.references or [] if ref.strip()]
        return (f"**References:** {', '.join(refs)}\n\n{self.body}" if refs else self.body)


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
        def write() -> tuple[str, Path]:
            agent, shown = agent_folder(self.layout, args.agentName)
            return agent, write_inbox_entry(
                self.layout, agent=agent, title=args.title, body=args.full_body(),
                category=args.category, max_bytes=self.settings.limits.max_entry_bytes, by=shown,
            )

        try:
            agent, path = await anyio.to_thread.run_sync(write)
        except StateError as exc:
            return ToolResult.failure(f"decision not written: {exc}")
        return ToolResult.success(
            f'Decision "{args.title}" written to the inbox as {path.name}. '
            "The Scribe will merge it into decisions.md.",
            file=str(path.relative_to(self.layout.root)), title=args.title,
            agent=agent, category=args.category,
        )
