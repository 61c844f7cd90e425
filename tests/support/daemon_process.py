"""A real `squadd serve` process for tests: a temp repo with a squad, the daemon started with
`python -m squadd serve` against a test model server, waited on through `GET /v1/health`, and
always killed at the end (no process is left behind).

    with DaemonProcess.in_new_repo(tmp_path, server.url) as daemon:
        daemon.client.route("hi", "lead")
        daemon.squadd("status")
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import httpx

from squadd.daemon.client import DaemonClient
from squadd.errors import DaemonError
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad, templates_dir
from squadd.state.team import add_agent

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
START_TIMEOUT_S = 20.0
FAST_CONFIG = """\
[daemon]
grace_s = 1.0

[provider]
max_attempts = 1
"""
"""A config for daemons under test: a short stop grace and no provider retries."""


def make_repo(path: Path, agents: tuple[str, ...] = ("lead",), config: str = "") -> SquadLayout:
    """A folder with a fresh `.squad/`, the given agents, and `config` as .squad/config.toml."""
    path.mkdir(parents=True, exist_ok=True)
    layout = SquadLayout.at(init_squad(path).squad_dir)
    for agent in agents:
        add_agent(layout, agent, agent.capitalize(), templates=templates_dir())
    if config:
        layout.config_toml.write_text(config, encoding="utf-8")
    return layout


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a squadd process: no SQUADD_* of the person running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SQUADD_")}
    env.update({"NO_COLOR": "1", "PYTHONPATH": str(REPO_ROOT), **extra})
    return env


class DaemonProcess:
    """One `squadd serve` child process and a client for it."""

    def __init__(self, layout: SquadLayout, model_url: str, *, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):
        self.layout = layout
        self.model_url = model_url
        self.extra_args = extra_args
        self.env = env if env is not None else clean_env(
            XDG_CONFIG_HOME=str(layout.repo.parent / "xdg-config"))
        self.proc: subprocess.Popen[str] | None = None
        self.client = DaemonClient(layout, timeout=30.0)
        self.log_path = layout.repo.parent / f"daemon-{layout.repo.name}.out"

    @classmethod
    def in_new_repo(cls, tmp_path: Path, model_url: str, *, config: str = "",
                    agents: tuple[str, ...] = ("lead",), **options: Any) -> DaemonProcess:
        return cls(make_repo(tmp_path / "repo", agents, config), model_url, **options)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "squadd", "serve", "--provider", "openai", "--base-url",
                self.model_url, "--model", "test-model", "--log-level", "warning",
                *self.extra_args]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> Self:
        """Start the daemon and wait (up to `timeout_s`) until its health endpoint answers with
        its PID."""
        with self.log_path.open("a") as out:
            self.proc = subprocess.Popen(self.command, cwd=self.layout.repo, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                         text=True)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited ({self.proc.returncode}):\n{self.output}")
            with contextlib.suppress(DaemonError):
                if self.client.health()["pid"] == self.proc.pid:
                    return self
            if time.monotonic() > deadline:
                raise TimeoutError(f"the daemon did not answer within {timeout_s:g}s:\n"
                                   f"{self.output}")
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") \
            if self.log_path.exists() else ""

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, and wait for the graceful stop; the exit status."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would; the socket and pid file stay behind."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def close(self) -> None:
        self.client.close()
        self.kill()

    def squadd(self, *args: str, timeout: float = 60.0,
               input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run `python -m squadd ARGS` in the repo, as a person would."""
        return subprocess.run([sys.executable, "-m", "squadd", *args], cwd=self.layout.repo,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              input=input, stdin=None if input is not None else subprocess.DEVNULL)

    def wait_for_state(self, session_id: str, states: set[str], timeout: float = 15.0
                       ) -> dict[str, Any]:
        """The session's view once its state is one of `states`: read now, then again at each
        `agent.state` event of the session (the pool publishes every change of state)."""
        view: dict[str, Any] = {}
        try:
            with self.follow_events(timeout, types=["agent.state"],
                                    session_id=session_id) as changes:
                for _ in itertools.chain([None], changes):
                    view = self.client.session(session_id, transcript=False)["session"]
                    if view["state"] in states:
                        return view
        except TimeoutError:
            pass
        raise TimeoutError(f"session {session_id} is {view.get('state')}, not {states}")

    @contextlib.contextmanager
    def follow_events(self, timeout: float, *, types: Sequence[str],
                      session_id: str | None = None, recent: int = 0
                      ) -> Iterator[Iterator[dict[str, Any]]]:
        """The daemon's event stream on its socket (`GET /v1/events`), subscribed on entry:
        first up to `recent` past events, then each as it happens. Iterating raises
        `TimeoutError` once `timeout` seconds have passed since entry; the stream ends with the
        block. It speaks the HTTP API itself, so that a test's wait does not depend on the
        client under test."""
        params = {"recent": str(recent), "follow": "1", "type": ",".join(types)}
        if session_id is not None:
            params["session"] = session_id
        deadline = time.monotonic() + timeout
        transport = httpx.HTTPTransport(uds=str(self.layout.socket))
        with httpx.Client(transport=transport, base_url="http://squadd",
                          timeout=httpx.Timeout(10.0, read=timeout)) as http, \
                http.stream("GET", "/v1/events", params=params) as response:
            response.raise_for_status()
            lines = response.iter_lines()
            for line in lines:  # the daemon says when the subscription is in place
                if line.startswith(":") and line[1:].strip() == "subscribed":
                    break

            def events() -> Iterator[dict[str, Any]]:
                data: list[str] = []
                try:
                    for line in lines:
                        if time.monotonic() > deadline:
                            break
                        if line.startswith("data:"):
                            data.append(line[5:].removeprefix(" "))
                        elif not line and data:
                            event = json.loads("\n".join(data))
                            data = []
                            if isinstance(event, dict):
                                yield event
                except httpx.ReadTimeout:
                    pass
                raise TimeoutError(f"the {','.join(types)} events sought did not come within "
                                   f"{timeout:g}s (or the stream ended)")

            yield events()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()  # a start that timed out leaves a live process behind
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
