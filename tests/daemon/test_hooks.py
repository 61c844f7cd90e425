"""Hooks through the daemon's API (run in process: what is tested is the runtime's hooks, not
the process), with scripts as Claude Code's documentation writes them: a PreToolUse Bash
validator blocks `rm -rf` and the model reads why, a PostToolUse formatter formats what was
written, a Stop notifier hears the end; and the events come in order, a routed session's seen
from its parent as SubagentStart / SubagentStop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from squadd.state.layout import SquadLayout
from tests.support.hook_scripts import BASH_VALIDATOR, RECORDER, command_hook, recorded, script
from tests.support.in_process import api_in_process
from tests.support.model_servers import OpenAIServer

CONFIG = """\
[daemon]
grace_s = 1.0

[provider]
max_attempts = 1

[tools]
approvals = { "bash" = "allow" }
"""

FORMATTER = '''\
import json
import subprocess
import sys

data = json.load(sys.stdin)
path = data["tool_input"]["file_path"]
if path.endswith(".py"):
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", path], check=True)
'''

STOP_NOTIFIER = '''\
import json
import sys

data = json.load(sys.stdin)
with open(sys.argv[1], "a", encoding="utf-8") as out:
    out.write(f"squadd: {data['session_id']} finished ({data['status']})\\n")
'''


def _hooks(layout: SquadLayout) -> None:
    # Where Claude Code keeps them, in the repository: hooks run in the sandbox, which sees the
    # workspace (and writes only there), not the test's temp folder.
    repo = layout.repo
    scripts = repo / ".claude" / "hooks"
    record = f"{script(scripts, 'record.py', RECORDER)} {repo / 'events.jsonl'}"
    every = {"matcher": "*", "hooks": [command_hook(record)]}
    table: dict[str, list[dict[str, Any]]] = {
        event: [every] for event in ("SessionStart", "UserPromptSubmit", "PreToolUse",
                                     "PostToolUse", "Stop", "SubagentStart", "SubagentStop")}
    table["PreToolUse"] = [{"matcher": "Bash", "hooks": [
        command_hook(script(scripts, "validate.py", BASH_VALIDATOR), timeout=30)]}, every]
    table["PostToolUse"] = [{"matcher": "Edit|Write", "hooks": [
        command_hook(script(scripts, "format.py", FORMATTER))]}, every]
    table["Stop"] = [{"hooks": [command_hook(
        f"{script(scripts, 'notify.py', STOP_NOTIFIER)} {repo / 'notified.txt'}")]}, every]
    layout.hooks_json.write_text(json.dumps({"hooks": table}), encoding="utf-8")


pytestmark = pytest.mark.daemon(config=CONFIG, agents=("lead", "fenster"), prepare=_hooks)


def _events(layout: SquadLayout) -> list[tuple[str, ...]]:
    seen: list[tuple[str, ...]] = []
    for data in recorded(layout.repo / "events.jsonl"):
        name = data["hook_event_name"]
        detail = data.get("tool_name") or (
            data["agent_type"] if name.startswith("Subagent") else "")
        seen.append((name, data["session_id"], detail))
    return seen


async def test_a_validator_blocks_rm_rf_a_formatter_formats_and_a_notifier_hears_the_end(
        layout: SquadLayout, model_server: OpenAIServer, tmp_path: Path) -> None:
    repo = layout.repo
    (repo / "src").mkdir()
    model_server.script(
        OpenAIServer.tool_call_turn(("bash", {"command": "rm -rf src"}, "call_rm")),
        OpenAIServer.tool_call_turn(("write", {"path": "app.py", "content": "x=[1,2 ,3]\n"},
                                     "call_write")),
        OpenAIServer.text_turn("cleaned up"))
    async with api_in_process(layout, model_server.url) as daemon:
        result = await daemon.client.route("tidy the repository", "lead")
    assert result["ok"], result
    session = result["session_id"]

    assert (repo / "src").is_dir()
    assert (repo / "app.py").read_text() == "x = [1, 2, 3]\n"
    second = model_server.bodies[1]["messages"]
    [told] = [m for m in second if m["role"] == "tool" and m["tool_call_id"] == "call_rm"]
    assert "blocked by a PreToolUse hook: • rm -rf is not allowed here" in told["content"]
    assert (repo / "notified.txt").read_text() == \
        f"squadd: {session} finished (completed)\n"
    assert _events(layout) == [
        ("SessionStart", session, ""), ("UserPromptSubmit", session, ""),
        ("PreToolUse", session, "Bash"),
        ("PreToolUse", session, "Write"), ("PostToolUse", session, "Write"),
        ("Stop", session, "")]
    [prompt] = [d for d in recorded(repo / "events.jsonl")
                if d["hook_event_name"] == "UserPromptSubmit"]
    assert prompt["prompt"] == "tidy the repository" and prompt["cwd"] == str(repo)
    assert Path(prompt["transcript_path"]).is_file()


async def test_a_routed_session_is_seen_from_its_parent(layout: SquadLayout,
                                                        model_server: OpenAIServer,
                                                        tmp_path: Path) -> None:
    model_server.script(
        OpenAIServer.tool_call_turn(("squad_route", {"targetAgent": "fenster",
                                                     "task": "draft the API"}, "call_route")),
        OpenAIServer.text_turn("API drafted"),
        OpenAIServer.text_turn("fenster drafted it"))
    async with api_in_process(layout, model_server.url) as daemon:
        result = await daemon.client.route("get the API drafted", "lead")
    assert result["ok"], result
    lead = result["session_id"]
    events = _events(layout)
    [child] = {sid for name, sid, _ in events if sid != lead}
    assert events == [
        ("SessionStart", lead, ""), ("UserPromptSubmit", lead, ""),
        ("PreToolUse", lead, "squad_route"),
        ("SubagentStart", lead, "fenster"),
        ("SessionStart", child, ""), ("UserPromptSubmit", child, ""),
        ("Stop", child, ""), ("SubagentStop", lead, "fenster"),
        ("PostToolUse", lead, "squad_route"), ("Stop", lead, "")]
    [stopped] = [d for d in recorded(layout.repo / "events.jsonl")
                 if d["hook_event_name"] == "SubagentStop"]
    assert stopped["agent_id"] == child and stopped["last_assistant_message"] == "API drafted"
    assert stopped["agent_transcript_path"].endswith(f"{child}.jsonl")
