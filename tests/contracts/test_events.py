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


def test_text_is_mended_wherever_it_sits_among_plain_fields() -> None:
    class Name(str):
        """A str subclass (not taken as plain ASCII text by its type alone)."""

    from squadd.contracts.events import AgentStateChanged, RouteQueued

    late = RouteQueued(session_id="s1", agent="lead", seq=3, position=2, task="fix \ud800")
    odd = AgentStateChanged(session_id=Name("s\udcff"), agent="lead", state="active")
    plain = AgentStateChanged(session_id="s1", agent="lead", state="active", previous=None)
    assert late.task == "fix \ufffd" and (late.seq, late.position) == (3, 2)
    assert odd.session_id == "s\ufffd"
    assert plain.model_dump(exclude={"ts"}) == {
        "session_id": "s1", "agent": "lead", "seq": 0, "worker": None,
        "type": "agent.state", "state": "active", "previous": None}
