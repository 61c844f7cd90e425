"""Scripted Squad agents for the chaos model server: from a chat-completions request, which agent
is asked about which task at which turn, and what it does next.

A conversation's plan (decide, remember, call a custom tool, route to another agent, collect a
no-wait route's answer, work on a file with the built-in workspace tools (`chaos_workspace`),
then answer) is drawn from the seed and the task id. The steps already
taken are read back from the tool-call ids in the conversation, so a retried or resumed turn
takes the same next step, and a step whose call was cut off by a crash is never taken twice.
Task texts carry `[task ID chain a>b]`: the id makes every decision and learning unique, the
chain keeps routes within `route.max_depth` and out of cycles.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from tests.support.chaos_workspace import ESCAPE, SCENE, invalid_calls, scene_calls
from tests.support.model_servers import ToolCallSpec

SYSTEM_RE = re.compile(r"^You are ([a-z0-9][a-z0-9._-]*), a Squad agent")
TASK_RE = re.compile(r"\[task (?P<id>[A-Za-z0-9][A-Za-z0-9.-]*) chain (?P<chain>[a-z0-9._>-]+)\]")
STEP_ID_RE = re.compile(r"-s(\d+)-\d+$")
SPAWNED_RE = re.compile(r"spawned with session ([A-Za-z0-9][A-Za-z0-9_-]*)")
MAX_TURNS = 16
"""A conversation answers at this turn whatever its plan says (session.max_turns is 30)."""
DECISION_CATEGORIES = ("architecture", "process", "security", "feature", "team", "general")
LEARNING_CATEGORIES = ("technical", "process", "architecture", "team", "general")
_PHRASES = ("cache the charter parse", "keep transcripts append-only", "fsync before rename",
            "bound every queue", "retry only 429 and 5xx", "prefer small modules",
            "name things in the Squad's words", "test with real sockets",
            "shield the last transcript line", "never block the event loop")


def task_text(task_id: str, chain: tuple[str, ...], what: str) -> str:
    """A task the chaos agents understand."""
    return f"[task {task_id} chain {'>'.join(chain)}] {what}"


def decision_title(task_id: str, step: int) -> str:
    return f"Soak decision {task_id} s{step}"


@dataclass(frozen=True)
class Behaviour:
    """Chances that a conversation's plan holds each kind of step, and of tool faults per turn."""

    decide: float = 0.6
    remember: float = 0.6
    pair: float = 0.15
    """A decision and a learning in one turn (two tool calls)."""
    python_tool: float = 0.2
    python_stall: float = 0.05
    """A call of the Python tool that never ends on its own (its timeout must stop it)."""
    shell_tool: float = 0.15
    route_by_depth: tuple[float, ...] = (0.4, 0.2)
    """Chance to route, for a session at depth 1, 2, ... (none past the tuple or max_depth)."""
    route_waits: float = 0.5
    route_urgent: float = 0.1
    collect: float = 0.7
    """After a no-wait route: ask squad_status for its answer later."""
    invalid_args: float = 0.04
    unknown_tool: float = 0.03
    workspace: float = 0.2
    """Work on a file of the repository with the built-in tools (`chaos_workspace.SCENE`)."""
    escape: float = 0.3
    """Of that work: also try to write outside the repository (confinement must refuse)."""
    python_tool_name: str = "soak_note"
    stall_tool_name: str = "soak_stall"
    shell_tool_name: str = "soak_shell"


@dataclass(frozen=True)
class Step:
    kind: str
    """decide, remember, pair, python, stall, shell, route, collect, or a workspace step
    (`chaos_workspace.SCENE` and `ESCAPE`)."""
    target: str = ""
    wait: bool = True
    urgent: bool = False
    ref: int = -1
    """For collect: the index of the route step whose session it asks about."""


@dataclass(frozen=True)
class Turn:
    """What the conversation of one request says."""

    agent: str
    task_id: str
    chain: tuple[str, ...]
    number: int
    """Assistant messages so far."""
    next_step: int
    """The plan step to take now (one past the highest step already called)."""
    results: dict[str, str] = field(default_factory=dict)
    """Tool results by tool-call id."""


@dataclass(frozen=True)
class Action:
    calls: tuple[ToolCallSpec, ...] = ()
    text: str | None = None
    fault: str = ""
    """"invalid_args" or "unknown_tool" when the calls are deliberately wrong."""


class AgentScript:
    """Deterministic agents: `read` a request body into a `Turn`, then `act` on it."""

    def __init__(self, *, seed: int, agents: tuple[str, ...], behaviour: Behaviour,
                 max_depth: int):
        self.seed = seed
        self.agents = agents
        self.behaviour = behaviour
        self.max_depth = max_depth

    def read(self, body: Any) -> Turn | None:
        """The turn a request asks for; None when it is not a soak conversation."""
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list) or not messages:
            return None
        system = messages[0].get("content") if isinstance(messages[0], dict) else None
        agent = SYSTEM_RE.match(system) if isinstance(system, str) else None
        user = next((m.get("content") for m in messages
                     if isinstance(m, dict) and m.get("role") == "user"), None)
        task = TASK_RE.search(user) if isinstance(user, str) else None
        if agent is None or task is None:
            return None
        number, issued, results = 0, -1, {}
        for message in messages:
            role = message.get("role")
            if role == "assistant":
                number += 1
                for call in message.get("tool_calls") or []:
                    found = STEP_ID_RE.search(str(call.get("id", "")))
                    if found:
                        issued = max(issued, int(found.group(1)))
            elif role == "tool":
                results[str(message.get("tool_call_id"))] = str(message.get("content") or "")
        return Turn(agent=agent.group(1), task_id=task.group("id"),
                    chain=tuple(task.group("chain").split(">")), number=number,
                    next_step=issued + 1, results=results)

    def plan(self, turn: Turn) -> list[Step]:
        """The conversation's steps, the same every time it is asked."""
        rng = random.Random(f"{self.seed}|plan|{turn.task_id}")
        b = self.behaviour
        steps: list[Step] = []
        if rng.random() < b.decide:
            steps.append(Step("decide"))
        if rng.random() < b.remember:
            steps.append(Step("remember"))
        if rng.random() < b.pair:
            steps.append(Step("pair"))
        if rng.random() < b.python_tool:
            steps.append(Step("python"))
        if rng.random() < b.python_stall:
            steps.append(Step("stall"))
        if rng.random() < b.shell_tool:
            steps.append(Step("shell"))
        rng.shuffle(steps)
        depth = len(turn.chain)
        free = [a for a in self.agents if a not in turn.chain]
        chance = b.route_by_depth[depth - 1] if 0 < depth <= len(b.route_by_depth) else 0.0
        if depth < self.max_depth and free and rng.random() < chance:
            wait = rng.random() < b.route_waits
            steps.insert(rng.randint(0, len(steps)), Step(
                "route", target=rng.choice(free), wait=wait, urgent=rng.random() < b.route_urgent))
            if not wait and rng.random() < b.collect:
                steps.append(Step("collect", ref=next(i for i, s in enumerate(steps)
                                                      if s.kind == "route")))
        # Drawn apart and appended, so the rest of the plan is what it was without it.
        drawn = random.Random(f"{self.seed}|workspace|{turn.task_id}")
        if drawn.random() < b.workspace:
            scene = [Step(kind) for kind in SCENE]
            if drawn.random() < b.escape:
                scene[0] = Step(ESCAPE)
            steps += scene
        return steps

    def act(self, turn: Turn) -> Action:
        steps = self.plan(turn)
        rng = random.Random(f"{self.seed}|turn|{turn.task_id}|{turn.number}")
        index = turn.next_step
        if turn.number < MAX_TURNS and index < len(steps):
            draw = rng.random()
            if draw < self.behaviour.invalid_args:
                return Action(calls=(self._invalid(turn, rng, steps[index].kind),),
                              fault="invalid_args")
            if draw < self.behaviour.invalid_args + self.behaviour.unknown_tool:
                name = rng.choice(("squad_teleport", "deploy_everything"))
                return Action(calls=((name, {"where": "prod"}, f"{turn.task_id}-x{turn.number}"),),
                              fault="unknown_tool")
        while turn.number < MAX_TURNS and index < len(steps):
            calls = self._calls(steps, index, turn, rng)
            if calls:
                return Action(calls=calls)
            index += 1  # a step that does not apply (collect after a failed route)
        return Action(text=f"Done with {turn.task_id} as {turn.agent} after "
                           f"{turn.number} turns.")

    def _calls(self, steps: list[Step], index: int, turn: Turn,
               rng: random.Random) -> tuple[ToolCallSpec, ...]:
        step, task, agent = steps[index], turn.task_id, turn.agent
        phrase = rng.choice(_PHRASES)

        def call_id(k: int) -> str:
            return f"{task}-s{index}-{k}"

        decide: ToolCallSpec = ("squad_decide", {
            "title": decision_title(task, index), "agentName": agent,
            "body": f"{agent} decided, for {task} step {index}, to {phrase}.",
            "category": rng.choice(DECISION_CATEGORIES)}, call_id(0))
        remember: ToolCallSpec = ("squad_memory", {
            "agentName": agent, "learning": f"Soak learning {task} s{index}: {phrase}",
            "category": rng.choice(LEARNING_CATEGORIES)}, call_id(1))
        if step.kind == "decide":
            return (decide,)
        if step.kind == "remember":
            return (remember,)
        if step.kind == "pair":
            return (decide, remember)
        if step.kind == "python":
            return ((self.behaviour.python_tool_name,
                     {"text": f"note {task} s{index}", "count": 2}, call_id(0)),)
        if step.kind == "stall":
            return ((self.behaviour.stall_tool_name, {"text": f"stall {task} s{index}"},
                     call_id(0)),)
        if step.kind == "shell":
            return ((self.behaviour.shell_tool_name, {"WORD": f"w-{task}-s{index}"},
                     call_id(0)),)
        if step.kind in SCENE or step.kind == ESCAPE:
            return scene_calls(step.kind, task, f"{task}-s{index}")
        if step.kind == "route":
            child = task_text(f"{task}.{index}", (*turn.chain, step.target),
                              f"help {agent} to {phrase}")
            return (("squad_route", {
                "targetAgent": step.target, "task": child, "waitForResult": step.wait,
                "priority": "urgent" if step.urgent else "normal"}, call_id(0)),)
        routed = turn.results.get(f"{task}-s{step.ref}-0", "")
        spawned = SPAWNED_RE.search(routed)
        if spawned is None:
            return ()
        return (("squad_status", {"sessionId": spawned.group(1)}, call_id(0)),)

    def _invalid(self, turn: Turn, rng: random.Random, kind: str) -> ToolCallSpec:
        agent, call_id = turn.agent, f"{turn.task_id}-x{turn.number}"
        if kind in SCENE or kind == ESCAPE:
            name, arguments = rng.choice(invalid_calls(turn.task_id))
            return (name, arguments, call_id)
        variants: list[tuple[str, dict[str, Any] | str]] = [
            ("squad_decide", {"title": f"Soak bad {turn.task_id}", "agentName": agent}),
            ("squad_memory", {"agentName": agent, "learning": "x", "category": "bogus"}),
            ("squad_decide", '{"title": "unterminated'),
            ("squad_route", {"targetAgent": agent, "task": ""}),
            (self.behaviour.python_tool_name, {"text": "bad", "count": "many"}),
            ("squad_memory", {"agentName": agent, "learning": "x", "surprise": 1}),
        ]
        name, arguments = rng.choice(variants)
        return (name, arguments, call_id)
