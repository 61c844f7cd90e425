"""Helpers for custom tool tests: write tool files, discover them, call them through the
real pipeline, and record the events."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from squadd.config import Settings
from squadd.contracts.events import BaseEvent
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import ConfirmFn, Tool, ToolContext, ToolResult, ToolSet
from squadd.tools.discovery import Discovery, ToolDiscoverer
from squadd.tools.gates import ApprovalGate, VariableResolver
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.yaml.schema import ShellToolFile
from squadd.tools.yaml.tool import ShellTool


class Recorder:
    """An event sink that keeps every event."""

    def __init__(self) -> None:
        self.events: list[BaseEvent] = []
        self._changed: anyio.Event | None = None

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)
        if self._changed is not None:
            self._changed.set()

    async def wait_for(self, kind: type[BaseEvent], count: int = 1) -> list[Any]:
        """The events of `kind` once there are `count` of them (at most 30 s)."""
        with anyio.fail_after(30):
            while len(self.of(kind)) < count:
                self._changed = anyio.Event()
                await self._changed.wait()
        return self.of(kind)

    def of(self, kind: type[BaseEvent]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


class Answering:
    """An approval gate that lets every call run and answers each `ctx.confirm` question with
    `answer(question)`, keeping the questions in `asked`."""

    def __init__(self, answer: Callable[[str], bool]):
        self.answer = answer
        self.asked: list[str] = []

    async def check(self, *args: Any, **kwargs: Any) -> None:
        return None

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn:
        async def confirm(question: str) -> bool:
            self.asked.append(question)
            return self.answer(question)
        return confirm


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def discover(layout: SquadLayout, settings: Settings | None = None,
             sink: Recorder | None = None, **kwargs: Any) -> Discovery:
    return ToolDiscoverer().discover(layout, settings or Settings(), sink, **kwargs)


def shell_tool(data: dict[str, Any], settings: Settings | None = None,
               name: str = "t") -> ShellTool:
    """A YAML tool from a dict, as if loaded from a file (no linking)."""
    from squadd.tools.yaml.checks import check_spec

    spec = ShellToolFile.model_validate(data)
    check_spec(spec)
    return ShellTool(spec, name=name, file=None, source="project", settings=settings or Settings())


async def call(layout: SquadLayout, tools: ToolSet | list[Tool[Any]] | Tool[Any], name: str,
               arguments: dict[str, Any] | None = None, *, settings: Settings | None = None,
               sink: Recorder | None = None, variables: VariableResolver | None = None,
               approvals: ApprovalGate | None = None, call_id: str = "call_1",
               session_id: str = "s-1", origin: CallOrigin | None = None) -> ToolResult:
    """Run one call through a real `ToolInvoker`."""
    if isinstance(tools, Tool):
        tools = [tools]
    toolset = tools if isinstance(tools, ToolSet) else ToolSet(tools)
    invoker = ToolInvoker(layout, settings or Settings(), sink, variables=variables,
                          approvals=approvals)
    return await invoker.invoke(toolset, ToolCall(id=call_id, name=name,
                                                  arguments=arguments or {}),
                                origin or CallOrigin(session_id=session_id, agent="fenster"))

