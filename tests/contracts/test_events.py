"""The one event-type matcher, used by bus subscriptions and the daemon's event streams."""

from __future__ import annotations

from squadd.contracts.events import AgentIdle, PoolEmpty, event_matches, type_matches


def test_a_type_matches_itself_and_the_globs_of_its_prefixes() -> None:
    assert type_matches("tool.started", "tool.started")
    assert type_matches("tool.started", "tool.*")
    assert not type_matches("tool.started", "tool.completed")
    assert not type_matches("tools.load_failed", "tool.*")  # a glob ends at its dot
    assert not type_matches("tool.started", "tool")


def test_events_match_by_type_and_session() -> None:
    idle = AgentIdle(session_id="s1", agent="lead")
    assert event_matches(idle, None, None)
    assert event_matches(idle, ["agent.*"], "s1")
    assert not event_matches(idle, ["agent.*"], "s2")
    assert not event_matches(idle, ["pool.empty"], None)
    assert event_matches(PoolEmpty(), frozenset({"pool.empty", "tool.*"}), None)
