"""`squad_memory`: store a learning in an agent's history.md under `## Learnings`.

Takes PRD 2's arguments or the Squad SDK's (`agent`, `content`, `section`): see `aliases`.
Every section is stored as a learning, the one part of history.md squadd puts in prompts and
compacts: `updates` become `team` learnings and `sessions` become `process` learnings unless a
category is given.
"""

from __future__ import annotations

from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.json_schema import SkipJsonSchema

from squadd.config import Settings
from squadd.errors import StateError
from squadd.state.charters import roster
from squadd.state.history import append_learning
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolResult
from squadd.tools.squad.aliases import agent_folder, alias, refuse_both

Category = Literal["technical", "process", "architecture", "team", "general"]
SECTION_CATEGORY: dict[str, Category] = {"learnings": "general", "updates": "team",
                                         "sessions": "process"}
"""The category a Squad SDK `section` stores its entry under when no category is given."""


class MemoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agentName: str = Field(min_length=1, max_length=64,
                           validation_alias=alias("agentName", "agent"),
                           description="Name of the agent storing this learning")
    learning: str = Field(min_length=1, validation_alias=alias("learning", "content"),
                          description="The learning: a clear, actionable statement")
    category: Category = Field("general", description="Category of the learning")
    section: SkipJsonSchema[Literal["learnings", "updates", "sessions"] | None] = None
    """Squad SDK: the history section; see the module docstring."""

    @model_validator(mode="before")
    @classmethod
    def _one_name_each(cls, data: Any) -> Any:
        return refuse_both(data, ("agentName", "agent"), ("learning", "content"))

    @property
    def stored_category(self) -> Category:
        if "category" in self.model_fields_set or self.section is None:
            return self.category
        return SECTION_CATEGORY[self.section]


class SquadMemory(Tool[MemoryArgs]):
    name = "squad_memory"
    label = "Remember"
    description = (
        "Store a learning in an agent's project knowledge (history.md, under ## Learnings). Use "
        "for patterns discovered, mistakes avoided, or findings worth remembering next session."
    )
    args_model = MemoryArgs
    squad_tool = True

    def __init__(self, layout: SquadLayout, settings: Settings):
        self.layout = layout
        self.settings = settings

    async def run(self, args: MemoryArgs, ctx: ToolContext) -> ToolResult:
        category = args.stored_category

        def write() -> str:
            agent, _shown = agent_folder(self.layout, args.agentName)
            if not self.layout.charter(agent).is_file():
                known = ", ".join(a.name for a in roster(self.layout)) or "none"
                raise StateError(f"no agent named {agent!r} (agents: {known})")
            append_learning(self.layout, agent, args.learning, category=category,
                            max_bytes=self.settings.limits.max_entry_bytes)
            return agent

        try:
            agent = await anyio.to_thread.run_sync(write)
        except StateError as exc:
            return ToolResult.failure(f"learning not stored: {exc}")
        preview = " ".join(args.learning.split())
        if len(preview) > 80:
            preview = preview[:77] + "..."
        return ToolResult.success(
            f'Learning stored in {agent}\'s history: "{preview}"',
            agent=agent, category=category,
        )
