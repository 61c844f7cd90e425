"""Finding the sessions a stopped daemon left running, from their transcripts' tails."""

from __future__ import annotations

import json
from pathlib import Path

from squadd.daemon.recovery import CRASH_REASON, last_record, recover_sessions
from squadd.state.layout import SquadLayout


def _write(path: Path, *records: dict[str, object], torn: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in records) + torn
    path.write_text(text, encoding="utf-8")


META = {"kind": "meta", "agent": "lead", "task": "Fix it", "created": "2026-01-02T03:04:05+00:00"}
ACTIVE = {"kind": "state", "state": "active"}
MESSAGE = {"kind": "message", "message": {"role": "user", "content": "Fix it"}}


def test_last_record_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _write(path, META, ACTIVE, torn='{"kind": "mess')
    assert last_record(path) == ACTIVE


def test_last_record_finds_a_record_longer_than_the_tail_it_reads(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    big = {"kind": "message", "message": {"role": "tool", "content": "x" * 300_000}}
    _write(path, META, big)
    assert last_record(path) == big
    _write(path)
    assert last_record(path) is None


def test_a_crashed_session_is_marked_interrupted_and_its_lines_kept(squad: SquadLayout) -> None:
    crashed = squad.transcript("20260102-030405-aaaa0001")
    _write(crashed, META, MESSAGE, ACTIVE, MESSAGE)
    before = crashed.read_text(encoding="utf-8")
    done = squad.transcript("20260102-030405-aaaa0002")
    _write(done, META, {"kind": "state", "state": "completed", "answer": "ok"})
    stopped = squad.transcript("20260102-030405-aaaa0003")
    _write(stopped, META, ACTIVE, {"kind": "state", "state": "interrupted",
                                   "reason": "cancelled while running"})
    recovered = recover_sessions(squad, keep=10)
    assert recovered.marked == ["20260102-030405-aaaa0001"]
    after = crashed.read_text(encoding="utf-8")
    assert after.startswith(before)
    added = json.loads(after.splitlines()[-1])
    assert added["kind"] == "state" and added["state"] == "interrupted"
    assert added["reason"] == CRASH_REASON
    views = {v.session_id: v for v in recovered.views}
    assert set(views) == {"20260102-030405-aaaa0001", "20260102-030405-aaaa0003"}
    assert all(v.state == "interrupted" and v.agent == "lead" for v in views.values())
    assert views["20260102-030405-aaaa0003"].error == "interrupted: cancelled while running"
    assert views["20260102-030405-aaaa0001"].age_s > 0
    again = recover_sessions(squad, keep=10)
    assert again.marked == [] and len(again.views) == 2  # marking happens once


def test_only_the_newest_interrupted_sessions_are_kept(squad: SquadLayout) -> None:
    for index in range(5):
        _write(squad.transcript(f"20260102-030405-bbbb000{index}"), META, ACTIVE)
    recovered = recover_sessions(squad, keep=2)
    assert len(recovered.views) == 2
    assert len(recovered.marked) == 2


def test_stale_orchestration_temp_files_are_swept_and_fresh_ones_kept(tmp_path: Path) -> None:
    import os

    from squadd.daemon.recovery import sweep_stale_temp_files

    layout = SquadLayout.at(tmp_path / ".squad")
    folder = tmp_path / ".squad" / "orchestration-log"
    folder.mkdir(parents=True)
    stale = folder / ".20261126T000000.000000Z-lead.md.abc.tmp"
    fresh = folder / ".20261126T000001.000000Z-lead.md.def.tmp"
    entry = folder / "20261126T000000.000000Z-lead.md"
    for path in (stale, fresh, entry):
        path.write_text("x", encoding="utf-8")
    old = stale.stat().st_mtime - 3600
    os.utime(stale, (old, old))
    assert sweep_stale_temp_files(layout) == [stale]
    assert not stale.exists() and fresh.exists() and entry.exists()
