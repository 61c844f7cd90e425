"""Tool files are read as YAML 1.2: only `true` and `false` are booleans, so `on`, `yes`, `no`
and `off` stay text where the file wants text, and are a load error naming the file and key
where it wants a boolean. Nothing is read as a base-60 number; a key given twice is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from squadd.errors import ShellToolError
from squadd.state.layout import SquadLayout
from squadd.tools.yaml.agent import load_agent_tool
from squadd.tools.yaml.files import load_shell_file, parse_yaml
from tests.tools.custom_tools import call, discover, write

TEXTS = """
description: on
tags: [run]
bash: echo "{WORD}" "{TIME}"
parameters:
  WORD: {type: string, description: yes, default: yes}
  TIME: {type: string, description: no, default: 1:20}
metadata:
  on: off
"""


def _refused(path: Path) -> str:
    with pytest.raises(ShellToolError) as caught:
        load_shell_file(path)
    assert str(caught.value).startswith(f"{path}: ")
    return str(caught.value)


def test_yes_no_on_off_are_text_and_only_true_false_are_booleans(tmp_path: Path) -> None:
    document = parse_yaml(tmp_path / "t.yaml",
                          "a: yes\nb: no\nc: on\nd: off\ne: y\nf: true\ng: false\nh: 1:20\n"
                          "i: 010\nj: 0o10\non: 1\n")
    assert document == {"a": "yes", "b": "no", "c": "on", "d": "off", "e": "y", "f": True,
                        "g": False, "h": "1:20", "i": 10, "j": 8, "on": 1}


def test_on_yes_in_a_tool_file_stays_text_where_the_schema_wants_text(tmp_path: Path) -> None:
    spec = load_shell_file(write(tmp_path, "words.yaml", TEXTS))
    assert spec.description == "on"
    assert spec.parameters["WORD"].default == "yes"
    assert spec.parameters["WORD"].description == "yes"
    assert spec.parameters["TIME"].default == "1:20"  # YAML 1.1 read this as 80
    assert spec.metadata is not None and spec.metadata.model_extra == {"on": "off"}


async def test_the_text_values_reach_the_command_as_written(layout: SquadLayout) -> None:
    write(layout.root / "tools", "words.yaml", TEXTS)
    found = discover(layout)
    assert found.failures == ()
    result = await call(layout, found.tools, "words")
    assert result.result_type == "success", result.text
    assert result.text.splitlines()[0] == "yes 1:20"


@pytest.mark.parametrize(("text", "key"), [
    ("description: d\nsteps:\n  - {name: a, bash: echo a}\n  - {name: b, bash: echo b, "
     "parallel: yes}\n", "steps.1.parallel"),
    ("description: d\nbash: echo\ninteractive: on\n", "interactive"),
    ("description: d\nbash: echo\nignore-errors: no\n", "ignore-errors"),
    ("description: d\nbash: echo {X}\nparameters:\n  X: {type: string, description: x, "
     "required: yes}\n", "parameters.X.required"),
    ("description: d\nbash: echo\nenvironment: {inherit: off}\n", "environment.inherit"),
])
def test_yes_or_on_where_a_boolean_is_wanted_is_an_error_naming_file_and_key(
        tmp_path: Path, text: str, key: str) -> None:
    error = _refused(write(tmp_path, "flags.yaml", text))
    assert f"'{key}'" in error and "valid boolean" in error
    assert "write true or false (tool files are YAML 1.2" in error


def test_true_and_false_are_still_booleans(tmp_path: Path) -> None:
    spec = load_shell_file(write(tmp_path, "t.yaml",
                                 "description: d\nbash: echo\ninteractive: true\n"
                                 "ignore-errors: false\n"))
    assert spec.interactive is True and spec.ignore_errors is False


def test_a_key_given_twice_is_an_error_naming_the_file_and_key(tmp_path: Path) -> None:
    error = _refused(write(tmp_path, "twice.yaml",
                           "description: d\nbash: echo one\nbash: echo two\n"))
    assert "not valid YAML" in error and 'duplicate key "bash"' in error


def test_an_agent_tool_reads_yaml_1_2_too(tmp_path: Path) -> None:
    path = write(tmp_path, "ask.yaml", "type: agent\ndescription: ask\nagent: hockney\n"
                                       "prompt: review\nblocking: no\n")
    with pytest.raises(ShellToolError) as caught:
        load_agent_tool(path, source="project")
    assert str(caught.value).startswith(f"{path}: ")
    assert "'blocking': Input should be a valid boolean, not 'no': write true or false" in \
        str(caught.value)
