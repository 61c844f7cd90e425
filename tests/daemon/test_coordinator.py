"""The coordinator's loops outlive what Redis does to them: a real redis-server and runtime."""

from __future__ import annotations

from pathlib import Path

import anyio

from squadd.cluster.connection import RedisGuard, connect
from squadd.cluster.requests import send
from squadd.cluster.wire import Request
from squadd.config import load_settings
from squadd.daemon.coordinator import Coordinator
from squadd.providers.replay import ReplayProvider, ReplayScript
from squadd.runtime.acceptance import record_acceptance
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session_info import SessionInfo
from squadd.state.transcripts import read_transcript
from tests.support.daemon_process import make_repo
from tests.support.redis_server import RedisServer


async def test_requests_are_answered_again_after_redis_lost_its_data(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    settings = load_settings(layout.root, environ={},
                             overrides={"cluster": {"heartbeat_s": 0.1}})
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        guard = RedisGuard(client, url=server.url, down_s=10)
        runtime = SquadRuntime(layout, settings, ReplayProvider(ReplayScript()))
        coordinator = Coordinator(runtime, settings.cluster, guard)

        async def ask(rid: str) -> bool:
            reply = await send(guard, Request(request_id=rid, kind="end", session_id="gone",
                                              worker="w1"), timeout_s=5, attempts=6)
            return reply.ok

        try:
            async with runtime, anyio.create_task_group() as tg:
                await tg.start(coordinator.run)
                assert await ask("before")
                # As a Redis restarted without its append-only file: the groups are gone.
                await client.flushdb()
                assert await ask("after")
                tg.cancel_scope.cancel()
        finally:
            await client.aclose()


async def test_an_ended_session_leaves_nothing_behind_and_late_records_stay_applied_once(
        tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "repo")
    settings = load_settings(layout.root, environ={})
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        guard = RedisGuard(client, url=server.url, down_s=10)
        runtime = SquadRuntime(layout, settings, ReplayProvider(ReplayScript()))
        coordinator = Coordinator(runtime, settings.cluster, guard)
        record_acceptance(layout, SessionInfo(session_id="s1", agent="lead", model="m",
                                              task="t"), None)
        records = Request(request_id="s1:0:r1-1", kind="records", session_id="s1",
                          worker="w1", body={"records": [{"kind": "note", "n": 1, "text": "x"}]})
        try:
            async with runtime:
                assert (await coordinator.handle(records)).ok
                assert (await coordinator.handle(Request(
                    request_id="s1:0:end", kind="end", session_id="s1", worker="w1"))).ok
                kept = (coordinator._epochs, coordinator._applied, coordinator._locks)
                assert kept == ({}, {}, {})
                # The same records again, late: the transcript already has them.
                assert (await coordinator.handle(records)).ok
        finally:
            await client.aclose()
    notes = [r for r in read_transcript(layout.transcript("s1")).records
             if r.get("kind") == "note"]
    assert [r["cluster"] for r in notes] == [[0, 1]]
