"""The world the hostile suite attacks: a real git repository with a squad, a session's real
worktree, a home folder with planted secrets, a listener on 127.0.0.1, a process of another
session, and bash and YAML tool calls through the real invocation pipeline, for each sandbox
mechanism this machine has."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from squadd.config import Settings, load_settings
from squadd.contracts.messages import ToolCall
from squadd.errors import SandboxError
from squadd.sandbox import mechanism_for
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.yaml.schema import ShellToolFile
from squadd.tools.yaml.tool import ShellTool
from squadd.workspaces import Workspaces
from tests.workspaces.conftest import Events, git, make_repo

MECHANISMS = ("bwrap", "landlock")


def needs(mechanism: str) -> None:
    try:
        if mechanism_for(mechanism) != mechanism:  # type: ignore[arg-type]
            pytest.skip(f"{mechanism} is not available here")
    except SandboxError as exc:
        pytest.skip(str(exc))


def running(token: str) -> list[int]:
    """Host pids of live processes whose command line holds `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text(encoding="ascii").rpartition(")")[2].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if token.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@dataclass
class World:
    """Everything an attack aims at, and the way to run a command as an agent would."""

    mechanism: str
    layout: SquadLayout
    home: Path
    worktree: Path
    outside: Path
    secrets: dict[str, str]
    listener: socket.socket
    victim: subprocess.Popen[bytes]
    hooks_path: Path
    settings: Settings
    spaces: Workspaces
    session_id: str
    token: str = field(default_factory=lambda: f"sbx{uuid.uuid4().hex[:12]}")
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    @property
    def common_dir(self) -> Path:
        return self.layout.repo / ".git"

    def values(self) -> dict[str, Any]:
        return {"ssh": self.home / ".ssh" / "id_rsa", "secrets": self.home / ".config" /
                "squadd" / "secrets", "run_token": self.layout.root / "run" / "planted-token",
                "outside": self.outside, "home": self.home, "common": self.common_dir,
                "hooks_path": self.hooks_path, "port": self.port, "daemon": os.getpid(),
                "victim": self.victim.pid, "token": self.token, "python": "python3"}

    def _invoker(self, settings: Settings) -> ToolInvoker:
        tools = settings.tools.model_copy(update={"approvals": {"*": "allow"}})
        return ToolInvoker(self.layout, settings.model_copy(update={"tools": tools}), None)

    def _origin(self, agent: str) -> CallOrigin:
        return CallOrigin(session_id=self.session_id, agent=agent, workspace_dir=self.worktree)

    async def bash(self, command: str, *, agent: str = "lead", seconds: float = 60.0,
                   settings: Settings | None = None) -> ToolResult:
        """`command` as a model-issued `bash` call of `agent` in the session's worktree (its
        `timeout` argument: `seconds`)."""
        settings = settings or self.settings
        call = ToolCall(id=f"call-{next(self._ids)}", name="bash",
                        arguments={"command": command, "timeout": seconds})
        return await self._invoker(settings).invoke(ToolSet(workspace_tools(settings)), call,
                                                    self._origin(agent))

    async def yaml_tool(self, command: str, *, agent: str = "lead") -> ToolResult:
        """`command` as the body of a YAML shell tool (tagged `read`: it needs no approval)."""
        spec = ShellToolFile.model_validate({"description": "d", "tags": ["read"],
                                             "bash": command, "timeout": 60})
        tool = ShellTool(spec, name="innocent", file=None, source="project",
                         settings=self.settings)
        call = ToolCall(id=f"call-{next(self._ids)}", name="innocent", arguments={})
        return await self._invoker(self.settings).invoke(ToolSet([tool]), call,
                                                         self._origin(agent))

    def connections(self) -> int:
        """Connections the listener received (and closes)."""
        count = 0
        self.listener.settimeout(0.2)
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return count
            conn.close()
            count += 1


def sandbox_settings(layout: SquadLayout, mechanism: str,
                     agents: dict[str, dict[str, Any]] | None = None, **sandbox: Any) -> Settings:
    return load_settings(layout.root, overrides={
        "sandbox": {"mode": mechanism, "max_processes": 64, **sandbox},
        "workspace": {"isolation": "worktree"}, "agents": agents or {}})


@pytest.fixture(params=MECHANISMS)
async def world(request: pytest.FixtureRequest, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Any:
    mechanism = str(request.param)
    needs(mechanism)
    home = tmp_path / "home"
    secrets = {"ssh": f"ssh-private-{uuid.uuid4().hex}", "squadd": f"squadd-{uuid.uuid4().hex}",
               "run": f"run-token-{uuid.uuid4().hex}"}
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text(secrets["ssh"] + "\n")
    (home / ".config" / "squadd").mkdir(parents=True)
    (home / ".config" / "squadd" / "secrets").write_text(f"API_KEY={secrets['squadd']}\n")
    (home / ".bashrc").write_text("# the user's own\n")
    monkeypatch.setenv("HOME", str(home))
    layout = make_repo(tmp_path / "repo", {"app.py": "print('app')\n"})
    (layout.root / "run").mkdir(exist_ok=True)
    (layout.root / "run" / "planted-token").write_text(secrets["run"] + "\n")
    hooks_path = tmp_path / "hooks"
    hooks_path.mkdir()
    git(layout.repo, "config", "core.hooksPath", str(hooks_path))
    outside = tmp_path / "outside"
    outside.mkdir()
    settings = sandbox_settings(layout, mechanism)
    spaces = Workspaces(layout, settings, Events())
    session_id = "20260101-000000-5a4db0c1"
    record = await spaces.open(session_id, "lead")
    assert record is not None
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    # Another session's process (a plain child of this test, as the daemon's would be).
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)  # noqa: ASYNC220
    world = World(mechanism, layout, home, Path(record.path), outside, secrets, listener,
                  victim, hooks_path, settings, spaces, session_id)
    try:
        yield world
    finally:
        listener.close()
        victim.kill()
        victim.wait(10)
        for pid in running(world.token):
            os.kill(pid, 9)
