"""PreToolUse and PostToolUse in the invocation pipeline, with real hook processes: a hook
blocks, asks or rewrites a call the approval policy let through, never one it refused; a hook
that fails decides nothing unless `hooks.fail_closed`; PostToolUse speaks to the model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from squadd.config import HooksSettings, SandboxSettings, Settings, ToolsSettings
from squadd.contracts.events import NullSink
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import ConfirmFn, Tool, ToolContext, ToolResult, ToolSet
from squadd.tools.builtin import workspace_tools
from squadd.tools.gates import Unattended
from squadd.tools.invoke import CallOrigin, ToolInvoker
from tests.support.hook_scripts import (
    BASH_VALIDATOR,
    RECORDER,
    REPLY,
    command_hook,
    recorded,
    script,
    write_hooks,
)

ALLOW_BASH = ToolsSettings(approvals={"bash": "allow"})
UNCONFINED = SandboxSettings(mode="off")
"""These tests are about what hooks decide: their scripts and logs live in tmp_path, which a
sandboxed hook cannot see (its /tmp is its own). The sandbox has a test of its own below."""


def _settings(**hooks: Any) -> Settings:
    return Settings(tools=ALLOW_BASH, hooks=HooksSettings(**hooks), sandbox=UNCONFINED)


def _invoker(layout: SquadLayout, settings: Settings, gate: Any = None) -> tuple[ToolInvoker,
                                                                                ToolSet]:
    invoker = ToolInvoker(layout, settings, NullSink(), approvals=gate)
    return invoker, ToolSet(workspace_tools(settings))


async def _call(invoker: ToolInvoker, tools: ToolSet, name: str,
                arguments: dict[str, Any], call_id: str = "call-1") -> ToolResult:
    return await invoker.invoke(tools, ToolCall(id=call_id, name=name, arguments=arguments),
                                CallOrigin(session_id="s-1", agent="lead"))


def _reply(folder: Path, name: str, document: Mapping[str, Any], exit_code: int = 0) -> str:
    kept = folder / f"{name}.json"
    kept.write_text(json.dumps(document), encoding="utf-8")
    return f"{script(folder, 'reply.py', REPLY)} {kept} {exit_code}"


async def test_a_bash_validator_blocks_rm_rf_and_the_model_reads_its_reason(
        layout: SquadLayout, tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    log = tmp_path / "inputs.jsonl"
    write_hooks(layout, {"PreToolUse": [
        {"matcher": "Bash", "hooks": [command_hook(script(hooks, "validate.py",
                                                          BASH_VALIDATOR))]},
        {"matcher": "*", "hooks": [command_hook(f"{script(hooks, 'rec.py', RECORDER)} {log}")]},
    ]})
    victim = layout.repo / "precious"
    victim.mkdir()
    invoker, tools = _invoker(layout, _settings())

    blocked = await _call(invoker, tools, "bash", {"command": "rm -rf precious"})
    assert not blocked.ok and victim.is_dir()
    assert blocked.text == ("bash was not run: blocked by a PreToolUse hook: "
                            "• rm -rf is not allowed here: delete single files by name")
    allowed = await _call(invoker, tools, "bash", {"command": "echo fine"}, "call-2")
    assert allowed.ok and "fine" in allowed.text

    first = recorded(log)[0]
    assert first["hook_event_name"] == "PreToolUse" and first["tool_name"] == "Bash"
    assert first["tool_input"] == {"command": "rm -rf precious"}
    assert first["session_id"] == "s-1" and first["tool_use_id"] == "call-1"
    assert first["cwd"] == str(layout.repo)
    assert first["transcript_path"] == str(layout.transcript("s-1"))


async def test_a_hook_never_runs_for_a_call_the_policy_denied(layout: SquadLayout,
                                                              tmp_path: Path) -> None:
    log = tmp_path / "inputs.jsonl"
    allow = _reply(tmp_path, "allow", {"hookSpecificOutput": {"permissionDecision": "allow"}})
    write_hooks(layout, {"PreToolUse": [{"matcher": "Bash", "hooks": [
        command_hook(allow),
        command_hook(f"{script(tmp_path, 'rec.py', RECORDER)} {log}")]}]})
    settings = Settings(tools=ToolsSettings(approvals={"bash": "deny"}), sandbox=UNCONFINED)
    invoker, tools = _invoker(layout, settings)
    result = await _call(invoker, tools, "bash", {"command": "echo hi"})
    assert not result.ok and "denied by tools.approvals rule 'bash'" in result.text
    assert recorded(log) == []


async def test_a_json_deny_blocks_with_its_permission_decision_reason(
        layout: SquadLayout, tmp_path: Path) -> None:
    deny = _reply(tmp_path, "deny", {"hookSpecificOutput": {
        "hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": "writes outside docs/ are reviewed first"}})
    write_hooks(layout, {"PreToolUse": [{"matcher": "Edit|Write", "hooks": [
        command_hook(deny)]}]})
    invoker, tools = _invoker(layout, _settings())
    result = await _call(invoker, tools, "write", {"path": "a.txt", "content": "x"})
    assert result.text.endswith("writes outside docs/ are reviewed first")
    assert result.details["hook"] == "PreToolUse"
    assert not (layout.repo / "a.txt").exists()
    ran = await _call(invoker, tools, "bash", {"command": "echo unmatched"}, "call-2")
    assert ran.ok


class Answering(Unattended):
    """A gate that allows what the policy allows and answers every question as told."""

    def __init__(self, settings: Settings, answer: bool):
        super().__init__(settings)
        self.answer = answer
        self.questions: list[str] = []

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn:
        async def confirm(question: str) -> bool:
            self.questions.append(question)
            return self.answer
        return confirm


@pytest.mark.parametrize("answer", [True, False])
async def test_ask_goes_to_the_approval_flow(layout: SquadLayout, tmp_path: Path,
                                             answer: bool) -> None:
    ask = _reply(tmp_path, "ask", {"hookSpecificOutput": {
        "permissionDecision": "ask", "permissionDecisionReason": "it pushes"}})
    write_hooks(layout, {"PreToolUse": [{"matcher": "Bash", "hooks": [command_hook(ask)]}]})
    settings = _settings()
    gate = Answering(settings, answer)
    invoker, tools = _invoker(layout, settings, gate)
    result = await _call(invoker, tools, "bash", {"command": "echo pushed"})
    assert gate.questions == ["Run bash? A PreToolUse hook asks (it pushes)"]
    assert result.ok is answer
    if not answer:
        assert "asked for approval (it pushes) and it was not given" in result.text


async def test_updated_input_is_mapped_back_and_validated_again(layout: SquadLayout,
                                                                 tmp_path: Path) -> None:
    moved = _reply(tmp_path, "moved", {"hookSpecificOutput": {
        "permissionDecision": "allow", "updatedInput": {
            "file_path": str(layout.repo / "docs" / "note.md"), "content": "rewritten\n"}}})
    write_hooks(layout, {"PreToolUse": [{"matcher": "Write", "hooks": [command_hook(moved)]}]})
    (layout.repo / "docs").mkdir()
    invoker, tools = _invoker(layout, _settings())
    result = await _call(invoker, tools, "write", {"path": "note.md", "content": "first\n"})
    assert result.ok, result.text
    assert (layout.repo / "docs" / "note.md").read_text() == "rewritten\n"
    assert not (layout.repo / "note.md").exists()

    broken = _reply(tmp_path, "broken", {"hookSpecificOutput": {
        "permissionDecision": "allow", "updatedInput": {"file_path": "x.md"}}})
    write_hooks(layout, {"PreToolUse": [{"matcher": "Write", "hooks": [
        command_hook(broken)]}]})
    refused = await _call(invoker, tools, "write", {"path": "y.md", "content": "y"}, "call-2")
    assert not refused.ok
    assert "a PreToolUse hook changed its arguments into ones it cannot take" in refused.text
    assert "- content: required, but missing" in refused.text
    assert not (layout.repo / "x.md").exists() and not (layout.repo / "y.md").exists()


@pytest.mark.parametrize("failure", ["crash", "timeout", "missing"])
@pytest.mark.parametrize("fail_closed", [False, True])
async def test_a_failing_hook_blocks_only_when_hooks_fail_closed(
        layout: SquadLayout, tmp_path: Path, failure: str, fail_closed: bool) -> None:
    hook = {"crash": command_hook(_reply(tmp_path, "crash", {}, 1)),
            "timeout": command_hook("sleep 30", timeout=0.2),
            "missing": command_hook(str(tmp_path / "no-such-hook.sh"))}[failure]
    write_hooks(layout, {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]})
    invoker, tools = _invoker(layout, _settings(fail_closed=fail_closed))
    result = await _call(invoker, tools, "bash", {"command": "echo ran"})
    assert result.ok is not fail_closed
    if fail_closed:
        assert "hooks.fail_closed" in result.text and "blocked by a PreToolUse hook" in result.text


async def test_a_broken_hooks_file_is_logged_and_blocks_only_when_fail_closed(
        layout: SquadLayout) -> None:
    layout.hooks_json.write_text('{"hooks": {"PreToolUse": "nope"}}', encoding="utf-8")
    for fail_closed in (False, True):
        invoker, tools = _invoker(layout, _settings(fail_closed=fail_closed))
        result = await _call(invoker, tools, "bash", {"command": "echo ran"})
        assert result.ok is not fail_closed
        if fail_closed:
            assert ".squad/hooks.json: hooks.PreToolUse must be a list" in result.text


FORMATTER = '''\
import json
import subprocess
import sys

data = json.load(sys.stdin)
path = data["tool_input"]["file_path"]
if path.endswith(".py"):
    subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", path], check=True)
'''
"""A PostToolUse formatter on Edit|Write, as Claude Code's guide has one (ruff, not prettier)."""


async def test_a_post_tool_use_formatter_formats_what_was_written(layout: SquadLayout,
                                                                   tmp_path: Path) -> None:
    write_hooks(layout, {"PostToolUse": [{"matcher": "Edit|Write", "hooks": [
        command_hook(script(tmp_path, "format.py", FORMATTER))]}]})
    invoker, tools = _invoker(layout, _settings())
    result = await _call(invoker, tools, "write", {"path": "m.py", "content": "x=[1,2 ,3]\n"})
    assert result.ok, result.text
    assert (layout.repo / "m.py").read_text() == "x = [1, 2, 3]\n"


async def test_post_tool_use_feedback_reaches_the_model_and_skips_failed_calls(
        layout: SquadLayout, tmp_path: Path) -> None:
    log = tmp_path / "post.jsonl"
    block = _reply(tmp_path, "block", {"decision": "block", "reason": "lint: 2 warnings",
                                       "hookSpecificOutput": {
                                           "additionalContext": "run the linter"}})
    write_hooks(layout, {"PostToolUse": [{"matcher": "Bash", "hooks": [
        command_hook(block), command_hook(f"{script(tmp_path, 'rec.py', RECORDER)} {log}")]}]})
    invoker, tools = _invoker(layout, _settings())
    result = await _call(invoker, tools, "bash", {"command": "echo built"})
    assert result.ok
    assert result.text.endswith("[exit code 0]\n[PostToolUse hook: lint: 2 warnings]\n"
                                "[PostToolUse hook context: run the linter]")
    failed = await _call(invoker, tools, "bash", {"command": "exit 3"}, "call-2")
    assert not failed.ok and "PostToolUse" not in failed.text
    [seen] = recorded(log)
    assert seen["tool_use_id"] == "call-1"
    assert seen["tool_response"]["stdout"].startswith("built")
    assert seen["tool_response"]["exit_code"] == 0


async def test_a_hook_runs_in_the_sandbox_its_sessions_tools_get(layout: SquadLayout,
                                                                 tmp_path: Path) -> None:
    # Outside the workspace and outside /tmp (a sandboxed process has a /tmp of its own).
    outside = Path.home() / f".squadd-hook-probe-{tmp_path.name}"
    folder = layout.repo / ".claude" / "hooks"
    probe = script(folder, "probe.py", f"""\
import json, pathlib, sys
json.load(sys.stdin)
pathlib.Path("inside.txt").write_text("written")
try:
    pathlib.Path({str(outside)!r}).write_text("escaped")
except OSError as exc:
    print(f"refused: {{exc.strerror}}", file=sys.stderr)
    sys.exit(2)
""")
    write_hooks(layout, {"PreToolUse": [{"matcher": "Bash", "hooks": [command_hook(probe)]}]})
    invoker, tools = _invoker(layout, Settings(tools=ALLOW_BASH))  # sandbox.mode = "auto"
    result = await _call(invoker, tools, "bash", {"command": "echo ran"})
    escaped = outside.exists()
    outside.unlink(missing_ok=True)
    assert (layout.repo / "inside.txt").read_text() == "written"
    assert not escaped
    assert not result.ok and "blocked by a PreToolUse hook: refused:" in result.text
