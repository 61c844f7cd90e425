"""The keys of a YAML tool beyond its command: typos are named with the likely key, refused
settings say why, keys squadd cannot honour are warnings, and the ones it honours run."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import ApprovalRequested, ApprovalResolved
from squadd.errors import ShellToolError
from squadd.state.layout import SquadLayout
from squadd.tools.approvals import ApprovalBroker
from squadd.tools.yaml.checks import check_spec, tool_warnings
from squadd.tools.yaml.files import load_shell_file
from squadd.tools.yaml.run import step_dependencies
from squadd.tools.yaml.schema import ShellToolFile
from tests.tools.custom_tools import Recorder, call, shell_tool, write


@pytest.mark.parametrize(("yaml", "message"), [
    ("descripton: d\nbash: echo\n", "unknown key 'descripton' (did you mean 'description'?)"),
    ("description: d\nbash: echo\nignore_errors: true\n",
     "unknown key 'ignore_errors' (did you mean 'ignore-errors'?)"),
    ("description: d\nbash: echo {P}\nparameters:\n  P:\n    description: p\n"
     "    detailed_help: x\n",
     "unknown key 'parameters.P.detailed_help' (did you mean 'detailed-help'?)"),
    ("description: d\nsteps:\n  - name: a\n    bash: x\n    continue-on-eror: true\n",
     "unknown key 'steps.0.continue-on-eror' (did you mean 'continue-on-error'?)"),
    ("description: d\nbash: x\nresources:\n  max-memroy: 1MB\n",
     "unknown key 'resources.max-memroy' (did you mean 'max-memory'?)"),
    ("description: d\nbash: x\ncolour: red\n", "unknown key 'colour'"),
])
def test_an_unknown_key_is_an_error_that_suggests_the_key_it_resembles(
        tmp_path: Path, yaml: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(yaml, encoding="utf-8")
    with pytest.raises(ShellToolError) as caught:
        load_shell_file(path)
    assert str(caught.value) == f"{path}: {message}"


@pytest.mark.parametrize("data", [
    {"description": "d", "bash": "echo {P}", "parameters": {
        "P": {"description": "p", "security": {"escape-shell": False}}}},
    {"description": "d", "bash": "echo", "security": {"escape-shell": False}},
])
def test_turning_escape_shell_off_is_refused_with_the_reason(data: dict[str, Any]) -> None:
    spec = ShellToolFile.model_validate(data)
    with pytest.raises(ValueError, match="'escape-shell: false' is refused: squadd always "
                                         "quotes parameter values"):
        check_spec(spec)


def test_keys_squadd_cannot_honour_are_warnings_not_failures() -> None:
    spec = ShellToolFile.model_validate({
        "description": "d", "bash": "echo {P}", "interactive-options": {"timeout": 1000},
        "parameters": {"P": {"description": "p", "transform": "value.replace('a', 'b')",
                             "validation": {"minimum": 1}}},
        "security": {"execution-privilege": "reduced", "isolation": "container"},
        "file-paths": {"temp-directory": "/tmp/x"},
        "function-calling": {"schema-generation": {"include-defaults": False}},
        "resources": {"cleanup": [{"final-command": "rm -f x"}]},
    })
    check_spec(spec)
    warnings = tool_warnings(spec)
    assert [w.split(" ")[0] for w in warnings] == [
        "security.execution-privilege:", "security.isolation:", "file-paths.temp-directory",
        "function-calling.schema-generation", "parameters.P.validation:",
        "parameters.P.transform", "interactive-options"]
    assert shell_tool({"description": "d", "bash": "echo"}).warnings == ()


def test_an_elevated_tool_always_asks() -> None:
    tool = shell_tool({"description": "d", "bash": "echo", "tags": ["read"],
                       "security": {"execution-privilege": "elevated"}})
    assert tool.default_approval == "ask" and "elevated is not applied" in tool.warnings[0]


async def test_transform_then_format_shape_the_words_of_the_command(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["read"],
                       "run": "printf '<%s>' {NAME} {FLAG} {LEVEL} {TAGS}", "parameters": {
                           "NAME": {"description": "n", "transform": "value.trim().toUpperCase()"},
                           "FLAG": {"type": "boolean", "description": "f", "default": False,
                                    "format": "--flag"},
                           "LEVEL": {"type": "number", "description": "l", "required": False,
                                     "format": "--level={value}"},
                           "TAGS": {"type": "array", "description": "t", "default": [],
                                    "format": "-t{value}"}}})
    quiet = await call(layout, tool, "t", {"NAME": "  ada "})
    assert quiet.text == "<ADA>"
    loud = await call(layout, tool, "t", {"NAME": "b", "FLAG": True, "LEVEL": 3,
                                          "TAGS": ["x y", "z"]})
    assert loud.text == "<B><--flag><--level=3><-tx y><-tz>"


def test_detailed_help_reaches_the_schema_the_model_reads() -> None:
    tool = shell_tool({"description": "d", "bash": "echo {P}", "parameters": {
        "P": {"description": "The path", "detailed-help": "Relative to the repo.\n"}}})
    schema = tool.parameters_schema()
    assert schema["properties"]["P"]["description"] == "The path\n\nRelative to the repo."


async def test_a_step_output_variable_feeds_later_steps(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["read"], "steps": [
        {"name": "make", "bash": "printf '%s\\n' \"it's; \\$(x)\"", "output": "MADE"},
        {"name": "side", "bash": "echo side", "parallel": True},
        {"name": "use", "bash": "printf '[%s]' {MADE}", "parallel": True,
         "run-condition": "{MADE} contains 'it'"},
        {"name": "short", "bash": "echo abcdef", "output": {"variable": "CUT",
                                                            "buffer-limit": 3}},
        {"name": "cut", "bash": "printf '[%s]' {CUT}"},
    ]})
    assert tool.definition.steps is not None
    assert step_dependencies(tool.definition.steps)["use"] == {"make"}
    result = await call(layout, tool, "t")
    assert result.ok, result.text
    assert "[it's; $(x)]" in result.text.splitlines()
    assert "[abc]" in result.text.splitlines()


def test_an_output_variable_must_not_take_a_parameter_name() -> None:
    spec = ShellToolFile.model_validate({
        "description": "d", "parameters": {"P": {"description": "p"}},
        "steps": [{"name": "a", "bash": "echo {P}", "output": "P"}]})
    with pytest.raises(ValueError, match=r"steps\.a\.output: 'P' is already a parameter"):
        check_spec(spec)


async def test_ignore_errors_keeps_a_failing_tool_a_success(layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["read"], "bash": "echo partial; exit 4",
                       "ignore-errors": True})
    result = await call(layout, tool, "t")
    assert result.ok and result.details["exit_code"] == 4
    assert result.text == "partial\n[exit code 4, ignored: ignore-errors]"


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is a Linux limit")
async def test_resource_limits_apply_to_the_command_and_its_children(
        layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["read"],
                       "resources": {"max-memory": "256MB", "max-cpu-time": "2500ms"},
                       "bash": "bash -c 'ulimit -v; ulimit -t'"})
    result = await call(layout, tool, "t")
    assert result.text.splitlines() == [str(256 * 1024), "3"]
    hog = shell_tool({"description": "d", "tags": ["read"], "resources": {"max-memory": "256MB"},
                      "run": f"{shutil.which('python3') or sys.executable} -c "
                             "'bytearray(4 << 30)'"})
    failed = await call(layout, hog, "t")
    assert not failed.ok and "MemoryError" in failed.text


def _interactive(default: str, wait: str = "60s") -> dict[str, Any]:
    return {"description": "d", "tags": ["read"], "bash": "echo ran", "interactive": True,
            "interactive-options": {"timeout": wait, "default-response": default}}


async def _answer(recorder: Recorder, broker: ApprovalBroker, approved: bool) -> None:
    request = (await recorder.wait_for(ApprovalRequested))[0]
    broker.resolve(request.approval_id, approved)


@pytest.mark.parametrize(("approved", "ran"), [(True, True), (False, False)])
async def test_an_interactive_tool_asks_through_the_approval_flow(
        layout: SquadLayout, recorder: Recorder, approved: bool, ran: bool) -> None:
    broker = ApprovalBroker(Settings(tools=ToolsSettings(approval_timeout_s=60)), recorder)
    async with anyio.create_task_group() as group:
        group.start_soon(_answer, recorder, broker, approved)
        result = await call(layout, shell_tool(_interactive("y")), "t", sink=recorder,
                            approvals=broker)
    assert (result.text == "ran") is ran
    [request] = recorder.of(ApprovalRequested)
    assert request.question == ("t asks before it runs (interactive). Run it now with {}? (no "
                                "answer within 60 s counts as yes)")
    if not ran:
        assert result.text == "t was not run: the confirmation it asks for was declined"


@pytest.mark.parametrize(("default", "ran"), [("y", True), ("n", False)])
async def test_silence_past_the_interactive_timeout_takes_the_default_response(
        layout: SquadLayout, recorder: Recorder, default: str, ran: bool) -> None:
    broker = ApprovalBroker(Settings(tools=ToolsSettings(approval_timeout_s=600)), recorder)
    with anyio.fail_after(30):
        result = await call(layout, shell_tool(_interactive(default, wait="200ms")), "t",
                            sink=recorder, approvals=broker)
    assert (result.text == "ran") is ran
    assert broker.pending() == []
    [resolved] = recorder.of(ApprovalResolved)
    assert not resolved.approved
    if not ran:
        assert result.text == ("t was not run: no answer to its confirmation within 0.2 s, and "
                               "its default response is no")


def test_a_tool_file_may_name_itself_apart_from_its_file(layout: SquadLayout) -> None:
    path = write(layout.tools_dir, "file.yaml", "name: other\ndescription: d\nbash: echo\n")
    assert load_shell_file(path).name == "other"


async def test_cleanup_final_commands_run_after_the_tool_even_when_it_fails(
        layout: SquadLayout) -> None:
    tool = shell_tool({"description": "d", "tags": ["write"],
                       "parameters": {"F": {"description": "f"}},
                       "bash": "touch {F}.tmp; echo made; exit 2",
                       "resources": {"cleanup": [{"delete-temp-files": True},
                                                 {"final-command": "rm -v -- {F}.tmp"}]}})
    result = await call(layout, tool, "t", {"F": "scratch"})
    assert not result.ok and result.details["exit_code"] == 2
    assert result.text.splitlines() == ["made", "[cleanup] exit 0", "removed 'scratch.tmp'",
                                        "[exit code 2]"]
    assert not (layout.repo / "scratch.tmp").exists()
