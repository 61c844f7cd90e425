"""A cluster for tests: a real `redis-server`, a scripted model server, a git repo with a
squad, the coordinator (`squadd serve --cluster`) and worker processes (`squadd worker`), each
worker with its own clone in its own folder. Every process is killed at the end.

The scripted team reads its task:
- `decide:TITLE` calls `squad_decide` once, then answers `decided TITLE`;
- `hold:TITLE` does the same but holds its second model turn (after the decision is applied)
  until the test calls `release(TITLE)`: a kill point chosen by a hook, not by a clock;
- `step:MARKER` calls the project tool `step`, which appends to MARKER.started and waits for
  MARKER.go, then answers with the tool's result;
- `route:AGENT:TASK` routes TASK to AGENT and waits, then answers with the child's answer;
- `write:PATH` writes PATH (text: "written by the squad") with the built-in `write`, then
  answers `wrote PATH`; `writehold:PATH` does the same but holds its second turn until
  `release(PATH)`;
- anything else is answered `answer: TASK`.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from tests.support.daemon_process import DaemonProcess, clean_env, make_repo
from tests.support.model_servers import OpenAIServer, Reply
from tests.support.redis_server import RedisServer

HOLD_LIMIT_S = 120.0
"""A held model turn gives up after this long (a test that forgot to release it fails)."""

CLUSTER_CONFIG = """\
[daemon]
grace_s = 1.0

[provider]
max_attempts = 1

[cluster]
lease_s = 1.5
heartbeat_s = 0.5
request_timeout_s = 1.0
request_attempts = 120
redis_down_s = 60.0
"""

STEP_TOOL = '''\
import time
from pathlib import Path

from squadd import tool


@tool
def step(marker: str) -> str:
    """Append to MARKER.started, then wait (at most two minutes) for MARKER.go."""
    with open(marker + ".started", "a", encoding="utf-8") as handle:
        handle.write("ran\\n")
    deadline = time.monotonic() + 120
    while not Path(marker + ".go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return "stepped " + Path(marker).name
'''


class ScriptedTeam:
    """The model server's responder (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, threading.Event] = {}
        self._reached: dict[str, threading.Event] = {}
        self.calls: Counter[str] = Counter()
        """Tool calls the model made, by `name:argument` (a repeated call shows here)."""

    def _gate(self, table: dict[str, threading.Event], key: str) -> threading.Event:
        with self._lock:
            return table.setdefault(key, threading.Event())

    def release(self, title: str) -> None:
        self._gate(self._held, title).set()

    def wait_reached(self, title: str, timeout: float = 60.0) -> None:
        if not self._gate(self._reached, title).wait(timeout):
            raise TimeoutError(f"no session reached the hold of {title!r}")

    def __call__(self, body: Any) -> Reply:
        messages = body["messages"]
        task = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        last = messages[-1]
        kind, _, rest = task.partition(":")
        if last["role"] == "tool":
            result = str(last.get("content") or "")
            if kind in ("write", "writehold"):
                if kind == "writehold":
                    self._gate(self._reached, rest).set()
                    self._gate(self._held, rest).wait(HOLD_LIMIT_S)
                return OpenAIServer.text_turn(f"wrote {rest}")
            if kind == "hold":
                self._gate(self._reached, rest).set()
                self._gate(self._held, rest).wait(HOLD_LIMIT_S)
            if kind in ("decide", "hold"):
                return OpenAIServer.text_turn(f"decided {rest}")
            return OpenAIServer.text_turn(f"tool said: {result}")
        if kind in ("decide", "hold"):
            with self._lock:
                self.calls[f"squad_decide:{rest}"] += 1
            return OpenAIServer.tool_call_turn(("squad_decide", {
                "title": rest, "body": f"We settle {rest}.", "agentName": "lead",
                "category": "architecture"}))
        if kind in ("write", "writehold"):
            return OpenAIServer.tool_call_turn(("write", {
                "path": rest, "content": "written by the squad\n"}))
        if kind == "step":
            with self._lock:
                self.calls[f"step:{rest}"] += 1
            return OpenAIServer.tool_call_turn(("step", {"marker": rest}))
        if kind == "route":
            agent, _, child = rest.partition(":")
            return OpenAIServer.tool_call_turn(("squad_route", {
                "targetAgent": agent, "task": child, "waitForResult": True}))
        return OpenAIServer.text_turn(f"answer: {task}")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
                   cwd=repo, check=True, capture_output=True)


WAIT_S = 90.0


def eventually(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll `check` until it returns something true (bounded); the value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"never happened: {what}")
        time.sleep(0.05)


class Background:
    """A route sent from a thread (its caller may die with the coordinator)."""

    def __init__(self, cluster: Cluster, task: str, agent: str = "lead"):
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = cluster.daemon.client.route(task, agent)
            except BaseException as exc:
                self.error = exc
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def wait(self) -> dict[str, Any]:
        self.thread.join(WAIT_S)
        assert not self.thread.is_alive(), "the route never returned"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def sessions_of(cluster: Cluster) -> list[str]:
    return [p.name.removesuffix(".jsonl") for p in cluster.layout.transcripts_dir.glob("*.jsonl")]


def one_session(cluster: Cluster) -> str:
    found = eventually(lambda: sessions_of(cluster), "a transcript")
    assert len(found) == 1, found
    return str(found[0])


def claims(cluster: Cluster, session_id: str) -> list[tuple[str, int]]:
    return [(r["worker"], r["epoch"]) for r in cluster.transcript(session_id)
            if r.get("kind") == "state" and r.get("state") == "active" and "worker" in r]


def marks(cluster: Cluster, session_id: str) -> list[tuple[int, int]]:
    return [tuple(r["cluster"]) for r in cluster.transcript(session_id) if "cluster" in r]


class Cluster:
    """Redis, the model server, the coordinator and named workers."""

    def __init__(self, tmp_path: Path, *, agents: tuple[str, ...] = ("lead", "backend"),
                 config: str = CLUSTER_CONFIG, serve_args: tuple[str, ...] = ()):
        self.serve_args = serve_args
        self.tmp = tmp_path
        self.team = ScriptedTeam()
        self.model = OpenAIServer(self.team, keep_bodies=False)
        self.redis = RedisServer(tmp_path / "redis")
        # The `step` tool's markers live in the test's folder, outside the worktree: the
        # sandbox lets its processes write there, as a project would declare a cache.
        config += f'\n[sandbox]\nwritable = ["{tmp_path}"]\n'
        self.layout = make_repo(tmp_path / "repo", agents, config)
        self.layout.tools_dir.mkdir(parents=True, exist_ok=True)
        (self.layout.tools_dir / "step.py").write_text(STEP_TOOL, encoding="utf-8")
        git(self.layout.repo, "init", "-q")
        git(self.layout.repo, "add", "-A")
        git(self.layout.repo, "commit", "-qm", "the squad")
        self.coordinator: DaemonProcess | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> Self:
        self.model.start()
        self.redis.start()
        self.start_coordinator()
        return self

    def start_coordinator(self) -> DaemonProcess:
        self.coordinator = DaemonProcess(self.layout, self.model.url,
                                         extra_args=("--cluster", self.redis.url,
                                                     *self.serve_args))
        return self.coordinator.start()

    @property
    def daemon(self) -> DaemonProcess:
        assert self.coordinator is not None
        return self.coordinator

    def start_worker(self, name: str, slots: int = 4) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"worker-{name}.out").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "squadd", "worker", "--cluster", self.redis.url,
             "--repo", str(self.layout.repo), "--slots", str(slots), "--name", name,
             "--workdir", str(self.tmp / f"clone-{name}"), "--provider", "openai",
             "--base-url", self.model.url, "--model", "test-model", "--log-level", "info"],
            cwd=self.tmp, env=clean_env(XDG_CONFIG_HOME=str(self.tmp / "xdg-config"),
                                        XDG_CACHE_HOME=str(self.tmp / "xdg-cache")),
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        self.workers[name] = proc
        self.wait_worker_ready(name)
        return proc

    def worker_log(self, name: str) -> str:
        path = self.tmp / f"worker-{name}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_worker_ready(self, name: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while "worker ready" not in self.worker_log(name):
            proc = self.workers[name]
            if proc.poll() is not None:
                raise RuntimeError(f"worker {name} exited:\n{self.worker_log(name)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker {name} not ready:\n{self.worker_log(name)}")
            time.sleep(0.05)

    def kill_worker(self, name: str) -> None:
        proc = self.workers[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)

    def transcript(self, session_id: str) -> list[dict[str, Any]]:
        path = self.layout.transcript(session_id)
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def holder(self, session_id: str) -> str | None:
        """The worker that claimed the session last (from its transcript)."""
        owners = [r["owner"]["worker"] for r in self.transcript(session_id)
                  if r.get("kind") == "meta" and isinstance(r.get("owner"), dict)
                  and "worker" in r["owner"]]
        return owners[-1] if owners else None

    def inbox(self) -> list[Path]:
        folder = self.layout.inbox_dir
        return sorted(p for p in folder.glob("*.md")) if folder.is_dir() else []

    def decisions_text(self) -> str:
        """The decisions in the inbox, decisions.md and its archive, read once the coordinator has
        stopped (so its Scribe moves nothing between the two reads)."""
        if self.coordinator is not None and self.coordinator.proc is not None \
                and self.coordinator.proc.poll() is None:
            self.coordinator.stop()
        texts = [p.read_text() for p in self.inbox()]
        # The Scribe archives older entries once decisions.md grows: they count too.
        for path in (self.layout.decisions_md, self.layout.decisions_archive):
            if path.exists():
                texts.append(path.read_text())
        return "\n".join(texts)

    def close(self) -> None:
        for name in list(self.workers):
            self.kill_worker(name)
        if self.coordinator is not None:
            self.coordinator.close()
        for gate in list(self.team._held.values()):
            gate.set()
        self.redis.close()
        self.model.close()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.close()
