"""Claude Code's hook wire format: squadd's workspace tools under Claude Code's tool names and
input fields (and back, for `updatedInput`), and what a hook's exit code and output mean.

`Bash {command, timeout (ms)}`, `Read {file_path, offset, limit}`, `Write {file_path, content}`,
`Edit {file_path, old_string, new_string, replace_all}`, `Glob {pattern, path}`,
`Grep {pattern, path, glob, -i}`; file paths absolute, as Claude Code sends them. Any other
tool keeps its own name and arguments.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from squadd.errors import UntrustedInputError
from squadd.untrusted import parse_json

Decision = Literal["allow", "deny", "ask"]

CLAUDE_NAMES = {"bash": "Bash", "read": "Read", "write": "Write", "edit": "Edit",
                "find": "Glob", "grep": "Grep"}
"""squadd's workspace tool -> Claude Code's name for the same tool."""
_RENAMED = {"old": "old_string", "new": "new_string", "ignore_case": "-i"}
_PATHS = ("path",)


def claude_name(tool: str) -> str:
    return CLAUDE_NAMES.get(tool, tool)


def _absolute(path: Any, workspace: Path) -> Any:
    if not isinstance(path, str) or not path:
        return path
    return path if Path(path).is_absolute() else os.path.normpath(workspace / path)


def _relative(path: Any, workspace: Path) -> Any:
    """A path a hook gave back, relative to the workspace when it lies inside (the tool still
    checks it: a path outside is refused there, as from the model)."""
    if not isinstance(path, str) or not Path(path).is_absolute():
        return path
    relative = os.path.relpath(os.path.normpath(path), workspace)
    return path if relative == ".." or relative.startswith(".." + os.sep) else relative


def claude_input(tool: str, arguments: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """`arguments` of squadd's `tool` as Claude Code's tool of that kind takes them."""
    if tool not in CLAUDE_NAMES:
        return dict(arguments)
    shown: dict[str, Any] = {}
    for key, value in arguments.items():
        if key in _PATHS:
            name = "file_path" if tool in ("read", "write", "edit") else "path"
            shown[name] = _absolute(value, workspace)
        elif tool == "bash" and key == "timeout":
            shown["timeout"] = None if value is None else int(float(value) * 1000)
        else:
            shown[_RENAMED.get(key, key)] = value
    return shown


def squadd_arguments(tool: str, updated: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """A hook's `updatedInput` for `tool` in squadd's argument names (the tool validates it)."""
    if tool not in CLAUDE_NAMES:
        return dict(updated)
    back = {claude: ours for ours, claude in _RENAMED.items()}
    arguments: dict[str, Any] = {}
    for key, value in updated.items():
        if key in ("file_path", "path"):
            arguments["path"] = _relative(value, workspace)
        elif tool == "bash" and key == "timeout":
            arguments["timeout"] = None if value is None else (
                value / 1000 if isinstance(value, int | float) and not isinstance(value, bool)
                else value)
        elif tool == "bash" and key in ("description", "run_in_background"):
            continue  # Claude Code's own fields that squadd's bash has no use for
        else:
            arguments[back.get(key, key)] = value
    return arguments


def claude_response(tool: str, arguments: Mapping[str, Any], text: str, ok: bool,
                    details: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """A tool's result as PostToolUse's `tool_response`: Claude Code's fields where it has
    them (`filePath`, `stdout`), and squadd's own (`success`, `output`) for every tool."""
    response: dict[str, Any] = {"success": ok, "output": text}
    if tool in ("write", "edit", "read") and isinstance(arguments.get("path"), str):
        response["filePath"] = _absolute(arguments["path"], workspace)
    if tool == "bash":
        response.update(stdout=text, stderr="", interrupted=bool(details.get("timed_out")),
                        isImage=False, exit_code=details.get("exit_code"))
    return response


@dataclass(frozen=True)
class HookReply:
    """What one hook run said, in Claude Code's terms."""

    exit_code: int | None
    stdout: str
    stderr: str
    failed: str | None = None
    """Why the hook did not give an answer (it could not start, timed out, crashed)."""
    decision: Decision | None = None
    """`deny` for exit code 2 or a blocking JSON decision; `ask` / `allow` from JSON."""
    reason: str = ""
    updated_input: dict[str, Any] | None = None
    context: str = ""
    """Text for the model: `additionalContext`, or a SessionStart / UserPromptSubmit hook's
    plain stdout."""
    stop: str | None = None
    """`continue: false`: the `stopReason` (or a default), which blocks what the event guards."""


def read_reply(event: str, exit_code: int | None, stdout: str, stderr: str) -> HookReply:
    """Claude Code's rules: exit 2 blocks, with stderr as the reason; exit 0 may print JSON
    (`decision`, `reason`, `continue`, `stopReason`, `hookSpecificOutput`), or plain text that
    SessionStart and UserPromptSubmit add to the model's context; any other exit code is an
    error that does not block."""
    if exit_code == 2:
        return HookReply(exit_code, stdout, stderr, decision="deny",
                         reason=stderr.strip() or "blocked by a hook (exit code 2)")
    if exit_code != 0:
        return HookReply(exit_code, stdout, stderr,
                         failed=f"exited with status {exit_code}: {stderr.strip()[-500:]}")
    document: Any = None
    text = stdout.strip()
    if text.startswith("{"):
        try:
            document = parse_json(text)
        except UntrustedInputError:
            document = None
    if not isinstance(document, dict):
        plain = text if event in ("SessionStart", "UserPromptSubmit") else ""
        return HookReply(exit_code, stdout, stderr, context=plain)
    specific = document.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision: Decision | None = None
    reason = ""
    permission = specific.get("permissionDecision")
    if permission in ("allow", "deny", "ask"):
        decision = permission
        reason = _text(specific.get("permissionDecisionReason"))
    elif document.get("decision") in ("block", "deny"):
        decision, reason = "deny", _text(document.get("reason"))
    elif document.get("decision") in ("approve", "allow"):
        decision, reason = "allow", _text(document.get("reason"))
    updated = specific.get("updatedInput")
    stop = None
    if document.get("continue") is False:
        stop = _text(document.get("stopReason")) or "stopped by a hook (continue: false)"
    return HookReply(exit_code, stdout, stderr, decision=decision, reason=reason,
                     updated_input=updated if isinstance(updated, dict) else None,
                     context=_text(specific.get("additionalContext")), stop=stop)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
