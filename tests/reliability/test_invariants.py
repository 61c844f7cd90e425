"""The soak's invariants can fail: each check is fed a run that breaks it (an early retry, a
retried 404, tool results out of order, a doubled decision, a vanished route) and must say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from squadd.state.decisions import format_entry
from squadd.state.history import format_learning
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Transcript
from tests.reliability.invariants import (
    decisions_once,
    learnings_once,
    retries_respected,
    routes_ended,
    transcripts_well_formed,
)
from tests.support.chaos_server import ChaosRecord
from tests.support.daemon_process import make_repo


def _request(seq: int, arrived: float, body: str, *, status: int = 200, fault: str = "",
             epoch: int = 0, wait_s: float | None = None) -> ChaosRecord:
    return ChaosRecord(seq=seq, arrived=arrived, epoch=epoch, body_hash=body, conversation="T1",
                       agent="lead", turn=0, attempt=0, fault=fault, status=status,
                       retry_after=None if wait_s is None else str(wait_s),
                       not_before=None if wait_s is None else arrived + 0.01 + wait_s,
                       answered=arrived + 0.01)


def test_a_retry_before_retry_after_or_after_a_404_is_a_violation() -> None:
    check = retries_respected([
        _request(0, 0.0, "a", status=429, fault="429", wait_s=1.0),
        _request(1, 1.02, "a"),  # waited long enough
        _request(2, 2.0, "b", status=429, fault="429", wait_s=1.0),
        _request(3, 2.5, "b"),  # half a second early
        _request(4, 4.0, "c", status=404, fault="404"),
        _request(5, 4.1, "c"),  # a 404 retried
        _request(6, 5.0, "d", status=400, fault="400"),
        _request(7, 6.0, "d", epoch=1),  # a restarted daemon resuming: not a retry
    ])
    assert len(check.failures) == 2, check.failures
    assert "request #3" in check.failures[0] and "too early" in check.failures[0]
    assert "request #5" in check.failures[1] and "404" in check.failures[1]
    assert check.notes["retries"] == 3


def _transcript(*messages: dict[str, Any], last: str = "completed") -> Transcript:
    records = [{"kind": "meta", "agent": "lead"},
               *({"kind": "message", "message": m} for m in messages),
               {"kind": "state", "state": last}]
    return Transcript(session_id="s", meta=records[0], messages=list(messages),
                      states=[records[-1]], records=records)


def _calls(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "tool_calls": [{"id": i, "name": "squad_status"} for i in ids]}


def _result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def test_tool_results_out_of_order_or_missing_are_violations() -> None:
    check = transcripts_well_formed({
        "in-order": _transcript(_calls("a", "b"), _result("a"), _result("b")),
        "swapped": _transcript(_calls("a", "b"), _result("b"), _result("a")),
        "unanswered": _transcript(_calls("a")),
        "cut-off": _transcript(_calls("a"), last="interrupted"),
    })
    assert len(check.failures) == 2, check.failures
    assert "swapped" in check.failures[0] and "where the result of a was due" in check.failures[0]
    assert "unanswered" in check.failures[1] and "never answered" in check.failures[1]


def _layout(tmp_path: Path) -> SquadLayout:
    return make_repo(tmp_path / "repo", ("lead",))


def test_a_decision_merged_twice_or_never_is_a_violation(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    entry = format_entry(title="Twice", body="b", agent="lead", category="general")
    layout.decisions_md.write_text("# Decisions\n\n" + entry + "\n" + entry, encoding="utf-8")
    decided = [{"kind": "message", "message": {"role": "assistant", "tool_calls": [
        {"id": f"c{n}", "name": "squad_decide", "arguments": {"title": title}}]}}
        for n, title in enumerate(("Twice", "Never"))]
    results = [{"kind": "message", "result_type": "success",
                "message": {"role": "tool", "tool_call_id": f"c{n}", "content": "written"}}
               for n in range(2)]
    transcript = Transcript(session_id="s", records=[decided[0], results[0], decided[1],
                                                     results[1]])
    check = decisions_once(layout, {"s": transcript})
    assert [f.split(" (")[0] for f in check.failures] == ["decision 'Twice'", "decision 'Never'"]
    assert "2 times" in check.failures[0] and "0 times" in check.failures[1]


def test_a_learning_missing_from_history_is_a_violation(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    kept = format_learning("kept it", "technical")
    layout.history("lead").write_text(f"# Project Context\n\n## Learnings\n\n{kept}\n",
                                      encoding="utf-8")
    records = []
    for n, learning in enumerate(("kept it", "lost it")):
        records += [
            {"kind": "message", "message": {"role": "assistant", "tool_calls": [{
                "id": f"m{n}", "name": "squad_memory", "arguments": {
                    "agentName": "lead", "learning": learning, "category": "technical"}}]}},
            {"kind": "message", "result_type": "success",
             "message": {"role": "tool", "tool_call_id": f"m{n}", "content": "stored"}}]
    check = learnings_once(layout, {"s": Transcript(session_id="s", records=records)})
    assert check.checked == 2 and len(check.failures) == 1
    assert "lost it" in check.failures[0] and "0 times" in check.failures[0]


def test_a_vanished_or_stuck_route_is_a_violation() -> None:
    check = routes_ended(
        {"s1": "task T1 via http", "s2": "task T2 via mcp"},
        {"s1": {"state": "idle"}, "s2": None},
        {"s1": _transcript(), "s3": _transcript(last="active")})
    assert len(check.failures) == 3, check.failures
    assert all("task T2 via mcp" in f and "vanished" in f for f in check.failures[:2])
    assert "stuck: session s3" in check.failures[2]
