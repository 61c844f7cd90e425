"""Multi-step YAML tools: order, conditions, parallel steps, retries, fallbacks, use-tool,
aliases, and a tool file's own tests."""

from __future__ import annotations

import pytest

from squadd.config import Settings
from squadd.state.layout import SquadLayout
from squadd.tools.invoke import ToolInvoker
from squadd.tools.yaml.run import step_dependencies
from squadd.tools.yaml.schema import ShellToolFile
from squadd.tools.yaml.self_tests import run_tool_tests
from squadd.tools.yaml.tool import ShellTool
from tests.tools.custom_tools import call, discover, shell_tool, write


async def test_run_condition_sees_earlier_exit_codes_and_output(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["run"], "steps": [
        {"name": "probe", "bash": "echo version 3; exit 2", "continue-on-error": True},
        {"name": "when-failed", "run-condition": "{probe.exit-code} != 0",
         "bash": "echo probe failed"},
        {"name": "when-ok", "run-condition": "{probe.exit-code} == 0", "bash": "echo nope"},
        {"name": "by-output", "run-condition": "{probe.output} contains 'version 3'",
         "bash": "echo saw v3"},
    ]})
    result = await call(layout, tool, "t")
    assert result.ok
    assert result.text.splitlines() == [
        "[step probe] exit 2 (continue-on-error)", "version 3",
        "[step when-failed] exit 0", "probe failed",
        "[step when-ok] skipped: run-condition '{probe.exit-code} == 0' is false",
        "[step by-output] exit 0", "saw v3",
        "[4 steps: 2 ok, 1 failed, 1 skipped]",
    ]


async def test_a_failing_step_stops_the_rest_and_fails_the_call(layout: SquadLayout) -> None:
    marker = layout.repo / "ran"
    tool = shell_tool({"description": "d", "tags": ["run"], "steps": [
        {"name": "a", "bash": "exit 4"},
        {"name": "b", "bash": f"touch {marker}"},
    ]})
    result = await call(layout, tool, "t")
    assert not result.ok and result.details["exit_code"] == 4
    assert "[step b] not run: step a failed" in result.text
    assert not marker.exists()


async def test_parallel_steps_run_together_and_wait_for_joins_them(layout: SquadLayout) -> None:
    # Each parallel step marks that it started, then waits (bounded) until all three have: run
    # one after another, the first would give up waiting and fail. Overlap, not speed, is checked.
    marks = layout.repo / "marks"
    marks.mkdir()
    def step(name: str) -> str:
        return (f"touch {marks}/{name}; for i in $(seq 1200); do "
                f"[ -e {marks}/left ] && [ -e {marks}/right ] && [ -e {marks}/also ] && break; "
                f"sleep 0.05; done; [ -e {marks}/left ] && [ -e {marks}/right ] && "
                f"[ -e {marks}/also ] && echo {name}")
    tool = shell_tool({"description": "d", "tags": ["run"], "timeout": "120s", "steps": [
        {"name": "left", "bash": step("left")},
        {"name": "right", "parallel": True, "bash": step("right")},
        {"name": "also", "parallel": True, "bash": step("also")},
        {"name": "join", "wait-for": ["left", "right", "also"], "bash": "echo joined"},
    ]})
    result = await call(layout, tool, "t")
    assert result.ok, result.text
    lines = result.text.splitlines()
    assert lines.index("left") < lines.index("right") < lines.index("also") < \
        lines.index("joined")  # output stays in step order


def test_step_dependencies_follow_parallel_wait_for_and_conditions() -> None:
    spec = ShellToolFile.model_validate({"description": "d", "steps": [
        {"name": "a", "bash": "x"},
        {"name": "b", "parallel": True, "bash": "x"},
        {"name": "c", "bash": "x"},
        {"name": "d", "parallel": True, "bash": "x"},
        {"name": "e", "wait-for": "a", "bash": "x"},
        {"name": "f", "parallel": True, "run-condition": "{c.exit-code} == 0", "bash": "x"},
    ]})
    assert spec.steps is not None
    assert step_dependencies(spec.steps) == {
        "a": set(), "b": set(), "c": {"a", "b"}, "d": {"a", "b"}, "e": {"a"},
        "f": {"a", "c"}}


async def test_retry_then_fallback(layout: SquadLayout) -> None:
    counter = layout.repo / "count"
    tool = shell_tool({"description": "d", "tags": ["run"], "steps": [
        {"name": "flaky", "bash": f"echo try >> {counter}; exit 1",
         "error-handling": {"retry": {"attempts": 3, "delay": 10},
                            "fallback": "echo fell back"}},
    ]})
    result = await call(layout, tool, "t")
    assert result.ok
    assert counter.read_text().count("try") == 3
    assert "[step flaky] exit 0 after 3 attempts (from the fallback)" in result.text
    assert "[attempt 3 of 3]" in result.text and "fell back" in result.text


async def test_retry_stops_at_the_first_success(layout: SquadLayout) -> None:
    counter = layout.repo / "count"
    tool = shell_tool({"description": "d", "tags": ["run"], "steps": [
        {"name": "second-time", "bash": f"echo x >> {counter}; "
                                        f"[ $(wc -l < {counter}) -ge 2 ]",
         "error-handling": {"retry": {"attempts": 5, "delay": "1ms"}}},
    ]})
    result = await call(layout, tool, "t")
    assert result.ok and counter.read_text().count("x") == 2


async def test_use_tool_passes_parameters_and_alias_sets_defaults(layout: SquadLayout) -> None:
    write(layout.tools_dir, "shout.yaml", """
        description: Print a word loudly
        tags: [read]
        parameters:
          WORD: {type: string, description: the word}
          TIMES: {type: number, description: how often, default: 1}
        bash: for i in $(seq 1 {TIMES}); do printf '%s!\\n' {WORD}; done
        """)
    write(layout.tools_dir, "greet.yaml", """
        description: Greet via shout
        tags: [read]
        parameters:
          NAME: {type: string, description: who}
        steps:
          - name: hello
            use-tool: shout
            with: {WORD: "hi {NAME}", TIMES: 2}
          - name: check
            run-condition: "{hello.output} contains 'hi'"
            bash: echo checked
        """)
    write(layout.tools_dir, "shout-twice.yaml", """
        type: alias
        base-tool: shout
        description: Shout a word twice
        default-parameters: {TIMES: 2}
        """)
    found = discover(layout)
    assert found.failures == ()
    tools = found.toolset()
    greet = await call(layout, tools, "greet", {"NAME": "a b; rm"})
    assert greet.ok, greet.text
    assert greet.text.splitlines() == [
        "[step hello] use-tool shout: ok", "hi a b; rm!", "hi a b; rm!",
        "[step check] exit 0", "checked", "[2 steps: 2 ok]"]
    alias = tools.get("shout-twice")
    assert isinstance(alias, ShellTool)
    assert alias.parameters_schema()["required"] == ["WORD"]
    shouted = await call(layout, tools, "shout-twice", {"WORD": "x"})
    assert shouted.text == "x!\nx!"


async def test_use_tool_with_bad_values_fails_the_step_with_the_reason(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "num.yaml", """
        description: Needs a number
        tags: [read]
        parameters:
          N: {type: number, description: n}
        bash: echo {N}
        """)
    write(layout.tools_dir, "outer.yaml", """
        description: Passes a word
        tags: [read]
        steps:
          - name: s
            use-tool: num
            with: {N: "not a number"}
        """)
    result = await call(layout, discover(layout).toolset(), "outer")
    assert not result.ok and "use-tool num: bad 'with' values: N:" in result.text


async def test_variables_of_used_tools_are_resolved_for_the_caller(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUADD_TEST_REGION", "eu-1")
    write(layout.tools_dir, "inner.yaml", """
        description: Needs a region
        tags: [read]
        variables: [{name: SQUADD_TEST_REGION, type: text}]
        bash: echo "region=$SQUADD_TEST_REGION"
        """)
    write(layout.tools_dir, "outer.yaml", """
        description: Uses inner
        tags: [read]
        steps: [{name: s, use-tool: inner}]
        """)
    tools = discover(layout).toolset()
    outer = tools.get("outer")
    assert outer is not None and [v.name for v in outer.variables] == ["SQUADD_TEST_REGION"]
    assert "region=eu-1" in (await call(layout, tools, "outer")).text


async def test_tool_tests_pass_and_fail_with_reasons(layout: SquadLayout) -> None:
    write(layout.tools_dir, "touch.yaml", """
        description: Make a file
        tags: [write]
        parameters:
          FILE: {type: string, description: file}
        bash: touch {FILE} && echo made {FILE}
        tests:
          - name: makes the file
            parameters: {FILE: made.txt}
            expected: {exit-code: 0, output-contains: made made.txt, file-exists: made.txt}
            cleanup: ["rm made.txt"]
          - name: expects the wrong thing
            parameters: {FILE: other.txt}
            expected: {exit-code: 3, output-contains: [nothing like this], file-exists: no.txt}
            cleanup: ["rm other.txt"]
        """)
    tool = discover(layout).toolset().get("touch")
    assert isinstance(tool, ShellTool)
    outcomes = await run_tool_tests(tool, ToolInvoker(layout, Settings()))
    assert [o.passed for o in outcomes] == [True, False]
    assert outcomes[1].problems == ["exit code 0, expected 3",
                                    "the output does not contain 'nothing like this'",
                                    "file no.txt does not exist"]
    assert not (layout.repo / "made.txt").exists() and not (layout.repo / "other.txt").exists()


@pytest.mark.parametrize("data, message", [
    ({"description": "d"}, "give exactly one of 'bash', 'cmd', 'pwsh', 'run', 'script', "
                           "'commands' or 'steps'"),
    ({"description": "d", "bash": "x", "run": "y"}, "found: bash, run"),
    ({"bash": "x"}, "'description' is required"),
    ({"description": "d", "bash": "x", "timeout": 3_600_001}, "timeout: 3600001 is 3.6e.06 ms, "
                                                              "outside the range"),
    ({"description": "d", "steps": [{"name": "a", "bash": "x", "wait-for": ["b"]},
                                    {"name": "b", "bash": "y"}]}, "not an earlier step"),
    ({"description": "d", "steps": [{"name": "a", "bash": "x",
                                     "run-condition": "{a.exit-code} =="}]}, "ends too early"),
    ({"description": "d", "steps": [{"name": "a", "bash": "x",
                                     "run-condition": "{zz.output} == 'x'"}]},
     "does not name an earlier step"),
    ({"description": "d", "script": "x", "shell": "python3"}, "not supported"),
    ({"type": "alias", "base-tool": "b", "bash": "x"}, "remove 'bash'"),
    ({"description": "d", "bash": "x", "parameters": {"N": {"type": "number",
                                                             "description": "n",
                                                             "default": "abc"}}},
     "is not a valid number"),
])
def test_bad_files_are_refused_with_the_reason(data: dict[str, object], message: str) -> None:
    from squadd.tools.yaml.checks import check_spec

    spec = ShellToolFile.model_validate(data)
    with pytest.raises(ValueError, match=message):
        check_spec(spec)


def test_unknown_keys_are_named_with_their_place(layout: SquadLayout) -> None:
    from squadd.errors import ShellToolError
    from squadd.tools.yaml.files import load_shell_file

    path = write(layout.tools_dir, "x.yaml", """
        description: d
        steps:
          - name: a
            bash: x
            output: {mode: stream, colour: red}
        """)
    with pytest.raises(ShellToolError,
                       match=r"x\.yaml: unknown key 'steps\.0\.output\.colour'$"):
        load_shell_file(path)


def test_timeouts_accept_units() -> None:
    assert shell_tool({"description": "d", "bash": "x", "timeout": "500ms"}).run_timeout_s == 0.5
    assert shell_tool({"description": "d", "bash": "x", "timeout": 90000}).run_timeout_s == 90
    assert shell_tool({"description": "d", "bash": "x"}).run_timeout_s == 60
