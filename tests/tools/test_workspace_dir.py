"""`ToolContext.workspace_dir`: the calling session's worktree, or the repository root."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from squadd.config import Settings
from squadd.contracts.events import NullSink
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolOutput, ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker


class NoArgs(BaseModel):
    pass


class Where(Tool[NoArgs]):
    name = "where"
    description = "Say where the tool works"
    args_model = NoArgs

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutput:
        return str(ctx.workspace)


async def test_workspace_dir_is_the_sessions_worktree_else_the_repository(
        layout: SquadLayout, tmp_path: Path) -> None:
    invoker = ToolInvoker(layout, Settings(), NullSink())
    tools = ToolSet([Where()])
    call = ToolCall(id="c1", name="where", arguments={})
    shared = await invoker.invoke(tools, call, CallOrigin(session_id="s1", agent="lead"))
    assert shared.text == str(layout.repo)
    tree = tmp_path / "tree"
    isolated = await invoker.invoke(tools, call, CallOrigin(session_id="s1", agent="lead",
                                                            workspace_dir=tree))
    assert isolated.text == str(tree)


def test_a_context_built_without_workspace_dir_defaults_to_the_repository(
        tmp_path: Path) -> None:
    ctx = ToolContext(session_id="s", call_id="c", agent="a", repo_dir=tmp_path,
                      squad_dir=tmp_path / ".squad")
    assert ctx.workspace_dir is None and ctx.workspace == tmp_path
