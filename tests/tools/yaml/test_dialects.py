"""Commands for PowerShell and CMD, and per-platform commands: values quoted for their
interpreter, unsafe placeholders refused at load, and a tool whose interpreter is missing
listed as unavailable on this platform rather than broken."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from squadd.errors import TemplateError
from squadd.state.layout import SquadLayout
from squadd.tools.yaml.dialects import (
    check_template,
    cmd_quote,
    pwsh_quote,
    substitute,
)
from squadd.tools.yaml.keys import CommandsSpec
from tests.tools.custom_tools import call, discover, write


@pytest.mark.parametrize(("value", "quoted"), [
    ("plain", "'plain'"),
    ("it's", "'it''s'"),
    ("\u2018curly\u2019", "'\u2018\u2018curly\u2019\u2019'"),
    ("$(Remove-Item x); `n", "'$(Remove-Item x); `n'"),
    (7, "'7'"),
])
def test_a_powershell_value_is_one_single_quoted_literal(value: object, quoted: str) -> None:
    assert pwsh_quote(value) == quoted


@pytest.mark.parametrize(("template", "where"), [
    ('Write-Output "{X}"', "inside quotes"),
    ("Write-Output '{X}'", "inside quotes"),
    ("Write-Output `{X}", "after a ` escape"),
    ("git --% log {X}", "after --%"),
    ("@'\n{X}\n'@", "inside a here-string"),
])
def test_powershell_placeholders_that_quoting_cannot_hold_are_refused(template: str,
                                                                      where: str) -> None:
    with pytest.raises(TemplateError, match=where):
        check_template(template, ["X"], "pwsh")


def test_powershell_arrays_become_a_list_of_literals() -> None:
    assert substitute("Get-Item -Path {P}", {"P": ["a", "b'c"]}, "pwsh") == \
        "Get-Item -Path 'a', 'b''c'"


def test_cmd_values_are_quoted_and_syntax_characters_refused() -> None:
    assert cmd_quote("C:\\work dir\\*.txt", "P") == '"C:\\work dir\\*.txt"'
    assert substitute('dir {P} "{P}"', {"P": "a b"}, "cmd") == 'dir "a b" "a b"'
    for bad in ['x" & calc', "100%", "a|b", "x^y", "a\nb", "it's"]:
        with pytest.raises(TemplateError, match="could read as syntax"):
            cmd_quote(bad, "P")


@pytest.mark.parametrize(("platform", "chosen"), [
    ("linux", "on linux"), ("darwin", "on unix"), ("win32", "on windows"), ("sunos5", "on unix"),
])
def test_commands_pick_the_platform_then_its_family_then_the_default(platform: str,
                                                                     chosen: str) -> None:
    commands = CommandsSpec.model_validate({"default": "anywhere", "platforms": {
        "linux": "on linux", "unix": "on unix", "windows": "on windows"}})
    assert commands.for_platform(platform) == chosen
    windows_only = {"platforms": {"windows": "w"}}
    assert CommandsSpec.model_validate(windows_only).for_platform("linux") is None
    assert CommandsSpec.model_validate({**windows_only, "default": "d"}).for_platform(
        "linux") == "d"


def test_missing_interpreters_make_a_tool_unavailable_not_broken(layout: SquadLayout,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    write(layout.tools_dir, "ps.yaml", "description: d\npwsh: Get-Date\n")
    write(layout.tools_dir, "win.yaml", "description: d\ncmd: ver\n")
    write(layout.tools_dir, "steps.yaml", "description: d\nsteps:\n  - name: a\n    pwsh: x\n")
    write(layout.tools_dir, "only-win.yaml",
          "description: d\ncommands:\n  platforms:\n    windows: ver\n")
    found = discover(layout)
    assert found.failures == () and found.tools == ()
    reasons = {s.name: s.reason for s in found.skipped}
    assert reasons["ps"] == reasons["steps"] == "pwsh is not installed (not found on PATH)"
    if sys.platform != "win32":
        assert reasons["win"] == "cmd runs only on Windows"
        assert reasons["only-win"].startswith("'commands' has no variant for")


async def test_a_pwsh_tool_runs_pwsh_with_the_command_when_it_is_installed(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A stand-in pwsh that prints the argv it was given, one word a line.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pwsh"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    write(layout.tools_dir, "ps.yaml", """
        description: d
        tags: [read]
        pwsh: Get-ChildItem -Path {FOLDER}
        parameters:
          FOLDER: {description: f}
        """)
    found = discover(layout)
    assert [t.name for t in found.tools] == ["ps"]
    result = await call(layout, found.toolset(), "ps", {"FOLDER": "it's here"})
    assert result.text.splitlines() == ["-NoLogo", "-NoProfile", "-NonInteractive", "-Command",
                                        "Get-ChildItem -Path 'it''s here'"]
