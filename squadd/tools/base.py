"""What a tool is: `Tool`, the `ToolContext` it runs with, the `ToolResult` it returns, `ToolSet`.

Every kind of tool (the squad tools, Python tool files, YAML shell tools) is a `Tool`, and every
call of one goes through `squadd.tools.invoke.ToolInvoker`.
"""

from __future__ import annotations

import fnmatch
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from squadd.contracts.messages import ToolSpec

ToolSource = Literal["builtin", "project", "user", "extra", "cycod-project", "cycod-user",
                     "cycod-global"]
Approval = Literal["allow", "ask", "deny"]


class ToolResult(BaseModel):
    """A tool's structured result: success or failure, text for the model, and details."""

    model_config = ConfigDict(frozen=True)

    result_type: Literal["success", "failure"]
    text: str
    details: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def success(cls, text: str, **details: Any) -> ToolResult:
        return cls(result_type="success", text=text, details=details)

    @classmethod
    def failure(cls, text: str, **details: Any) -> ToolResult:
        return cls(result_type="failure", text=text, details=details)

    @property
    def ok(self) -> bool:
        return self.result_type == "success"


class VariableSpec(BaseModel):
    """A variable a tool declares (seed 004): where its value comes from is the invoker's job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    type: Literal["text", "secret"] = "text"
    required: bool = True
    description: str = ""


class CancelSignal:
    """Set when the call is cancelled; tools poll `cancelled` or `await wait()`."""

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._children: weakref.WeakSet[CancelSignal] = weakref.WeakSet()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()
        for child in list(self._children):
            child.set()

    def child(self) -> CancelSignal:
        """A signal set whenever this one is, that can also be set on its own (one call's)."""
        signal = CancelSignal()
        if self.cancelled:
            signal.set()
        else:
            self._children.add(signal)
        return signal

    async def wait(self) -> None:
        await self._event.wait()


ProgressFn = Callable[[str, float | None], None]
ConfirmFn = Callable[[str], Awaitable[bool]]


async def _always_yes(question: str) -> bool:
    return True


@dataclass
class ToolContext:
    """What a running tool knows about its call and can do besides returning."""

    session_id: str
    call_id: str
    agent: str
    repo_dir: Path
    squad_dir: Path
    cancel: CancelSignal = field(default_factory=CancelSignal)
    variables: Mapping[str, str] = field(default_factory=dict)
    depth: int = 0
    """How deep in a chain of routes the calling session is (0 = called from outside)."""
    lineage: tuple[str, ...] = ()
    """Agents of the sessions above this call, outermost first (for cycle checks)."""
    workspace_dir: Path = Path()
    """Where the calling session works: its git worktree, or the repository root (default)."""
    _progress: ProgressFn | None = None
    _confirm: ConfirmFn = _always_yes

    def __post_init__(self) -> None:
        if self.workspace_dir == Path():
            self.workspace_dir = self.repo_dir

    def progress(self, message: str, fraction: float | None = None) -> None:
        """Report progress; it becomes a `tool.updated` event."""
        if self._progress is not None:
            self._progress(message, fraction)

    async def confirm(self, question: str) -> bool:
        """Ask the user (through the approval flow); True when they approve."""
        return await self._confirm(question)

    def confirm_sync(self, question: str) -> bool:
        """`confirm` for sync tools, which run in a worker thread."""
        async def ask() -> bool:
            return await self._confirm(question)

        return anyio.from_thread.run(ask)


ToolOutput = ToolResult | str | dict[str, Any]
ArgsT = TypeVar("ArgsT", bound=BaseModel)


class Tool(ABC, Generic[ArgsT]):
    """Base of every tool. Subclasses set the metadata and implement `run`."""

    name: str
    description: str
    args_model: type[ArgsT]
    label: str = ""
    kind: ClassVar[str] = "builtin"
    source: ToolSource = "builtin"
    file: Path | None = None
    variables: tuple[VariableSpec, ...] = ()
    default_approval: Approval = "allow"
    timeout_s: float | None = None
    """Seconds a call may run; None uses the `tools.timeout_s` setting (squad tools: no limit)."""
    squad_tool: bool = False
    """Squad tools have their results capped at `tools.squad_result_bytes`."""

    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, as the model and MCP clients see it."""
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def spec(self) -> ToolSpec:
        """The tool as the model sees it, built once per tool object (schemas are costly)."""
        cached: ToolSpec | None = self.__dict__.get("_spec")
        if cached is None:
            cached = ToolSpec(name=self.name, description=self.description,
                              parameters=self.parameters_schema())
            self.__dict__["_spec"] = cached
        return cached

    @abstractmethod
    async def run(self, args: ArgsT, ctx: ToolContext) -> ToolOutput:
        """Do the work; raise or return a failure `ToolResult` on error (the invoker catches)."""


class ToolSet:
    """The tools one session may call, by name, in a stable order."""

    def __init__(self, tools: Iterable[Tool[Any]] = ()):
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool[Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self._tools.values()]

    def narrowed(self, allowed: Iterable[str] | None) -> ToolSet:
        """Only the tools matching one of `allowed` (names or globs); None keeps all."""
        if allowed is None:
            return self
        patterns = list(allowed)
        return ToolSet(
            tool for tool in self._tools.values()
            if any(fnmatch.fnmatchcase(tool.name, p) for p in patterns)
        )

    def merged(self, other: Iterable[Tool[Any]]) -> ToolSet:
        """This set plus `other`; on the same name this set's tool wins."""
        combined = dict(self._tools)
        for tool in other:
            combined.setdefault(tool.name, tool)
        return ToolSet(combined.values())
