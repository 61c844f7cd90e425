"""The Router: `@name` mentions, routing.md's table, deterministic scoring, and no match."""

from __future__ import annotations

from squadd.runtime.router import Router, mentioned_agent, parse_routing, words
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
