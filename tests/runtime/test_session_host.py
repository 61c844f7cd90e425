"""A session handed to another host (the cluster's coordinator hands it to a worker): the host
gets the session's narrowed tools, found on the event loop once the custom tool files are
loaded and unchanged, and in a worker thread only when one must be read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.custom_tools import CustomTools
from squadd.runtime.planning import RoutePlan
from squadd.runtime.pool import SessionRecord
from squadd.runtime.runner import RunHere
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session import SessionOutcome
from squadd.runtime.session_sink import SessionSink
from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet

TOOL = "description: Says hello\ntags: [read]\nbash: echo hello\n"


class Handed:
    """A host that notes the tools it was handed, then runs the task here."""

    def __init__(self) -> None:
        self.tools: list[list[str]] = []

    async def run(self, plan: RoutePlan, record: SessionRecord, tools: ToolSet,
                  sink: SessionSink, run_here: RunHere) -> SessionOutcome:
        self.tools.append(sorted(tools.names))
        return await run_here()


async def test_a_hosted_sessions_tools_are_read_from_disk_only_when_a_file_changed(
        layout: SquadLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "hello.yaml").write_text(TOOL, encoding="utf-8")
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"default": [{"text": "done"}]}), encoding="utf-8")
    settings = Settings.model_validate({"provider": {"kind": "replay",
                                                     "replay_file": str(replay)}})
    runtime = SquadRuntime.from_settings(layout, settings)
    host = Handed()
    runtime.runner.host = host
    reads: list[str] = []  # the custom tools found by reading their files (blocking)
    read = CustomTools.__call__

    def counted(self: CustomTools) -> ToolSet:
        reads.append("read")
        return read(self)

    monkeypatch.setattr(CustomTools, "__call__", counted)
    async with runtime:
        results = [await runtime.route(RouteRequest(target_agent="fenster", task=f"t{n}"))
                   for n in range(3)]
        (layout.tools_dir / "bye.yaml").write_text(TOOL.replace("hello", "bye"),
                                                   encoding="utf-8")
        results.append(await runtime.route(RouteRequest(target_agent="fenster", task="t3")))
    assert [r.ok for r in results] == [True] * 4, [r.message for r in results]
    assert all("hello" in names for names in host.tools)
    assert "bye" in host.tools[-1] and "bye" not in host.tools[0]
    # Read for the first route (nothing was loaded yet) and for the route after a new file
    # appeared; the routes between found them on the loop, without a thread trip.
    assert reads == ["read", "read"], reads
