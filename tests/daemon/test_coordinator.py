"""The coordinator's loops outlive what Redis does to them, and its report lists the workers
alive when it is asked: a real redis-server and runtime."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from squadd.cluster import workers
from squadd.cluster.requests import send
from squadd.cluster.wire import Request, WorkerBeat
from squadd.daemon import orphans as orphans_module
from squadd.runtime.planning import load_transcript
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import Transcript, read_transcript
from tests.support.coordinator import (
    claimed_earlier,
    coordinator_on_redis,
    held_by,
    submit_remote,
)


async def test_requests_are_answered_again_after_redis_lost_its_data(tmp_path: Path) -> None:
    async with coordinator_on_redis(tmp_path, {"heartbeat_s": 0.1}) as here:
        async def ask(rid: str) -> bool:
            """Answered (a session no one knows: refused as such, never left unanswered)."""
            reply = await send(here.guard, Request(request_id=rid, kind="end", session_id="gone",
                                                   worker="w1"), timeout_s=5, attempts=6)
            return reply.refused == "unknown_session"

        async with here.runtime, anyio.create_task_group() as tg:
            await tg.start(here.coordinator.run)
            assert await ask("before")
            # As a Redis restarted without its append-only file: the groups are gone.
            await here.client.flushdb()
            assert await ask("after")
            tg.cancel_scope.cancel()


async def test_an_ended_session_leaves_nothing_behind_and_late_records_stay_applied_once(
        tmp_path: Path) -> None:
    async with coordinator_on_redis(tmp_path) as here:
        coordinator = here.coordinator
        await claimed_earlier(here)
        records = Request(request_id="s1:1:r1-1", kind="records", session_id="s1",
                          worker="w1", epoch=1,
                          body={"records": [{"kind": "note", "n": 1, "text": "x"}]})
        async with here.runtime:
            assert (await coordinator.handle(records)).ok
            assert (await coordinator.handle(Request(
                request_id="s1:1:end", kind="end", session_id="s1", worker="w1",
                epoch=1))).ok
            kept = (coordinator.requests._epochs, coordinator.requests._applied,
                    coordinator.requests._locks, list(coordinator._orphans),
                    coordinator.requests._holders)
            assert kept == ({}, {}, {}, [], {})
            # The same records again, late: the transcript already has them.
            assert (await coordinator.handle(records)).ok
    notes = [r for r in read_transcript(here.layout.transcript("s1")).records
             if r.get("kind") == "note"]
    assert [r["cluster"] for r in notes] == [[1, 1]]


async def test_an_end_carrying_the_last_records_applies_them_once_when_it_is_redone(
        tmp_path: Path) -> None:
    """The end request carries the session's last records; handled again (its reply lost
    when the coordinator stopped, what it kept in memory gone with it), it adds none twice
    and none is lost."""
    async with coordinator_on_redis(tmp_path) as here:
        coordinator = here.coordinator
        await claimed_earlier(here)
        first = Request(request_id="s1:1:r1-1", kind="records", session_id="s1", worker="w1",
                        epoch=1, body={"records": [{"kind": "note", "n": 1, "text": "x"}]})
        end = Request(request_id="s1:1:end", kind="end", session_id="s1", worker="w1",
                      epoch=1, body={"status": "completed", "answer": "done", "records": [
                          {"kind": "note", "n": 2, "text": "y"},
                          {"kind": "state", "n": 3, "state": "completed", "answer": "done"}]})
        async with here.runtime:
            assert (await coordinator.handle(first)).ok
            assert (await coordinator.handle(end)).ok
            assert coordinator.requests._applied == {}  # forgotten: a redo reads the file
            held_by(here.layout, "s1", "w1", 1)  # still its holder when the redo comes
            assert (await coordinator.handle(end)).ok
            stale = await coordinator.handle(end.model_copy(update={"epoch": 2}))
            assert stale.refused == "stale_epoch"
    records = read_transcript(here.layout.transcript("s1")).records
    assert [r["cluster"] for r in records if "cluster" in r] == [[1, 1], [1, 2], [1, 3]]
    assert [r.get("text") for r in records if r.get("kind") == "note"] == ["x", "y"]


async def test_requests_of_a_session_whose_caller_is_gone_read_its_transcript_and_cancel_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []

    def counted(layout: SquadLayout, session_id: str) -> Transcript | None:
        reads.append(session_id)
        return load_transcript(layout, session_id)
    monkeypatch.setattr(orphans_module, "load_transcript", counted)
    async with coordinator_on_redis(tmp_path) as here:
        # This coordinator never submitted s1: an earlier one did, and its worker goes on.
        await claimed_earlier(here)
        await here.client.config_resetstat()
        async with here.runtime:
            for n in (1, 2):
                tool = await here.coordinator.handle(Request(
                    request_id=f"s1:1:tc{n}", kind="tool", session_id="s1", worker="w1",
                    epoch=1, body={"call": {"id": f"c{n}", "name": "squad_status",
                                            "arguments": {}}}))
                records = await here.coordinator.handle(Request(
                    request_id=f"s1:1:r{n}-{n}", kind="records", session_id="s1",
                    worker="w1", epoch=1, body={"records": [
                        {"kind": "note", "n": n, "text": "x"}]}))
                assert tool.ok and records.ok and not tool.cancelled, (tool, records)
            stats = await here.client.info("commandstats")
    assert reads == ["s1"]
    assert stats["cmdstat_exists"]["calls"] == 1


async def test_a_session_seen_as_an_orphan_then_resumed_here_hears_of_its_cancel(
        tmp_path: Path) -> None:
    """After a restart the old worker's requests make the session an orphan (cached, not
    cancelled); the user then resumes it here, and cancels that route: the new worker must
    hear of the cancel at its next request, not the orphan's cached answer."""
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        info = await claimed_earlier(here)
        coordinator = here.coordinator
        async with here.runtime:
            old = await coordinator.handle(Request(
                request_id="s1:1:r1-1", kind="records", session_id="s1", worker="w1",
                epoch=1, body={"records": [{"kind": "note", "n": 1, "text": "x"}]}))
            assert old.ok and not old.cancelled
            charter = await here.runtime.planner.charter("lead")
            async with anyio.create_task_group() as tg:
                submit_remote(here, tg, info, charter)
                with anyio.fail_after(30):
                    while True:  # the job is submitted by the task just started
                        if not await coordinator.jobs.held_by("w2", "s1"):
                            await coordinator.jobs.take("w2", block_s=0.01)
                        claim = await coordinator.handle(Request(
                            request_id="claim-x", kind="claim", session_id="s1", worker="w2"))
                        if claim.ok:
                            break
                        await anyio.sleep(0.01)
                tg.cancel_scope.cancel()  # the caller cancels the resumed route
            epoch = claim.body["epoch"]
            late = await coordinator.handle(Request(
                request_id=f"s1:{epoch}:r1-1", kind="records", session_id="s1", worker="w2",
                epoch=epoch, body={"records": [{"kind": "note", "n": 1, "text": "y"}]}))
    assert late.ok and late.cancelled


async def test_orphans_that_never_end_are_kept_only_up_to_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(orphans_module, "ORPHANS_KEPT", 2)
    async with coordinator_on_redis(tmp_path) as here:
        for sid in ("s1", "s2", "s3"):
            await claimed_earlier(here, sid)
        async with here.runtime:
            for n, sid in enumerate(("s1", "s2", "s1", "s3"), start=1):  # s1 used again
                answer = await here.coordinator.handle(Request(
                    request_id=f"{sid}:1:r{n}-{n}", kind="records", session_id=sid,
                    worker="w1", epoch=1, body={"records": [{"kind": "note", "n": n,
                                                             "text": "x"}]}))
                assert answer.ok
            assert list(here.coordinator._orphans) == ["s1", "s3"]  # s2 was the oldest used


async def test_the_report_lists_a_worker_that_started_since_the_last_heartbeat(
        tmp_path: Path) -> None:
    async with coordinator_on_redis(tmp_path, {"heartbeat_s": 3600}) as here, \
            here.runtime, anyio.create_task_group() as tg:
        await tg.start(here.coordinator.run)
        assert (await here.coordinator.report())["workers"] == []
        # The coordinator's own listing runs once an hour here: only the report's finds it.
        await workers.beat(here.guard, WorkerBeat(
            name="w1", host="h1", pid=1, version="0", slots=4, busy=1,
            started="2026-11-29T00:00:00+00:00"), every_s=60)
        report = await here.coordinator.report()
        tg.cancel_scope.cancel()
    assert [w["name"] for w in report["workers"]] == ["w1"]
    assert (report["slots"], report["busy"]) == (4, 1)
