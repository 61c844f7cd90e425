"""Charters: role, preferred model and tools parsed from charter.md, and the roster."""

from __future__ import annotations

import pytest

from squadd.errors import NotFoundError
from squadd.state.charters import parse_charter, read_charter, roster
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import templates_dir
from squadd.state.team import add_agent, render_template


def test_the_charter_template_parses_to_its_role_and_no_pinned_model() -> None:
    text = render_template((templates_dir() / "charter.md").read_text(),
                           name="backend", role="Backend Developer")
    charter = parse_charter("backend", text)
    assert charter.role == "Backend Developer"
    assert charter.model is None  # "Preferred: auto" lets squadd choose
    assert charter.tools is None  # no ## Tools section: every tool
    assert {"identity", "what i own", "how i work", "boundaries", "model", "collaboration",
            "voice"} <= set(charter.sections)


def test_the_scribe_charter_parses(squad: SquadLayout) -> None:
    charter = read_charter(squad, "scribe")
    assert (charter.role, charter.model, charter.tools) == ("Scribe", None, None)


def test_preferred_model_is_read_from_the_model_section() -> None:
    text = "## Identity\n\n- **Role:** Lead\n\n## Model\n\n- **Preferred:** `gpt-4.1`\n"
    assert parse_charter("lead", text).model == "gpt-4.1"
    assert parse_charter("lead", "## Model\n\nPreferred: claude-sonnet-4\n").model == (
        "claude-sonnet-4")
    assert parse_charter("lead", "## Identity\n\nPreferred: nope\n").model is None


def test_tools_section_lists_the_allowed_tools() -> None:
    text = (
        "## Tools\n\n<!-- what this agent may use -->\n- `squad_route` — hand work on\n"
        "- squad_decide: record decisions\n- run_tests, lint\n"
    )
    assert parse_charter("lead", text).tools == ("squad_route", "squad_decide", "run_tests",
                                                 "lint")
    assert parse_charter("lead", "## Tools\n\n").tools == ()


def test_roster_lists_agents_with_charters_sorted(squad: SquadLayout) -> None:
    add_agent(squad, "zed", "Ops", templates=templates_dir())
    add_agent(squad, "ann", "Tester", templates=templates_dir())
    (squad.agents_dir / "no-charter").mkdir()
    (squad.agents_dir / "Bad Name").mkdir()
    (squad.agents_dir / "Bad Name" / "charter.md").write_text("## Identity\n")
    entries = roster(squad)
    assert [(e.name, e.role, e.has_history) for e in entries] == [
        ("ann", "Tester", True), ("scribe", "Scribe", True), ("zed", "Ops", True)]


def test_reading_a_missing_charter_names_the_agents_and_how_to_add_one(
    squad: SquadLayout,
) -> None:
    with pytest.raises(NotFoundError, match=r"agents: scribe.*squadd agent add"):
        read_charter(squad, "ghost")


def test_agent_folders_are_read_whatever_their_case(squad: SquadLayout) -> None:
    rai = squad.agents_dir / "Rai"  # what Squad's own `init` makes
    rai.mkdir()
    (rai / "charter.md").write_text("## Identity\n\n- **Role:** Responsible AI\n")
    assert squad.charter("rai") == rai / "charter.md"
    assert squad.history("RAI") == rai / "history.md"
    assert squad.agent_dir("rai") == rai
    [entry] = [e for e in roster(squad) if e.name == "rai"]
    assert (entry.role, entry.charter) == ("Responsible AI", rai / "charter.md")
    # Where both cases exist, the lower-case folder is the agent.
    (squad.agents_dir / "rai").mkdir()
    (squad.agents_dir / "rai" / "charter.md").write_text("## Identity\n\n- **Role:** Other\n")
    assert squad.charter("rai") == squad.agents_dir / "rai" / "charter.md"
    assert [e.role for e in roster(squad) if e.name == "rai"] == ["Other"]
