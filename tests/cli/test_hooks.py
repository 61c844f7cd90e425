"""`squadd hooks`: the hooks a squad runs, checked as the daemon reads them."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from squadd.cli.app import main
from squadd.state.layout import SquadLayout


def _run(squad: SquadLayout, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["hooks", "--dir", str(squad.repo), *args])
    return result.exit_code, result.output


def test_lists_the_hooks_by_event_with_their_source_and_what_was_skipped(
        squad: SquadLayout) -> None:
    squad.hooks_json.write_text(json.dumps({"hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "./check.sh", "timeout": 5}]}],
        "SessionEnd": [{"hooks": [{"type": "command", "command": "x"}]}]}}))
    code, out = _run(squad)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == ["EVENT", "MATCHER", "COMMAND", "TIMEOUT", "FROM"]
    assert lines[1].split()[:4] == ["PreToolUse", "Bash", "./check.sh", "5s"]
    assert lines[2].split()[:2] == ["Stop", "*"] and "60s" in lines[2]
    assert "skipped: .squad/hooks.json: event 'SessionEnd' is not one squadd fires" in out
    code, out = _run(squad, "--json")
    data = json.loads(out)
    assert [h["event"] for h in data["hooks"]] == ["PreToolUse", "Stop"]
    assert data["import_claude"] is False


def test_a_broken_file_is_an_error_naming_the_place(squad: SquadLayout) -> None:
    squad.hooks_json.write_text('{"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}')
    code, out = _run(squad)
    assert code == 1
    assert ".squad/hooks.json: hooks.Stop[0].hooks[0].command must be a shell command" in out


def test_without_hooks_it_says_where_to_write_them(squad: SquadLayout, tmp_path: Path) -> None:
    code, out = _run(squad)
    assert code == 0 and "no hooks: write them in" in out and "hooks.json" in out
