"""One soak run: a real daemon (`max_concurrent=8`) against the chaos model server, clients on
HTTP, the CLI and MCP routing tasks, the daemon SIGKILLed and restarted at random moments with its
interrupted sessions resumed, `squadd scribe` passes beside the daemon's own Scribe, then a clean
stop, a final Scribe pass and every invariant. `run_soak` returns the summary and the checks.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil

from squadd.contracts.sessions import LIVE_STATES
from squadd.daemon.client import AsyncDaemonClient
from squadd.daemon.wire import DaemonRequestError
from squadd.state.layout import SquadLayout
from tests.reliability import invariants, workspace_invariants
from tests.reliability.invariants import Check, RssSample
from tests.reliability.soak_clients import (
    CliChannel,
    HttpChannel,
    Ledger,
    mcp_channel,
    run_client,
)
from tests.reliability.soak_setup import CONFIG, READ_TIMEOUT_S, around_repo, prepare
from tests.support.chaos_server import ChaosServer
from tests.support.chaos_workspace import BASH_PAUSE_S
from tests.support.daemon_process import DaemonProcess

AGENTS = ("lead", "backend", "tester")
SETTLE_BOUND_S = 120.0
RESTART_BOUND_S = 90.0
"""How long a restarted daemon may take to answer: its start-up reads the tail of every
transcript (over 2,000 late in the full run), and CI machines are busy."""
AIM_BOUND_S = 30.0
"""How long an aimed kill waits for a `bash` call to be handed out before it kills anyway."""
@dataclass(frozen=True)
class SoakPlan:
    name: str
    tasks: int
    http_clients: int
    cli_clients: int
    mcp_clients: int
    kills: int
    warmup_tasks: int
    """Tasks a daemon process finishes before its RSS is taken as the warm baseline."""
    graceful_restarts: int = 0
    """SIGTERM stops under load (the daemon's graceful stop), besides the kills."""
    aimed_kills: int = 0
    """Of the kills, those that fall just after the model handed out a `bash` call (its
    command is then likely running): the rest fall anywhere."""
    scribe_every_s: float = 20.0
    seed: int = 8


@dataclass
class _Daemon:
    """One daemon process of the run, and its RSS."""

    index: int
    pid: int
    started_at_task: int
    warm: int | None = None
    end: int | None = None


@dataclass
class _Run:
    """One run's state, and what drives it: the stops, the Scribe beside, the clients, the end."""

    plan: SoakPlan
    daemon: DaemonProcess
    chaos: ChaosServer
    ledger: Ledger
    rng: random.Random
    processes: list[_Daemon] = field(default_factory=list)
    kills: int = 0
    graceful_exits: list[int] = field(default_factory=list)
    stops: list[dt.datetime] = field(default_factory=list)
    """When each stopped daemon was known to be gone (wall clock, as transcripts stamp)."""
    aimed: Counter[str] = field(default_factory=Counter)
    resumed: Counter[str] = field(default_factory=Counter)
    scribe_passes: int = 0

    @property
    def layout(self) -> SquadLayout:
        return self.daemon.layout

    def squadd_command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "squadd", *args]

    # The daemon's lives.
    def started(self) -> None:
        self.processes.append(_Daemon(len(self.processes), self.daemon.pid,
                                      self.ledger.finished))

    def rss(self) -> int | None:
        try:
            return int(psutil.Process(self.daemon.pid).memory_info().rss)
        except psutil.Error:
            return None

    async def watch_warmup(self, done: anyio.Event) -> None:
        """Take each daemon process's RSS once it has finished `plan.warmup_tasks` tasks."""
        while not done.is_set():
            current = self.processes[-1]
            if current.warm is None and \
                    self.ledger.finished - current.started_at_task >= self.plan.warmup_tasks:
                current.warm = self.rss()
            await anyio.sleep(0.2)

    async def stop_at_random_moments(self, done: anyio.Event) -> None:
        """SIGKILL the daemon (and, if planned, SIGTERM it) at random points of the run, start
        it again, and resume what it interrupted."""
        total = self.plan.tasks
        aimed = min(self.plan.aimed_kills, self.plan.kills)
        stops = ["aimed"] * aimed + ["kill"] * (self.plan.kills - aimed) + \
            ["term"] * self.plan.graceful_restarts
        points = sorted((self.rng.randint(int(total * 0.15), int(total * 0.85)), how)
                        for how in stops)
        for point, how in points:
            while True:  # by progress, not time: the moment falls anywhere in a task's life
                if done.is_set():
                    return
                if self.ledger.finished >= point:
                    break
                await anyio.sleep(0.05)
            if how == "aimed":
                await self.just_after_a_bash_call()
            else:
                await anyio.sleep(self.rng.uniform(0.0, 1.5))
            self.processes[-1].end = self.rss()
            if how == "term":
                code = await anyio.to_thread.run_sync(self.daemon.stop)
                self.graceful_exits.append(code)
            else:
                await anyio.to_thread.run_sync(self.daemon.kill)
                self.kills += 1
            self.stops.append(dt.datetime.now(dt.UTC))
            self.chaos.begin_epoch()
            await anyio.sleep(self.rng.uniform(0.3, 1.5))  # clients find no daemon meanwhile
            await anyio.to_thread.run_sync(self.daemon.start, RESTART_BOUND_S)
            self.started()
            await self.resume_interrupted()

    async def just_after_a_bash_call(self) -> None:
        """Return a moment after the model next hands out a `bash` call (within its command's
        pause), or after `AIM_BOUND_S` when none comes."""
        seen = self.chaos.handed_out("bash")
        hit = await anyio.to_thread.run_sync(self.chaos.wait_handed_out, "bash", seen,
                                             AIM_BOUND_S)
        self.aimed["after_bash" if hit else "unaimed"] += 1
        if hit:
            await anyio.sleep(self.rng.uniform(0.05, BASH_PAUSE_S * 0.6))

    async def resume_interrupted(self) -> int:
        """Resume every interrupted session, two over HTTP for one with the CLI."""
        async with AsyncDaemonClient(self.layout) as client:
            report = await client.status()
            interrupted = [s["session_id"] for s in report["sessions"]
                           if s["state"] == "interrupted"]
            for n, session_id in enumerate(interrupted):
                if n % 3 == 2:
                    done = await anyio.run_process(
                        self.squadd_command("sessions", "resume", session_id, "--no-wait",
                                            "--json"),
                        cwd=self.layout.repo, env=self.daemon.env, check=False)
                    ok = json.loads(done.stdout or b"{}").get("ok") is True
                    self.resumed["cli" if ok else "cli_refused"] += 1
                    continue
                try:
                    result = await client.resume(session_id, wait=False)
                except DaemonRequestError as exc:
                    result = {"ok": False, "reason": str(exc)}
                self.resumed["http" if result.get("ok") else "http_refused"] += 1
        return len(interrupted)

    async def run_scribe_beside(self, done: anyio.Event) -> None:
        """`squadd scribe` passes while the daemon's own Scribe merges: they share its lock."""
        while not done.is_set():
            with anyio.move_on_after(self.plan.scribe_every_s):
                await done.wait()
            if done.is_set():
                return
            result = await anyio.run_process(self.squadd_command("scribe", "--json"),
                                             cwd=self.layout.repo, env=self.daemon.env,
                                             check=False)
            if result.returncode != 0:
                raise AssertionError(f"squadd scribe failed during the run: "
                                     f"{result.stderr.decode()[-2000:]}")
            self.scribe_passes += 1

    # The clients.
    async def run_clients(self) -> None:
        plan, env, layout = self.plan, self.daemon.env, self.layout

        async def http(index: int) -> None:
            async with AsyncDaemonClient(layout) as client:
                await run_client(HttpChannel(client), self.ledger, AGENTS,
                                 random.Random(f"{plan.seed}|http|{index}"))

        async def cli(index: int) -> None:
            async with AsyncDaemonClient(layout) as client:
                await run_client(CliChannel(client, env), self.ledger, AGENTS,
                                 random.Random(f"{plan.seed}|cli|{index}"))

        async def mcp(index: int) -> None:
            async with mcp_channel(layout, env) as channel:
                await run_client(channel, self.ledger, AGENTS,
                                 random.Random(f"{plan.seed}|mcp|{index}"))

        async with anyio.create_task_group() as group:
            for kind, count in ((http, plan.http_clients), (cli, plan.cli_clients),
                                (mcp, plan.mcp_clients)):
                for index in range(count):
                    group.start_soon(kind, index)

    # The end.
    async def settle(self) -> None:
        """Wait until no session has a task in hand, resuming what is interrupted (bounded)."""
        last: dict[str, Any] = {}
        with anyio.move_on_after(SETTLE_BOUND_S):
            for _ in range(10):
                await self._until_idle(last)
                if await self.resume_interrupted() == 0:
                    return
        live = [(s["session_id"], s["agent"], s["state"], s["task"][:60])
                for s in last.get("sessions", []) if s["state"] in LIVE_STATES]
        raise AssertionError(f"the daemon did not settle within {SETTLE_BOUND_S:g}s: pool "
                             f"{last.get('pool')}, sessions with a task in hand: {live[:20]}")

    async def _until_idle(self, last: dict[str, Any]) -> None:
        async with AsyncDaemonClient(self.layout) as client:
            while True:
                last.update(await client.status())
                pool = last["pool"]
                live = [s for s in last["sessions"] if s["state"] in LIVE_STATES]
                if not live and pool["running"] == pool["queued"] == pool["waiting"] == 0:
                    return
                await anyio.sleep(0.2)

    async def pool_problems(self) -> list[str]:
        async with AsyncDaemonClient(self.layout) as client:
            health = await client.health()
        return [str(problem) for problem in health.get("pool_problems", ["not reported"])]

    async def views(self) -> dict[str, dict[str, Any] | None]:
        found: dict[str, dict[str, Any] | None] = {}
        async with AsyncDaemonClient(self.layout) as client:
            for session_id in self.ledger.accepted:
                try:
                    found[session_id] = (await client.session(session_id,
                                                              transcript=False))["session"]
                except DaemonRequestError as exc:
                    if exc.status != 404:
                        raise
                    found[session_id] = None
        return found


async def run_soak(plan: SoakPlan, tmp_path: Path) -> tuple[dict[str, Any], list[Check]]:
    """Run `plan` in `tmp_path`; the summary and the checks (not asserted yet)."""
    started = time.monotonic()
    with ChaosServer(seed=plan.seed, agents=AGENTS, read_timeout_s=READ_TIMEOUT_S) as chaos:
        daemon = DaemonProcess.in_new_repo(tmp_path, chaos.url, config=CONFIG, agents=AGENTS)
        prepare(daemon.layout, tmp_path)
        beside = around_repo(tmp_path, daemon.log_path)
        run = _Run(plan, daemon, chaos, Ledger(total=plan.tasks),
                   random.Random(f"{plan.seed}|run"))
        try:
            await anyio.to_thread.run_sync(daemon.start)
            run.started()
            done = anyio.Event()
            async with anyio.create_task_group() as group:
                group.start_soon(run.stop_at_random_moments, done)
                group.start_soon(run.watch_warmup, done)
                group.start_soon(run.run_scribe_beside, done)
                await run.run_clients()
                done.set()
            clients_s = time.monotonic() - started
            await run.settle()
            views = await run.views()
            pool_problems = await run.pool_problems()
            run.processes[-1].end = run.rss()
            stopped_with = await anyio.to_thread.run_sync(daemon.stop)
        finally:
            daemon.close()
        stop_check = invariants.run_dir_clean(daemon.layout)
        if stopped_with != 0:
            stop_check.failures.append(f"the clean stop (SIGTERM) exited {stopped_with}")
        final = await anyio.run_process(run.squadd_command("scribe", "--json"),
                                        cwd=daemon.layout.repo, env=daemon.env, check=False)
        if final.returncode != 0:
            raise AssertionError(f"the final squadd scribe failed: {final.stderr.decode()}")
        transcripts = invariants.load_transcripts(daemon.layout)
        checks = [
            invariants.routes_ended(run.ledger.accepted, views, transcripts),
            invariants.transcripts_well_formed(transcripts),
            invariants.call_ids_unique(transcripts),
            invariants.stalls_stopped(transcripts),
            invariants.pool_consistent(pool_problems),
            invariants.decisions_once(daemon.layout, transcripts),
            invariants.learnings_once(daemon.layout, transcripts),
            workspace_invariants.workspace_files_whole(daemon.layout, transcripts),
            workspace_invariants.calls_cut_reported(transcripts, run.stops, tools=None),
            workspace_invariants.outside_untouched(
                beside, around_repo(tmp_path, daemon.log_path), transcripts),
            invariants.retries_respected(chaos.records),
            invariants.no_processes_left(tmp_path),
            stop_check,
            invariants.rss_bounded([RssSample(p.index, p.pid, p.warm, p.end)
                                    for p in run.processes]),
            _clients_check(run),
        ]
        root = daemon.layout.root
        summary = _summary(run, checks, transcripts_count=len(transcripts),
                           temp_files=sorted(str(p.relative_to(root)) for p in root.rglob("*.tmp")),
                           final_scribe=json.loads(final.stdout),
                           clients_s=clients_s, total_s=time.monotonic() - started)
    out = tmp_path / f"soak-{plan.name}.json"
    out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary, checks


def _clients_check(run: _Run) -> Check:
    """Every task was accepted, every kill planned happened, and the clients could wait."""
    ledger = run.ledger
    check = Check("every task accepted within its bound; every planned stop survived",
                  checked=ledger.total)
    check.failures += [f"{task} was never accepted" for task in ledger.not_accepted]
    if run.kills != run.plan.kills:
        check.failures.append(f"{run.kills} of {run.plan.kills} planned kills happened")
    if len(run.graceful_exits) != run.plan.graceful_restarts or any(run.graceful_exits):
        check.failures.append(f"graceful stops under load exited {run.graceful_exits}; "
                              f"{run.plan.graceful_restarts} planned, each to exit 0")
    check.notes = {"lost_while_waiting": ledger.lost[:20]}
    return check


def _summary(run: _Run, checks: list[Check], *, transcripts_count: int, temp_files: list[str],
             final_scribe: dict[str, Any], clients_s: float, total_s: float) -> dict[str, Any]:
    ledger = run.ledger
    faults = run.chaos.fault_counts()
    clean = faults.pop("none", 0)
    return {
        "plan": asdict(run.plan),
        "duration_s": round(total_s, 1),
        "clients_duration_s": round(clients_s, 1),
        "tasks": {"requested": ledger.total, "accepted": len(ledger.accepted),
                  "by_entry_point": dict(ledger.by_entry),
                  "waited_outcomes": dict(ledger.outcomes),
                  "daemon_down_retries": ledger.daemon_down,
                  "resubmitted_after_broken_call": ledger.ambiguous,
                  "refused": dict(ledger.refused)},
        "sessions": transcripts_count,
        "model_requests": clean + sum(faults.values()),
        "clean_answers": clean,
        "faults_injected": faults,
        "kills_survived": run.kills,
        "aimed_kills": dict(run.aimed),
        "graceful_restarts": len(run.graceful_exits),
        "resumed": dict(run.resumed),
        "scribe_passes_beside_daemon": run.scribe_passes,
        "final_scribe": {k: final_scribe.get(k) for k in ("merged", "skipped", "archived")},
        "temp_files_left_by_kills": temp_files[:20],
        "rss_mib": [{"daemon": p.index, "warm": _mib(p.warm), "end": _mib(p.end)}
                    for p in run.processes],
        "invariants": [check.summary() for check in checks],
    }


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / 2**20, 1)

