"""The run-condition language: references, comparisons, boolean logic, errors."""

from __future__ import annotations

import pytest

from squadd.errors import ConditionError
from squadd.tools.yaml.conditions import Ref, parse_condition

VALUES = {("build", "exit-code"): "0", ("test", "exit-code"): "3",
          ("test", "output"): "2 passed, 1 failed", ("MODE", None): "fast", ("EMPTY", None): ""}


def holds(text: str) -> bool:
    return parse_condition(text).evaluate(lambda ref: VALUES.get((ref.name, ref.field), ""))


@pytest.mark.parametrize("text, expected", [
    ("{build.exit-code} == 0", True),
    ("{test.exit-code} != 0", True),
    ("{test.exit-code} >= 3 && {test.exit-code} < 4", True),
    ("{test.output} contains 'failed'", True),
    ("{test.output} =~ '^[0-9]+ passed'", True),
    ("{MODE} == fast", True),
    ('{MODE} == "slow" || {build.exit-code} == 0', True),
    ("not ({build.exit-code} == 0)", False),
    ("!{EMPTY}", True),
    ("{MODE}", True),
    ("{test.exit-code} == 3 and {test.output} contains passed", True),
    ("{test.output} > 1", False),  # not a number: ordering is false
    ("{skipped.exit-code} == 0", False),  # a step that did not run has no exit code
])
def test_conditions_evaluate(text: str, expected: bool) -> None:
    assert holds(text) is expected


def test_references_are_listed() -> None:
    condition = parse_condition("{a.exit-code} == 0 || {b.output} contains {P}")
    assert condition.refs() == [Ref("a", "exit-code"), Ref("b", "output"), Ref("P", None)]


@pytest.mark.parametrize("text, message", [
    ("", "empty"), ("{a.exit-code} ==", "ends too early"), ("(1 == 1", "not closed"),
    ("1 == 1 )", "unexpected"), ("{a.output} =~ '('", "bad regular expression"),
    ("== 1", "expected a value"), ("{a.exit-code} == 0 $", "cannot read"),
])
def test_bad_conditions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConditionError, match=message):
        parse_condition(text)
