"""`squadd agent add` and `squadd agent list`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from squadd.cli.app import main
from squadd.contracts.names import NAME_RULE
from squadd.state.history import append_learning
from squadd.state.layout import SquadLayout
from tests._helpers import snapshot


def _cli(*args: str, squad: SquadLayout) -> Result:
    return CliRunner().invoke(main, [*args, "--dir", str(squad.repo)])


def test_agent_add_creates_files_and_team_row(squad: SquadLayout) -> None:
    result = _cli("agent", "add", "backend", "--role", "Backend Developer", squad=squad)
    assert result.exit_code == 0, result.output
    assert "Added backend (Backend Developer)" in result.output
    assert squad.charter("backend").is_file() and squad.history("backend").is_file()
    assert "| Backend | Backend Developer |" in squad.team_md.read_text()


def test_agent_add_json(squad: SquadLayout) -> None:
    result = _cli("agent", "add", "qa", "--role", "Tester", "--json", squad=squad)
    data = json.loads(result.stdout)
    assert data["name"] == "qa" and data["team_updated"] is True
    assert data["created"] == [str(squad.charter("qa")), str(squad.history("qa"))]


@pytest.mark.parametrize("name", ["../x", "a/b", "", "a\x00b", "n" * 200])
def test_agent_add_refuses_bad_names_with_the_rule_and_writes_nothing(
    squad: SquadLayout, name: str
) -> None:
    before = snapshot(squad.repo)
    result = _cli("agent", "add", name, "--role", "Role", squad=squad)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: invalid agent name")
    assert NAME_RULE in result.stderr
    assert snapshot(squad.repo) == before


def test_agent_add_refuses_an_existing_agent(squad: SquadLayout) -> None:
    assert _cli("agent", "add", "lead", "--role", "Lead", squad=squad).exit_code == 0
    before = snapshot(squad.repo)
    result = _cli("agent", "add", "lead", "--role", "Other", squad=squad)
    assert result.exit_code == 1
    assert "Error: agent 'lead' already exists" in result.stderr
    assert snapshot(squad.repo) == before


def test_agent_add_needs_a_role(squad: SquadLayout) -> None:
    result = _cli("agent", "add", "lead", squad=squad)
    assert result.exit_code == 2 and "--role" in result.stderr


def test_agent_commands_outside_a_squad_name_squadd_init(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["agent", "add", "lead", "--role", "Lead",
                                       "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "squadd init" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_agent_list_shows_a_table(squad: SquadLayout) -> None:
    _cli("agent", "add", "lead", "--role", "Lead", squad=squad)
    append_learning(squad, "lead", "one")
    append_learning(squad, "lead", "two")
    charter = squad.charter("lead")
    charter.write_text(charter.read_text().replace("**Preferred:** auto", "**Preferred:** gpt-4.1")
                       + "\n## Tools\n\n- squad_route\n- run_tests\n")
    result = _cli("agent", "list", squad=squad)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLE", "MODEL", "TOOLS", "HISTORY"]
    assert lines[1].split() == ["Lead", "✅", "Active", "Lead", "gpt-4.1", "squad_route,",
                                "run_tests", "2", "learnings"]
    assert lines[2].split() == ["Scribe", "📋", "Silent", "Scribe", "auto", "all", "0",
                                "learnings"]


def test_agent_list_json(squad: SquadLayout) -> None:
    _cli("agent", "add", "lead", "--role", "Lead", squad=squad)
    squad.history("lead").unlink()
    data = json.loads(_cli("agent", "list", "--json", squad=squad).stdout)
    assert data["squad_dir"] == str(squad.root)
    lead = data["agents"][0]
    assert lead == {"name": "lead", "display_name": "Lead", "status": "✅ Active",
                    "status_kind": "active", "role": "Lead", "model": None, "tools": None,
                    "charter": str(squad.charter("lead")), "history": False,
                    "learnings": None}


def test_agent_list_with_no_agents_says_how_to_add_one(squad: SquadLayout) -> None:
    for path in sorted(squad.agents_dir.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    result = _cli("agent", "list", squad=squad)
    assert result.exit_code == 0 and "squadd agent add" in result.output


def test_agent_list_counts_learnings_of_both_shapes_and_survives_bad_bytes(
    squad: SquadLayout,
) -> None:
    from tests.state.memory_fixtures import BLOCKS_NEWEST, BULLETS_OLDEST

    for name in ("tern", "wren", "kite"):
        _cli("agent", "add", name, "--role", "Engineer", squad=squad)
    squad.history("tern").write_text(BLOCKS_NEWEST)
    squad.history("wren").write_text(BULLETS_OLDEST)
    squad.history("kite").write_bytes(BULLETS_OLDEST.encode() + b"- **[general]** caf\xe9\n")

    data = json.loads(_cli("agent", "list", "--json", squad=squad).stdout)

    counts = {a["name"]: a["learnings"] for a in data["agents"]}
    assert (counts["tern"], counts["wren"], counts["kite"]) == (3, 3, 4)
