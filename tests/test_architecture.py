"""squadd's shape, as docs/architecture.md promises it: no import cycle between its modules
(TYPE_CHECKING-only imports left out: they run nowhere) and no module over 500 lines. The checks
are `scripts/check_architecture.py`'s, which prints the same report outside the test suite."""

from __future__ import annotations

from pathlib import Path

import grimp

from scripts.check_architecture import MAX_MODULE_LINES, import_cycles, long_modules, report


def test_no_import_cycle_between_squadds_modules() -> None:
    cycles = import_cycles()
    assert cycles == [], report(cycles, [])


def test_no_module_is_over_the_line_limit() -> None:
    long = long_modules()
    assert long == [], report([], long)


def test_a_cycle_is_found_and_shown_as_its_chain() -> None:
    """The check itself: a three-module loop, a two-module loop and a module outside both."""
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c", "p.d", "p.e", "p.f"):
        graph.add_module(name)
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"),
                               ("p.d", "p.e"), ("p.e", "p.d"), ("p.f", "p.a")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c", "p.a"], ["p.d", "p.e", "p.d"]]
    shown = report(import_cycles(graph), [("squadd/x.py", MAX_MODULE_LINES + 1)])
    assert "p.a -> p.b -> p.c -> p.a" in shown and "squadd/x.py: 501 lines" in shown


def test_a_module_is_long_only_past_the_limit(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "at_limit.py").write_text("x = 1\n" * MAX_MODULE_LINES, encoding="utf-8")
    (package / "over.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    assert long_modules(package) == [("pkg/over.py", MAX_MODULE_LINES + 1)]
