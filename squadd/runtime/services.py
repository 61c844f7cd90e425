"""What sessions and routes are built from: one frozen value each, made once by their owner.

`SessionServices` holds what every session of a process works with (the squad, the settings,
the provider, the tool invoker, the budgets' guard, the prompt's file caches): a `SquadRuntime`
and a cluster worker each build one. `RouteServices` adds what running a route needs in a
runtime (the bus, the pool, the orchestration log, the workspaces, the inbox, the tools and the
transcript sink factory). A mode that is absent is a null object (`NO_GUARD`,
`NO_EXTRA_TOOLS`), never None.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from squadd.config import Settings
from squadd.contracts.messages import Completion
from squadd.providers.base import CompletionRequest, Provider
from squadd.runtime.events import EventBus
from squadd.runtime.inbox import Inbox
from squadd.runtime.orchestration import OrchestrationLog
from squadd.runtime.pool import SessionPool
from squadd.runtime.session_info import SessionInfo
from squadd.statcache import StatCache
from squadd.state.layout import SquadLayout
from squadd.state.skills import SkillSummaries
from squadd.state.transcripts import FileSinks
from squadd.tools.base import Tool, ToolSet
from squadd.tools.invoke import ToolInvoker
from squadd.workspaces import Workspaces


class CallGuard(Protocol):
    """What a session asks around each model call: the budgets before it (which may park the
    session until a person allows it), the spending after it, and, when it resumes, which
    dangling tool calls a person has answered since (they run now instead of getting an
    "interrupted" stand-in)."""

    async def before_call(self, info: SessionInfo, request: CompletionRequest) -> str | None:
        """None when the call may go out (after a park, maybe); else why the session stops."""

    async def after_call(self, info: SessionInfo, request: CompletionRequest,
                         completion: Completion, message_id: str) -> float | None:
        """Count the call's spending; its cost in US dollars (None: unknown)."""

    def answered_later(self, session_id: str, call_id: str) -> bool: ...


class NoGuard:
    """No budget and no spending: every call may go out, and costs nothing known."""

    async def before_call(self, info: SessionInfo, request: CompletionRequest) -> str | None:
        return None

    async def after_call(self, info: SessionInfo, request: CompletionRequest,
                         completion: Completion, message_id: str) -> float | None:
        return None

    def answered_later(self, session_id: str, call_id: str) -> bool:
        return False


NO_GUARD = NoGuard()


class ToolSource(Protocol):
    """A session's tool set: `find` it (blocking the first time, when files must be read;
    the same set after)."""

    def find(self) -> ToolSet: ...


@dataclass(frozen=True)
class Found:
    """A tool set known before the session starts (a cluster worker's)."""

    tools: ToolSet

    def find(self) -> ToolSet:
        return self.tools


ExtraTools = Callable[[], Iterable[Tool[Any]]]
"""Tools added to the built-in ones at each session start (the custom tools on disk)."""


class CachedTools(Protocol):
    """Extra tools that can also be answered without reading a file (on the event loop).
    A session start looks for `cached` by name (a runtime Protocol check costs 10 µs)."""

    def __call__(self) -> Iterable[Tool[Any]]: ...

    def cached(self) -> Iterable[Tool[Any]]:
        """The same tools when no file must be read to find them, else `NotCached`."""
        ...


class NoExtraTools:
    """No tools beyond the built-in ones."""

    def __call__(self) -> list[Tool[Any]]:
        return []

    def cached(self) -> list[Tool[Any]]:
        return []


NO_EXTRA_TOOLS = NoExtraTools()


@dataclass(frozen=True)
class SessionServices:
    """What every session of one process works with."""

    layout: SquadLayout
    settings: Settings
    provider: Provider
    invoker: ToolInvoker
    files: StatCache[str]
    """The prompt's files (charters, histories, decisions.md), by stat signature."""
    summaries: SkillSummaries
    """The skills' index lines in the prompt, by stat signature (and the folders missing)."""
    guard: CallGuard = NO_GUARD
    """Budgets and spending around every model call."""


@dataclass(frozen=True)
class RouteServices:
    """What running a route needs besides its session's services."""

    session: SessionServices
    bus: EventBus
    pool: SessionPool
    orchestration: OrchestrationLog
    workspaces: Workspaces
    inbox: Inbox
    """Where a failed session goes, and a parked one waits."""
    sinks: FileSinks
    """Makes each transcript's one sink."""
    tools: ToolSet
    """The built-in tools every session starts from."""
    extra_tools: ExtraTools = NO_EXTRA_TOOLS
    """Added to `tools` at each session start."""

    @property
    def layout(self) -> SquadLayout:
        return self.session.layout

    @property
    def settings(self) -> Settings:
        return self.session.settings
