"""The two rules of squadd's shape that the layers contract does not check: no import cycle
between squadd's modules, and no module over 500 lines. Prints every cycle (with its chain of
imports) and every long module; exits 1 if there is any, 0 when there is none.

    .venv/bin/python scripts/check_architecture.py

What counts as an import: every import grimp (installed with import-linter) finds, at module
level or inside a function, except those under `if TYPE_CHECKING:`. A function-level import
still ties the two modules together (one cannot be read, moved or tested without the other);
an import for annotations only runs nowhere, and is how a lower layer names a type from above.
A package's `__init__` is a module like any other: `squadd.x` re-exporting `squadd.x.y`, which
imports `squadd.x`, is a cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import grimp

PACKAGE = "squadd"
MAX_MODULE_LINES = 500
ROOT = Path(__file__).resolve().parent.parent


def import_graph(package: str = PACKAGE) -> grimp.ImportGraph:
    """squadd's imports, TYPE_CHECKING-only ones left out."""
    return grimp.build_graph(package, exclude_type_checking_imports=True)


def _components(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for start in sorted(graph.modules):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = []
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, sorted(graph.find_modules_directly_imported_by(start))))
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph.find_modules_directly_imported_by(child))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _shortest_cycle(graph: grimp.ImportGraph, module: str, within: set[str]) -> list[str]:
    """The shortest chain of imports from `module` back to itself inside its component."""
    best: list[str] | None = None
    for imported in sorted(graph.find_modules_directly_imported_by(module) & within):
        back = graph.find_shortest_chain(importer=imported, imported=module)
        if back is not None and (best is None or len(back) + 1 < len(best)):
            best = [module, *back]
    assert best is not None, f"{module} is in a cycle but none leads back to it"
    return best


def import_cycles(graph: grimp.ImportGraph | None = None) -> list[list[str]]:
    """One shortest cycle through each module that is on a cycle, without repeats: each is a
    chain `a -> b -> ... -> a`, sorted so that the same tangle reads the same way each run."""
    graph = graph or import_graph()
    cycles: dict[frozenset[str], list[str]] = {}
    for component in _components(graph):
        for module in sorted(component):
            cycle = _shortest_cycle(graph, module, component)
            key = frozenset(cycle)
            if key not in cycles:
                smallest = min(range(len(cycle) - 1), key=lambda i: cycle[i])
                turned = cycle[smallest:-1] + cycle[:smallest]
                cycles[key] = [*turned, turned[0]]
    return sorted(cycles.values())


def long_modules(root: Path = ROOT / PACKAGE, limit: int = MAX_MODULE_LINES
                 ) -> list[tuple[str, int]]:
    """Every module under `root` longer than `limit` lines, longest first, as a path relative
    to the repository."""
    found = []
    for path in sorted(root.rglob("*.py")):
        with path.open("rb") as handle:
            lines = sum(1 for _ in handle)
        if lines > limit:
            found.append((str(path.relative_to(root.parent)), lines))
    return sorted(found, key=lambda item: (-item[1], item[0]))


def report(cycles: Iterable[list[str]], long: Iterable[tuple[str, int]]) -> str:
    lines = []
    cycles, long = list(cycles), list(long)
    if cycles:
        lines.append(f"{len(cycles)} import cycle(s) between squadd's modules:")
        lines += [f"  {' -> '.join(cycle)}" for cycle in cycles]
    if long:
        lines.append(f"{len(long)} module(s) over {MAX_MODULE_LINES} lines:")
        lines += [f"  {path}: {count} lines" for path, count in long]
    return "\n".join(lines) or (f"no import cycle, no module over {MAX_MODULE_LINES} lines")


def main() -> int:
    sys.path.insert(0, str(ROOT))  # this checkout's squadd, wherever the script runs from
    cycles, long = import_cycles(), long_modules()
    print(report(cycles, long))
    return 1 if cycles or long else 0


if __name__ == "__main__":
    sys.exit(main())
