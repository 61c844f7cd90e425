"""`squadd tools list|show|call|test|new`, run in this process."""

from __future__ import annotations

import json
import textwrap

from click.testing import CliRunner, Result

from squadd.cli.tools import tools
from squadd.state.layout import SquadLayout


def _cli(*args: str, squad: SquadLayout) -> Result:
    return CliRunner().invoke(tools, [*args, "--dir", str(squad.repo)])


def _write(squad: SquadLayout, name: str, text: str) -> None:
    squad.tools_dir.mkdir(parents=True, exist_ok=True)
    (squad.tools_dir / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")


def test_new_scaffolds_working_python_and_yaml_tools(squad: SquadLayout) -> None:
    made = _cli("new", "echo-it", squad=squad)
    assert made.exit_code == 0, made.output
    assert (squad.tools_dir / "echo-it.py").is_file()
    assert _cli("new", "words", "--yaml", squad=squad).exit_code == 0
    called = _cli("call", "echo-it", "--arg", "text=hi", "--arg", "repeat=2", squad=squad)
    assert called.exit_code == 0, called.output
    assert called.stdout.strip() == "hi hi"
    counted = _cli("call", "words", "--arg", "TEXT=a b c d", squad=squad)
    assert counted.exit_code == 0 and counted.stdout.strip() == "4"
    tested = _cli("test", "words", squad=squad)
    assert tested.exit_code == 0, tested.output
    assert "PASS words: counts three words" in tested.output
    again = _cli("new", "words", "--python", squad=squad)
    assert again.exit_code == 1 and "already exists" in again.output


def test_new_refuses_a_bad_name(squad: SquadLayout) -> None:
    result = _cli("new", "../escape", squad=squad)
    assert result.exit_code == 1 and "is not allowed" in result.output
    assert not (squad.repo / "escape.py").exists()


def test_list_shows_sources_shadowing_and_load_errors(squad: SquadLayout) -> None:
    _write(squad, "ok.yaml", "description: Ok\ntags: [read]\nbash: echo ok\n")
    _write(squad, "bad.yaml", "description: Bad\nbash: echo x\ncolour: red\n")
    listed = _cli("list", "--json", squad=squad)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)["tools"]
    by_file = {r["file"]: r for r in rows if r["file"]}
    ok = by_file[str(squad.tools_dir / "ok.yaml")]
    assert (ok["name"], ok["source"], ok["status"]) == ("ok", "project", "ok")
    bad = by_file[str(squad.tools_dir / "bad.yaml")]
    assert bad["status"] == "error" and bad["error"] == "unknown key 'colour'"
    assert {"squad_decide", "squad_memory", "squad_skill"} <= {r["name"] for r in rows}
    table = _cli("list", squad=squad)
    assert "error: unknown key 'colour'" in table.output


def test_show_prints_the_schema(squad: SquadLayout) -> None:
    _write(squad, "greet.yaml", """
        description: Greet someone
        parameters:
          NAME: {type: string, description: who}
        bash: echo hi {NAME}
        """)
    shown = json.loads(_cli("show", "greet", squad=squad).stdout)
    assert shown["approval"] == "ask"  # no read/write/run tag
    assert shown["parameters"]["properties"]["NAME"]["description"] == "who"
    missing = _cli("show", "nope", squad=squad)
    assert missing.exit_code == 1 and "no tool named 'nope'" in missing.output


def test_call_of_an_ask_tool_without_a_terminal_is_denied_and_says_how_to_allow(
        squad: SquadLayout) -> None:
    marker = squad.repo / "ran"
    _write(squad, "risky.yaml", f"description: Risky\nbash: touch {marker}\n")
    result = _cli("call", "risky", squad=squad)
    assert result.exit_code == 1
    assert "stdin is not a terminal" in result.stdout and '"risky" = "allow"' in result.stdout
    assert not marker.exists()


def test_call_reports_bad_arguments_and_failures(squad: SquadLayout) -> None:
    _write(squad, "fail.yaml", """
        description: Fails
        tags: [run]
        parameters:
          N: {type: number, description: n}
        bash: echo n={N}; exit 3
        """)
    bad = _cli("call", "fail", "--arg", "N=abc", squad=squad)
    assert bad.exit_code == 1 and "- N: Input should be a valid number" in bad.stdout
    failed = _cli("call", "fail", "--args", '{"N": 2}', "--json", squad=squad)
    assert failed.exit_code == 1
    result = json.loads(failed.stdout)
    assert result["result_type"] == "failure" and result["details"]["exit_code"] == 3


def test_test_fails_when_an_expectation_fails(squad: SquadLayout) -> None:
    _write(squad, "say.yaml", """
        description: Say
        tags: [read]
        bash: echo hello
        tests:
          - name: wrong
            expected: {output-contains: goodbye}
        """)
    result = _cli("test", squad=squad)
    assert result.exit_code == 1
    assert "FAIL say: wrong" in result.output and "does not contain 'goodbye'" in result.output
    assert "0 passed, 1 failed" in result.output


def test_a_custom_tool_named_like_a_pool_squad_tool_is_shown_shadowed(squad: SquadLayout) -> None:
    # The daemon gives squad_route to every session, so a project tool of that name never runs.
    _write(squad, "squad_route.yaml", "description: Mine\ntags: [read]\nbash: echo mine\n")
    rows = json.loads(_cli("list", "--json", squad=squad).stdout)["tools"]
    mine = [r for r in rows if r["file"] == str(squad.tools_dir / "squad_route.yaml")]
    assert [(r["status"], r["shadowed_by"]) for r in mine] == [("shadowed", "builtin")]


def test_list_shows_warnings_and_unavailable_tools_and_show_resolves_durations(
        squad: SquadLayout) -> None:
    _write(squad, "careful.yaml", """
        description: Careful
        tags: [read]
        timeout: 90000
        bash: echo {P}
        security: {isolation: container}
        changelog: [{version: 1, changes: first}]
        min-cycod-version: 1.0.0
        metadata: {category: demo, owner: ops}
        parameters:
          P: {description: the p, detailed-help: "More about p."}
        steps: null
        """)
    _write(squad, "winonly.yaml", "description: W\ncmd: ver\n")
    listed = json.loads(_cli("list", "--json", squad=squad).stdout)["tools"]
    by_name = {r["name"]: r for r in listed}
    assert by_name["careful"]["status"] == "ok"
    assert by_name["careful"]["warnings"] == [
        "security.isolation: container is not available: the tool runs in its own process group"]
    assert by_name["winonly"]["status"] == "unavailable"
    assert by_name["winonly"]["error"] == "cmd runs only on Windows"
    table = _cli("list", squad=squad).output
    assert "ok (1 warning: security.isolation: container" in table
    assert "unavailable on this platform: cmd runs only on Windows" in table
    shown = json.loads(_cli("show", "careful", squad=squad).stdout)
    assert shown["durations"] == {"timeout": "90000 ms (90s)",
                                  "run timeout (used)": "90000 ms (90s)"}
    assert shown["kept"]["changelog"] == [{"version": 1, "changes": "first"}]
    assert shown["kept"]["min-cycod-version"] == "1.0.0"
    assert shown["kept"]["metadata"] == {"category": "demo", "owner": "ops"}
    assert shown["detailed-help"] == {"P": "More about p."}
    assert shown["parameters"]["properties"]["P"]["description"] == "the p\n\nMore about p."


def test_list_shows_the_workspace_tools_as_builtin_and_they_shadow_custom_ones(
        squad: SquadLayout) -> None:
    _write(squad, "grep.yaml", "description: Mine\ntags: [read]\nbash: echo mine\n")
    rows = json.loads(_cli("list", "--json", squad=squad).stdout)["tools"]
    builtin = {r["name"]: r for r in rows if r["source"] == "builtin"}
    for name in ("read", "write", "edit", "find", "grep", "bash"):
        assert builtin[name]["status"] == "ok" and builtin[name]["kind"] == "builtin"
    mine = [r for r in rows if r["file"] == str(squad.tools_dir / "grep.yaml")]
    assert [(r["status"], r["shadowed_by"]) for r in mine] == [("shadowed", "builtin")]


def test_call_runs_a_workspace_tool_through_the_pipeline(squad: SquadLayout) -> None:
    (squad.repo / "notes.txt").write_text("one\ntwo\n", encoding="utf-8")
    result = _cli("call", "read", "--args", '{"path": "notes.txt", "offset": 2}', squad=squad)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "2\ttwo"
    refused = _cli("call", "read", "--arg", "path=../../etc/passwd", squad=squad)
    assert refused.exit_code != 0 and "leads out of the workspace" in refused.output


def test_list_shows_agent_and_prompt_tools_by_kind(squad: SquadLayout) -> None:
    _write(squad, "ask-lead.yaml", "type: agent\ndescription: Ask the lead\nagent: lead\n"
                                   "prompt: Decide this\n")
    _write(squad, "notes.yaml", "type: prompt\ndescription: A note\nprompt: Write it down\n")
    listed = _cli("list", "--json", squad=squad)
    assert listed.exit_code == 0, listed.output
    kinds = {r["name"]: r["kind"] for r in json.loads(listed.stdout)["tools"]}
    assert (kinds["ask-lead"], kinds["notes"]) == ("agent", "prompt")
    table = _cli("list", squad=squad)
    assert any(line.split()[:3] == ["ask-lead", "project", "agent"]
               for line in table.output.splitlines())
    called = _cli("call", "notes", squad=squad)
    assert called.exit_code == 0 and called.output == "Write it down\n"
