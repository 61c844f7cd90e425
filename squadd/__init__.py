"""squadd: a daemon that runs a Squad, a team of AI agents living in a repo's `.squad/` folder.

The public API is what custom tool files use: ``from squadd import tool, ToolContext, ToolResult``.
A file in ``.squad/tools/`` declares tools with `tool`, reads its call through `ToolContext`, and
may answer with a `ToolResult`:

    from squadd import ToolContext, ToolResult, tool

    @tool
    async def count_mentions(path: str, word: str, ctx: ToolContext) -> ToolResult:
        \"\"\"Count the lines of a file in the repository that mention a word.

        Args:
            path: The file, relative to the repository root.
            word: The word to look for.
        \"\"\"
        file = ctx.repo_dir / path
        if not file.is_file():
            return ToolResult.failure(f"no file {path}: give a path inside the repository")
        count = sum(word in line for line in file.read_text().splitlines())
        return ToolResult.success(f"{count} lines mention {word} in {path}", count=count)

Each name's docstring has more: ``help(squadd.tool)``, ``help(squadd.ToolContext)``.
"""

from __future__ import annotations

from squadd._version import __version__

TYPE_CHECKING = False  # `typing` is not imported at run time: `squadd status` starts fast
if TYPE_CHECKING:
    from typing import Any

    from squadd.tools.base import ToolContext, ToolResult
    from squadd.tools.python import tool

__all__ = ["ToolContext", "ToolResult", "__version__", "tool"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `squadd status` does not pay for the tool machinery.
    if name in ("ToolContext", "ToolResult"):
        from squadd.tools import base

        return getattr(base, name)
    if name == "tool":
        from squadd.tools.python import tool

        return tool
    raise AttributeError(f"module 'squadd' has no attribute {name!r}")
