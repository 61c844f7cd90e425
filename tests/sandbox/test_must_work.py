"""The other half: what an agent legitimately does still works in the sandbox, under each
mechanism this machine has: tests, builds, the interpreter and system headers, git, the network
for an agent allowed it, a Python tool whose worker starts inside the sandbox."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from squadd.tools.discovery import ToolDiscoverer
from squadd.tools.invoke import CallOrigin
from tests.sandbox.conftest import World, sandbox_settings
from tests.tools.custom_tools import call


async def test_python_m_pytest_runs_in_the_worktree(world: World) -> None:
    (world.worktree / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    result = await world.bash(f"{sys.executable} -m pytest -q -p no:cacheprovider test_ok.py")
    assert result.ok and "1 passed" in result.text, result.text


async def test_a_build_writes_its_outputs_in_the_worktree(world: World) -> None:
    (world.worktree / "hello.c").write_text(
        '#include <stdio.h>\nint main(void) { puts("built and ran"); return 0; }\n')
    (world.worktree / "Makefile").write_text("build/hello: hello.c\n\tmkdir -p build\n"
                                             "\tcc -o build/hello hello.c\n")
    result = await world.bash("make -s && ./build/hello")
    assert result.ok and "built and ran" in result.text, result.text
    assert (world.worktree / "build" / "hello").is_file()


async def test_the_interpreter_and_system_headers_are_readable(world: World) -> None:
    result = await world.bash(f"{sys.executable} -c 'import json, sqlite3; print(\"py ok\")' && "
                              "head -c 200 /usr/include/stdio.h >/dev/null && echo headers ok "
                              "&& echo tmp > $TMPDIR/scratch && cat $TMPDIR/scratch")
    assert result.ok and "py ok" in result.text and "headers ok" in result.text, result.text
    assert "\ntmp\n" in result.text


async def test_git_status_and_diff_work_in_the_worktree(world: World) -> None:
    (world.worktree / "app.py").write_text("print('changed')\n")
    result = await world.bash("git status --short && git diff --stat && git log --oneline -1")
    assert result.ok, result.text
    assert "M app.py" in result.text and "1 file changed" in result.text


async def test_an_agent_allowed_the_network_reaches_the_listener(world: World) -> None:
    settings = sandbox_settings(world.layout, world.mechanism,
                                agents={"lead": {"network": "on"}})
    command = (f"{sys.executable} -c \"import socket; "
               f"socket.create_connection(('127.0.0.1', {world.port}), 5); print('CONNECTED')\"")
    result = await world.bash(command, settings=settings)
    assert result.ok and "CONNECTED" in result.text, result.text
    assert result.details["sandbox"]["network"] == "on"
    assert result.details["sandbox"]["network_from"] == "agents.lead.network"
    assert world.connections() == 1
    other = await world.bash(command, agent="keaton", settings=settings)
    assert "CONNECTED" not in other.text and other.details["sandbox"]["network"] == "off"


async def test_a_python_tool_worker_starts_inside_the_sandbox(world: World) -> None:
    folder = world.layout.tools_dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "peek.py").write_text(textwrap.dedent(f'''
        import os
        from squadd import tool

        @tool
        def peek() -> str:
            """Try what an attacker would."""
            out = []
            try:
                out.append(open({str(world.home / ".ssh" / "id_rsa")!r}).read())
            except OSError as exc:
                out.append(f"ssh denied: {{exc.errno}}")
            try:
                open({str(world.outside / "x")!r}, "w").write("pwned")
            except OSError as exc:
                out.append(f"write denied: {{exc.errno}}")
            open("made-by-tool.txt", "w").write("fine")
            return " | ".join(out)
        '''))
    found = ToolDiscoverer().discover(world.layout, world.settings)
    try:
        result = await call(world.layout, found.toolset(), "peek", settings=world.settings,
                            origin=CallOrigin(session_id=world.session_id, agent="lead",
                                              workspace_dir=world.worktree))
    finally:
        found_workers = [t for t in found.tools if getattr(t, "workers", None) is not None]
        for tool in found_workers[:1]:
            tool.workers.close()  # type: ignore[attr-defined]
    assert result.ok, result.text
    assert world.secrets["ssh"] not in result.text and "ssh denied" in result.text
    assert "write denied" in result.text and not list(world.outside.iterdir())
    assert (world.worktree / "made-by-tool.txt").read_text() == "fine"


@pytest.mark.parametrize("mode", ["bwrap", "landlock"])
def test_the_policy_keeps_git_and_the_squad_read_only_inside_the_repository(
        tmp_path: Path, mode: str) -> None:
    from squadd.sandbox import build_policy

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    policy = build_policy(mode=mode, network=False, workspace=repo, repo=repo,
                          squad_dir=repo / ".squad", home=tmp_path / "home")
    assert policy.writable[0] == repo
    assert repo / ".git" in policy.read_only and repo / ".squad" in policy.read_only
    assert repo / ".squad" / "run" in policy.deny_read
    assert tmp_path / "home" / ".ssh" in policy.deny_read
