"""Tool files in the shapes of the CYCOD schema (the fixtures in fixtures/cycod/, one per
shape, one with every key) load without an error and run where their interpreter exists; CYCOD's
tool folders are read after squadd's own."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from squadd.config import Settings, ToolsSettings
from squadd.state.layout import SquadLayout
from squadd.tools.discovery import ToolDiscoverer, tool_dirs
from squadd.tools.invoke import ToolInvoker
from squadd.tools.yaml.self_tests import run_tool_tests
from squadd.tools.yaml.tool import ShellTool
from tests.tools.custom_tools import call, discover, write

FIXTURES = Path(__file__).parent / "fixtures" / "cycod"
NEEDS = {"ps-items": "pwsh", "windows-dir": "cmd"}


def _install(layout: SquadLayout) -> None:
    layout.tools_dir.mkdir(parents=True, exist_ok=True)
    for path in FIXTURES.glob("*.yaml"):
        shutil.copy(path, layout.tools_dir / path.name)


def test_every_fixture_loads_and_only_a_missing_interpreter_keeps_one_from_running(
        layout: SquadLayout) -> None:
    _install(layout)
    found = discover(layout)
    assert found.failures == ()
    loaded = {t.name for t in found.tools}
    unavailable = {s.name for s in found.skipped}
    assert loaded | unavailable == {
        "notes-digest", "say-hello", "count-then-report", "find-named", "scale-number",
        "tagged-everywhere", "keep-going", "fan-out", "big-output", "model-facing",
        "guarded-copy", "composed", "ls-branch", "list-under", "self-tested", "windows-dir",
        "ps-items", "sh-script", "direct-run"}
    for name in unavailable:
        assert name in NEEDS, f"{name} is unavailable: {found.skipped}"
    assert ("ps-items" in loaded) == (shutil.which("pwsh") is not None)
    digest = found.get("notes-digest")
    assert isinstance(digest, ShellTool) and len(digest.warnings) == 3


RUNS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("notes-digest", {"TOPIC": "  Parser "},
     ["note parser", "NOTE PARSER", "aside about parser", "hello parser", "[cleanup] exit 0",
      "[4 steps: 4 ok]"]),
    ("say-hello", {"PERSON": "Ada; rm -rf /"}, ["hello Ada; rm -rf /"]),
    ("count-then-report", {"FOLDER": "trees"}, ["[step count] exit 0", "1", "counted"]),
    ("find-named", {"DIRECTORY": "trees", "PATTERN": "*.txt"}, ["trees/main/a.txt"]),
    ("scale-number", {"FACTOR": 3, "SHOW": True, "WORDS": ["x y"]},
     ["--show 3 label=RESULT x y"]),
    ("tagged-everywhere", {}, []),
    ("keep-going", {"MARKER": "absent"},
     ["marker missing: absent", "[step failing] exit 3 (ignore-errors)", "still ran"]),
    ("fan-out", {}, ["one", "two", "three", "[3 steps: 3 ok]"]),
    ("big-output", {"COUNT": 3}, ["1", "2", "3"]),
    ("model-facing", {"WORD": "w"}, ["w"]),
    ("composed", {"WHO": "Bo", "WHERE": "trees"}, ["hello Bo", "counted"]),
    ("ls-branch", {"BRANCH": "main"}, ["a.txt"]),
    ("list-under", {"ROOT": "r", "DIRECTORY": "trees"}, ["main"]),
    ("sh-script", {"NAME": "$(id)"}, ["hi $(id)"]),
    ("direct-run", {"WORD": "a b"}, ["[a b]"]),
]


@pytest.mark.parametrize(("name", "arguments", "lines"), RUNS, ids=[r[0] for r in RUNS])
async def test_each_fixture_runs_and_says_what_it_did(layout: SquadLayout, name: str,
                                                      arguments: dict[str, Any],
                                                      lines: list[str]) -> None:
    _install(layout)
    (layout.repo / "trees" / "main").mkdir(parents=True)
    (layout.repo / "trees" / "main" / "a.txt").write_text("a", encoding="utf-8")
    found = discover(layout)
    result = await call(layout, found.toolset(), name, arguments)
    assert result.ok, result.text
    shown = result.text.splitlines()
    for line in lines:
        assert line in shown, (line, result.text)


async def test_a_guarded_tool_runs_once_approved_and_the_self_tested_tool_passes(
        layout: SquadLayout) -> None:
    _install(layout)
    found = discover(layout)
    tool = found.get("self-tested")
    assert isinstance(tool, ShellTool)
    outcomes = await run_tool_tests(tool, ToolInvoker(layout, Settings()))
    assert [(o.test, o.passed, o.problems) for o in outcomes] == [("makes-a-file", True, [])]
    guarded = found.get("guarded-copy")
    assert guarded is not None and guarded.default_approval == "ask"


async def test_an_alias_fills_its_parameters_into_its_default_parameters(
        layout: SquadLayout) -> None:
    write(layout.tools_dir, "show-dir.yaml", """
        description: Print a folder name
        tags: [read]
        run: printf '%s|%s' {DIRECTORY} {DEPTH}
        parameters:
          DIRECTORY: {description: d}
          DEPTH: {type: number, description: n, default: 1}
        """)
    write(layout.tools_dir, "branch-dir.yaml", """
        type: alias
        base-tool: show-dir
        parameters:
          BRANCH: {description: b, validation: {pattern: "^[a-z]+$"}}
        default-parameters:
          DIRECTORY: "./repos/{BRANCH}/{DEPTH}"
        """)
    found = discover(layout)
    assert found.failures == ()
    tools = found.toolset()
    assert (await call(layout, tools, "branch-dir", {"BRANCH": "dev"})).text == "./repos/dev/1|1"
    given = await call(layout, tools, "branch-dir", {"BRANCH": "dev", "DIRECTORY": "x",
                                                     "DEPTH": 2})
    assert given.text == "x|2"
    bad = await call(layout, tools, "branch-dir", {"BRANCH": "Dev"})
    assert not bad.ok and "BRANCH" in bad.text


def test_an_alias_default_naming_an_unknown_parameter_fails_to_load(layout: SquadLayout) -> None:
    write(layout.tools_dir, "base.yaml", "description: d\nbash: echo {A}\n"
                                         "parameters:\n  A: {description: a}\n")
    write(layout.tools_dir, "alias.yaml", "type: alias\nbase-tool: base\n"
                                          "default-parameters:\n  A: 'x-{NOPE}'\n")
    [failure] = discover(layout).failures
    assert "default-parameters.A uses {NOPE}, which is not a parameter" in failure.reason


def test_cycod_folders_come_after_squadds_own_and_shadow_in_order(
        layout: SquadLayout, tmp_path: Path) -> None:
    home, system = tmp_path / "home", tmp_path / "etc-cycod"
    yaml = "description: from {where}\nbash: echo {where}\n"
    write(layout.tools_dir, "same.yaml", yaml.format(where="squad"))
    write(layout.repo / ".cycod" / "tools", "same.yaml", yaml.format(where="cycod"))
    write(layout.repo / ".cycod" / "tools", "proj.yaml", yaml.format(where="cycod"))
    write(layout.repo / ".cycod" / "tools", "skip.py", "raise SystemExit('never loaded')\n")
    write(home / ".cycod" / "tools", "proj.yml", yaml.format(where="home"))
    write(home / ".cycod" / "tools", "mine.yaml", yaml.format(where="home"))
    write(system, "shared.yaml", yaml.format(where="system"))
    write(system, "mine.yaml", yaml.format(where="system"))
    settings = Settings(tools=ToolsSettings(cycod_global_dir=str(system)))
    environ = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    found = ToolDiscoverer().discover(layout, settings, environ=environ)
    assert found.failures == ()
    assert {t.name: t.source for t in found.tools} == {
        "same": "project", "proj": "cycod-project", "mine": "cycod-user",
        "shared": "cycod-global"}
    assert sorted((s.tool.name, s.tool.source) for s in found.shadowed) == [
        ("mine", "cycod-global"), ("proj", "cycod-user"), ("same", "cycod-project")]
    off = Settings(tools=ToolsSettings(cycod_dirs=False))
    assert [d.source for d in tool_dirs(layout, off, environ)] == ["project", "user"]
