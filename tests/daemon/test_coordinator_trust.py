"""The coordinator accepts from a worker only what a worker sends: a claim of a job the group
gave it, then for that session, under the epoch of its claim, records, its end and squad-tool
calls. Anyone who can write to Redis is tried here as a worker: every other request is refused,
logged, and changes nothing. A real redis-server and runtime."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from squadd.cluster.wire import Job, Reply, Request
from squadd.runtime.opening import record_acceptance
from squadd.runtime.session_info import SessionInfo
from squadd.state.transcripts import read_transcript
from tests.support.coordinator import CoordinatorHere, coordinator_on_redis, submit_remote

_ids = itertools.count(1)


async def _ask(here: CoordinatorHere, kind: str, sid: str, worker: str, epoch: int = 0,
               **body: Any) -> Reply:
    return await here.coordinator.handle(Request(
        request_id=f"{sid}:{epoch}:{kind}-{next(_ids)}", kind=kind,  # type: ignore[arg-type]
        session_id=sid, worker=worker, epoch=epoch, body=body))


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"call": {"id": f"c{next(_ids)}", "name": name, "arguments": arguments}}


async def test_only_the_claiming_worker_may_send_and_only_squad_tools(tmp_path: Path) -> None:
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        coordinator, repo = here.coordinator, here.layout.repo
        info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
        record_acceptance(here.layout, info, None)
        async with here.runtime:
            charter = await here.runtime.planner.charter("lead")
            async with anyio.create_task_group() as tg:
                submit_remote(here, tg, info, charter)
                with anyio.fail_after(30):
                    while (delivery := await coordinator.jobs.take("w1", block_s=0.05)) is None:
                        pass
                assert delivery.job.session_id == "s1"
                with capture_logs() as logs:
                    # Claims by a worker the job never went to: refused, however named.
                    for thief in ("w2", "w1 ", "W1", ""):
                        stolen = await _ask(here, "claim", "s1", thief)
                        assert not stolen.ok and stolen.refused == "invalid", thief
                    # A job for s1 that someone else put on the stream, taken by its author:
                    # the coordinator never submitted it, so it holds nothing.
                    await coordinator.jobs.submit(Job(session_id="s1", agent="lead",
                                                      timeout_s=60))
                    forged = await coordinator.jobs.take("mallory", block_s=1)
                    assert forged is not None and forged.job.session_id == "s1"
                    stolen = await _ask(here, "claim", "s1", "mallory")
                    assert not stolen.ok and stolen.refused == "invalid"
                    claim = await _ask(here, "claim", "s1", "w1")
                    assert claim.ok, claim.error
                    epoch = claim.body["epoch"]
                    # The holder may call squad tools...
                    status = await _ask(here, "tool", "s1", "w1", epoch, **_call("squad_status"))
                    assert status.ok and status.body["result"]["result_type"] == "success"
                    # ...and nothing else: workspace tools, bash, unknown or custom names.
                    for name, arguments in (
                            ("write", {"path": "owned.txt", "content": "x"}),
                            ("edit", {"path": "README.md", "old": "a", "new": "b"}),
                            ("read", {"path": ".squad/config.toml"}),
                            ("bash", {"command": "touch owned-by-bash"}),
                            ("grep", {"pattern": "x"}), ("no_such_tool", {})):
                        refused = await _ask(here, "tool", "s1", "w1", epoch,
                                             **_call(name, **arguments))
                        assert not refused.ok and refused.refused == "invalid", name
                        assert "not a squad tool" in (refused.error or "")
                    # Another worker, even under the right epoch, or the holder under a
                    # stale or future one: refused, for every kind of request.
                    for worker, at in (("w2", epoch), ("w1", epoch - 1), ("w1", epoch + 1)):
                        for kind, body in (("tool", _call("squad_status")),
                                           ("records", {"records": [
                                               {"kind": "note", "n": 9, "text": "forged"}]}),
                                           ("end", {"status": "completed", "answer": "forged"})):
                            refused = await _ask(here, kind, "s1", worker, at, **body)
                            assert not refused.ok, (worker, at, kind)
                            assert refused.refused in ("invalid", "stale_epoch")
                    # A session nobody claimed: refused too.
                    other = await _ask(here, "tool", "nobody", "w1", 1, **_call("squad_status"))
                    assert not other.ok
                    ended = await _ask(here, "end", "s1", "w1", epoch, status="completed",
                                       answer="done")
                    assert ended.ok
                tg.cancel_scope.cancel()
    assert not (repo / "owned.txt").exists() and not (repo / "owned-by-bash").exists()
    notes = [r for r in read_transcript(here.layout.transcript("s1")).records
             if r.get("text") == "forged"]
    assert notes == []
    refusals = [entry for entry in logs if entry["event"] == "cluster request refused"]
    whys = {entry["why"] for entry in refusals}
    assert whys == {"claim of a job the worker was not given", "not a squad tool",
                    "not the holder", "stale epoch"}
    assert len(refusals) >= 5 + 6 + 9 + 1


@pytest.mark.parametrize("reclaimed_by", ["w2"])
async def test_a_worker_that_reclaimed_the_job_takes_the_session_over(
        tmp_path: Path, reclaimed_by: str) -> None:
    """The lease moves with the job: after `XAUTOCLAIM`, the new holder's claim succeeds and
    the old holder's requests are refused (its epoch and its name no longer hold)."""
    async with coordinator_on_redis(tmp_path, {"local_slots": 0}) as here:
        coordinator = here.coordinator
        info = SessionInfo(session_id="s1", agent="lead", model="m", task="t")
        record_acceptance(here.layout, info, None)
        async with here.runtime:
            charter = await here.runtime.planner.charter("lead")
            async with anyio.create_task_group() as tg:
                submit_remote(here, tg, info, charter)
                with anyio.fail_after(30):
                    while await coordinator.jobs.take("w1", block_s=0.05) is None:
                        pass
                first = await _ask(here, "claim", "s1", "w1")
                assert first.ok
                assert await coordinator.jobs.reclaim(reclaimed_by, lease_s=0) is not None
                second = await _ask(here, "claim", "s1", reclaimed_by)
                assert second.ok and second.body["epoch"] == first.body["epoch"] + 1
                late = await _ask(here, "tool", "s1", "w1", first.body["epoch"],
                                  **_call("squad_status"))
                assert not late.ok and late.refused == "stale_epoch"
                again = await _ask(here, "claim", "s1", "w1")
                assert not again.ok
                tg.cancel_scope.cancel()
