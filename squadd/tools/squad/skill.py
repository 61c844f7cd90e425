"""`squad_skill`: read, write or list the squad's skills (SKILL.md files)."""

from __future__ import annotations

from typing import Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.config import Settings
from squadd.errors import StateError
from squadd.state.layout import SquadLayout
from squadd.state.skills import list_skills, read_skill, write_skill
from squadd.tools.base import Tool, ToolContext, ToolResult


class SkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["read", "write", "list"] = Field(description="What to do")
    skillName: str | None = Field(None, max_length=64,
                                  description="Skill name (required for read and write)")
    content: str | None = Field(None, description="Skill content in markdown (for write)")


class SquadSkill(Tool[SkillArgs]):
    name = "squad_skill"
    label = "Skill"
    description = (
        "Read, write, or list Squad skills: reusable knowledge at .squad/skills/{name}/SKILL.md. "
        "Use 'list' to discover skills, 'read' to load one, 'write' to create or update one."
    )
    args_model = SkillArgs
    squad_tool = True

    def __init__(self, layout: SquadLayout, settings: Settings):
        self.layout = layout
        self.settings = settings

    async def run(self, args: SkillArgs, ctx: ToolContext) -> ToolResult:
        if args.action == "list":
            skills = await anyio.to_thread.run_sync(list_skills, self.layout)
            if not skills:
                return ToolResult.success("No skills yet.", skills=[])
            lines = [f"- {s.name} ({s.source}): "
                     + (s.summary if s.problem is None
                        else "(not available: its SKILL.md cannot be read safely)")
                     for s in skills]
            return ToolResult.success(
                f"Available skills ({len(skills)}):\n" + "\n".join(lines),
                skills=[s.name for s in skills],
            )
        if not args.skillName:
            return ToolResult.failure(f"skillName is required for action {args.action!r}")
        name = args.skillName
        try:
            if args.action == "read":
                text = await anyio.to_thread.run_sync(read_skill, self.layout, name)
                return ToolResult.success(text, skill=name.lower())
            if args.content is None or not args.content.strip():
                return ToolResult.failure("content is required for action 'write'")
            content = args.content
            path = await anyio.to_thread.run_sync(lambda: write_skill(
                self.layout, name, content, max_bytes=self.settings.limits.max_entry_bytes))
        except StateError as exc:
            return ToolResult.failure(f"skill {args.action} failed: {exc}")
        return ToolResult.success(
            f'Skill "{name.lower()}" written to {path.relative_to(self.layout.repo)}.',
            skill=name.lower(), file=str(path.relative_to(self.layout.root)),
        )
