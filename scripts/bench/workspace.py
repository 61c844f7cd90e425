"""Workspace cost on a repository of 10,000 files: a worktree session and a landing.

Times (p50 of N runs) (1) a route with `isolation = "worktree"` and a one-turn replay model:
the session gets its worktree, runs and its (empty) end is committed. "create" is the usual
case, a spare worktree ready (`workspace.spares = 1`: the benchmark waits for the background
maker before each route, as a route arriving after the last one's spare was replaced would);
"cold_create" has no spare (`workspace.spares = 0`): the whole tree is checked out on the
route's path. (2) landing a one-file change that must be rebased onto a target that moved.
(3) the same landing as a person types it: `squadd land SESSION` (a process of its own) with a
daemon running (it asks the daemon, which lands and answers) and without one (it lands in its
own process), each less the CLI's own start (`squadd --version`, timed beside it), and the
daemon's answer alone (the HTTP call from a client already started).
Beside them, the plain git commands for the same work on the same repository: `git worktree
add`, and `git rebase` + `git merge --ff-only`.

    .venv/bin/python scripts/bench/workspace.py [--runs 8] [--files 10000] [--cli-only]
"""

from __future__ import annotations

import argparse
import json
import os
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
from squadd.daemon.client import DaemonClient
from squadd.errors import DaemonError
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
    async with anyio.create_task_group() as tg:
        # As a daemon's runtime runs it: a landed worktree's files are deleted after the
        # landing, not while it waits (a command without a daemon deletes them at once:
        # `cli_land_local` below).
        tg.start_soon(spaces.keep_emptied)
        for session in sessions:
            started = time.perf_counter()
            landed = await spaces.land(session)
            lands.append(time.perf_counter() - started)
            assert landed.ok, landed.message
        tg.cancel_scope.cancel()
    return creates, cold, lands


async def committed_sessions(layout: SquadLayout, runs: int, tag: str) -> list[str]:
    """`runs` worktree sessions, each with a one-file change committed on its branch, all
    from the same base (so each landing after the first rebases onto a target that moved)."""
    settings = load_settings(layout.root, overrides={"workspace": {"isolation": "worktree",
                                                                   "spares": 0}})
    spaces = Workspaces(layout, settings, NullSink())
    sessions = []
    for n in range(runs):
        session = f"20260101-000000-{tag}{n:04x}"
        record = await spaces.open(session, "lead")
        assert record is not None
        (Path(record.path) / "pkg002" / f"cli{tag}{n}.py").write_text(f"CLI = {n}\n")
        await spaces.close(record, title=f"cli change {n}")
        sessions.append(session)
    return sessions


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return elapsed


def start_daemon(layout: SquadLayout, env: dict[str, str]) -> subprocess.Popen[bytes]:
    replay = layout.root / "bench-replay.json"
    replay.write_text(json.dumps({"default": [{"text": "done"}]}), encoding="utf-8")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "squadd", "serve", "--provider", "replay", "--replay-file",
         str(replay), "--log-level", "warning"], cwd=layout.repo, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    with DaemonClient(layout) as client:
        while True:
            try:
                if client.health()["pid"] == daemon.pid:
                    return daemon
            except DaemonError:
                pass
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                sys.exit("the daemon did not start")
            time.sleep(0.05)


def cli_side(layout: SquadLayout, runs: int) -> dict[str, list[float]]:
    """`squadd land` as a command, with and without a daemon, and `squadd --version` timed
    just before each; the daemon's answer alone from a client already started."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQUADD_")}
    squadd = [sys.executable, "-m", "squadd"]
    times: dict[str, list[float]] = {"version": [], "land_daemon": [], "land_local": [],
                                     "land_api": []}
    local = anyio.run(committed_sessions, layout, runs, "aa")
    for session in local:
        times["version"].append(timed([*squadd, "--version"], layout.repo, env))
        times["land_local"].append(timed([*squadd, "land", session], layout.repo, env))
    served = anyio.run(committed_sessions, layout, 2 * runs, "bb")
    daemon = start_daemon(layout, env)
    try:
        for session in served[:runs]:
            times["version"].append(timed([*squadd, "--version"], layout.repo, env))
            times["land_daemon"].append(timed([*squadd, "land", session], layout.repo, env))
        with DaemonClient(layout) as client:
            for session in served[runs:]:
                started = time.perf_counter()
                answer = client.land(session)
                times["land_api"].append(time.perf_counter() - started)
                assert answer["landing"]["state"] == "landed", answer
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    return times


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
    parser.add_argument("--cli-only", action="store_true",
                        help="Only `squadd land` as a command (3), beside plain git.")
    args = parser.parse_args()
    with bench_folder("squadd-bench-ws-") as folder:
        layout = make_repo(Path(folder) / "repo", args.files)
        if not args.cli_only:
            creates, cold, lands = anyio.run(squadd_side, layout, args.runs)
        cli = cli_side(layout, args.runs)
        plain_creates, plain_lands = git_side(layout, args.runs)
    plain_create, plain_land = ms(plain_creates), ms(plain_lands)
    print(f"repo of {args.files} files, {args.runs} runs each (p50)", file=sys.stderr)
    version = ms(cli["version"])
    daemon_less = ms(cli["land_daemon"]) - version
    local_less = ms(cli["land_local"]) - version
    figures = (f"version_p50_ms={version} cli_land_p50_ms={ms(cli['land_daemon'])} "
               f"cli_land_local_p50_ms={ms(cli['land_local'])} "
               f"land_api_p50_ms={ms(cli['land_api'])} git_land_p50_ms={plain_land} "
               f"cli_land_less_start_ms={daemon_less:.1f} "
               f"cli_land_local_less_start_ms={local_less:.1f} "
               f"cli_land_ratio={daemon_less / plain_land:.2f} "
               f"cli_land_local_ratio={local_less / plain_land:.2f}")
    if args.cli_only:
        print(f"workspace_cli {figures}")
        return
    # One last line (scripts/bench/report.py reads it).
    create, cold_create, land = ms(creates), ms(cold), ms(lands)
    print(f"workspace create_p50_ms={create} cold_create_p50_ms={cold_create} "
          f"land_p50_ms={land} git_create_p50_ms={plain_create} "
          f"create_ratio={create / plain_create:.2f} land_ratio={land / plain_land:.2f} "
          f"{figures}")

if __name__ == "__main__":
    main()
