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

from squadd.contracts.messages import ImagePart, ToolSpec

ToolSource = Literal["builtin", "project", "user", "extra", "cycod-project", "cycod-user",
                     "cycod-global"]
Approval = Literal["allow", "ask", "deny"]


class ToolResult(BaseModel):
    """A tool's structured result: success or failure, text for the model, and details.

    A tool may return a plain `str` (a success) or a `dict` (a success shown as JSON); it
    returns a `ToolResult` to fail without raising, or to attach details:

        from squadd import ToolResult, tool

        @tool
        def word_count(text: str) -> ToolResult:
            \"\"\"Count the words of a text.\"\"\"
            if not text.strip():
                return ToolResult.failure("the text is empty: pass some words")
            return ToolResult.success(f"{len(text.split())} words", words=len(text.split()))

    The model reads `text`; `details` go to events and API callers.
    """

    model_config = ConfigDict(frozen=True)

    result_type: Literal["success", "failure"]
    text: str
    details: dict[str, Any] = Field(default_factory=dict)
    """For events and the transcript, never sent to the model."""
    images: tuple[ImagePart, ...] = ()
    """Images for the model, sent to providers that take them (others get a short note)."""

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
    scoped: bool = False
    """Visible only to the tools that declare it: squadd hides it from every other tool's
    environment, even when it is set in the environment squadd runs in."""


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


async def _no_one_to_ask(question: str) -> bool:
    return False


@dataclass
class ToolContext:
    """What a running tool knows about its call, and what it can do besides returning.

    The pipeline builds it for each call; a tool asks for it by a parameter annotated
    `ToolContext` (or as the second argument of a tool with `args=`):

        from squadd import ToolContext, tool

        @tool
        async def deploy(target: str, ctx: ToolContext) -> str:
            \"\"\"Deploy the current build.

            Args:
                target: Where to deploy, e.g. "staging".
            \"\"\"
            ctx.progress("uploading", 0.5)
            if target == "prod" and not await ctx.confirm("Deploy to production?"):
                return "not deployed: the user said no"
            return f"deployed to {target} for {ctx.agent}"

    `confirm` goes through the approval flow, and answers no when no one can be asked.
    """

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
    workspace_dir: Path | None = None
    """The session's working copy, where the workspace tools work (None = the repository)."""
    message_id: str = ""
    """The id of the assistant message that made this call ("" for calls from outside)."""
    known_secrets: Mapping[str, str] = field(default_factory=dict)
    """Every secret value the pipeline redacts from this call's output (name -> value): a tool
    that writes output somewhere itself (a spill file) redacts it with these."""
    hidden_variables: frozenset[str] = frozenset()
    """Scoped variables of other tools: a tool that starts a process leaves them out of its
    environment."""
    _progress: ProgressFn | None = field(default=None, init=False, repr=False)
    """Set by the pipeline: where `progress` reports go."""
    _confirm: ConfirmFn = field(default_factory=lambda: _no_one_to_ask, init=False, repr=False)
    """Set by the pipeline: how `confirm` asks (the approval gate's; by default, no)."""

    @property
    def workspace(self) -> Path:
        """The folder the workspace tools are confined to: the session's or the repository."""
        return self.workspace_dir if self.workspace_dir is not None else self.repo_dir

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

    def spec_json(self) -> dict[str, Any]:
        """`spec()` as JSON data (what a cluster claim's reply carries for a squad tool),
        dumped once per tool object: shared, so not to be changed."""
        dumped: dict[str, Any] | None = self.__dict__.get("_spec_json")
        if dumped is None:
            dumped = self.__dict__["_spec_json"] = self.spec().model_dump(mode="json")
        return dumped

    async def approval_reason(self, args: ArgsT, ctx: ToolContext) -> str | None:
        """Why this call needs a person's approval whatever the approval policy says (a write
        to a file that squadd or git will execute), or None: the policy decides alone."""
        return None

    @abstractmethod
    async def run(self, args: ArgsT, ctx: ToolContext) -> ToolOutput:
        """Do the work; raise or return a failure `ToolResult` on error (the invoker catches)."""


def _matcher(patterns: list[str]) -> Callable[[str], bool]:
    """Whether a tool name matches one of `patterns` (names or globs): a plain name by a set
    lookup, only the globs through `fnmatch` (a worker narrows every job's twenty-odd tools by
    as many names: about a tenth of the time)."""
    names = {p for p in patterns if not any(c in p for c in "*?[")}
    globs = [p for p in patterns if p not in names]
    return lambda name: name in names or any(fnmatch.fnmatchcase(name, g) for g in globs)


class ToolSet:
    """The tools one session may call, by name, in a stable order.

    A set narrowed by a rule remembers the tools the rule took out and why, so that a call of
    one is refused by naming the rule rather than as an unknown tool.
    """

    def __init__(self, tools: Iterable[Tool[Any]] = (),
                 unavailable: Mapping[str, str] | None = None,
                 refused: Mapping[str, str] | None = None):
        self._tools: dict[str, Tool[Any]] = {}
        for tool in tools:
            self._tools[tool.name] = tool
        self.unavailable: dict[str, str] = {
            name: reason for name, reason in (unavailable or {}).items()
            if name not in self._tools}
        """Tools that exist but failed to load, by name, with the reason (told to a model
        that calls one, instead of a bare "unknown tool")."""
        self._refused: dict[str, str] = {
            name: why for name, why in (refused or {}).items() if name not in self._tools}

    def refusal(self, name: str) -> str | None:
        """Why `name` is not in this set when a rule took it out (None: it never was)."""
        return self._refused.get(name)

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

    def narrowed(self, allowed: Iterable[str] | None, *, rule: str = "") -> ToolSet:
        """Only the tools matching one of `allowed` (names or globs); None keeps all. `rule`
        says what allows only those (a refused call quotes it)."""
        if allowed is None:
            return self
        patterns = list(allowed)
        matches = _matcher(patterns)
        kept = [tool for tool in self._tools.values() if matches(tool.name)]
        why = rule or "only " + (", ".join(patterns) or "no tools") + " may be used here"
        refused = dict(self._refused)
        for name in self._tools:
            refused.setdefault(name, why)
        return ToolSet(kept, {name: reason for name, reason in self.unavailable.items()
                              if matches(name)}, refused)

    def merged(self, other: Iterable[Tool[Any]]) -> ToolSet:
        """This set plus `other`; on the same name this set's tool wins (tools that failed to
        load are kept from both, unless a tool of that name did load)."""
        combined = dict(self._tools)
        for tool in other:
            combined.setdefault(tool.name, tool)
        unavailable = dict(other.unavailable) if isinstance(other, ToolSet) else {}
        unavailable.update(self.unavailable)
        return ToolSet(combined.values(), unavailable, self._refused)
