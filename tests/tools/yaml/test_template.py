"""Every `{PARAM}` value reaches the program as exactly one literal argument; nothing else runs.

Real processes: `printf '%s\\0' {X}` prints each argument it gets followed by NUL, so the
output shows how many arguments arrived and what they were. A canary file that any injected
command would create must never appear.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squadd.state.layout import SquadLayout
from squadd.tools.yaml.template import check_shell_template, substitute_shell
from squadd.tools.yaml.tool import ShellTool
from tests.tools.custom_tools import call, shell_tool

FRAGMENTS = [
    "'", '"', "\\", "$(touch {canary})", "`touch {canary}`", "; touch {canary}",
    "| touch {canary}", "&& touch {canary}", "& touch {canary} &", "\n touch {canary}\n",
    "*", "?", "[a-z]", "~", "$HOME", "${HOME}", "$'\\x41'", "{X}", "%s", "-n", "--", " ",
    "\t", "\r", "é", "😀", "中文", "' ; touch {canary} ; '", '"; touch {canary}; "',
    "$((1+1))", "<(touch {canary})", ">{canary}", "!!", "#", "\\'", "'\\''",
]


def values(canary: Path) -> st.SearchStrategy[str]:
    pieces = [f.replace("{canary}", shlex.quote(str(canary))) if "{canary}" in f else f
              for f in FRAGMENTS]
    text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                   max_size=40)
    return st.one_of(text, st.lists(st.one_of(st.sampled_from(pieces), text),
                                    max_size=6).map("".join))


def _tools() -> dict[str, ShellTool]:
    param = {"X": {"type": "string", "description": "anything"}}
    return {
        "bash": shell_tool({"description": "d", "tags": ["read"], "parameters": param,
                            "bash": r"printf '%s\0' {X}"}, name="bash_form"),
        "double-quoted": shell_tool({"description": "d", "tags": ["read"], "parameters": param,
                                     "bash": r'printf "%s\0" "{X}"'}, name="dq_form"),
        "run": shell_tool({"description": "d", "tags": ["read"], "parameters": param,
                           "run": r"printf '%s\0' {X}"}, name="run_form"),
        "steps": shell_tool({"description": "d", "tags": ["read"], "parameters": param,
                             "steps": [{"name": "one", "bash": r"printf '%s\0' {X}"}]},
                            name="steps_form"),
    }


@pytest.mark.slow
@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_values_arrive_as_one_literal_argument(layout: SquadLayout,
                                                      data: st.DataObject) -> None:
    canary = layout.repo / "CANARY"
    value = data.draw(values(canary))
    tools = _tools()
    form = data.draw(st.sampled_from(sorted(tools)))
    tool = tools[form]
    result = anyio.run(lambda: call(layout, tool, tool.name, {"X": value}))
    assert result.ok, result.text
    expected = value + "\x00"
    if form == "steps":
        expected = f"[step one] exit 0\n{expected}\n[1 step: 1 ok]"
    assert result.text == expected
    assert not canary.exists()


async def test_nasty_values_reach_a_python_argv_dumper_unchanged(layout: SquadLayout) -> None:
    canary = layout.repo / "CANARY"
    dumper = (f"{shlex.quote(sys.executable)} -c "
              "'import json, sys; print(json.dumps(sys.argv[1:]))'")
    tool = shell_tool({"description": "d", "tags": ["read"],
                       "parameters": {"A": {"type": "string", "description": "a"},
                                      "L": {"type": "array", "description": "l"}},
                       "bash": dumper + " {A} --mid {L} end"})
    nasty = f"$(touch {canary}); `touch {canary}` | & * \n '\" ${{IFS}}"
    result = await call(layout, tool, "t", {"A": nasty, "L": ["x y", "*", f";touch {canary}"]})
    assert json.loads(result.text) == [nasty, "--mid", "x y", "*", f";touch {canary}", "end"]
    assert not canary.exists()


async def test_a_value_holding_nul_is_refused_before_anything_runs(layout: SquadLayout) -> None:
    marker = layout.repo / "ran"
    tool = shell_tool({"description": "d", "tags": ["read"],
                       "parameters": {"X": {"type": "string", "description": "x"}},
                       "bash": f"touch {shlex.quote(str(marker))}; echo {{X}}"})
    result = await call(layout, tool, "t", {"X": "a\x00b"})
    assert not result.ok and "NUL character" in result.text
    assert not marker.exists()


@pytest.mark.parametrize("template, reason", [
    ("echo '{X}'", "inside single quotes"),
    ('echo `echo "{X}"`', "inside `...`"),
    ('cat <<EOF\n"{X}"\nEOF', "after a heredoc"),
    ("echo ${X}", "reads a shell variable"),
    ("echo `echo {X}`", "inside `...`"),
    ("cat <<EOF\n{X}\nEOF", "after a heredoc"),
    ("echo ${Y:-{X}}", "inside ${...}"),
])
def test_placeholders_where_quoting_would_not_hold_are_refused_at_load(
        template: str, reason: str) -> None:
    from squadd.tools.yaml.checks import check_spec
    from squadd.tools.yaml.schema import ShellToolFile

    spec = ShellToolFile.model_validate({
        "description": "d", "parameters": {"X": {"type": "string", "description": "x"}},
        "bash": template})
    with pytest.raises(ValueError, match=re.escape(reason)):
        check_spec(spec)


@pytest.mark.parametrize("template, shown", [
    ('printf %s "{X}"', "{v}"),
    ('printf %s "a-{X}-b"', "a-{v}-b"),
    ('printf %s "$(printf %s "{X}")"', "{v}"),
    ('printf %s ${U:-"{X}"}', "{v}"),
])
@pytest.mark.parametrize("value", ['x"; echo HIJACKED; "', "$(echo HIJACKED)",
                                   "`echo HIJACKED`", "ends\\", 'mid\\"q', "two\nlines",
                                   "$HOME"])
def test_a_placeholder_in_double_quotes_stays_one_literal_string(
        template: str, shown: str, value: str) -> None:
    check_shell_template(template, ["X"])
    command = substitute_shell(template, {"X": value})
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    assert done.stdout == shown.replace("{v}", value)
