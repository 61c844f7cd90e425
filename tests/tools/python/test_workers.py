"""Python tool files run each call in a worker process: a timeout or a cancellation kills it
and everything it started, whatever the tool does (sleeps, spins, blocks its event loop,
ignores SIGTERM); progress, confirm, logs and results still travel as before.

These run with `sandbox.mode = "off"`: they read the pids a tool reports and write outside the
workspace, which a sandbox makes its own (tests/sandbox/ proves a sandboxed worker)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog.testing

from squadd.config import Settings
from squadd.contracts.events import ToolUpdated
from squadd.state.layout import SquadLayout
from squadd.state.owner import process_start
from squadd.tools.discovery import Discovery, ToolDiscoverer
from squadd.tools.gates import ResolvedVariables
from squadd.tools.python import calls as python_calls
from squadd.tools.python.tool import PythonTool
from tests.tools.custom_tools import Answering, Recorder, call, write
from tests.tools.custom_tools import discover as discover_with

UNCONFINED = Settings.model_validate({"sandbox": {"mode": "off"}})


def discover(layout: SquadLayout, settings: Settings | None = None, **kwargs: Any) -> Discovery:
    return discover_with(layout, settings or UNCONFINED, **kwargs)

RUNAWAYS = {
    "sync_sleep": '''
        import os, time
        from squadd import tool

        @tool(timeout_s=2)
        def sync_sleep(pidfile: str) -> str:
            open(pidfile, "w").write(str(os.getpid()))
            time.sleep(600)
            return "never"
        ''',
    "async_blocking": '''
        import os, time
        from squadd import tool

        @tool(timeout_s=2)
        async def async_blocking(pidfile: str) -> str:
            open(pidfile, "w").write(str(os.getpid()))
            time.sleep(600)  # blocks its event loop: nothing in its process can stop it
            return "never"
        ''',
    "spinning": '''
        import os
        from squadd import tool

        @tool(timeout_s=2)
        async def spinning(pidfile: str) -> str:
            open(pidfile, "w").write(str(os.getpid()))
            while True:
                pass
        ''',
    "deaf": '''
        import os, signal, time
        from squadd import tool

        @tool(timeout_s=2)
        async def deaf(pidfile: str) -> str:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open(pidfile, "w").write(str(os.getpid()))
            while True:
                time.sleep(1)
        ''',
    "parent_of_sleepers": '''
        import os, subprocess, time
        from squadd import tool

        @tool(timeout_s=2)
        def parent_of_sleepers(pidfile: str) -> str:
            child = subprocess.Popen(["sleep", "600"])
            open(pidfile, "w").write(f"{os.getpid()} {child.pid}")
            time.sleep(600)
            return "never"
        ''',
}


def _pids(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()]


def _gone(pid: int) -> bool:
    return process_start(pid) is None  # gone, or a zombie nobody runs any more


async def _all_gone(pids: list[int]) -> bool:
    """Whether every pid is gone once SIGKILL has done its work (bounded wait)."""
    with anyio.move_on_after(10):
        while not all(_gone(pid) for pid in pids):  # noqa: ASYNC110
            await anyio.sleep(0.01)
    return all(_gone(pid) for pid in pids)


@pytest.fixture
def workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The pids of the worker processes started from here on (each discovery has a fresh
    spare pool of its own)."""
    started: list[int] = []
    spawn = python_calls.spawn_worker

    def recorded(*args: Any) -> python_calls.Worker:
        worker = spawn(*args)
        started.append(worker.process.pid)
        return worker

    monkeypatch.setattr(python_calls, "spawn_worker", recorded)
    yield started


def _used(started: list[int], found: Discovery) -> list[int]:
    """Workers started that are not waiting as the spare for the next call."""
    waiting = {pid for tool in found.tools if isinstance(tool, PythonTool) and tool.workers
               for pid in tool.workers.waiting()}
    return [pid for pid in started if pid not in waiting]


@pytest.mark.parametrize("name", sorted(RUNAWAYS))
async def test_a_timeout_kills_the_tool_and_all_it_started(
        layout: SquadLayout, tmp_path: Path, name: str, workers: list[int]) -> None:
    write(layout.tools_dir, f"{name}.py", RUNAWAYS[name])
    found = discover(layout)
    pidfile = tmp_path / "pids"
    with anyio.fail_after(60):
        result = await call(layout, found.toolset(), name, {"pidfile": str(pidfile)})
    assert not result.ok and result.text == f"{name} timed out after 2s and was stopped"
    # The tool's own pids, when it got as far as writing them (a busy machine may take the
    # whole budget to start the worker: the worker is killed all the same).
    pids = _used(workers, found) + (_pids(pidfile) if pidfile.exists() else [])
    assert pids and os.getpid() not in pids
    assert await _all_gone(pids)


async def test_a_cancelled_call_kills_its_worker(layout: SquadLayout, tmp_path: Path,
                                                 workers: list[int]) -> None:
    # Only the cancel may end this call: with the 2 s timeout of the runaways, a busy machine
    # could spend it all starting the worker, and the call would end before it began.
    source = RUNAWAYS["parent_of_sleepers"].replace("@tool(timeout_s=2)", "@tool(timeout_s=600)")
    assert "timeout_s=600" in source
    write(layout.tools_dir, "parent_of_sleepers.py", source)
    found = discover(layout)
    pidfile = tmp_path / "pids"
    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            group.start_soon(call, layout, found.toolset(), "parent_of_sleepers",
                             {"pidfile": str(pidfile)})
            while not pidfile.exists() or len(pidfile.read_text().split()) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    pids = _pids(pidfile)
    assert pids[0] in workers
    assert await _all_gone([*pids, *_used(workers, found)])


async def test_a_blocked_event_loop_is_reported_with_the_tools_name(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(python_calls, "LOOP_BLOCKED_AFTER_S", 0.2)
    write(layout.tools_dir, "stall.py", '''
        import time
        from squadd import tool

        @tool
        async def stall() -> str:
            time.sleep(1.0)
            return "came back"
        ''')
    sink = Recorder()
    result = await call(layout, discover(layout).toolset(), "stall", sink=sink)
    assert result.ok and result.text == "came back"
    [update] = [e for e in sink.of(ToolUpdated) if "blocked its event loop" in e.message]
    assert update.tool == "stall" and "time.sleep" in update.message


async def test_progress_confirm_variables_and_results_cross_the_process_boundary(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "chatty.py", '''
        import os
        from squadd import ToolContext, ToolResult, tool

        @tool(variables=[{"name": "TOKEN"}])
        def chatty(n: int, ctx: ToolContext) -> dict:
            ctx.progress("halfway", 0.5)
            went = ctx.confirm_sync("go on?")
            return {"n": n * 2, "went": went, "pid": os.getpid(), "agent": ctx.agent,
                    "token": ctx.variables.get("TOKEN")}

        @tool
        async def careful(ctx: ToolContext) -> ToolResult:
            if not await ctx.confirm("delete it?"):
                return ToolResult.failure("stopped by the user", asked=True)
            return ToolResult.success("deleted")

        @tool
        def broken() -> str:
            raise ValueError("bad input")

        @tool
        def vanishing() -> str:
            os._exit(7)
        ''')
    gate = Answering(lambda question: question == "go on?")

    class Variables:
        def resolve(self, specs: Any) -> ResolvedVariables:
            return ResolvedVariables({"TOKEN": "t0k"})

    tools = discover(layout).toolset()
    sink = Recorder()
    chatty = await call(layout, tools, "chatty_chatty", {"n": 21}, sink=sink,
                        approvals=gate, variables=Variables())
    careful = await call(layout, tools, "chatty_careful", approvals=gate)
    broken = await call(layout, tools, "chatty_broken")
    vanishing = await call(layout, tools, "chatty_vanishing")
    assert chatty.ok, chatty.text
    data = chatty.details["data"]
    assert data["n"] == 42 and data["went"] is True and data["agent"] == "fenster"
    assert data["pid"] != os.getpid() and data["token"] == "t0k"
    [update] = sink.of(ToolUpdated)
    assert update.message == "halfway" and update.fraction == 0.5
    assert not careful.ok and careful.text == "stopped by the user" and careful.details["asked"]
    assert gate.asked == ["go on?", "delete it?"]
    assert not broken.ok and broken.text == "chatty_broken failed: ValueError: bad input"
    assert not vanishing.ok and "exited with status 7" in vanishing.text


async def test_no_spare_worker_still_runs_the_call(layout: SquadLayout) -> None:
    write(layout.tools_dir, "echo.py", '''
        from squadd import tool

        @tool
        def echo(text: str) -> str:
            return text
        ''')
    spares = python_calls.SpareWorkers(keep=0)
    found = ToolDiscoverer(spares).discover(layout, Settings())
    result = await call(layout, found.toolset(), "echo", {"text": "hi"})
    assert result.ok and result.text == "hi" and spares.waiting() == []


async def test_import_yaml_in_a_tool_is_pyyaml_not_squadds_yaml_engine(
        layout: SquadLayout) -> None:
    """squadd's YAML engine is the package `squadd.tools.yaml`; a tool's `import yaml` (in its
    worker, which `python -m` starts from the repo, not from inside squadd) is PyYAML."""
    write(layout.tools_dir, "which_yaml.py", '''
        import yaml
        from squadd import tool

        @tool
        def which_yaml() -> str:
            return f"{yaml.__name__} {yaml.safe_load('a: yes')['a']}"
        ''')
    found = discover(layout)
    result = await call(layout, found.toolset(), "which_yaml", {})
    assert result.ok and result.text == "yaml True", result.text  # PyYAML reads YAML 1.1


def test_a_worker_whose_daemon_died_while_it_started_ends_itself() -> None:
    """The daemon's pid comes on the command line: a worker that finds another parent (the
    daemon was killed while it still imported) kills its group before it could run a call."""
    ours, theirs = socket.socketpair()
    with ours:
        worker = subprocess.Popen(
            [sys.executable, "-m", python_calls.WORKER_MODULE, str(theirs.fileno()), "1"],
            pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        assert worker.wait(60) == -signal.SIGKILL


async def test_a_tool_logging_a_field_named_like_squadds_own_still_runs(
        layout: SquadLayout) -> None:
    """A tool's log line comes back to be logged under the tool's name: a `tool` field of its
    own must not collide with that and fail the call."""
    write(layout.tools_dir, "fetcher.py", '''
        import structlog
        from squadd import tool

        @tool
        def fetch() -> str:
            structlog.get_logger("tooldev").info("fetched", tool="curl", pages=2)
            return "done"
        ''')
    with structlog.testing.capture_logs() as logs:
        result = await call(layout, discover(layout).toolset(), "fetcher")
    assert result.ok and result.text == "done", result.text
    [line] = [entry for entry in logs if entry.get("event") == "fetched"]
    assert line["tool"] == "fetcher" and line["pages"] == 2
