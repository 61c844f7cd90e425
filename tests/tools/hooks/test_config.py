"""Reading hooks files: Claude Code's format, errors that name the place, matchers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from squadd.errors import HooksFileError
from squadd.statcache import ABSENT_RECHECK_S, NotCached
from squadd.state.layout import SquadLayout
from squadd.tools.hooks.config import HooksSource, MatcherGroup, parse_hooks


def _hooks(table: object) -> str:
    return json.dumps({"hooks": table})


def test_a_claude_code_hooks_table_is_read_by_event_with_its_matchers_and_timeouts() -> None:
    parsed = parse_hooks(_hooks({
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "./check.sh", "timeout": 5}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify"}]}],
    }), ".squad/hooks.json", hooks_required=True)
    [pre] = parsed.events["PreToolUse"]
    assert pre.matcher == "Bash" and pre.hooks[0].command == "./check.sh"
    assert pre.hooks[0].timeout_s == 5.0
    [stop] = parsed.events["Stop"]
    assert stop.matcher == "" and stop.hooks[0].timeout_s is None
    assert parsed.ignored == ()


def test_events_and_hook_types_squadd_does_not_run_are_listed_not_refused() -> None:
    parsed = parse_hooks(_hooks({
        "SessionEnd": [{"hooks": [{"type": "command", "command": "x"}]}],
        "PreToolUse": [{"matcher": "*", "hooks": [{"type": "prompt", "prompt": "ok?"}]}],
    }), ".claude/settings.json", hooks_required=False)
    assert "SessionEnd" not in parsed.events
    assert parsed.events["PreToolUse"][0].hooks == ()
    assert any("'SessionEnd'" in note for note in parsed.ignored)
    assert any("'prompt'" in note for note in parsed.ignored)


@pytest.mark.parametrize(("table", "named"), [
    ({"PreToolUse": {"matcher": "Bash"}}, "hooks.PreToolUse"),
    ({"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command"}]}]},
     "hooks.PreToolUse[0].hooks[0].command"),
    ({"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "x", "timeout": -1}]}]},
     "hooks.PreToolUse[0].hooks[0].timeout"),
    ({"PreToolUse": [{"matcher": "(?=x)y", "hooks": []}]}, "hooks.PreToolUse[0].matcher"),
    ({"PreToolUse": [{"matcher": 3, "hooks": []}]}, "hooks.PreToolUse[0].matcher"),
])
def test_a_broken_hooks_file_is_refused_naming_the_file_and_the_place(table: object,
                                                                       named: str) -> None:
    with pytest.raises(HooksFileError) as caught:
        parse_hooks(_hooks(table), ".squad/hooks.json", hooks_required=True)
    assert ".squad/hooks.json" in str(caught.value) and named in str(caught.value)
    assert caught.value.key == named


def test_not_json_and_a_missing_hooks_table_are_refused_in_the_squads_file() -> None:
    with pytest.raises(HooksFileError, match="not valid JSON"):
        parse_hooks("{oops", ".squad/hooks.json", hooks_required=True)
    with pytest.raises(HooksFileError, match='"hooks" must be an object'):
        parse_hooks("{}", ".squad/hooks.json", hooks_required=True)
    assert parse_hooks('{"model": "x"}', ".claude/settings.json",
                       hooks_required=False).events == {}


@pytest.mark.parametrize(("matcher", "value", "expected"), [
    ("", "Bash", True), ("*", "anything", True),
    ("Bash", "Bash", True), ("Bash", "BashOutput", False), ("Edit|Write", "Write", True),
    ("Edit|Write", "Read", False), ("mcp__.*", "mcp__memory__save", True),
    ("Notebook.*", "Bash", False), ("bash", "Bash", False),
])
def test_matchers_follow_claude_codes_rules(matcher: str, value: str, expected: bool) -> None:
    assert MatcherGroup(matcher, ()).matches(value) is expected


def test_the_squads_file_comes_first_and_claude_settings_only_when_imported(
        squad: SquadLayout) -> None:
    squad.hooks_json.write_text(_hooks({"Stop": [{"hooks": [
        {"type": "command", "command": "squad-stop"}]}]}), encoding="utf-8")
    claude = squad.repo / ".claude"
    claude.mkdir()
    (claude / "settings.json").write_text(json.dumps({"permissions": {}, "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "claude-stop"}]}]}}),
        encoding="utf-8")
    plain = HooksSource(squad, import_claude=False)
    assert [g.hooks[0].command for g in plain.groups("Stop")] == ["squad-stop"]
    both = HooksSource(squad, import_claude=True)
    assert [g.hooks[0].command for g in both.groups("Stop")] == ["squad-stop", "claude-stop"]


def test_a_changed_file_is_read_again_and_a_removed_one_means_no_hooks(
        squad: SquadLayout) -> None:
    now = [100.0]
    source = HooksSource(squad, import_claude=False, clock=lambda: now[0])
    assert source.groups("Stop") == []
    squad.hooks_json.write_text(_hooks({"Stop": [{"hooks": [
        {"type": "command", "command": "one"}]}]}), encoding="utf-8")
    # a missing file is looked for again once ABSENT_RECHECK_S passed
    assert source.groups("Stop") == []
    now[0] += ABSENT_RECHECK_S
    assert [g.hooks[0].command for g in source.groups("Stop")] == ["one"]
    squad.hooks_json.write_text(_hooks({"Stop": [{"hooks": [
        {"type": "command", "command": "two!"}]}]}), encoding="utf-8")
    assert [g.hooks[0].command for g in source.groups("Stop")] == ["two!"]
    squad.hooks_json.unlink()
    assert source.groups("Stop") == []


def test_a_hooks_file_linking_outside_the_repository_is_not_read(
        squad: SquadLayout, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text(_hooks({}), encoding="utf-8")
    claude = squad.repo / ".claude"
    claude.mkdir()
    (claude / "settings.json").symlink_to(outside)
    with pytest.raises(Exception, match="outside"):
        HooksSource(squad, import_claude=True).groups("Stop")


def test_known_groups_read_no_file_and_say_when_one_must_be_read(squad: SquadLayout) -> None:
    source = HooksSource(squad, import_claude=False)
    assert source.known_groups("Stop") == []  # no file: nothing to read
    squad.hooks_json.write_text(_hooks({"Stop": [{"hooks": [
        {"type": "command", "command": "one"}]}]}), encoding="utf-8")
    source = HooksSource(squad, import_claude=False)
    with pytest.raises(NotCached):  # never read
        source.known_groups("Stop")
    assert [g.hooks[0].command for g in source.groups("Stop")] == ["one"]
    assert [g.hooks[0].command for g in source.known_groups("Stop")] == ["one"]
    squad.hooks_json.write_text(_hooks({"Stop": [{"hooks": [
        {"type": "command", "command": "two!"}]}]}), encoding="utf-8")
    with pytest.raises(NotCached):  # changed since
        source.known_groups("Stop")
    assert [g.hooks[0].command for g in source.groups("Stop")] == ["two!"]
