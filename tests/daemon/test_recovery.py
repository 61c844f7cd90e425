"""Finding the sessions a stopped daemon left running, from their transcripts' tails."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from squadd.daemon.recovery import CRASH_REASON, last_record, past_views, recover_sessions
from squadd.runtime.opening import record_acceptance
from squadd.runtime.planning import view_from_transcript
from squadd.runtime.session_info import SessionInfo
from squadd.state.layout import SquadLayout
from squadd.state.owner import current_owner, process_start
from squadd.state.transcripts import list_transcripts, read_transcript
from tests.support.daemon_process import FAST_CONFIG, DaemonProcess
from tests.support.model_servers import OpenAIServer, Reply


def _write(path: Path, *records: dict[str, object], torn: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in records) + torn
    path.write_text(text, encoding="utf-8")


META = {"kind": "meta", "agent": "lead", "task": "Fix it", "created": "2026-01-02T03:04:05+00:00"}
ACTIVE = {"kind": "state", "state": "active"}
MESSAGE = {"kind": "message", "message": {"role": "user", "content": "Fix it"}}
AFTER_100_S = dt.datetime(2026, 1, 2, 3, 5, 45, tzinfo=dt.UTC)
"""The clock given to recovery: 100 s after META's `created`."""


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
    recovered = recover_sessions(squad, keep=10, now=AFTER_100_S)
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
    assert views["20260102-030405-aaaa0001"].age_s == 100.0  # counted from META's created
    again = recover_sessions(squad, keep=10)
    assert again.marked == [] and len(again.views) == 2  # marking happens once


def test_only_the_newest_interrupted_sessions_are_kept(squad: SquadLayout) -> None:
    done = squad.transcript("20260102-030405-bbbb0009")
    _write(done, META, {"kind": "state", "state": "completed", "answer": "ok"})
    os.utime(done, (1_000, 1_000))  # older than the crashed ones
    for index in range(5):
        _write(squad.transcript(f"20260102-030405-bbbb000{index}"), META, ACTIVE)
    recovered = recover_sessions(squad, keep=2)
    assert len(recovered.views) == 2
    assert len(recovered.marked) == 2
    assert recovered.ended == [done]  # the scan goes on for the ended ones, marking no more


def test_sessions_an_earlier_daemon_ended_are_listed_newest_kept_and_oldest_first(
        squad: SquadLayout) -> None:
    ended = {"completed": {"answer": "ok"}, "error": {"error": "model down"},
             "cancelled": {"reason": "by hand"}}
    for index, (state, fields) in enumerate(ended.items()):
        message = {**MESSAGE, "input_tokens": 5, "output_tokens": 2 + index}
        _write(squad.transcript(f"20260102-030405-cccc000{index}"), META, message,
               {"kind": "state", "state": state, **fields})
    _write(squad.transcript("20260102-030405-cccc0003"), META, ACTIVE)  # crashed: not ended
    _write(squad.transcript("20260102-030405-cccc0004"), META,
           {"kind": "state", "state": "interrupted", "reason": "stopped"})
    _write(squad.transcript("20260102-030405-cccc0005"), META,
           {"kind": "state", "state": "completed", "answer": "known"})
    for index in range(6):  # oldest first, whatever the clock's resolution
        os.utime(squad.transcript(f"20260102-030405-cccc000{index}"), (1_000 + index,) * 2)
    recovered = recover_sessions(squad, keep=10)
    assert [path.name[-10:-6] for path in recovered.ended] == ["0005", "0002", "0001", "0000"]
    views = past_views(recovered.ended[1:], now=AFTER_100_S)
    assert [v.session_id[-4:] for v in views] == ["0000", "0001", "0002"]
    assert all(v.state == "destroyed" and v.agent == "lead" for v in views)
    assert views[0].answer == "ok" and views[0].error is None and views[0].tokens == 7
    assert views[1].error == "error: model down" and views[2].error == "cancelled: by hand"
    assert views[0].age_s == 100.0  # counted from META's created
    assert [path.name[-10:-6] for path in recover_sessions(squad, keep=2).ended] == [
        "0005", "0002"]
    squad.transcript("20260102-030405-cccc0001").unlink()  # gone since the scan: skipped
    assert [v.session_id[-4:] for v in past_views(recovered.ended)] == ["0000", "0002", "0005"]


def test_stale_temp_files_and_torn_empty_entries_are_swept_and_fresh_ones_kept(
        tmp_path: Path) -> None:
    import os

    from squadd.daemon.recovery import sweep_empty_entries, sweep_stale_temp_files

    layout = SquadLayout.at(tmp_path / ".squad")
    folder = tmp_path / ".squad" / "orchestration-log"
    folder.mkdir(parents=True)
    stale = folder / ".20261126T000000.000000Z-lead.md.abc.tmp"
    fresh = folder / ".20261126T000001.000000Z-lead.md.def.tmp"
    entry = folder / "20261126T000000.000000Z-lead.md"
    for path in (stale, fresh, entry):
        path.write_text("x", encoding="utf-8")
    torn = folder / "20261126T000002.000000Z-lead.md"  # a kill between creating and writing
    being_made = folder / "20261126T000003.000000Z-lead.md"
    torn.touch()
    being_made.touch()
    old = stale.stat().st_mtime - 3600
    for path in (stale, entry, torn):
        os.utime(path, (old, old))
    assert sweep_stale_temp_files(layout) == [stale]
    assert sweep_empty_entries(layout) == [torn]
    assert not stale.exists() and not torn.exists()
    assert fresh.exists() and entry.read_text(encoding="utf-8") == "x" and being_made.exists()


def test_only_sessions_of_a_dead_owner_are_marked_interrupted(squad: SquadLayout) -> None:
    """The owner is pid + start time: a live other process keeps its session; a dead one, a
    reused pid (same pid, other start), a missing or malformed owner do not."""
    alive = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    try:
        alive_start = process_start(alive.pid)
        assert alive_start is not None
        owners: dict[str, object] = {
            "20260102-030405-bbbb0001": {"pid": alive.pid, "start": alive_start},
            "20260102-030405-bbbb0002": {"pid": dead.pid, "start": "12345"},
            "20260102-030405-bbbb0003": {"pid": alive.pid, "start": str(int(alive_start) + 1)},
            "20260102-030405-bbbb0004": None,
            "20260102-030405-bbbb0005": {"pid": "x", "start": alive_start},
        }
        for session_id, owner in owners.items():
            meta = dict(META, owner=owner) if owner is not None else META
            _write(squad.transcript(session_id), meta, MESSAGE, ACTIVE)
        recovered = recover_sessions(squad, keep=10)
        assert recovered.running_elsewhere == ["20260102-030405-bbbb0001"]
        assert sorted(recovered.marked) == sorted(set(owners) - {"20260102-030405-bbbb0001"})
        kept = read_transcript(squad.transcript("20260102-030405-bbbb0001"))
        assert kept.last_state == "active"
        assert "20260102-030405-bbbb0001" not in {v.session_id for v in recovered.views}
        view = view_from_transcript(kept)
        assert view.state == "active" and view.error is None  # shown as running, not stopped
    finally:
        alive.kill()
        alive.wait()
    # Once its owner is gone, the next start marks it.
    again = recover_sessions(squad, keep=10)
    assert again.marked == ["20260102-030405-bbbb0001"]


def test_transcripts_name_the_process_that_runs_them(squad: SquadLayout) -> None:
    info = SessionInfo(session_id="20260102-030405-cccc0001", agent="lead", model="m",
                       task="t")
    record_acceptance(squad, info, None)
    meta = read_transcript(squad.transcript(info.session_id)).meta
    assert meta["owner"] == current_owner() == {"pid": os.getpid(),
                                                "start": process_start(os.getpid())}


def _active_transcript(layout: SquadLayout, within_s: float = 30.0) -> Path:
    """The one transcript, once it says its session is active (polled: another process
    writes it)."""
    deadline = time.monotonic() + within_s
    while True:
        found = list_transcripts(layout)
        if len(found) == 1 and read_transcript(found[0]).last_state == "active":
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no active transcript within {within_s:g}s: {found}")
        time.sleep(0.01)


@pytest.mark.slow
def test_serve_leaves_a_running_squadd_run_session_alone(tmp_path: Path) -> None:
    """`squadd run` in a repo, its model still thinking, while `squadd serve` starts there: the
    daemon does not mark the session interrupted, shows it running, refuses to resume it, and
    the run ends it as completed."""
    release, asked = threading.Event(), threading.Event()

    def answer(body: Any) -> Reply:
        asked.set()
        release.wait(60)
        return OpenAIServer.text_turn("finished by run")

    with OpenAIServer(answer) as model:
        daemon = DaemonProcess.in_new_repo(tmp_path, model.url, config=FAST_CONFIG)
        layout = daemon.layout
        run = subprocess.Popen([sys.executable, "-m", "squadd", "run", "lead", "slow task",
                                "--provider", "openai", "--base-url", model.url,
                                "--model", "test-model"], cwd=layout.repo, env=daemon.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert asked.wait(60)  # the run's session is asking its model
            # (its prompt and task ride the next journal batch, which may land just after)
            path = _active_transcript(layout)
            session_id = path.name.removesuffix(".jsonl")
            with daemon:
                assert read_transcript(path).last_state == "active"
                view = daemon.client.session(session_id, transcript=False)["session"]
                assert view["state"] == "active" and view["error"] is None
                resumed = daemon.client.resume(session_id)
                assert resumed["ok"] is False and resumed["reason"] == "busy"
                assert f"pid {run.pid}" in resumed["message"]
                release.set()
                out, err = run.communicate(timeout=60)
            assert run.returncode == 0, err
            assert out.strip() == "finished by run"
            transcript = read_transcript(path)
            assert transcript.last_state == "completed"
            assert all(s["state"] != "interrupted" for s in transcript.states)
        finally:
            release.set()
            if run.poll() is None:
                run.kill()
                run.wait()


@pytest.mark.slow
def test_after_a_restart_status_all_lists_the_sessions_the_last_daemon_ended(
        tmp_path: Path) -> None:
    with OpenAIServer() as model:
        model.script(OpenAIServer.text_turn("done before"))
        daemon = DaemonProcess.in_new_repo(tmp_path, model.url, config=FAST_CONFIG)
        with daemon:
            routed = daemon.client.route("Fix it", "lead")
            assert routed["ok"]
        with DaemonProcess(daemon.layout, model.url) as again:
            assert again.client.status()["sessions"] == []  # ended: only with --all
            deadline = time.monotonic() + 30
            while not (listed := again.client.status(include_ended=True)["sessions"]):
                assert time.monotonic() < deadline, "the past sessions were never listed"
                time.sleep(0.05)
            [view] = listed
            assert view["session_id"] == routed["session_id"]
            assert (view["state"], view["answer"], view["task"]) == ("destroyed", "done before",
                                                                     "Fix it")


def test_an_orchestration_log_linked_out_of_the_repository_is_never_swept(
        tmp_path: Path) -> None:
    from squadd.daemon.recovery import sweep_empty_entries, sweep_stale_temp_files

    outside = tmp_path / "outside"
    outside.mkdir()
    empty = outside / "20261126T000000.000000Z-lead.md"
    empty.touch()
    os.utime(empty, (1_000, 1_000))
    (tmp_path / "repo" / ".squad").mkdir(parents=True)
    (tmp_path / "repo" / ".squad" / "orchestration-log").symlink_to(outside)
    layout = SquadLayout.at(tmp_path / "repo" / ".squad")
    assert sweep_stale_temp_files(layout) == [] and sweep_empty_entries(layout) == []
    assert empty.exists()
