"""The Python tool engine: tool files of `@tool` functions. `tool` makes a `PythonTool` from a
function (`docstrings` reads its parameters); `files` loads a tool file; each call of a tool
from a file runs in a worker process of its own (`calls` in squadd, `worker` in the process),
started ahead by `SpareWorkers`.

Other packages import what they use from here; the modules are this package's own.
"""

from squadd.tools.python.calls import SpareWorkers
from squadd.tools.python.tool import PythonTool, tool

__all__ = ["PythonTool", "SpareWorkers", "tool"]
