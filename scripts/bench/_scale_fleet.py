"""The processes of one scale benchmark setup, and what they spent on the measured routes.

`Fleet` starts the model server (`_model_server.py`), then one daemon, or Redis, a coordinator
and its workers, each as `python -m squadd ...` in its own process with its output in a file,
and kills them all at the end. `Fleet.measure` starts the client processes, lets them warm
up, then reads every process's CPU time (psutil: user + system, children included) and Redis's
command counts just before the clients start and just after the last one is done.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

import psutil
from _common import make_squad, wait_for_line

from tests.support.daemon_process import clean_env
from tests.support.redis_server import RedisServer

HERE = Path(__file__).resolve().parent
READY_TIMEOUT_S = 120.0
IN_FLIGHT_PER_SLOT = 1.25
"""Routes kept in flight for each slot: enough that a slot never waits for a client."""
PROBES = frozenset({"profile", "syscalls"})


@dataclass(frozen=True)
class Setup:
    name: str
    workers: int
    """0: one daemon with `slots` slots; else a cluster of that many workers of `slots`."""
    slots: int

    @property
    def total_slots(self) -> int:
        return self.slots if self.workers == 0 else self.slots * self.workers


@dataclass
class Measured:
    setup: Setup
    routes: int
    elapsed_s: float
    cpu: dict[str, float]
    """CPU seconds over the measured routes, by kind of process."""
    redis_calls: dict[str, int] = field(default_factory=dict)
    """Redis commands over the measured routes, by command."""
    completions: int = 0
    """Model turns the server answered over the measured routes."""
    loop_thread: dict[str, float] = field(default_factory=dict)
    """Of `cpu`, what each squadd process's main thread (its event loop) spent, by kind."""


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Bench", "-c", "user.email=bench@example.com",
                    *args], cwd=repo, check=True, capture_output=True)


def prepare_repo(root: Path, setup: Setup, routes: int) -> Path:
    """A committed git repository with a squad, its pool sized for `setup`."""
    layout = make_squad(root / "repo")
    (layout.root / "config.toml").write_text(
        "[daemon]\ngrace_s = 1.0\n[provider]\nmax_attempts = 1\n"
        f"[pool]\nmax_concurrent = {setup.slots}\nmax_queued = {max(1000, 4 * routes)}\n",
        encoding="utf-8")
    git(layout.repo, "init", "-q")
    git(layout.repo, "add", "-A")
    git(layout.repo, "commit", "-qm", "squad")
    return layout.repo


def start_model_server(delay_s: float) -> tuple[subprocess.Popen[str], int]:
    """`_model_server.py` in its own process, and the port it listens on."""
    model = subprocess.Popen([sys.executable, str(HERE / "_model_server.py"), "--delay-ms",
                              str(delay_s * 1000)], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True)
    assert model.stdout is not None
    line = model.stdout.readline().strip()
    if not line.startswith("port="):
        model.kill()
        raise SystemExit(f"the model server did not start: {line!r}")
    return model, int(line.removeprefix("port="))


def cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


class Fleet:
    """The model server and squadd's processes for one setup."""

    def __init__(self, root: Path, setup: Setup, repo: Path, delay_s: float, *,
                 probes: Path | None = None, probe_with: frozenset[str] = PROBES):
        self.root = root
        self.setup = setup
        self.repo = repo
        self.delay_s = delay_s
        self.env = clean_env(XDG_CONFIG_HOME=str(root / "xdg"), XDG_CACHE_HOME=str(root / "xc"))
        self.probes = probes
        self.probe_with = probe_with
        """Where to write the squadd processes' profiles and system call counts over the
        measured routes (None: they are not probed, and their CPU times are the real ones)."""
        if probes is not None:
            self.env["PYTHONPATH"] += f":{HERE / '_profiling'}"
            self.env["SQUADD_BENCH_PROFILE"] = str(root / "profile")
        self.procs: dict[str, list[subprocess.Popen[Any]]] = {}
        self.redis: RedisServer | None = None
        self.model_port = 0

    # Starting and stopping.
    def __enter__(self) -> Self:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        model, self.model_port = start_model_server(self.delay_s)
        self.procs["model"] = [model]
        provider = ["--provider", "openai", "--base-url",
                    f"http://127.0.0.1:{self.model_port}/v1", "--model", "bench-model"]
        if self.setup.workers == 0:
            self._spawn("daemon", "daemon", ["serve", *provider], self.repo)
            self._wait_for("daemon", "squadd serving")
            return
        self.redis = RedisServer(self.root / "redis").start()
        assert self.redis.proc is not None
        self.procs["redis"] = [self.redis.proc]
        self._spawn("coordinator", "coordinator",
                    ["serve", "--cluster", self.redis.url, *provider], self.repo)
        self._wait_for("coordinator", "squadd serving")
        for n in range(self.setup.workers):
            self._spawn("workers", f"w{n}", [
                "worker", "--cluster", self.redis.url, "--repo", str(self.repo), "--slots",
                str(self.setup.slots), "--name", f"w{n}", "--workdir",
                str(self.root / f"clone-{n}"), *provider], self.root)
        for n in range(self.setup.workers):
            self._wait_for(f"w{n}", "worker ready")

    def _spawn(self, kind: str, name: str, argv: list[str], cwd: Path) -> None:
        with (self.root / f"{name}.out").open("ab") as log:
            self.procs.setdefault(kind, []).append(subprocess.Popen(
                [sys.executable, "-m", "squadd", *argv], cwd=cwd, env=self.env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=log))

    def _wait_for(self, name: str, text: str) -> None:
        wait_for_line(self.root / f"{name}.out", text, name, READY_TIMEOUT_S)

    def close(self) -> None:
        for kind, procs in self.procs.items():
            if kind == "redis":
                continue
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=10)
        if self.redis is not None:
            self.redis.close()

    # Measuring.
    def _snapshot(self) -> dict[str, float]:
        return {kind: sum(cpu_s(psutil.Process(p.pid)) for p in procs)
                for kind, procs in self.procs.items()}

    def _loop_snapshot(self) -> dict[str, float]:
        """CPU seconds of each squadd process's main thread, summed by kind."""
        out: dict[str, float] = {}
        for kind, pid in _squadd_kinds(self.procs):
            main = next((t for t in psutil.Process(pid).threads() if t.id == pid), None)
            if main is not None:
                out[kind] = out.get(kind, 0.0) + main.user_time + main.system_time
        return out

    def _redis_calls(self) -> dict[str, int]:
        if self.redis is None:
            return {}
        import redis

        client = redis.Redis.from_url(self.redis.url, decode_responses=True)
        try:
            stats: Any = client.info("commandstats")
        finally:
            client.close()
        return {name.removeprefix("cmdstat_"): int(value["calls"])
                for name, value in stats.items()}

    def _completions(self) -> int:
        url = f"http://127.0.0.1:{self.model_port}/stats"
        with urllib.request.urlopen(url, timeout=30) as answer:
            return int(json.loads(answer.read())["served"])

    def _probe_start(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        """cProfile on in each squadd process's main thread, strace on all its threads."""
        tracers = []
        for kind, pid in _squadd_kinds(self.procs):
            if "profile" in self.probe_with:
                os.kill(pid, signal.SIGUSR1)
            if "syscalls" not in self.probe_with:
                continue
            tids = [f"-p{task.name}" for task in Path(f"/proc/{pid}/task").iterdir()]
            out = self.root / f"strace-{pid}"
            tracers.append((kind, subprocess.Popen(
                ["strace", "-c", "-f", "-q", "-e", f"trace={SYSCALLS}", "-o", str(out), *tids],
                stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        time.sleep(1.0)  # strace attaches to every thread before the routes start
        return tracers

    def _probe_stop(self, tracers: list[tuple[str, subprocess.Popen[bytes]]],
                    routes: int) -> None:
        """Write, per kind of process, the profile's top functions and the system calls a
        route, to `probes`."""
        import pstats

        assert self.probes is not None
        self.probes.mkdir(parents=True, exist_ok=True)
        counts: dict[str, dict[str, int]] = {}
        for _kind, pid in _squadd_kinds(self.procs):
            if "profile" in self.probe_with:
                os.kill(pid, signal.SIGUSR2)
        for (kind, tracer), (_, pid) in zip(tracers, _squadd_kinds(self.procs), strict=False):
            tracer.send_signal(signal.SIGINT)
            tracer.wait(timeout=30)
            for line in (self.root / f"strace-{pid}").read_text().splitlines():
                parts = line.split()
                if len(parts) >= 5 and parts[-1].isidentifier() and parts[3].isdigit():
                    seen = counts.setdefault(kind, {})
                    seen[parts[-1]] = seen.get(parts[-1], 0) + int(parts[3])
        lines = [f"system calls a route ({routes} routes, all processes of a kind, "
                 "all threads):"]
        for kind, seen in counts.items():
            lines.append(f"  {kind}: " + ", ".join(
                f"{name} {n / routes:.2f}" for name, n in sorted(seen.items(),
                                                               key=lambda i: -i[1])))
        name = self.setup.name
        if tracers:
            (self.probes / f"{name}-syscalls.txt").write_text("\n".join(lines) + "\n")
        time.sleep(2.0)  # the profiles are written by the processes' signal handlers
        for kind, pid in _squadd_kinds(self.procs):
            found = self.root / f"profile.{pid}"
            if not found.exists():
                continue
            shutil.copyfile(found, self.probes / f"{name}-{kind}-{pid}.prof")
            with (self.probes / f"{name}-{kind}-{pid}.txt").open("w") as out:
                stats = pstats.Stats(str(found), stream=out)
                stats.sort_stats("tottime").print_stats(40)
                stats.sort_stats("cumulative").print_stats(60)

    def measure(self, routes: int, clients: int) -> Measured:
        """`routes` routes from `clients` client processes, after a warm-up of one round."""
        slots = self.setup.total_slots
        in_flight = max(1, math.ceil(IN_FLIGHT_PER_SLOT * slots / clients))
        warmup = max(1, math.ceil(slots / clients))
        started: list[subprocess.Popen[str]] = []
        try:
            for n in range(clients):
                share = routes // clients + (1 if n < routes % clients else 0)
                with (self.root / f"client{n}.err").open("ab") as errors:
                    started.append(subprocess.Popen(
                        [sys.executable, str(HERE / "_scale_client.py"), str(self.repo),
                         "--tag", f"c{n}", "--routes", str(share), "--in-flight",
                         str(in_flight), "--warmup", str(warmup)], env=self.env,
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                        text=True))
            self.procs["clients"] = list(started)
            for n, client in enumerate(started):
                if _line(client.stdout) != "ready":
                    raise SystemExit(f"client {n} did not warm up: "
                                     + (self.root / f"client{n}.err").read_text()[-2000:])
            probing = self._probe_start() if self.probes is not None else []
            cpu_before, calls_before = self._snapshot(), self._redis_calls()
            loop_before = self._loop_snapshot()
            turns_before = self._completions()
            began = time.perf_counter()
            for client in started:
                assert client.stdin is not None
                client.stdin.write("go\n")
                client.stdin.flush()
            answers = [json.loads(_line(client.stdout) or "{}") for client in started]
            elapsed = time.perf_counter() - began
            cpu_after, calls_after = self._snapshot(), self._redis_calls()
            loop_after = self._loop_snapshot()
            turns = self._completions() - turns_before
            if self.probes is not None:
                self._probe_stop(probing, routes)
        finally:
            for client in started:
                if client.stdin is not None:
                    client.stdin.close()
                try:
                    client.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    client.kill()
            self.procs.pop("clients", None)
        failed = sum(int(a.get("failures", 1)) for a in answers)
        if failed or len(answers) != clients:
            first = next((a.get("first_failure") for a in answers if a.get("first_failure")),
                         None)
            raise SystemExit(f"{self.setup.name}: {failed} routes failed, e.g. {first}")
        return Measured(self.setup, routes, elapsed,
                        {kind: cpu_after[kind] - cpu_before.get(kind, 0.0) for kind in cpu_after},
                        {name: calls - calls_before.get(name, 0)
                         for name, calls in calls_after.items()
                         if calls - calls_before.get(name, 0) > 0}, turns,
                        {kind: loop_after[kind] - loop_before.get(kind, 0.0)
                         for kind in loop_after})


SYSCALLS = "fsync,fdatasync,write,writev,sendto,sendmsg,recvfrom,read,openat,epoll_wait"


def _squadd_kinds(procs: dict[str, list[subprocess.Popen[Any]]]) -> list[tuple[str, int]]:
    return [(kind, p.pid) for kind in ("daemon", "coordinator", "workers")
            for p in procs.get(kind, [])]


def _line(stream: IO[str] | None) -> str:
    assert stream is not None
    return stream.readline().strip()
