"""squadd: a daemon that runs a Squad, a team of AI agents living in a repo's `.squad/` folder.

The public API is what custom tool files use: ``from squadd import tool, ToolContext, ToolResult``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squadd._version import __version__

if TYPE_CHECKING:
    from squadd.tools.base import ToolContext, ToolResult
    from squadd.tools.custom.python_tools import tool

__all__ = ["ToolContext", "ToolResult", "__version__", "tool"]


def __getattr__(name: str) -> Any:
    # Imported lazily so that `squadd status` does not pay for the tool machinery.
    if name in ("ToolContext", "ToolResult"):
        from squadd.tools import base

        return getattr(base, name)
    if name == "tool":
        from squadd.tools.custom.python_tools import tool

        return tool
    raise AttributeError(f"module 'squadd' has no attribute {name!r}")
