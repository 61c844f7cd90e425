"""A stalled event loop is noticed from a thread, once per stall, and (in the daemon) the tools
running in its process at that moment are named."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import structlog

from squadd import tool
from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.daemon.server import _loop_blocked
from squadd.loop_watch import LoopWatch
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from squadd.tools.invoke import CallOrigin, ToolInvoker


@tool
async def blocker(seconds: float) -> str:
    """Block the event loop (what an async tool must not do)."""
    time.sleep(seconds)
    return "unblocked"


async def test_each_stall_is_reported_once_with_the_tools_then_running(
        squad: SquadLayout) -> None:
    invoker = ToolInvoker(squad, Settings())
    reports: list[tuple[float, list[str]]] = []
    watch = LoopWatch(lambda lag: reports.append((lag, sorted(invoker.running.values()))),
                      after_s=0.1)
    call = ToolCall(id="c1", name="blocker", arguments={"seconds": 0.8})
    async with anyio.create_task_group() as group:
        await group.start(watch.beat)
        first = await invoker.invoke(ToolSet([blocker]), call, CallOrigin("s", "lead"))
        await anyio.sleep(0.3)  # the loop runs again: the next stall is a new one
        time.sleep(0.8)
        group.cancel_scope.cancel()
    assert first.text == "unblocked"
    stalls = [r for r in reports if r[0] >= 0.1]
    assert len(stalls) >= 2
    assert ["blocker"] in [names for _, names in stalls]  # named while it blocked
    assert invoker.running == {}


def test_the_daemon_logs_a_stall_with_the_tools_running(squad: SquadLayout,
                                                        tmp_path: Path) -> None:
    from squadd.logs import configure_logging
    from squadd.runtime.runtime import SquadRuntime
    from squadd.tools.secrets import SecretRegistry

    log_file = tmp_path / "daemon.log"
    saved, root = structlog.get_config(), logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(redact=SecretRegistry().redact_log_event, console=False, json_file=log_file,
                      file_level="warning")
    try:
        runtime = SquadRuntime.from_settings(squad, Settings.model_validate(
            {"provider": {"kind": "openai", "base_url": "http://127.0.0.1:9"}}))
        runtime.invoker.running["s/c1"] = "slow_tool"
        _loop_blocked(runtime, 2.5)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        structlog.configure(**saved)
    text = log_file.read_text(encoding="utf-8")
    assert '"event loop blocked"' in text and "slow_tool" in text
