"""Workspace cost on a repository of 10,000 files: a worktree session and a landing.

Times (p50 of N runs) (1) a route with `isolation = "worktree"` and a one-turn replay model:
the session gets its worktree, runs and its (empty) end is committed. "create" is the usual
case, a spare worktree ready (`workspace.spares = 1`: the benchmark waits for the background
maker before each route, as a route arriving after the last one's spare was replaced would);
"cold_create" has no spare (`workspace.spares = 0`): the whole tree is checked out on the
route's path. (2) landing a one-file change that must be rebased onto a target that moved.
Beside them, the plain git commands for the same work on the same repository: `git worktree
add`, and `git rebase` + `git merge --ff-only`.

    .venv/bin/python scripts/bench/workspace.py [--runs 8] [--files 10000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_folder, percentile

from squadd.config import load_settings
from squadd.contracts.events import NullSink
from squadd.contracts.routes import RouteRequest
from squadd.providers.replay import ReplayProvider, ReplayScript, ScriptedTurn
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.workspaces import Workspaces

IDENTITY = ["-c", "user.name=Bench", "-c", "user.email=bench@example.com"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True,
                          text=True, timeout=600).stdout.strip()


def make_repo(path: Path, files: int) -> SquadLayout:
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "-b", "main")
    for n in range(files):
        folder = path / f"pkg{n // 100:03d}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{n % 100:02d}.py").write_text(f"VALUE = {n}\n" + "# filler\n" * 20)
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "start")
    layout = SquadLayout.at(init_squad(path).squad_dir)
    agent = layout.root / "agents" / "lead"
    agent.mkdir(parents=True, exist_ok=True)
    (agent / "charter.md").write_text("# lead\n\n## Identity\n- **Role:** lead\n")
    return layout


def ms(values: list[float]) -> float:
    return round(percentile(sorted(values), 0.5) * 1000, 1)


async def routes(layout: SquadLayout, runs: int, spares: int) -> tuple[list[float], list[str]]:
    """Time `runs` worktree routes; with spares, each starts once a spare is ready."""
    settings = load_settings(layout.root, overrides={"workspace": {"isolation": "worktree",
                                                                   "spares": spares}})
    provider = ReplayProvider(ReplayScript(default=[ScriptedTurn(text="done")]))
    creates: list[float] = []
    sessions: list[str] = []
    async with SquadRuntime(layout, settings, provider) as runtime:
        for _ in range(runs):
            if spares:
                assert await runtime.workspaces.refill_spares() == spares
            started = time.perf_counter()
            result = await runtime.route(RouteRequest(task="nothing", targetAgent="lead"))
            creates.append(time.perf_counter() - started)
            assert result.ok and result.workspace is not None, result.message
            sessions.append(result.session_id or "")
        await runtime.workspaces.prune()  # the spare left over
    return creates, sessions


async def squadd_side(layout: SquadLayout, runs: int
                      ) -> tuple[list[float], list[float], list[float]]:
    cold, _ = await routes(layout, runs, spares=0)
    creates, sessions = await routes(layout, runs, spares=1)
    settings = load_settings(layout.root, overrides={"workspace": {"isolation": "worktree"}})
    spaces = Workspaces(layout, settings, NullSink())
    for n, session in enumerate(sessions):  # a one-file change each, all from the same base
        record = await spaces.view(session)
        assert record is not None
        (Path(record.path) / "pkg000" / f"new{n}.py").write_text(f"NEW = {n}\n")
        await spaces.close(record, title=f"change {n}")
    lands: list[float] = []
    for session in sessions:
        started = time.perf_counter()
        landed = await spaces.land(session)
        lands.append(time.perf_counter() - started)
        assert landed.ok, landed.message
    return creates, cold, lands


def git_side(layout: SquadLayout, runs: int) -> tuple[list[float], list[float]]:
    repo = layout.repo
    base = Path(tempfile.mkdtemp(prefix="plain-", dir=repo.parent))
    creates: list[float] = []
    trees = []
    for n in range(runs):
        tree = base / f"wt{n}"
        started = time.perf_counter()
        git(repo, "worktree", "add", "--quiet", "-b", f"plain/{n}", str(tree), "main")
        creates.append(time.perf_counter() - started)
        (tree / "pkg001" / f"plain{n}.py").write_text(f"PLAIN = {n}\n")
        git(tree, "add", "--all")
        git(tree, "commit", "--quiet", "-m", f"plain {n}")
        trees.append(tree)
    lands: list[float] = []
    for tree in trees:
        started = time.perf_counter()
        git(tree, "rebase", "--quiet", "main")
        git(repo, "merge", "--ff-only", "--quiet", git(tree, "rev-parse", "HEAD"))
        lands.append(time.perf_counter() - started)
    return creates, lands


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    with bench_folder("squadd-bench-ws-") as folder:
        layout = make_repo(Path(folder) / "repo", args.files)
        creates, cold, lands = anyio.run(squadd_side, layout, args.runs)
        plain_creates, plain_lands = git_side(layout, args.runs)
    create, cold_create, land = ms(creates), ms(cold), ms(lands)
    plain_create, plain_land = ms(plain_creates), ms(plain_lands)
    print(f"repo of {args.files} files, {args.runs} runs each (p50)", file=sys.stderr)
    print(f"workspace create_p50_ms={create} cold_create_p50_ms={cold_create} "
          f"land_p50_ms={land} git_create_p50_ms={plain_create} git_land_p50_ms={plain_land} "
          f"create_ratio={create / plain_create:.2f} land_ratio={land / plain_land:.2f}")


if __name__ == "__main__":
    main()
