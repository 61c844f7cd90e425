"""No regular expression a tool file or a model supplies can stall the daemon.

`validation.pattern` and run-condition `=~` run in a linear-time engine; patterns it cannot
compile (look-around, backreferences) are refused when the file loads, naming the file and
parameter. The hostile matches run in a child process with a generous limit, so a regression
fails the test instead of hanging the suite; nothing here measures speed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from squadd.errors import ConditionError, ShellToolError
from squadd.state.layout import SquadLayout
from squadd.tools.yaml.conditions import parse_condition
from squadd.tools.yaml.files import load_shell_file
from tests.tools.custom_tools import call, shell_tool

CATASTROPHIC = [r"^([a-z0-9]+-?)+$", r"^(a+)+$", r"^(a|a)*$", r"^(\w+\s?)*$", r"(.*a){20}$"]
"""Patterns a backtracking engine takes exponential time on, with `a` * 40 + `!`."""
HOSTILE = "a" * 40 + "!"


def _run_isolated(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_a_catastrophic_validation_pattern_answers_at_once() -> None:
    out = _run_isolated(f"""
        import anyio
        from squadd.tools.yaml.checks import check_spec
        from squadd.tools.yaml.schema import ShellToolFile
        from squadd.tools.yaml.tool import ShellTool
        from squadd.config import Settings
        for pattern in {CATASTROPHIC!r}:
            spec = ShellToolFile.model_validate({{
                "description": "d", "parameters": {{"SLUG": {{"type": "string",
                "description": "s", "validation": {{"pattern": pattern}}}}}},
                "bash": "echo {{SLUG}}"}})
            check_spec(spec)
            tool = ShellTool(spec, name="t", file=None, source="project", settings=Settings())
            try:
                tool.args_model.model_validate({{"SLUG": {HOSTILE!r}}})
                print("accepted")
            except Exception as exc:
                print("refused", type(exc).__name__)
    """)
    assert out.split("\n")[:-1] == ["refused ValidationError"] * len(CATASTROPHIC)


@pytest.mark.slow
def test_a_catastrophic_run_condition_answers_at_once() -> None:
    out = _run_isolated(f"""
        from squadd.tools.yaml.conditions import parse_condition
        for pattern in {CATASTROPHIC!r}:
            values = {{"P": pattern, "S": {HOSTILE!r}}}
            condition = parse_condition("{{S}} =~ {{P}}")
            print(condition.evaluate(lambda ref: values[ref.name]))
            literal = parse_condition("{{S}} =~ '" + pattern.replace("\\\\", "\\\\\\\\") + "'")
            print(literal.evaluate(lambda ref: values[ref.name]))
    """)
    assert out.split("\n")[:-1] == ["False"] * (2 * len(CATASTROPHIC))


@pytest.mark.parametrize("pattern, reason", [
    (r"^(?=a)\w+$", "look-around"),
    (r"^(?!x)\w+$", "look-around"),
    (r"(?<=a)b", "look-around"),
    (r"(a)\1", "backreferences"),
    (r"[", "unclosed"),
])
def test_patterns_the_linear_engine_cannot_run_are_refused_at_load(
        layout: SquadLayout, pattern: str, reason: str) -> None:
    path = layout.root / "tools" / "slugger.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "description: d\nparameters:\n  SLUG:\n    type: string\n    description: s\n"
        f"    validation: {{pattern: '{pattern}'}}\nbash: echo {{SLUG}}\n", encoding="utf-8")
    with pytest.raises(ShellToolError) as caught:
        load_shell_file(path)
    message = str(caught.value)
    assert str(path) in message and "parameters.SLUG.validation.pattern" in message
    assert reason in message


@pytest.mark.parametrize("pattern", [r"^(?=a)a", r"(?<=a)b", r"(a)\\1"])
def test_run_condition_patterns_the_engine_cannot_run_are_refused(pattern: str) -> None:
    with pytest.raises(ConditionError, match="cannot be used"):
        parse_condition(f"{{X}} =~ '{pattern}'")


async def test_valid_and_invalid_values_still_validate(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["read"], "parameters": {"SLUG": {
        "type": "string", "description": "s", "validation": {"pattern": r"^[a-z0-9-]+$"}}},
        "bash": "echo {SLUG}"})
    good = await call(layout, tool, tool.name, {"SLUG": "a-1"})
    bad = await call(layout, tool, tool.name, {"SLUG": "A B"})
    assert good.ok and good.text.strip() == "a-1"
    assert not bad.ok and "SLUG" in bad.text

