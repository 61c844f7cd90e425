"""Claude Code's wire format: tool names and input fields both ways, and what a hook's exit
code and output mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squadd.tools.hooks.wire import (
    claude_input,
    claude_name,
    claude_response,
    read_reply,
    squadd_arguments,
)

WORKSPACE = Path("/work/space")


@pytest.mark.parametrize(("tool", "arguments", "name", "shown"), [
    ("bash", {"command": "ls", "timeout": 2.5}, "Bash", {"command": "ls", "timeout": 2500}),
    ("read", {"path": "src/a.py", "offset": 3, "limit": 9}, "Read",
     {"file_path": "/work/space/src/a.py", "offset": 3, "limit": 9}),
    ("write", {"path": "a.txt", "content": "hi"}, "Write",
     {"file_path": "/work/space/a.txt", "content": "hi"}),
    ("edit", {"path": "a.txt", "old": "x", "new": "y", "replace_all": True}, "Edit",
     {"file_path": "/work/space/a.txt", "old_string": "x", "new_string": "y",
      "replace_all": True}),
    ("find", {"pattern": "**/*.py", "path": "src"}, "Glob",
     {"pattern": "**/*.py", "path": "/work/space/src"}),
    ("grep", {"pattern": "TODO", "glob": "*.py", "ignore_case": True}, "Grep",
     {"pattern": "TODO", "glob": "*.py", "-i": True}),
    ("squad_decide", {"title": "t", "path": "kept"}, "squad_decide",
     {"title": "t", "path": "kept"}),
])
def test_workspace_tools_appear_under_claude_codes_names_and_fields(
        tool: str, arguments: dict[str, object], name: str, shown: dict[str, object]) -> None:
    assert claude_name(tool) == name
    assert claude_input(tool, arguments, WORKSPACE) == shown
    back = squadd_arguments(tool, shown, WORKSPACE)
    assert back == arguments


def test_an_updated_path_outside_the_workspace_stays_absolute_for_the_tool_to_refuse() -> None:
    assert squadd_arguments("write", {"file_path": "/etc/passwd", "content": ""},
                            WORKSPACE) == {"path": "/etc/passwd", "content": ""}
    assert squadd_arguments("bash", {"command": "ls", "description": "list"},
                            WORKSPACE) == {"command": "ls"}


def test_a_tool_response_carries_claude_codes_fields_and_squadds() -> None:
    write = claude_response("write", {"path": "a.txt", "content": "x"}, "wrote 1 line", True,
                            {}, WORKSPACE)
    assert write == {"success": True, "output": "wrote 1 line",
                     "filePath": "/work/space/a.txt"}
    bash = claude_response("bash", {"command": "ls"}, "a\n[exit code 0]", True,
                           {"exit_code": 0, "timed_out": False}, WORKSPACE)
    assert bash["stdout"] == "a\n[exit code 0]" and bash["exit_code"] == 0
    assert bash["interrupted"] is False


def test_exit_code_two_blocks_with_stderr_as_the_reason() -> None:
    reply = read_reply("PreToolUse", 2, '{"hookSpecificOutput": {}}', "no rm -rf here\n")
    assert reply.decision == "deny" and reply.reason == "no rm -rf here"


def test_another_exit_code_is_an_error_that_decides_nothing() -> None:
    reply = read_reply("PreToolUse", 1, "", "jq: not found")
    assert reply.decision is None and reply.failed is not None and "jq" in reply.failed


def test_json_output_gives_the_permission_decision_reason_and_updated_input() -> None:
    out = json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse", "permissionDecision": "ask",
        "permissionDecisionReason": "touches prod", "updatedInput": {"command": "ls -a"},
        "additionalContext": "prod is read-only"}})
    reply = read_reply("PreToolUse", 0, out, "")
    assert (reply.decision, reply.reason) == ("ask", "touches prod")
    assert reply.updated_input == {"command": "ls -a"}
    assert reply.context == "prod is read-only"


@pytest.mark.parametrize(("document", "decision"), [
    ({"decision": "block", "reason": "r"}, "deny"),
    ({"decision": "approve", "reason": "r"}, "allow"),
    ({"continue": False, "stopReason": "halt"}, None),
    ({"systemMessage": "hello"}, None),
])
def test_the_older_decision_field_and_continue_false(document: dict[str, object],
                                                     decision: str | None) -> None:
    reply = read_reply("PreToolUse", 0, json.dumps(document), "")
    assert reply.decision == decision
    if document.get("continue") is False:
        assert reply.stop == "halt"


def test_plain_stdout_is_context_only_where_claude_code_adds_it() -> None:
    assert read_reply("SessionStart", 0, "branch main is frozen\n", "").context == \
        "branch main is frozen"
    assert read_reply("UserPromptSubmit", 0, "note", "").context == "note"
    assert read_reply("PreToolUse", 0, "chatter", "").context == ""
    assert read_reply("PreToolUse", 0, "{not json", "").decision is None
