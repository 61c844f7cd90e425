"""Hook scripts as Claude Code's documentation writes them (Python reading JSON on stdin), and
a squad whose `.squad/hooks.json` runs them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from squadd.state.layout import SquadLayout

BASH_VALIDATOR = '''\
import json
import re
import sys

# Define validation rules as a list of (regex pattern, message) tuples
VALIDATION_RULES = [
    (r"\\brm\\s+-(rf|fr)\\b", "rm -rf is not allowed here: delete single files by name"),
]

input_data = json.load(sys.stdin)
tool_name = input_data.get("tool_name", "")
command = input_data.get("tool_input", {}).get("command", "")
if tool_name != "Bash" or not command:
    sys.exit(0)
issues = [message for pattern, message in VALIDATION_RULES if re.search(pattern, command)]
if issues:
    for message in issues:
        print(f"• {message}", file=sys.stderr)
    # Exit code 2 blocks tool call and shows stderr to Claude
    sys.exit(2)
'''
"""Claude Code's `bash_command_validator_example.py`, its rules swapped for one on rm -rf."""

RECORDER = '''\
import json
import sys

data = json.load(sys.stdin)
with open(sys.argv[1], "a", encoding="utf-8") as log:
    log.write(json.dumps(data) + "\\n")
'''
"""Appends each hook input it gets to the file named by its argument."""

REPLY = '''\
import json
import sys

json.load(sys.stdin)
print(open(sys.argv[1], encoding="utf-8").read())
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
'''
"""Prints the reply kept in the file its first argument names; exits with the second."""


def script(folder: Path, name: str, text: str) -> str:
    """Write a hook script; the command line that runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return f"{sys.executable} {path}"


def write_hooks(layout: SquadLayout, table: dict[str, list[dict[str, Any]]]) -> None:
    layout.hooks_json.write_text(json.dumps({"hooks": table}, indent=2), encoding="utf-8")


def command_hook(command: str, timeout: float | None = None) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    return hook


def recorded(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
