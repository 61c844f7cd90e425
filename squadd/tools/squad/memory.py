"""`squad_memory`: store a learning in an agent's history.md under `## Learnings`."""

from __future__ import annotations

from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.config import Settings
from squadd.errors import StateError
from squadd.state.charters import roster
from squadd.state.history import append_learning
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolResult


class MemoryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agentName: str = Field(min_length=1, max_length=64,
                           description="Name of the agent storing this learning")
    learning: str = Field(min_length=1, description="The learning: a clear, actionable statement")
    category: Literal["technical", "process", "architecture", "team", "general"] = Field(
        "general", description="Category of the learning"
    )


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
        def write() -> str:
            agent = args.agentName.lower()
            if not self.layout.charter(agent).is_file():
                known = ", ".join(a.name for a in roster(self.layout)) or "none"
                raise StateError(f"no agent named {agent!r} (agents: {known})")
            append_learning(self.layout, agent, args.learning, category=args.category,
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
            agent=agent, category=args.category,
        )
