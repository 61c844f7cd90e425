"""No callback blocks the event loop: routes whose sessions call a custom tool with a secret
variable and an output big enough to spill, record decisions, and read charters, histories and
decisions, all under asyncio's slow-callback detection."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import anyio.lowlevel

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.state.layout import SquadLayout
from squadd.tools.variables import default_secrets_file
from tests.support.loop_watch import loop_blocks

BIG_TOOL = """\
description: Prints a long listing
tags: [read]
variables:
  - {name: LISTING_TOKEN, type: secret, description: the token}
bash: seq 1 50000
"""


async def test_the_detector_reports_a_callback_that_blocks_for_a_second() -> None:
    async with loop_blocks() as blocks:
        time.sleep(1.0)  # the blocking call the detector must catch
        await anyio.lowlevel.checkpoint()
    assert len(blocks) == 1 and "took 1." in blocks[0]


async def test_routes_with_tools_spills_and_decisions_never_block_the_loop(
        layout: SquadLayout, tmp_path: Path) -> None:
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "listing.yaml").write_text(BIG_TOOL, encoding="utf-8")
    secrets = default_secrets_file()
    secrets.parent.mkdir(parents=True, exist_ok=True)
    secrets.write_text("LISTING_TOKEN=t0ken-value\n", encoding="utf-8")
    secrets.chmod(0o600)
    turns = [
        {"tool_calls": [{"name": "listing", "arguments": {}}]},
        {"tool_calls": [{"name": "squad_decide",
                         "arguments": {"title": "Keep listings", "body": "They help."}}]},
        {"text": "done"},
    ]
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"default": turns}), encoding="utf-8")
    settings = Settings.model_validate({"provider": {"kind": "replay",
                                                     "replay_file": str(replay)}})
    runtime = SquadRuntime.from_settings(layout, settings)
    results = []

    async def one(index: int) -> None:
        results.append(await runtime.route(RouteRequest(
            target_agent=("fenster", "hockney", "lead")[index % 3], task=f"list things {index}")))

    async with loop_blocks() as blocks, runtime, anyio.create_task_group() as group:
        for index in range(6):
            group.start_soon(one, index)
    assert [r.ok for r in results] == [True] * 6, [r.message for r in results]
    spilled = list((layout.root / "tool-output").rglob("*.txt"))
    assert len(spilled) == 6  # every listing was over the limit and went to a file
    assert blocks == []
