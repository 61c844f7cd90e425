"""A YAML tool's processes that leave its process group (`setsid`, `nohup ... & disown` in a
new session, a double fork) are stopped when the tool ends, and the result names them.

These run with `sandbox.mode = "off"`, where that cleanup is all there is (a sandbox's PID
namespace ends them with the call: tests/sandbox/ proves that)."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from tests.tools.custom_tools import call, shell_tool

UNCONFINED = Settings.model_validate({"sandbox": {"mode": "off"}})

WAIT_FOR_PID = "\nwhile [ ! -s pid.txt ]; do sleep 0.01; done; echo started"
"""The escaped process writes its pid once it is in its own session: the tool ends after."""
ESCAPES = {
    "setsid": "setsid sh -c 'echo $$ > pid.txt; exec sleep 300' &",
    "nohup-disown": "nohup setsid sh -c 'echo $$ > pid.txt; exec sleep 300' >/dev/null 2>&1 &"
                    " disown",
    "double-fork": "( setsid sh -c 'sh -c \"echo \\$\\$ > pid.txt; exec sleep 300\" &' & )",
    "python-daemon": "python3 -c 'import os, time\nif os.fork(): os._exit(0)\nos.setsid()\n"
                     "open(\"pid.txt\", \"w\").write(str(os.getpid()))\ntime.sleep(300)' &",
}


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("how", sorted(ESCAPES))
async def test_a_process_that_left_the_group_is_stopped_and_named(
        layout: SquadLayout, how: str) -> None:
    tool = shell_tool({"description": "d", "tags": ["run"], "bash": ESCAPES[how] + WAIT_FOR_PID},
                      UNCONFINED)
    result = await call(layout, tool, tool.name, {})
    pid = int((layout.repo / "pid.txt").read_text(encoding="ascii"))
    try:
        with anyio.move_on_after(10):  # a SIGKILL lands once the kernel runs the process again
            while _running(pid):  # noqa: ASYNC110 (nothing to wait on but /proc)
                await anyio.sleep(0.01)
        assert not _running(pid), f"{how}: process {pid} is still running"
        assert result.ok and "started" in result.text
        assert "left running outside its process group: " in result.text, result.text
        assert f"{pid} (sleep" in result.text or f"{pid} (python" in result.text, result.text
    finally:
        if _running(pid):
            os.kill(pid, signal.SIGKILL)


async def test_a_command_that_leaves_nothing_behind_reports_nothing(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["run"],
                       "bash": "sleep 0.01 & wait; echo done"})
    result = await call(layout, tool, tool.name, {})
    assert result.ok and result.text.strip() == "done"
