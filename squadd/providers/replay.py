"""The `replay` provider plays scripted turns from a YAML or JSON file; `RecordingProvider`
writes another provider's turns into such a file.

A file is ``{"default": [turns], "agents": {"lead": [turns]}}`` (a bare list means "default").
A turn is ``{"text": ...}`` or ``{"tool_calls": [{"name": ..., "arguments": {...}}], "text": ...}``
with optional ``"usage": {"input_tokens": n, "output_tokens": n}``. The turn played for a request
is the number of assistant messages already in it, so every session replays from its start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import structlog
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from squadd.contracts.messages import Completion, Usage
from squadd.errors import ConfigError, ProviderError
from squadd.fsio import atomic_write
from squadd.providers.arguments import arguments_json, tool_call
from squadd.providers.base import CompletionRequest, Provider

log = structlog.get_logger("squadd.providers")

DEFAULT_MODEL = "replay"


class ScriptedCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """An object, or a string of JSON (which may be broken on purpose, to script a mistake)."""


class ScriptedTurn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str = ""
    tool_calls: list[ScriptedCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


class ReplayScript(BaseModel):
    """Every scripted turn: the default script and one per agent."""

    model_config = ConfigDict(extra="forbid")

    default: list[ScriptedTurn] = Field(default_factory=list)
    agents: dict[str, list[ScriptedTurn]] = Field(default_factory=dict)

    def turns_for(self, agent: str) -> list[ScriptedTurn]:
        return self.agents.get(agent, self.default) if agent else self.default


def load_script(path: Path) -> ReplayScript:
    """Read and validate a replay file; `ConfigError` names the file and what is wrong in it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"replay file {path} does not exist (provider.replay_file)",
                          key="provider.replay_file", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"replay file {path} cannot be read: {exc}",
                          key="provider.replay_file", source=str(path)) from exc
    return parse_script(text, source=str(path), yaml_syntax=_is_yaml(path))


def parse_script(text: str, *, source: str, yaml_syntax: bool = True) -> ReplayScript:
    """Validate a replay script given as YAML (a superset of JSON) or strict JSON text."""
    try:
        data = yaml.safe_load(text) if yaml_syntax else json.loads(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise ConfigError(f"replay file {source} is not valid {'YAML' if yaml_syntax else 'JSON'}"
                          f": {exc}", source=source) from exc
    if data is None:
        data = {}
    if isinstance(data, list):
        data = {"default": data}
    try:
        return ReplayScript.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}"
            for err in exc.errors()[:10])
        raise ConfigError(f"replay file {source} is not a valid script: {problems}",
                          source=source) from None


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


class ReplayProvider:
    """Answers each turn from a script held in memory: no file I/O per call."""

    def __init__(self, script: ReplayScript, *, source: str = "(script)",
                 model: str = DEFAULT_MODEL, name: str = "replay"):
        self.name = name
        self.default_model = model
        self.source = source
        self._script = script
        # Completions are built once, and kept as JSON: each call hands out a new one the
        # caller may change, parsed in pydantic-core (a deep copy costs three times as much).
        self._built: dict[str, list[str]] = {
            "": [_completion(i, turn).model_dump_json() for i, turn in enumerate(script.default)]}
        for agent, turns in script.agents.items():
            self._built[agent] = [_completion(i, turn).model_dump_json()
                                  for i, turn in enumerate(turns)]

    @classmethod
    def from_file(cls, path: Path, *, model: str = DEFAULT_MODEL) -> ReplayProvider:
        return cls(load_script(path), source=str(path), model=model)

    async def complete(self, request: CompletionRequest) -> Completion:
        if request.agent and request.agent in self._script.agents:
            turns, who = self._built[request.agent], f"agent '{request.agent}'"
        else:
            turns, who = self._built[""], "the default script"
            if not turns and self._script.agents:
                agents = ", ".join(sorted(self._script.agents))
                raise ProviderError(
                    f"{self.name}: {self.source} has no turns for agent '{request.agent}' and "
                    f"no default script (agents scripted: {agents})", provider=self.name)
        index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(turns):
            raise ProviderError(
                f"{self.name}: {who} in {self.source} is exhausted: it has {len(turns)} "
                f"turn(s) and this conversation asks for turn {index + 1}", provider=self.name)
        completion = Completion.model_validate_json(turns[index])
        completion.model = request.model or self.default_model
        return completion

    async def aclose(self) -> None:
        return None


def _completion(index: int, turn: ScriptedTurn) -> Completion:
    calls = [tool_call(f"call_{index}_{n}", c.name, c.arguments)
             for n, c in enumerate(turn.tool_calls)]
    return Completion(text=turn.text, tool_calls=calls, usage=turn.usage,
                      stop_reason="tool_calls" if calls else "end")


class RecordingProvider:
    """Forwards every turn to `inner` and writes it into a replay file after each turn.

    A turn lands at its index in its agent's list (the number of assistant messages before
    it), so the file replays the last recorded conversation of each agent.
    """

    def __init__(self, inner: Provider, path: Path):
        self.inner = inner
        self.path = path
        self.name = inner.name
        self.default_model = inner.default_model
        self._data: dict[str, Any] = {"default": [], "agents": {}}
        if path.exists():
            existing = load_script(path)
            self._data = existing.model_dump(mode="json", exclude_defaults=True)
            self._data.setdefault("default", [])
            self._data.setdefault("agents", {})
        self._lock = anyio.Lock()

    async def complete(self, request: CompletionRequest) -> Completion:
        completion = await self.inner.complete(request)
        index = sum(1 for m in request.messages if m.role == "assistant")
        turn = _recorded_turn(completion)
        async with self._lock:
            turns: list[Any] = (self._data["agents"].setdefault(request.agent, [])
                                if request.agent else self._data["default"])
            if index < len(turns):
                del turns[index:]
            elif index > len(turns):
                log.warning("replay.record_gap", path=str(self.path), agent=request.agent,
                            turn=index, recorded=len(turns))
            turns.append(turn)
            text = _dump(self._data, yaml_syntax=_is_yaml(self.path))
            await anyio.to_thread.run_sync(atomic_write, self.path, text)
        return completion

    async def aclose(self) -> None:
        await self.inner.aclose()


def _recorded_turn(completion: Completion) -> dict[str, Any]:
    turn: dict[str, Any] = {}
    if completion.text:
        turn["text"] = completion.text
    if completion.tool_calls:
        turn["tool_calls"] = [
            {"name": c.name,
             "arguments": c.arguments if c.arguments_error is None else arguments_json(c)}
            for c in completion.tool_calls]
    if completion.usage.total:
        usage = completion.usage
        turn["usage"] = {"input_tokens": usage.input_tokens,
                         "output_tokens": usage.output_tokens,
                         **usage.model_dump(include={"cache_read_input_tokens",
                                                     "cache_creation_input_tokens"},
                                            exclude_none=True)}
    return turn or {"text": ""}


def _dump(data: dict[str, Any], *, yaml_syntax: bool) -> str:
    if yaml_syntax:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
