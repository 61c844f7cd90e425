"""The built-in workspace tools: `read`, `write`, `edit`, `find`, `grep` and `bash`.

Each is confined to the calling session's workspace (`confine`) and runs through the one
invocation pipeline like every other tool. `bash` asks for approval by default; the others are
allowed.
"""

from __future__ import annotations

from typing import Any

from squadd.config import Settings
from squadd.tools.base import Tool

WORKSPACE_TOOL_NAMES = ("read", "write", "edit", "find", "grep", "bash")
"""The workspace tools: a custom tool of the same name is shadowed wherever tools are listed."""


def workspace_tools(settings: Settings) -> list[Tool[Any]]:
    """The six workspace tools, with the limits of `settings`; write and edit share one set of
    per-file locks (the owner's: two runtimes share none)."""
    from squadd.tools.builtin.bash import Bash
    from squadd.tools.builtin.common import FileLocks
    from squadd.tools.builtin.edit import Edit
    from squadd.tools.builtin.files import Read, Write
    from squadd.tools.builtin.search import Find, Grep

    locks = FileLocks()
    return [Read(settings), Write(settings, locks), Edit(settings, locks), Find(settings),
            Grep(settings), Bash(settings)]
