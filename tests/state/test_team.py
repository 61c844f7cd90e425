"""Adding an agent: charter and history from the templates, a row in team.md, all or nothing."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from squadd.contracts.names import NAME_RULE
from squadd.errors import ConfigError, InvalidNameError, StateError
from squadd.state.charters import read_charter
from squadd.state.history import append_learning, learnings
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent, add_member_row, check_role, member_names
from tests._helpers import snapshot


def test_add_agent_writes_charter_history_and_team_row(squad: SquadLayout) -> None:
    added = add_agent(squad, "Backend", "Backend Developer", templates=templates_dir())
    assert added.name == "backend" and added.team_updated
    assert added.created == [squad.charter("backend"), squad.history("backend")]
    charter = read_charter(squad, "backend")
    assert charter.role == "Backend Developer" and charter.model is None
    assert "{name}" not in charter.text and "{role}" not in charter.text
    history = squad.history("backend").read_text()
    assert history.startswith("# Project Context") and learnings(history) == []
    assert member_names(squad.team_md.read_text()) == ["scribe", "backend"]
    assert "| Backend | Backend Developer | `.squad/agents/backend/charter.md` | ✅ Active |" in (
        squad.team_md.read_text())


def test_a_new_agents_history_takes_learnings(squad: SquadLayout) -> None:
    add_agent(squad, "lead", "Lead", templates=templates_dir())
    append_learning(squad, "lead", "tests live in tests/", category="technical",
                    today=dt.date(2026, 3, 1))
    # A history with no learning yet takes Squad's style.
    assert learnings(squad.history("lead").read_text()) == [
        "### 2026-03-01: tests live in tests/\n\ntests live in tests/"]


def test_an_existing_agent_is_refused_and_nothing_changes(squad: SquadLayout) -> None:
    add_agent(squad, "lead", "Lead", templates=templates_dir())
    before = snapshot(squad.root)
    with pytest.raises(StateError, match="agent 'lead' already exists"):
        add_agent(squad, "lead", "Other", templates=templates_dir())
    assert snapshot(squad.root) == before


@pytest.mark.parametrize("name", ["../x", "a/b", "", "a\x00b", "n" * 200])
def test_a_bad_name_is_refused_with_the_rule_and_nothing_written(
    squad: SquadLayout, name: str
) -> None:
    before = snapshot(squad.root)
    with pytest.raises(InvalidNameError, match=re.escape(NAME_RULE)):
        add_agent(squad, name, "Role", templates=templates_dir())
    assert snapshot(squad.root) == before


@pytest.mark.parametrize("role", ["", "   ", "two\nlines", "nul\x00", "r" * 121])
def test_a_bad_role_is_refused_and_nothing_written(squad: SquadLayout, role: str) -> None:
    before = snapshot(squad.root)
    with pytest.raises(StateError, match="role"):
        add_agent(squad, "lead", role, templates=templates_dir())
    assert snapshot(squad.root) == before


def test_missing_templates_are_a_config_error_and_nothing_written(
    squad: SquadLayout, tmp_path: Path
) -> None:
    before = snapshot(squad.root)
    with pytest.raises(ConfigError, match="reinstall squadd"):
        add_agent(squad, "lead", "Lead", templates=tmp_path / "no-templates")
    assert snapshot(squad.root) == before


def test_a_failed_team_update_removes_the_files_it_created(squad: SquadLayout) -> None:
    squad.team_md.unlink()
    squad.team_md.mkdir()  # reading team.md now fails
    with pytest.raises(IsADirectoryError):
        add_agent(squad, "lead", "Lead", templates=templates_dir())
    assert not squad.agent_dir("lead").exists()


def test_member_row_goes_at_the_end_of_the_members_table() -> None:
    team = ("# Team\n\n## Members\n\n| Name | Role | Charter | Status |\n|---|---|---|---|\n"
            "| scribe | Scribe | x | active |\n\n## Notes\n\nkeep\n")
    result = add_member_row(team, name="lead", role="Lead | Architect")
    assert result == (
        "# Team\n\n## Members\n\n| Name | Role | Charter | Status |\n|---|---|---|---|\n"
        "| scribe | Scribe | x | active |\n"
        "| lead | Lead \\| Architect | `.squad/agents/lead/charter.md` | active |\n\n"
        "## Notes\n\nkeep\n"
    )
    assert member_names(result) == ["scribe", "lead"]


def test_members_section_and_table_are_created_when_missing() -> None:
    assert member_names(add_member_row("", name="a", role="A")) == ["a"]
    assert member_names(add_member_row("# Team\n\nHello.\n", name="a", role="A")) == ["a"]
    headed = add_member_row("# Team\n\n## Members\n\nNobody yet.\n", name="a", role="A")
    assert member_names(headed) == ["a"] and "Nobody yet." in headed


def test_an_agent_already_listed_in_team_md_gets_no_second_row(squad: SquadLayout) -> None:
    squad.team_md.write_text(add_member_row(squad.team_md.read_text(), name="lead", role="Lead"))
    added = add_agent(squad, "lead", "Lead", templates=templates_dir())
    assert not added.team_updated
    assert member_names(squad.team_md.read_text()).count("lead") == 1


def test_check_role_strips_whitespace() -> None:
    assert check_role("  Tester ") == "Tester"
