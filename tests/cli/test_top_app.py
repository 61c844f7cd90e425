"""The live view's pure parts: the order and depth of the session tree."""

from __future__ import annotations

from squadd.cli._top_app import MAX_SHOWN_DEPTH, session_order


def test_every_session_is_listed_once_however_deep_and_even_in_a_loop_of_parents() -> None:
    chain = [{"session_id": f"s{i}", "parent_session_id": f"s{i - 1}" if i else None}
             for i in range(40)]
    loop = [{"session_id": "a", "parent_session_id": "b"},
            {"session_id": "b", "parent_session_id": "a"}]
    sibling = {"session_id": "t", "parent_session_id": "s0"}
    listed = list(session_order([*chain, sibling, *loop]))
    assert [s["session_id"] for _, s in listed] == [
        "s0", *(f"s{i}" for i in range(1, 40)), "t", "a", "b"]
    depths = {s["session_id"]: depth for depth, s in listed}
    assert depths["s1"] == 1 and depths["t"] == 1 and depths["s39"] == MAX_SHOWN_DEPTH
    assert depths["a"] == 0 and depths["b"] == 1
