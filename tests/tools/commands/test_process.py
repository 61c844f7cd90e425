"""Shell tool processes: own process group, timeouts and cancels kill grandchildren, stdin,
and 100 MB of output that streams to the spill file with memory staying flat.

The process-group tests run with `sandbox.mode = "off"`: they read the pids a command reports,
which a sandbox's PID namespace makes its own (tests/sandbox/ proves the sandboxed case)."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import anyio
import psutil
import pytest

from squadd.config import Settings, ToolsSettings
from squadd.state.layout import SquadLayout
from squadd.tools.invoke import CallOrigin
from tests.tools.custom_tools import call, shell_tool

UNCONFINED = Settings.model_validate({"sandbox": {"mode": "off"}})


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its new parent to reap it counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _group_alive(pgid: int) -> list[int]:
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return alive


def _wait_gone(pids: list[int], pgid: int, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids) and not _group_alive(pgid):
            return
        time.sleep(0.02)
    raise AssertionError(f"still running: {[p for p in pids if _alive(p)]}, "
                         f"group {pgid}: {_group_alive(pgid)}")


def _sleeper(pids: Path, timeout: str = "0.5s") -> dict[str, object]:
    # The command records its own pid (the group id) and its grandchild's, then sleeps.
    out = shlex.quote(str(pids))
    return {"description": "sleeps", "tags": ["run"], "timeout": timeout,
            "bash": f"(sleep 30; echo never) & echo $$ $! > {out}; echo started; sleep 30"}


async def test_timeout_kills_the_command_and_its_grandchild(layout: SquadLayout) -> None:
    pids = layout.repo / "pids"
    tool = shell_tool(_sleeper(pids, timeout="3s"), UNCONFINED)
    started = time.monotonic()
    result = await call(layout, tool, "t")
    assert time.monotonic() - started < 25  # not waiting for the 30 s sleeps
    assert not result.ok
    assert "started" in result.text and "timed out after 3s" in result.text
    leader, grandchild = (int(x) for x in pids.read_text().split())
    _wait_gone([leader, grandchild], leader)


async def test_cancelling_the_session_kills_the_whole_group(layout: SquadLayout) -> None:
    pids = layout.repo / "pids"
    tool = shell_tool(_sleeper(pids, timeout="30s"), UNCONFINED)
    origin = CallOrigin(session_id="s-1", agent="fenster")

    async def cancel_soon() -> None:
        # Another process writes the file: polling is the only way to see it.
        while not pids.exists() or not pids.read_text().strip():  # noqa: ASYNC110
            await anyio.sleep(0.02)
        origin.cancel.set()

    async with anyio.create_task_group() as group:
        group.start_soon(cancel_soon)
        with anyio.fail_after(10):
            result = await call(layout, tool, "t", origin=origin)
    assert not result.ok and "cancelled" in result.text
    leader, grandchild = (int(x) for x in pids.read_text().split())
    _wait_gone([leader, grandchild], leader)


async def test_an_outer_cancel_scope_kills_the_group_too(layout: SquadLayout) -> None:
    pids = layout.repo / "pids"
    tool = shell_tool(_sleeper(pids, timeout="30s"), UNCONFINED)
    with anyio.CancelScope() as scope:
        async def cancel_once_started() -> None:
            while not pids.exists() or not pids.read_text().strip():  # noqa: ASYNC110
                await anyio.sleep(0.02)
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_started)
            await call(layout, tool, "t")
    assert scope.cancelled_caught
    leader, grandchild = (int(x) for x in pids.read_text().split())
    _wait_gone([leader, grandchild], leader)


async def test_background_processes_do_not_outlive_a_finished_command(
        layout: SquadLayout) -> None:
    pids = layout.repo / "pids"
    out = shlex.quote(str(pids))
    tool = shell_tool({"description": "d", "tags": ["run"],
                       "bash": f"sleep 30 & echo $$ $! > {out}; echo done"}, UNCONFINED)
    started = time.monotonic()
    result = await call(layout, tool, "t")
    assert result.ok and result.text == "done"
    assert time.monotonic() - started < 25  # not waiting for the 30 s background sleep
    leader, background = (int(x) for x in pids.read_text().split())
    _wait_gone([leader, background], leader)


async def test_input_goes_to_stdin_else_stdin_is_dev_null(layout: SquadLayout) -> None:
    fed = shell_tool({"description": "d", "tags": ["read"],
                      "parameters": {"NAME": {"type": "string", "description": "n"}},
                      "input": "hello {NAME}\n", "bash": "tr a-z A-Z"})
    assert (await call(layout, fed, "t", {"NAME": "$(whoami)"})).text == "HELLO $(WHOAMI)"
    empty = shell_tool({"description": "d", "tags": ["read"],
                        "bash": "cat; echo end; readlink /proc/self/fd/0 || true"})
    text = (await call(layout, empty, "t")).text
    assert text.splitlines() == ["end", "/dev/null"]


async def test_exit_code_and_stderr_are_in_the_result(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["run"],
                       "bash": "echo out; echo err >&2; exit 7"})
    result = await call(layout, tool, "t")
    assert not result.ok and result.details["exit_code"] == 7
    assert result.text == "out\nerr\n[exit code 7]"


async def test_environment_variables_working_directory_and_inherit(layout: SquadLayout,
                                                                   monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    monkeypatch.setenv("SQUADD_TEST_OUTER", "outer")
    (layout.repo / "sub").mkdir()
    tool = shell_tool({
        "description": "d", "tags": ["read"], "working-directory": "sub",
        "parameters": {"V": {"type": "string", "description": "v"}},
        "environment": {"variables": {"GREETING": "hi {V}"}, "inherit": False},
        "bash": 'echo "$GREETING|${SQUADD_TEST_OUTER:-unset}|$(basename "$PWD")"'})
    assert (await call(layout, tool, "t", {"V": "there"})).text == "hi there|unset|sub"


async def test_huge_output_streams_to_the_spill_file_and_memory_stays_flat(
        layout: SquadLayout) -> None:
    size = 100 * 1024 * 1024
    tool = shell_tool({"description": "d", "tags": ["read"],
                       "bash": f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}"},
                      settings=Settings())
    process = psutil.Process()
    baseline = process.memory_info().rss
    peak = baseline
    done = anyio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, process.memory_info().rss)
            await anyio.sleep(0.005)

    async with anyio.create_task_group() as group:
        group.start_soon(sample)
        result = await call(layout, tool, "t")
        done.set()
    assert result.ok
    assert peak - baseline < 50 * 1024 * 1024, f"RSS grew by {(peak - baseline) >> 20} MB"
    spill = Path(result.details["full_output"])
    assert spill == layout.tool_output("s-1", "call_1")
    assert spill.stat().st_size == size
    limits = ToolsSettings()
    assert len(result.text.encode()) < limits.max_output_bytes + 1024
    assert "[output truncated: showing" in result.text and "104857600 bytes" in result.text
    assert ".squad/tool-output/s-1/call_1.txt" in result.text
    assert [p.name for p in spill.parent.iterdir()] == ["call_1.txt"]  # no parts left over
    with spill.open("rb") as handle:
        handle.seek(size - 37 * 3)
        assert handle.read().count(b"0123456789abcdefghijklmnopqrstuvwxyz\n") >= 2


async def test_output_within_limits_leaves_no_file_behind(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["read"], "bash": "seq 1 100"})
    result = await call(layout, tool, "t")
    assert result.ok and "full_output" not in result.details
    assert result.text.splitlines()[-1] == "100"
    assert not (layout.root / "tool-output" / "s-1").exists() or \
        list((layout.root / "tool-output" / "s-1").iterdir()) == []


async def test_a_program_that_does_not_exist_is_a_failure_with_the_reason(
        layout: SquadLayout) -> None:
    single = shell_tool({"description": "d", "tags": ["run"], "run": "no-such-program-xyz a"})
    result = await call(layout, single, "t")
    assert not result.ok and result.details["exit_code"] == 127
    assert "[cannot start no-such-program-xyz: No such file or directory]" in result.text
    steps = shell_tool({"description": "d", "tags": ["run"], "steps": [
        {"name": "a", "run": "no-such-program-xyz"}, {"name": "b", "bash": "echo b"}]})
    result = await call(layout, steps, "t")
    assert not result.ok and "[step b] not run: step a failed" in result.text
