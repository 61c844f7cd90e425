"""Work that lands by itself, end to end over real HTTP, on a real multi-module Python package with
a pytest suite and a red main.

Agents are scripted turn by turn by the test suite's OpenAI-compatible server on 127.0.0.1 and
edit the package with their workspace tools in their own worktrees. `land = "auto"`, the land
check is the real pytest writing a JUnit report, and the policy is `no-new-failures`: three
parallel fixes land one by one while main is still red; a change that breaks a passing test is
refused (the route's result names the test) and, its repair turns spent, waits for a person; a
conflict goes back to its agent, whose follow-up turn resolves the markers, and lands.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest, RouteResult
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from tests.runtime.scripted import make_squad, settings
from tests.support.model_servers import OpenAIServer, Reply
from tests.workspaces.conftest import git

pytestmark = pytest.mark.slow

AGENTS = ("area", "perimeter", "volume", "breaker", "left", "right")
PROJECT = {
    ".gitignore": "__pycache__/\n*.pyc\n",
    "geometry/__init__.py": '"""Shapes: areas, perimeters, volumes and units."""\n',
    "geometry/area.py": "def square(side):\n    return side * side + 1\n\n\n"
                        "def rectangle(w, h):\n    return w * h\n",
    "geometry/perimeter.py": "def square(side):\n    return 4 * side + 1\n",
    "geometry/volume.py": "def cube(side):\n    return side * side\n",
    "geometry/units.py": "def to_cm(metres):\n    return metres * 100\n",
    "geometry/names.py": 'GREETING = "hello"\n',
    "tests/__init__.py": "",
    "tests/test_area.py": "from geometry import area\n\n\ndef test_square():\n"
                          "    assert area.square(3) == 9\n\n\ndef test_rectangle():\n"
                          "    assert area.rectangle(2, 3) == 6\n",
    "tests/test_perimeter.py": "from geometry import perimeter\n\n\ndef test_square():\n"
                               "    assert perimeter.square(3) == 12\n",
    "tests/test_volume.py": "from geometry import volume\n\n\ndef test_cube():\n"
                            "    assert volume.cube(2) == 8\n",
    "tests/test_units.py": "from geometry import units\n\n\ndef test_to_cm():\n"
                           "    assert units.to_cm(2) == 200\n",
    "tests/test_names.py": "from geometry import names\n\n\ndef test_greeting():\n"
                           "    assert names.GREETING.startswith('h')\n",
}
FIXES = {  # agent: (path, old, new)
    "area": ("geometry/area.py", "side * side + 1", "side * side"),
    "perimeter": ("geometry/perimeter.py", "4 * side + 1", "4 * side"),
    "volume": ("geometry/volume.py", "side * side\n", "side * side * side\n"),
}
UNITS_TEST = "tests.test_units::test_to_cm"
REPAIR_OPENING = "squadd could not land"
Step = Callable[[list[str]], Reply]


def _squad(tmp_path: Path) -> SquadLayout:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    git(repo, "config", "user.name", "Repo Owner")
    git(repo, "config", "user.email", "owner@example.com")
    for name, text in PROJECT.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    layout = make_squad(repo, AGENTS)
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "geometry: a package with three bugs")
    return layout


def _settings(url: str) -> Settings:
    config = settings(session_max_turns=20, max_concurrent=4)
    check = f"{sys.executable} -m pytest -q -p no:cacheprovider --junitxml={{report}}"
    return config.model_copy(update={
        "provider": config.provider.model_copy(update={
            "kind": "openai", "base_url": url, "model": "test-model"}),
        "workspace": config.workspace.model_copy(update={
            "isolation": "worktree", "land": "auto", "land_check": check,
            "land_check_report": "{report}", "spares": 0}),
    })


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else str(content)


class Script:
    """Answers each agent's turns from its steps; a repair turn (its last user message is
    squadd's repair prompt) from its repair steps. Every repair prompt is kept."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Step]] = {}
        self.repairs: dict[str, list[Step]] = {}
        self.repair_prompts: dict[str, list[str]] = {}
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        task, last = _content(messages[users[0]]), _content(messages[users[-1]])
        agent = next(a for a in self.steps if f"[{a}]" in task)
        repairing = last.startswith(REPAIR_OPENING)
        steps = self.repairs[agent] if repairing else self.steps[agent]
        since = messages[users[-1]:]
        if repairing and len(since) == 1:
            with self.lock:
                self.repair_prompts.setdefault(agent, []).append(last)
        results = [_content(m) for m in since if m["role"] == "tool"]
        done = sum(1 for m in since if m["role"] == "assistant")
        return steps[min(done, len(steps) - 1)](results)


def edit(path: str, old: str, new: str) -> Step:
    return lambda results: OpenAIServer.tool_call_turn(("edit", {"path": path, "old": old,
                                                                 "new": new}))


def write(path: str, content: str) -> Step:
    return lambda results: OpenAIServer.tool_call_turn(("write", {"path": path,
                                                                  "content": content}))


def answer(text: str) -> Step:
    def step(results: list[str]) -> Reply:
        assert all("[exit code" not in r or r.endswith("[exit code 0]") for r in results)
        return OpenAIServer.text_turn(text)
    return step


async def _route(runtime: SquadRuntime, agent: str, task: str) -> RouteResult:
    with anyio.fail_after(300):
        return await runtime.route(RouteRequest(target_agent=agent, task=f"[{agent}] {task}",
                                                requested_by="cli"))


async def test_three_fixes_land_on_a_red_main_and_a_breaking_change_is_refused(
        tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    repo = layout.repo
    start = git(repo, "rev-parse", "main")
    script = Script()
    for agent, (path, old, new) in FIXES.items():
        script.steps[agent] = [edit(path, old, new),
                               answer(f"Fixed {agent}: {path} computed the wrong value.\n\n"
                                      f"commit_message: Fix the {agent} of a shape")]
    script.steps["breaker"] = [edit("geometry/units.py", "metres * 100", "metres * 10"),
                               answer("Changed to_cm to decimetres.")]
    script.repairs["breaker"] = [answer("I cannot see how to keep both; leaving it.")]

    results: dict[str, RouteResult] = {}
    with OpenAIServer(responder=script) as server:
        async with SquadRuntime.from_settings(layout, _settings(server.url)) as runtime:
            async def fix(agent: str) -> None:
                results[agent] = await _route(runtime, agent, f"fix the {agent} bug")

            async with anyio.create_task_group() as group:
                for agent in FIXES:
                    group.start_soon(fix, agent)
            after_fixes = git(repo, "rev-parse", "main")
            broken = await _route(runtime, "breaker", "express lengths in decimetres")
        assert server.errors == []

    # Three fixes landed one by one on a main that stayed red until the last one.
    for agent, result in results.items():
        assert result.ok, result.message
        assert result.landing is not None and result.landing.state == "landed", result.landing
        module = FIXES[agent][0].split("/")[1].removesuffix(".py")
        assert result.landing.fixed == [f"tests.test_{module}::test_"
                                        + ("square" if agent != "volume" else "cube")]
        assert result.landing.broke == []
    subjects = git(repo, "log", "--format=%s", f"{start}..{after_fixes}").splitlines()
    assert sorted(subjects) == sorted(f"Fix the {agent} of a shape" for agent in FIXES)
    assert git(repo, "rev-list", "--merges", "main") == ""
    for path, _, new in FIXES.values():
        assert new.strip() in git(repo, "show", f"{after_fixes}:{path}")
    trailers = git(repo, "log", "--format=%(trailers:key=Squad-Agent,valueonly)",
                   f"{start}..{after_fixes}").split()
    assert sorted(trailers) == sorted(FIXES)
    assert set(git(repo, "log", "--format=%cn <%ce>", f"{start}..{after_fixes}").splitlines()) \
        == {"Repo Owner <owner@example.com>"}

    # The fourth change breaks a passing test: refused, named, main unchanged; its agent had
    # its repair turns, shown the failing test, then the session waits for a person.
    assert git(repo, "rev-parse", "main") == after_fixes
    assert broken.ok, broken.message  # the agent's task itself completed
    assert broken.landing is not None and broken.landing.state == "check_failed"
    assert broken.landing.broke == [UNITS_TEST]
    assert UNITS_TEST in broken.landing.detail
    assert broken.landing.next and f"squadd land {broken.session_id}" in broken.landing.next
    assert broken.workspace is not None and broken.workspace.state == "needs_attention"
    prompts = script.repair_prompts["breaker"]
    assert len(prompts) == 2 and all(UNITS_TEST in p for p in prompts)
    assert "repair turn 1 of 2" in prompts[0] and "repair turn 2 of 2" in prompts[1]
    assert Path(broken.workspace.path).is_dir()  # its work is kept for the person


async def test_a_conflict_goes_back_to_the_agent_and_its_resolution_lands(
        tmp_path: Path) -> None:
    layout = _squad(tmp_path)
    repo = layout.repo
    script = Script()
    left_landed = threading.Event()
    right_started = threading.Event()

    def left_waits(results: list[str]) -> Reply:
        assert right_started.wait(120)  # both worktrees start from the same main
        return edit("geometry/names.py", '"hello"', '"hello, world"')(results)

    def right_waits(results: list[str]) -> Reply:
        right_started.set()
        assert left_landed.wait(120)  # left lands first: right's edit now conflicts
        return edit("geometry/names.py", '"hello"', '"hi"')(results)

    def left_answers(results: list[str]) -> Reply:
        return OpenAIServer.text_turn("Greeting now says hello, world.")

    script.steps["left"] = [left_waits, left_answers]
    script.steps["right"] = [right_waits, answer("Shortened the greeting to hi.")]
    script.repairs["right"] = [write("geometry/names.py", 'GREETING = "hi, world"\n'),
                               answer("Resolved: kept the world and the shorter hi.")]

    with OpenAIServer(responder=script) as server:
        async with SquadRuntime.from_settings(layout, _settings(server.url)) as runtime:
            found: dict[str, RouteResult] = {}

            async def run(agent: str, task: str) -> None:
                found[agent] = await _route(runtime, agent, task)
                if agent == "left":
                    left_landed.set()

            async with anyio.create_task_group() as group:
                group.start_soon(run, "left", "greet the world")
                group.start_soon(run, "right", "shorten the greeting")
        assert server.errors == []

    left, right = found["left"], found["right"]
    assert left.landing is not None and left.landing.state == "landed"
    [prompt] = script.repair_prompts["right"]
    assert "geometry/names.py" in prompt and "<<<<<<<" in prompt and ">>>>>>>" in prompt
    assert right.landing is not None and right.landing.state == "landed", right.landing
    assert git(repo, "show", "main:geometry/names.py") == 'GREETING = "hi, world"'
    assert (repo / "geometry" / "names.py").read_text() == 'GREETING = "hi, world"\n'
    # One commit per session on main, the resolution squashed into right's.
    assert git(repo, "log", "-2", "--format=%s", "main").splitlines() == [
        "Shortened the greeting to hi.", "Greeting now says hello, world."]
    assert right.workspace is not None and right.workspace.state == "landed"
