"""Fail closed: an invoker without an approval gate refuses `ask` and `deny` tools, `confirm`
answers no unless a gate says yes, and a `ToolContext`'s private hooks are not constructor
arguments. The public tool-author API's examples run as written."""

from __future__ import annotations

import inspect
import re
import textwrap
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

import squadd
from squadd.config import Settings
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import Approval, Tool, ToolContext, ToolOutput, ToolResult, ToolSet
from squadd.tools.gates import Unattended
from squadd.tools.invoke import CallOrigin, ToolInvoker

ORIGIN = CallOrigin(session_id="s-1", agent="fenster")


class NoArgs(BaseModel):
    pass


def guarded(approval: Approval) -> Tool[NoArgs]:
    class Guarded(Tool[NoArgs]):
        name = f"guarded_{approval}"
        description = "Records that it ran"
        args_model = NoArgs
        default_approval = approval
        ran: ClassVar[list[str]] = []

        async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutput:
            self.ran.append(self.name)
            return "ran"

    return Guarded()


class Confirming(Tool[NoArgs]):
    name = "confirming"
    description = "Asks before acting"
    args_model = NoArgs

    async def run(self, args: NoArgs, ctx: ToolContext) -> ToolOutput:
        return "acted" if await ctx.confirm("Go ahead?") else "held back"


async def _invoke(invoker: ToolInvoker, tool: Tool[Any]) -> ToolResult:
    return await invoker.invoke(ToolSet([tool]), ToolCall(id="c1", name=tool.name, arguments={}),
                                ORIGIN)


@pytest.mark.parametrize(("approval", "runs"), [("allow", True), ("ask", False), ("deny", False)])
async def test_an_invoker_without_a_gate_runs_only_allowed_tools(
        layout: SquadLayout, approval: Approval, runs: bool) -> None:
    tool = guarded(approval)
    result = await _invoke(ToolInvoker(layout, Settings()), tool)
    assert result.ok is runs
    assert tool.ran == ([tool.name] if runs else [])  # type: ignore[attr-defined]
    if approval == "ask":
        assert "needs approval and no one can be asked" in result.text
    if approval == "deny":
        assert "denied by its default policy" in result.text


async def test_a_rule_denying_an_allowed_tool_holds_without_a_gate(layout: SquadLayout) -> None:
    tool = guarded("allow")
    settings = Settings.model_validate({"tools": {"approvals": {"guarded_*": "deny"}}})
    result = await _invoke(ToolInvoker(layout, settings), tool)
    assert not result.ok and "denied by tools.approvals rule 'guarded_*'" in result.text


async def test_confirm_answers_no_without_a_gate_and_when_built_by_hand(
        layout: SquadLayout) -> None:
    assert (await _invoke(ToolInvoker(layout, Settings()), Confirming())).text == "held back"
    ctx = ToolContext(session_id="s", call_id="c", agent="a", repo_dir=layout.repo,
                      squad_dir=layout.root)
    assert await ctx.confirm("Delete everything?") is False


async def test_a_gate_that_approves_asks_still_refuses_denials(layout: SquadLayout) -> None:
    invoker = ToolInvoker(layout, Settings(), approvals=Unattended(Settings(), approve_asks=True))
    assert (await _invoke(invoker, guarded("ask"))).ok
    assert not (await _invoke(invoker, guarded("deny"))).ok


@pytest.mark.parametrize("private", ["_progress", "_confirm"])
def test_private_hooks_are_not_constructor_arguments(layout: SquadLayout, private: str) -> None:
    async def yes(question: str) -> bool:
        return True

    with pytest.raises(TypeError, match=private):
        ToolContext(session_id="s", call_id="c", agent="a", repo_dir=layout.repo,
                    squad_dir=layout.root, **{private: yes})


def _examples(doc: str | None) -> list[str]:
    """The indented code blocks of a docstring that import from squadd."""
    blocks = re.findall(r"\n\n((?:    .*\n|\n)+)", inspect.cleandoc(doc or "") + "\n")
    return [textwrap.dedent(b) for b in blocks if "from squadd import" in b]


def test_the_public_api_is_declared_and_documented_with_examples() -> None:
    assert sorted(squadd.__all__) == ["ToolContext", "ToolResult", "__version__", "tool"]
    for name in ("tool", "ToolContext", "ToolResult"):
        assert _examples(getattr(squadd, name).__doc__), f"{name} has no example"
    assert _examples(squadd.__doc__)


@pytest.mark.parametrize("where", ["squadd", "tool", "ToolContext", "ToolResult"])
async def test_each_example_defines_tools_that_run_through_the_pipeline(
        layout: SquadLayout, where: str) -> None:
    doc = squadd.__doc__ if where == "squadd" else getattr(squadd, where).__doc__
    (layout.repo / "notes.txt").write_text("ship one\nfine\nship two\n", encoding="utf-8")
    arguments = {"count_mentions": {"path": "notes.txt", "word": "ship"},
                 "deploy": {"target": "staging"}, "word_count": {"text": "one two three"},
                 "greet": {"name": "Ada"}}
    expected = {"count_mentions": "2 lines mention ship in notes.txt",
                "deploy": "deployed to staging for fenster", "word_count": "3 words",
                "greet": "Hello, Ada!"}
    ran = 0
    for code in _examples(doc):
        namespace: dict[str, Any] = {}
        exec(compile(code.replace("...", "return 'published'"), f"<{where} example>", "exec"),
             namespace)
        tools = [value for value in namespace.values() if isinstance(value, Tool)]
        for tool in tools:
            if tool.name not in arguments:
                continue
            result = await ToolInvoker(layout, Settings()).invoke(
                ToolSet([tool]), ToolCall(id="c1", name=tool.name,
                                          arguments=arguments[tool.name]), ORIGIN)
            assert result.ok and result.text == expected[tool.name], result.text
            ran += 1
    assert ran >= 1


def test_tool_docstrings_are_read_in_google_sphinx_and_numpy_style() -> None:
    from squadd.tools.python.docstrings import parse_docstring

    google = parse_docstring("Find files.\n\nArgs:\n    pattern (str): A glob,\n"
                             "        like *.py.\n    limit: At most this many.\n")
    sphinx = parse_docstring("Find files.\n\n:param pattern: A glob,\n    like *.py.\n"
                             ":param int limit: At most this many.\n")
    numpy = parse_docstring("Find files.\n\nParameters\n----------\npattern : str\n"
                            "    A glob,\n    like *.py.\nlimit : int\n    At most this many.\n")
    want = ("Find files.", {"pattern": "A glob, like *.py.", "limit": "At most this many."})
    assert google == sphinx == numpy == want
    assert parse_docstring("Only a summary.\n\nAnd a paragraph.") == (
        "Only a summary.\n\nAnd a paragraph.", {})


