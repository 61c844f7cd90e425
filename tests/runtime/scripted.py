"""Test doubles at the provider boundary, and squads to run them in.

`script()` builds a real `ReplayProvider`; `Gauge` wraps any provider to measure how many turns
run at once (and to slow them down, or crash them for one agent). `make_squad` writes real
charters into a real `.squad/` under tmp_path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from squadd.config import Settings
from squadd.contracts.events import BaseEvent, EventSink
from squadd.contracts.messages import Completion
from squadd.providers.base import CompletionRequest, Provider
from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedCall, ScriptedTurn
from squadd.runtime.prompt import file_cache
from squadd.runtime.services import Found, SessionServices
from squadd.runtime.session import AgentSession
from squadd.runtime.session_info import SessionInfo
from squadd.state.journal import GroupCommit
from squadd.state.layout import SquadLayout
from squadd.state.skills import summary_cache
from squadd.state.transcripts import FileSink, TranscriptWriter
from squadd.tools.base import ToolSet
from squadd.tools.invoke import ToolInvoker

ROUTING_MD = """# Routing

## Routing Table

| Work Type | Route To | Examples |
|-----------|----------|----------|
| Backend, APIs, database | fenster | add an endpoint, fix a slow query |
| Tests and quality | hockney | write tests for a bug fix, find flaky tests |
"""


def make_squad(repo: Path, agents: tuple[str, ...] = ("lead", "fenster", "hockney"),
               *, routing: str = ROUTING_MD) -> SquadLayout:
    root = repo / ".squad"
    (root / "decisions" / "inbox").mkdir(parents=True)
    (root / "decisions.md").write_text("# Decisions\n", encoding="utf-8")
    (root / "routing.md").write_text(routing, encoding="utf-8")
    for agent in agents:
        add_agent(SquadLayout.at(root), agent)
    return SquadLayout.at(root)


def add_agent(layout: SquadLayout, agent: str, *, tools: tuple[str, ...] | None = None,
              model: str = "auto") -> None:
    folder = layout.root / "agents" / agent
    folder.mkdir(parents=True, exist_ok=True)
    tools_section = ("\n## Tools\n" + "".join(f"- {t}\n" for t in tools)) if tools else ""
    (folder / "charter.md").write_text(
        f"# {agent}\n\n## Identity\n- **Role:** {agent} work\n\n## Model\nPreferred: {model}\n"
        + tools_section, encoding="utf-8")
    (folder / "history.md").write_text("# Project Context\n\n## Learnings\n", encoding="utf-8")


def text(answer: str, tokens: tuple[int, int] = (0, 0)) -> ScriptedTurn:
    return ScriptedTurn(text=answer, usage={"input_tokens": tokens[0],
                                            "output_tokens": tokens[1]})


def call(name: str, **arguments: Any) -> ScriptedTurn:
    return ScriptedTurn(tool_calls=[ScriptedCall(name=name, arguments=arguments)])


def script(default: list[ScriptedTurn] | None = None,
           **agents: list[ScriptedTurn]) -> ReplayProvider:
    """A replay provider: `default` turns for every agent, or per-agent turns."""
    return ReplayProvider(ReplayScript(default=default or [], agents=agents))


@dataclass
class Started:
    agent: str
    session_id: str
    task: str
    at: float


@dataclass
class Gauge:
    """Wraps a provider: counts turns running at once, sleeps `delay_s` in each, may crash."""

    inner: Provider
    delay_s: float = 0.0
    crash_agents: frozenset[str] = frozenset()
    crash_from_turn: int = 0
    """Crash the agents above from this turn on (0 = their first turn)."""
    active: int = 0
    max_active: int = 0
    turns: int = 0
    starts: list[Started] = field(default_factory=list)
    """The first turn of each task, in the order they began."""
    log: list[tuple[str, str]] = field(default_factory=list)
    """Every turn, in the order they began: (agent, role of the last message it was sent)."""
    requests: list[CompletionRequest] = field(default_factory=list)
    hold: dict[str, anyio.Event] = field(default_factory=dict)
    """Turns of a task named here ("*": of every task) wait until its event is set."""

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def default_model(self) -> str:
        return self.inner.default_model

    async def complete(self, request: CompletionRequest) -> Completion:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        self.turns += 1
        try:
            self.log.append((request.agent, request.messages[-1].role))
            self.requests.append(request)
            if request.messages[-1].role == "user":
                self.starts.append(Started(request.agent, request.session_id,
                                           request.messages[-1].content, time.monotonic()))
            task = next((m.content for m in request.messages if m.role == "user"), "")
            gate = self.hold.get(task) or self.hold.get("*")
            if gate is not None:
                await gate.wait()
            if self.delay_s:
                await anyio.sleep(self.delay_s)
            turn = sum(1 for m in request.messages if m.role == "assistant")
            if request.agent in self.crash_agents and turn >= self.crash_from_turn:
                raise RuntimeError(f"model backend exploded for {request.agent}")
            return await self.inner.complete(request)
        finally:
            self.active -= 1

    async def aclose(self) -> None:
        await self.inner.aclose()


class Recorder:
    """An event sink that keeps everything."""

    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if getattr(e, "type", "") == kind]


def settings(**pool: Any) -> Settings:
    """Default settings with `[pool]` (and `route_*` / `session_*`) overrides."""
    sections: dict[str, dict[str, Any]] = {}
    for key, value in pool.items():
        section, _, name = key.partition("_")
        if section in ("route", "session", "prompt"):
            sections.setdefault(section, {})[name] = value
        else:
            sections.setdefault("pool", {})[key] = value
    return Settings.model_validate(sections)


async def eventually(predicate: Callable[[], object], within: float = 30.0) -> None:
    """Wait until `predicate()` is true; fail the test after `within` seconds."""
    with anyio.fail_after(within):
        while not predicate():  # noqa: ASYNC110 - a test polls state it does not own
            await anyio.sleep(0.002)


def make_session(layout: SquadLayout, info: SessionInfo, provider: Provider,
                 invoker: ToolInvoker, tools: ToolSet, events: EventSink, *,
                 settings: Settings | None = None,
                 commits: GroupCommit | None = None) -> AgentSession:
    """An `AgentSession` outside a route, its records going to its transcript's file sink (made
    durable by `commits`, else each by itself: a group commit that is not running)."""
    settings = settings or Settings()
    services = SessionServices(layout, settings, provider, invoker, files=file_cache(layout),
                               summaries=summary_cache())
    sink = FileSink(TranscriptWriter(layout.transcript(info.session_id)),
                    commits if commits is not None else GroupCommit(layout))
    return AgentSession(info, services, sink=sink, events=events, tools=Found(tools))
