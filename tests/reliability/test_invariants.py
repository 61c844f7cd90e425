"""The soak's invariants can fail: each check is fed a run that breaks it (an early retry, a
retried 404, tool results out of order, a doubled decision, a vanished route, a torn or stale
workspace file, a read of what was never written, a cut call reported finished, a write beside
the repository) and must say so."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from squadd.runtime.conversation import INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT
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
from tests.reliability.soak_setup import around_repo, prepare
from tests.reliability.workspace_invariants import (
    calls_cut_reported,
    outside_untouched,
    workspace_files_whole,
)
from tests.support.chaos_server import ChaosRecord
from tests.support.chaos_workspace import (
    ESCAPE_LINK,
    OUTSIDE_FOLDER,
    SENTINEL,
    WORKSPACE_FOLDER,
    bash_command,
    edit_new,
    edit_old,
    edited,
    scene_file,
    written,
)
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


# The workspace tools' invariants.

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


def _at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


Step = tuple[str, dict[str, Any], str, str, float, float | None]
"""(tool, arguments, call id, answer, called at, answered at): answer "" = no result; an answer
starting "ok:" is a success (the rest is its text), the stand-ins are as squadd writes them."""


def _session(*steps: Step, last: str = "completed") -> Transcript:
    records: list[dict[str, Any]] = [{"kind": "meta", "ts": _at(0)}]
    for name, args, call_id, answer, called, answered in steps:
        records.append({"kind": "message", "ts": _at(called), "message": {
            "role": "assistant", "tool_calls": [{"id": call_id, "name": name,
                                                 "arguments": args}]}})
        if answered is None:
            continue
        message = {"role": "tool", "tool_call_id": call_id, "name": name,
                   "content": answer.removeprefix("ok:")}
        record: dict[str, Any] = {"kind": "message", "ts": _at(answered), "message": message}
        if answer not in (INTERRUPTED_TOOL_TEXT, NOT_STARTED_TOOL_TEXT):
            record["result_type"] = "success" if answer.startswith("ok:") else "failure"
        records.append(record)
    records.append({"kind": "state", "ts": _at(99), "state": last})
    return Transcript(session_id="s", records=records, states=[records[-1]],
                      messages=[r["message"] for r in records if r["kind"] == "message"])


def _write(task: str, answer: str = "ok:created", at: float = 1) -> Step:
    return ("write", {"path": scene_file(task), "content": written(task)}, f"{task}-s0-0",
            answer, at, at + 0.1)


def _edit(task: str, answer: str = "ok:edited", at: float = 2) -> Step:
    return ("edit", {"path": scene_file(task), "old": edit_old(task), "new": edit_new(task)},
            f"{task}-s1-0", answer, at, at + 0.1)


def _read(task: str, shows: str, at: float = 3) -> Step:
    numbered = "\n".join(f"{n}\t{line}" for n, line in enumerate(shows.splitlines(), 1))
    return ("read", {"path": scene_file(task)}, f"{task}-s2-0", "ok:" + numbered, at, at + 0.1)


def _bash(task: str, answer: str, at: float, answered: float | None) -> Step:
    return ("bash", {"command": bash_command(task)}, f"{task}-s3-0", answer, at, answered)


def test_a_torn_stale_or_stray_workspace_file_is_a_violation(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    folder = layout.repo / WORKSPACE_FOLDER
    folder.mkdir()
    files = {"A": edited("A"), "B": edited("B"), "C": written("C")[:10], "D": edited("D"),
             "E": edited("E"), "F": written("F")}
    for task, content in files.items():
        (folder / f"{task}.txt").write_text(content, encoding="utf-8")
    (folder / ".B.txt.0a1b2c.tmp").write_text(written("B")[:5], encoding="utf-8")
    (folder / ".D.txt.3d4e5f.tmp").write_text(edited("D")[:5], encoding="utf-8")
    (folder / "notes.md").write_text("not written by any call\n", encoding="utf-8")
    check = workspace_files_whole(layout, {
        "fine": _session(_write("A"), _edit("A"), _read("A", edited("A"))),
        "cut-edit": _session(_write("B"), _edit("B", INTERRUPTED_TOOL_TEXT)),
        "torn": _session(_write("C")),
        "temp-left": _session(_write("D"), _edit("D")),
        "stale-read": _session(_write("E"), _edit("E"), _read("E", written("E"))),
        "edit-lost": _session(_write("F"), _edit("F")),
    })
    failures = "\n".join(check.failures)
    assert len(check.failures) == 5, failures
    assert "C.txt holds 'C line 1\\nC'," in failures  # torn
    assert ".D.txt.3d4e5f.tmp is a temp file left beside soak-work/D.txt" in failures
    assert "read call E-s2-0" in failures and "could only hold 'E line 1" in failures
    assert "F.txt holds 'F line 1\\nF line 2\\nF line 3\\n', but its calls could only leave " \
        "'F line 1\\nF line 2 edited" in failures
    assert "notes.md is not a file any call wrote" in failures
    assert check.notes["temp_files_left_by_stops"] == [f"{WORKSPACE_FOLDER}/.B.txt.0a1b2c.tmp"]


def test_a_call_a_stop_cut_off_must_be_reported_interrupted() -> None:
    stops = [T0 + dt.timedelta(seconds=5)]
    shown = "ok:" + edited("T") + "3\n[exit code 0]"
    check = calls_cut_reported({
        "answered-after-the-stop": _session(_bash("A", shown, 4, 6)),
        "stand-in": _session(_bash("B", INTERRUPTED_TOOL_TEXT, 4, 6)),
        "unanswered-but-completed": _session(_bash("C", "", 4, None)),
        "unanswered-interrupted": _session(_bash("D", "", 4, None), last="interrupted"),
        "stand-in-without-a-stop": _session(_bash("E", INTERRUPTED_TOOL_TEXT, 6, 7)),
        "finished-before-the-stop": _session(_bash("F", shown, 3, 4)),
    }, stops)
    failures = "\n".join(check.failures)
    assert check.checked == 6 and len(check.failures) == 3, failures
    assert "bash call A-s3-0 (session answered-after-the-stop) was cut off" in failures
    assert "says success" in failures
    assert "C-s3-0 (session unanswered-but-completed) was cut off" in failures
    assert "E-s3-0 (session stand-in-without-a-stop) is reported interrupted, but no stop" \
        in failures
    assert check.notes["cut_by_stops"] == {"bash": 4}


def test_a_bash_or_read_that_shows_what_was_never_written_is_a_violation(
        tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    (layout.repo / WORKSPACE_FOLDER).mkdir()
    (layout.repo / scene_file("A")).write_text(edited("A"), encoding="utf-8")
    (layout.repo / scene_file("B")).write_text(edited("B"), encoding="utf-8")
    check = workspace_files_whole(layout, {
        "saw-it": _session(_write("A"), _edit("A"),
                           _bash("A", "ok:" + edited("A") + "3\n[exit code 0]", 4, 5)),
        "saw-a-torn-one": _session(_write("B"), _edit("B"),
                                   _bash("B", "ok:B line 1\n3\n[exit code 0]", 4, 5)),
    })
    assert len(check.failures) == 1, check.failures
    assert "bash call B-s3-0" in check.failures[0]
    assert "proved nothing" in workspace_files_whole(layout, {}).failures[-1]


def test_anything_written_beside_the_repository_is_a_violation(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    prepare(layout, tmp_path)
    log = tmp_path / "daemon-repo.out"
    before = around_repo(tmp_path, log)
    outside = tmp_path / OUTSIDE_FOLDER
    assert before and (outside / SENTINEL).is_file()
    log.write_text("the daemon's output is the harness's\n", encoding="utf-8")
    (layout.repo / "inside.txt").write_text("inside the repository\n", encoding="utf-8")
    refused = ("edit", {"path": f"{ESCAPE_LINK}/{SENTINEL}", "old": "s", "new": "t"},
               "T-s1-1", "edit refused: it leads out of the workspace", 3, 4)
    assert outside_untouched(before, around_repo(tmp_path, log), {"s": _session(refused)}).ok
    assert "proved nothing" in outside_untouched(before, before, {}).failures[0]
    (outside / "nested" / "gone.txt").write_text("made and removed\n", encoding="utf-8")
    (outside / "nested" / "gone.txt").unlink()
    (outside / SENTINEL).write_text("taken\n", encoding="utf-8")
    (tmp_path / "stray.txt").write_text("beside the repository\n", encoding="utf-8")
    escape = ("write", {"path": f"../{OUTSIDE_FOLDER}/T.txt", "content": "x"}, "T-s1-0",
              "ok:created", 1, 2)
    check = outside_untouched(before, around_repo(tmp_path, log),
                              {"s": _session(escape, refused)})
    assert sorted(check.failures) == sorted([
        f"{OUTSIDE_FOLDER}/nested (outside the repository) changed during the run",
        f"{OUTSIDE_FOLDER}/{SENTINEL} (outside the repository) changed during the run",
        "stray.txt (outside the repository) was made during the run",
        f"write call T-s1-0 (session s) to ../{OUTSIDE_FOLDER}/T.txt (outside the repository) "
        "succeeded: 'created'"]), check.failures
    assert check.notes["escape_calls"] == 2
