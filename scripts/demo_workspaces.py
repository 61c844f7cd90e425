"""Two agents work at once, each in its own git worktree, and one lands: a workspaces demo.

Makes a throwaway git repository with a squad, runs two agents in parallel on a recorded model
(no API key, no network) with `workspace.isolation = "worktree"`, each writing files through a
shell tool, then lands one with the landing queue and shows the branch history.

    .venv/bin/python scripts/demo_workspaces.py [--keep]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from squadd.config import load_settings
from squadd.contracts.events import BaseEvent
from squadd.contracts.routes import RouteRequest, RouteResult
from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedCall, ScriptedTurn
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.tools.discovery import discover_tools

WRITE_TOOL = """description: Write text to a file in the working directory
parameters:
  FILE: {type: string, description: file to write}
  TEXT: {type: string, description: its text}
bash: mkdir -p "$(dirname {FILE})" && printf '%s\\n' {TEXT} > {FILE} && echo "in $(pwd)"
"""
AGENTS = {"backend": ("Add the rate limiter", "src/limiter.py",
                      "LIMIT_PER_MINUTE = 60"),
          "tester": ("Test the rate limiter", "tests/test_limiter.py",
                     "def test_limit(): assert True")}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=You", "-c", "user.email=you@example.com",
                           *args], cwd=cwd, check=True, capture_output=True, text=True,
                          timeout=60).stdout.strip()


def setup(repo: Path) -> SquadLayout:
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    (repo / "README.md").write_text("# api\n")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "Start the project")
    layout = SquadLayout.at(init_squad(repo).squad_dir)
    for agent, (role, _, _) in AGENTS.items():
        folder = layout.root / "agents" / agent
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "charter.md").write_text(f"# {agent}\n\n## Identity\n- **Role:** {role}\n")
    (layout.root / "tools").mkdir(exist_ok=True)
    (layout.root / "tools" / "jot.yaml").write_text(WRITE_TOOL)
    return layout


def show(event: BaseEvent) -> None:
    kind = getattr(event, "type", "")
    if kind.startswith("workspace.") or kind in ("tool.completed", "agent.completed"):
        detail = {k: v for k, v in event.model_dump().items()
                  if k in ("branch", "diffstat", "target", "new_tip", "output", "tool")}
        print(f"  {kind:<20} {event.agent or '':<8} {detail}")


async def main(keep: bool) -> None:
    folder = Path(tempfile.mkdtemp(prefix="squadd-workspaces-demo-"))
    layout = setup(folder / "repo")
    print(f"repository: {layout.repo}\n")
    turns = {agent: [ScriptedTurn(tool_calls=[ScriptedCall(
                         name="jot", arguments={"FILE": path, "TEXT": body})]),
                     ScriptedTurn(text=f"{task}: done")]
             for agent, (task, path, body) in AGENTS.items()}
    provider = ReplayProvider(ReplayScript(agents=turns))
    settings = load_settings(layout.root, overrides={"workspace": {"isolation": "worktree"},
                                                   "tools": {"approvals": {"jot": "allow"}}})
    results: dict[str, RouteResult] = {}
    async with SquadRuntime(layout, settings, provider,
                            extra_tools=lambda: discover_tools(layout, settings).tools) as rt:
        rt.bus.add_listener(show)
        print("two agents at once, each in its own worktree:")

        async def route(agent: str) -> None:
            results[agent] = await rt.route(RouteRequest(task=AGENTS[agent][0],
                                                         targetAgent=agent))
        async with anyio.create_task_group() as group:
            for agent in AGENTS:
                group.start_soon(route, agent)
        print("\nworktrees:")
        for view in await rt.workspaces.listing():
            print(f"  {view.branch:<26} {view.state:<10} {view.diffstat.strip()}")
        print("\nthe user's tree is untouched:", sorted(p.name for p in layout.repo.iterdir()
                                                       if p.name not in (".git", ".squad")))
        print("\nsquadd land", results["backend"].session_id)
        landed = await rt.land(results["backend"].session_id or "")
        print(" ", landed.message)
    print("\ngit log main:")
    print("\n".join("  " + line for line in git(layout.repo, "log", "--format=%h %an: %s",
                                                 "main").splitlines()))
    print(f"\n{results['tester'].workspace.branch if results['tester'].workspace else ''} "
          f"waits: squadd land {results['tester'].session_id}")
    if not keep:
        await anyio.to_thread.run_sync(shutil.rmtree, folder)


if __name__ == "__main__":
    anyio.run(main, "--keep" in sys.argv[1:])
