"""The Router: `@name` mentions, routing.md's table, deterministic scoring, and no match."""

from __future__ import annotations

from squadd.runtime.router import (
    Router,
    mentioned_agent,
    parse_routing,
    resolve_agent_cell,
    words,
)
from squadd.state.layout import SquadLayout

TABLE = """# Routing

| Work Type | Route To | Examples |
|-----------|----------|----------|
| Backend, APIs, database | **Fenster** | add an endpoint, fix a slow query |
| Tests and quality | `hockney` | write tests for a bug fix, find flaky tests |
| Frontend, CSS | @keaton (UI) | fix the navbar layout |

<!-- | Docs | nobody | never a rule: this row is inside a comment | -->
"""

AGENTS = {"fenster", "hockney", "keaton", "lead"}


def test_table_rows_become_rules_and_comments_are_ignored() -> None:
    rules = parse_routing(TABLE)
    assert [(r.work_type, r.agent) for r in rules] == [
        ("Backend, APIs, database", "fenster"), ("Tests and quality", "hockney"),
        ("Frontend, CSS", "keaton")]


def test_a_row_commented_out_inside_a_table_does_not_end_it() -> None:
    text = ("| Work Type | Route To |\n|---|---|\n<!-- | Docs | nobody | -->\n"
            "| Backend | Fenster |\n<!--\n| Old | nobody |\n-->\n| Tests | Hockney |\n\n"
            "| a table | after a blank line |\n| Frontend | keaton |\n")
    rules = parse_routing(text)
    assert [(r.agent, r.line) for r in rules] == [("fenster", 4), ("hockney", 8)]


def test_words_drop_stopwords_and_fold_plurals() -> None:
    assert words("Write the tests for queries and APIs") == {"write", "test", "query", "api"}


def test_mention_of_a_known_agent_wins(layout: SquadLayout) -> None:
    layout.routing_md.write_text(TABLE, encoding="utf-8")
    router = Router(layout)
    choice = router.choose("@keaton please write tests for the parser", AGENTS.__contains__)
    assert choice is not None and (choice.agent, choice.routed_by) == ("keaton", "mention")
    assert mentioned_agent("mail me@example.com or @nobody", AGENTS.__contains__) is None


def test_best_word_overlap_wins_and_ties_go_to_the_higher_row(layout: SquadLayout) -> None:
    layout.routing_md.write_text(TABLE, encoding="utf-8")
    router = Router(layout)
    choice = router.choose("write tests for the parser", AGENTS.__contains__)
    assert choice is not None and (choice.agent, choice.routed_by) == ("hockney", "rules")
    assert router.choose("the database query is slow", AGENTS.__contains__).agent == "fenster"
    tie = router.choose("fix it", AGENTS.__contains__)  # "fix" is in both rows 1 and 3
    assert tie is not None and tie.agent == "fenster"
    again = [router.choose("write tests for the parser", AGENTS.__contains__)
             for _ in range(3)]
    assert {c.agent for c in again if c} == {"hockney"}


def test_nothing_matches_and_the_table_can_be_shown(layout: SquadLayout) -> None:
    layout.routing_md.write_text(TABLE, encoding="utf-8")
    router = Router(layout)
    assert router.choose("bake a cake", AGENTS.__contains__) is None
    shown = router.describe()
    assert "| Tests and quality | hockney |" in shown


def test_rules_for_agents_without_a_charter_are_skipped(layout: SquadLayout) -> None:
    layout.routing_md.write_text(TABLE, encoding="utf-8")
    router = Router(layout)
    assert router.choose("fix the navbar layout", {"fenster"}.__contains__).agent == "fenster"


def test_routing_md_is_reread_when_it_changes(layout: SquadLayout) -> None:
    layout.routing_md.write_text(TABLE, encoding="utf-8")
    router = Router(layout)
    assert router.choose("deploy the cluster", AGENTS.__contains__) is None
    layout.routing_md.write_text(
        TABLE.replace("| Frontend, CSS | @keaton (UI) | fix the navbar layout |",
                      "| Operations | lead | deploy the cluster |"), encoding="utf-8")
    choice = router.choose("deploy the cluster", AGENTS.__contains__)
    assert choice is not None and choice.agent == "lead"


def test_empty_table_is_described_as_having_no_rules(layout: SquadLayout) -> None:
    empty = "# Routing\n\n| Work Type | Route To | Examples |\n|---|---|---|\n"
    layout.routing_md.write_text(empty, encoding="utf-8")
    assert "has no routing rules" in Router(layout).describe()


SQUAD_TEAM = """# Team

## Members

| Name | Role | Charter | Status |
|------|------|---------|--------|
| EECOM | Flight Engineer | `.squad/agents/eecom/charter.md` | ✅ Active |
| Mission Control | Lead | `.squad/agents/capcom/charter.md` | ✅ Active |
| Scribe | Session Logger | `.squad/agents/scribe/charter.md` | 📋 Silent |
| Ralph | Work Monitor | `.squad/agents/ralph/charter.md` | 🔄 Monitor |
"""

AGENT_TABLE = """# Routing

| Work Type | Agent | Examples |
|-----------|-------|----------|
| Power and thermal systems | EECOM 🔧 | battery drain, radiator valve |
| Planning, priorities | Mission Control 🎯, EECOM | sprint plan |
| Session notes | **Scribe** 📋 | minutes of the meeting |
| Backlog watch | Ralph 🔄 | stale issues |

<!--
| Work Type | Agent | Examples |
|---|---|---|
| Commented planning | EECOM | never a rule |
-->

```
| Work Type | Route To | Examples |
|---|---|---|
| Fenced planning | EECOM | never a rule |
```
"""

TEAM_AGENTS = {"eecom", "capcom", "scribe", "ralph"}


def test_agent_column_and_decorated_names_resolve_through_team_md(layout: SquadLayout) -> None:
    layout.team_md.write_text(SQUAD_TEAM, encoding="utf-8")
    layout.routing_md.write_text(AGENT_TABLE, encoding="utf-8")
    router = Router(layout)
    assert [(r.agent, r.agent_cell, r.line) for r in router.rules()] == [
        ("eecom", "EECOM 🔧", 5), ("capcom", "Mission Control 🎯, EECOM", 6),
        ("scribe", "**Scribe** 📋", 7), ("ralph", "Ralph 🔄", 8)]
    choice = router.choose("the radiator valve sticks", TEAM_AGENTS.__contains__)
    assert choice is not None and (choice.agent, choice.routed_by) == ("eecom", "rules")
    assert router.choose("draft the sprint plan", TEAM_AGENTS.__contains__).agent == "capcom"
    mention = router.choose("ask @EECOM about it", TEAM_AGENTS.__contains__)
    assert mention is not None and (mention.agent, mention.routed_by) == ("eecom", "mention")
    assert "no routing rules" not in router.describe()


def test_rules_skip_silent_and_monitor_members(layout: SquadLayout) -> None:
    layout.team_md.write_text(SQUAD_TEAM, encoding="utf-8")
    layout.routing_md.write_text(AGENT_TABLE, encoding="utf-8")
    router = Router(layout)
    assert router.choose("minutes of the meeting", TEAM_AGENTS.__contains__) is None
    assert router.choose("watch stale issues", TEAM_AGENTS.__contains__) is None
    named = router.choose("@scribe take the minutes", TEAM_AGENTS.__contains__)
    assert named is not None and named.agent == "scribe"  # a mention still reaches it


def test_examples_in_comments_and_fences_are_not_rules() -> None:
    rules = parse_routing(AGENT_TABLE)
    assert all("never a rule" not in r.examples for r in rules)
    assert len(rules) == 4


def test_the_examples_column_counts_for_matching(layout: SquadLayout) -> None:
    layout.routing_md.write_text(AGENT_TABLE, encoding="utf-8")
    router = Router(layout)
    choice = router.choose("battery drain overnight", {"eecom"}.__contains__)
    assert choice is not None and choice.agent == "eecom" and choice.score == 2


def test_a_decorated_agent_cell_resolves_without_team_md() -> None:
    assert resolve_agent_cell("EECOM 🔧") == "eecom"
    assert resolve_agent_cell("`@keaton` (UI)") == "keaton"
    assert resolve_agent_cell("Mission Control 🎯", {"mission control": "capcom"}) == "capcom"
    assert resolve_agent_cell("??? ") == ""


PRESET_TABLE = """# Work Routing

## Work Type → Agent

| Work Type | Primary | Secondary |
|-----------|---------|----------|
| security review, auth | security | lead |
| docs, README | docs | — |
| release planning | Ralph 🔄 | lead |
| flight checks | nobody-here | EECOM |
"""


def test_the_primary_column_is_read_and_secondary_is_its_fallback(layout: SquadLayout) -> None:
    layout.team_md.write_text(SQUAD_TEAM, encoding="utf-8")
    layout.routing_md.write_text(PRESET_TABLE, encoding="utf-8")
    router = Router(layout)
    assert [(r.work_type, r.agent, r.fallback) for r in router.rules()] == [
        ("security review, auth", "security", "lead"), ("docs, README", "docs", ""),
        ("release planning", "ralph", "lead"), ("flight checks", "nobody", "eecom")]
    agents = {"security", "docs", "lead", "ralph", "eecom"}
    choice = router.choose("security review of the login flow", agents.__contains__)
    assert choice is not None and (choice.agent, choice.routed_by) == ("security", "rules")
    # The primary busy: the Secondary takes it; both busy: the primary (it waits its turn).
    busy = router.choose("security review of the login flow", agents.__contains__,
                         {"security"}.__contains__)
    assert busy is not None and busy.agent == "lead"
    both = router.choose("security review", agents.__contains__,
                         {"security", "lead"}.__contains__)
    assert both is not None and both.agent == "security"
    # The primary not active (🔄 Monitor) or unknown (no charter): the Secondary.
    assert router.choose("release planning", agents.__contains__).agent == "lead"
    assert router.choose("run the flight checks", agents.__contains__).agent == "eecom"
    # No Secondary (`—`) and the primary unknown: no route by this row.
    assert router.choose("update the README docs", {"lead"}.__contains__) is None


def test_a_pattern_column_names_the_work_type() -> None:
    rules = parse_routing("## Routing Table\n\n| Pattern | Owner |\n|---|---|\n| *.py | lead |\n")
    assert [(r.work_type, r.agent) for r in rules] == [("*.py", "lead")]
