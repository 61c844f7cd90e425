"""Loading a Python tool file: run under a private module name, its `@tool` functions collected
and named (the file's stem for one tool, `{stem}_{function}` for several), each schema checked.
Discovery loads it to list the tools; a call's worker process loads it again to run one.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import types
from pathlib import Path

from squadd.errors import ToolDefinitionError
from squadd.tools.base import ToolSource
from squadd.tools.naming import check_tool_name
from squadd.tools.python.tool import PythonTool

MAX_PYTHON_FILE_BYTES = 1_048_576
MODULE_PREFIX = "squadd_custom_tools."


def _module_name(path: Path) -> str:
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    return f"{MODULE_PREFIX}m{digest}_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"


def load_python_file(path: Path, source: ToolSource, *,
                     data: bytes | None = None) -> list[PythonTool]:
    """Run a tool file (its bytes `data`, already read, or else read here) under a private
    module name and collect its tools, named."""
    text = path.read_bytes() if data is None else data
    if len(text) > MAX_PYTHON_FILE_BYTES:
        raise ToolDefinitionError(f"larger than {MAX_PYTHON_FILE_BYTES} bytes")
    name = _module_name(path)
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        # compile + exec rather than an import: no __pycache__ is written into .squad/tools/.
        exec(compile(text, str(path), "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    found: list[PythonTool] = []
    for value in list(vars(module).values()):
        if isinstance(value, PythonTool) and value.module == name and \
                all(value is not f for f in found):
            found.append(value)
    if not found:
        raise ToolDefinitionError(
            "no tools in this file: decorate a function with @tool (from squadd import tool)")
    stem = path.stem
    named: list[PythonTool] = []
    taken: set[str] = set()
    for item in found:
        if item.explicit_name:
            tool_name = item.name
        elif len(found) == 1:
            tool_name = stem
        else:
            tool_name = f"{stem}_{item.function_name}"
        check_tool_name(tool_name, where=str(path))
        if tool_name in taken:
            raise ToolDefinitionError(f"two tools in this file are named {tool_name!r}")
        taken.add(tool_name)
        bound = item.bound(tool_name, source=source, file=path)
        _check_schema(bound)
        named.append(bound)
    return named


def _check_schema(tool: PythonTool) -> None:
    """The tool's argument schema must be plain JSON: it goes to the model in every request."""
    try:
        json.dumps(tool.spec().parameters, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool.name}: its argument schema is not plain JSON ({exc}): a default "
            "of NaN or infinity, or a type with no JSON form?") from None
