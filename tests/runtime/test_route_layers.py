"""A route's calls from `RouteRunner.run` go back up the layers at most twice.

One route runs in-process (the replay provider: a tool call, then an answer) under
`sys.setprofile`/`threading.setprofile`. Every call into a squadd module made on the route's
behalf (its task, and the worker threads it sends work to) is checked against the layers of
pyproject's import-linter contract: a call from a module of a lower layer into one of a higher
layer (a callback handed down, running back up) is a crossing. Each place that does it (caller
function, callee function) counts once, however often it runs.
"""

from __future__ import annotations

import contextvars
import json
import sys
import threading
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import anyio.to_thread
import pytest

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runner import RouteRunner
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
MOST_CROSSINGS = 2

_in_route: contextvars.ContextVar[bool] = contextvars.ContextVar("in_route", default=False)


def layer_of() -> dict[str, int]:
    """Each top-level module of squadd by its layer's rank (0: the highest), as pyproject's
    layers contract draws them."""
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"]
                  if c.get("type") == "layers"]
    ranks: dict[str, int] = {}
    for rank, layer in enumerate(contract["layers"]):
        for name in layer.split("|"):
            ranks[name.strip()] = rank
    return ranks


class CallFlow:
    """The upward crossings seen while tracing: (caller, callee) → how many calls."""

    def __init__(self, ranks: dict[str, int]):
        self.ranks = ranks
        self.crossings: dict[tuple[str, str], int] = {}
        self.modules: set[str] = set()
        self._lock = threading.Lock()

    def rank(self, frame: FrameType) -> tuple[str, int] | None:
        module = frame.f_globals.get("__name__", "")
        if not isinstance(module, str) or not module.startswith("squadd."):
            return None
        top = module.split(".")[1]
        rank = self.ranks.get(top)
        return None if rank is None else (module, rank)

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not _in_route.get():
            return
        callee = self.rank(frame)
        if callee is None:
            return
        self.modules.add(callee[0])
        caller_frame = frame.f_back
        while caller_frame is not None:  # the nearest squadd frame that made the call
            caller = self.rank(caller_frame)
            if caller is not None:
                break
            caller_frame = caller_frame.f_back
        else:
            return
        if caller[1] > callee[1]:  # a lower layer calls into a higher one
            key = (f"{caller[0]}.{caller_frame.f_code.co_qualname}",
                   f"{callee[0]}.{frame.f_code.co_qualname}")
            with self._lock:
                self.crossings[key] = self.crossings.get(key, 0) + 1


@pytest.fixture
def flow(monkeypatch: pytest.MonkeyPatch) -> Iterator[CallFlow]:
    """Traces the calls made from `RouteRunner.run` (its task and the threads it uses: anyio
    runs a worker thread's function in a copy of the caller's context)."""
    traced = CallFlow(layer_of())
    real_run = RouteRunner.run

    async def run(self: RouteRunner, *args: Any, **kwargs: Any) -> Any:
        token = _in_route.set(True)
        try:
            return await real_run(self, *args, **kwargs)
        finally:
            _in_route.reset(token)

    real_run_sync = anyio.to_thread.run_sync

    async def run_sync(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A worker thread made before this test (anyio keeps them) is traced too."""
        def profiled(*inner: Any) -> Any:
            sys.setprofile(traced.profile)
            try:
                return func(*inner)
            finally:
                sys.setprofile(None)
        return await real_run_sync(profiled, *args, **kwargs)

    monkeypatch.setattr(RouteRunner, "run", run)
    monkeypatch.setattr(anyio.to_thread, "run_sync", run_sync)
    threading.setprofile(traced.profile)
    sys.setprofile(traced.profile)
    try:
        yield traced
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def _settings(tmp_path: Path) -> Settings:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"default": [
        {"tool_calls": [{"name": "read", "arguments": {"path": ".squad/decisions.md"}}]},
        {"text": "done"}]}), encoding="utf-8")
    return Settings.model_validate({"provider": {"kind": "replay",
                                                 "replay_file": str(replay)}})


def _skill_and_custom_tool(layout: SquadLayout) -> None:
    """A skill for the prompt's index and a custom tool to discover: the opening reads both."""
    skill = layout.root / "skills" / "testing"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: testing\ndescription: How we test\n---\n",
                                    encoding="utf-8")
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "greet.yaml").write_text(
        "description: Says hello\ntags: [read]\nbash: echo hello\n", encoding="utf-8")


async def test_a_route_goes_back_up_the_layers_at_most_twice(
        layout: SquadLayout, tmp_path: Path, flow: CallFlow) -> None:
    _skill_and_custom_tool(layout)
    async with SquadRuntime.from_settings(layout, _settings(tmp_path)) as runtime:
        result = await runtime.route(RouteRequest(target_agent="fenster", task="read it"))
    sys.setprofile(None)
    assert result.ok, result.message
    assert result.turns == 2  # the tool call ran: the route went through the tools' layer
    transcript = read_transcript(layout.transcript(result.session_id or ""))
    assert "greet" in transcript.meta["tools"]
    assert "- testing: How we test" in transcript.messages[0]["content"]
    assert any(m.startswith("squadd.tools.") for m in flow.modules), sorted(flow.modules)
    assert any(m.startswith("squadd.state.") for m in flow.modules), sorted(flow.modules)
    crossings = "\n".join(f"{caller} -> {callee} ({count}x)"
                          for (caller, callee), count in sorted(flow.crossings.items()))
    assert len(flow.crossings) <= MOST_CROSSINGS, crossings
