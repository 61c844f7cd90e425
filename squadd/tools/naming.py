"""The names and labels of custom tools, one rule for every kind (Python, YAML, agent, prompt)."""

from __future__ import annotations

import re

from squadd.errors import ToolDefinitionError

TOOL_NAME_RULE = "^[A-Za-z0-9_-]{1,64}$"
TOOL_NAME_RE = re.compile(TOOL_NAME_RULE)


def check_tool_name(name: str, *, where: str) -> str:
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise ToolDefinitionError(
            f"{where}: tool name {name!r} is not allowed: names must match {TOOL_NAME_RULE} "
            "(letters, digits, '_' and '-', at most 64 characters)")
    return name


def default_label(name: str) -> str:
    words = re.split(r"[_\-\s]+", name.strip())
    return " ".join(w for w in words if w).capitalize() or name
