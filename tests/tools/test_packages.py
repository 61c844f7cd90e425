"""The shape of `squadd.tools`: its modules import each other without cycles and stay under
500 lines, and the packages above it use the tool engines (`tools.yaml`, `tools.python`)
through their `__init__` only, never their modules."""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

import squadd.tools

ENGINES = ("squadd.tools.yaml", "squadd.tools.python")
ABOVE = ("squadd.cli", "squadd.daemon", "squadd.worker", "squadd.runtime", "squadd.mcp_server")
MAX_LINES = 500


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("squadd")


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The groups of `modules` that import each other in a circle (Tarjan's components)."""
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for after in edges[node]:
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_the_tools_modules_import_each_other_without_cycles(graph: grimp.ImportGraph) -> None:
    tools = {m for m in graph.modules if m == "squadd.tools" or m.startswith("squadd.tools.")}
    assert len(tools) > 40
    assert _cycles(graph, tools) == []


def test_no_tools_module_is_over_500_lines() -> None:
    root = Path(squadd.tools.__file__).parent
    long = {str(path.relative_to(root)): n for path in root.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_the_layers_above_use_the_engines_through_their_packages_only(
        graph: grimp.ImportGraph) -> None:
    reaching = sorted(
        (importer, imported)
        for importer in graph.modules if importer.startswith(ABOVE)
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported.startswith(tuple(f"{engine}." for engine in ENGINES)))
    assert reaching == []
