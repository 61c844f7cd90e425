"""A busy squad for the watching tests (dashboard, `squadd top`): a real daemon over a replayed
model with four agents and project tools: `work_build` reports half-way and waits for the test
(the file `release` beside the repo), `work_publish` asks for approval, `work_chatter` reports
progress COUNT times. Route the three tasks of `TASKS` and lead sends a nested route to backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.daemon_process import FAST_CONFIG, DaemonProcess, make_repo

TASKS = (("Plan the 1.4 release", "lead"), ("Publish 1.4.0", "tester"),
         ("Write the release notes", "writer"))

TOOLS = '''\
from pathlib import Path

import anyio

from squadd import ToolContext, tool

RELEASE = Path({release!r})


@tool
async def build(part: str, ctx: ToolContext) -> str:
    """Build PART in two steps (the second waits for the test to say go)."""
    ctx.progress(f"building {{part}}: step 1 of 2", 0.5)
    with anyio.fail_after(120):
        while not RELEASE.exists():
            await anyio.sleep(0.05)
    return f"{{part}} built"


@tool(requires_approval=True)
def publish(version: str) -> str:
    """Publish VERSION (asks first)."""
    return f"published {{version}}"


@tool
def chatter(count: int, ctx: ToolContext) -> str:
    """Report progress COUNT times."""
    for step in range(count):
        ctx.progress(f"tick {{step}}", (step + 1) / count)
    return "done"
'''


def _turn(text: str = "", *calls: tuple[str, dict[str, Any]],
          tokens: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": n, "arguments": a} for n, a in calls],
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}}


SCRIPT = {"agents": {
    "lead": [_turn("Backend builds the API.", ("squad_route", {
        "targetAgent": "backend", "task": "Build the orders API", "waitForResult": True}),
        tokens=(1200, 140)), _turn("The API is built.", tokens=(1500, 60))],
    "backend": [_turn("", ("work_build", {"part": "orders API"}), tokens=(900, 80)),
                _turn("Orders API built.", tokens=(1000, 40))],
    "tester": [_turn("", ("work_publish", {"version": "1.4.0"}), tokens=(700, 50)),
               _turn("Published 1.4.0.", tokens=(760, 30))],
    "writer": [_turn("", ("squad_decide", {
        "agentName": "writer", "title": "Release notes live in CHANGELOG.md",
        "body": "One section per release, newest first."}), tokens=(400, 120)),
        _turn("Release notes written.", tokens=(450, 100))],
}}




@contextmanager
def busy_squad(tmp_path: Path, *serve_args: str) -> Iterator[DaemonProcess]:
    """The daemon of a fresh repo under `tmp_path`, started with `serve_args` too; killed at
    the end. Write `tmp_path / "release"` to let `work_build` finish."""
    with busy_daemon(tmp_path, *serve_args) as process:
        yield process


def busy_daemon(tmp_path: Path, *serve_args: str) -> DaemonProcess:
    """`busy_squad`'s daemon, not started yet (for the `daemon` mark's `build`)."""
    layout = make_repo(tmp_path / "repo", agents=("lead", "backend", "tester", "writer"),
                       config=FAST_CONFIG + "\n[tools]\napproval_timeout_s = 120\n"
                       # `work_build` waits for the release file beside the repo: the
                       # sandbox's private /tmp would hide that folder unless it is declared.
                       + f'\n[sandbox]\nwritable = ["{tmp_path}"]\n')
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    (layout.tools_dir / "work.py").write_text(
        TOOLS.format(release=str(tmp_path / "release")), encoding="utf-8")
    replay = tmp_path / "script.json"
    replay.write_text(json.dumps(SCRIPT), encoding="utf-8")
    return DaemonProcess(layout, "http://127.0.0.1:9/v1", extra_args=(
        *serve_args, "--provider", "replay", "--replay-file", str(replay)))
