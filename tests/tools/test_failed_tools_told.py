"""A tool whose file failed to load is not just "unknown" to the model that calls it: the
failure says the tool exists, that it failed to load, and why; through merges and narrowing."""

from __future__ import annotations

import pytest

from squadd.state.layout import SquadLayout
from squadd.tools.base import ToolSet
from tests.tools.custom_tools import call, discover, write

BROKEN = {
    "count.yaml": ("description: d\nparameters:\n  N: {type: string, description: n}\n"
                   "bash: 'if (( {N} > 1 )); then echo big; fi'\n", "arithmetic"),
    "slug.yaml": ("description: d\nparameters:\n  S:\n    type: string\n    description: s\n"
                  "    validation: {pattern: '(?=a)a'}\nbash: echo {S}\n", "look-around"),
    "crash.py": ("raise RuntimeError('no database configured')\n", "no database configured"),
    "syntax.py": ("def broken(:\n", "syntax error"),
}


@pytest.fixture
def toolset(layout: SquadLayout) -> ToolSet:
    for name, (text, _) in BROKEN.items():
        write(layout.root / "tools", name, text)
    write(layout.root / "tools", "hello.yaml", "description: d\nbash: echo hello\n")
    return discover(layout).toolset()


@pytest.mark.parametrize("filename", sorted(BROKEN))
async def test_calling_a_tool_that_failed_to_load_says_so_and_why(
        layout: SquadLayout, toolset: ToolSet, filename: str) -> None:
    name = filename.rsplit(".", 1)[0]
    result = await call(layout, toolset, name, {})
    assert not result.ok
    assert f"tool {name!r} exists but failed to load" in result.text, result.text
    assert BROKEN[filename][1] in result.text and filename in result.text
    assert "hello" in result.text  # and what it can call instead


async def test_a_name_nobody_defined_is_still_an_unknown_tool(
        layout: SquadLayout, toolset: ToolSet) -> None:
    result = await call(layout, toolset, "nonexistent", {})
    assert not result.ok and result.text.startswith("unknown tool 'nonexistent'")


async def test_merging_and_narrowing_keep_the_reason(layout: SquadLayout,
                                                     toolset: ToolSet) -> None:
    session_tools = ToolSet().merged(toolset).narrowed(["count", "hello"])
    assert set(session_tools.unavailable) == {"count"}
    told = await call(layout, session_tools, "count", {})
    assert "exists but failed to load" in told.text
    hidden = await call(layout, session_tools, "crash", {})
    assert hidden.text.startswith("unknown tool")
