"""A coordinator in this process, on a real `redis-server`, for the daemon's cluster tests:
a squad repository, its runtime (not started: the test enters it) and the Redis client.

    async with coordinator_on_redis(tmp_path) as here:
        async with here.runtime:
            reply = await here.coordinator.handle(request)
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.abc
import redis.asyncio as aioredis

from squadd.cluster.connection import RedisGuard, connect
from squadd.cluster.wire import Job
from squadd.config import load_settings
from squadd.contracts.routes import RouteOrigin
from squadd.daemon.coordinator import Coordinator
from squadd.providers.replay import ReplayProvider, ReplayScript
from squadd.runtime.planning import continue_plan
from squadd.runtime.pool import SessionRecord
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.session import SessionOutcome
from squadd.runtime.session_info import SessionInfo
from squadd.state.charters import Charter
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import TranscriptWriter
from tests.support.daemon_process import make_repo
from tests.support.redis_server import RedisServer


def held_by(layout: SquadLayout, session_id: str, worker: str, epoch: int) -> None:
    """Record in the transcript that `worker` claimed `session_id` under `epoch`, as an
    earlier coordinator's claim did (for requests of a session whose caller is gone)."""
    writer = TranscriptWriter(layout.transcript(session_id))
    writer.add("state", state="active", worker=worker, epoch=epoch)
    writer.flush()


async def claimed_earlier(here: CoordinatorHere, session_id: str = "s1", worker: str = "w1",
                          epoch: int = 1) -> SessionInfo:
    """A session an earlier coordinator accepted and `worker` claimed under `epoch`: its
    acceptance and claim in the transcript, its epoch in Redis."""
    from squadd.cluster import keys
    from squadd.runtime.opening import record_acceptance

    info = SessionInfo(session_id=session_id, agent="lead", model="m", task="t")
    record_acceptance(here.layout, info, None)
    await here.client.set(keys.epoch(session_id), epoch)
    held_by(here.layout, session_id, worker, epoch)
    return info


async def give_job(here: CoordinatorHere, session_id: str, worker: str) -> None:
    """Put `session_id`'s job on the stream and have `worker` take it, as the group would
    deliver it: only then may that worker claim the session."""
    await here.coordinator.jobs.ensure()
    await here.coordinator.jobs.submit(Job(session_id=session_id, agent="lead", timeout_s=60))
    delivery = await here.coordinator.jobs.take(worker, block_s=1)
    assert delivery is not None and delivery.job.session_id == session_id


@dataclass(frozen=True)
class CoordinatorHere:
    layout: SquadLayout
    client: aioredis.Redis
    guard: RedisGuard
    runtime: SquadRuntime
    coordinator: Coordinator


@asynccontextmanager
async def coordinator_on_redis(tmp_path: Path, cluster: dict[str, Any] | None = None,
                               overrides: dict[str, Any] | None = None,
                               ) -> AsyncIterator[CoordinatorHere]:
    """`cluster`: settings of the `[cluster]` table to override; `overrides`: other tables."""
    layout = make_repo(tmp_path / "repo")
    tables = {**(overrides or {}), **({"cluster": cluster} if cluster else {})}
    settings = load_settings(layout.root, environ={}, overrides=tables or None)
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        guard = RedisGuard(client, url=server.url, down_s=10)
        runtime = SquadRuntime(layout, settings, ReplayProvider(ReplayScript()))
        try:
            yield CoordinatorHere(layout, client, guard, runtime,
                                  Coordinator(runtime, settings.cluster, guard))
        finally:
            await client.aclose()


def submit_remote(here: CoordinatorHere, tg: anyio.abc.TaskGroup, info: SessionInfo,
                  charter: Charter, outcomes: list[SessionOutcome] | None = None, *,
                  new: bool = False) -> None:
    """Start the route of `info` through the coordinator in `tg`: with no local slot, its job
    goes to the workers' stream (the caller takes it as a worker would); its outcome is
    appended to `outcomes` when it ends. The route resumes a session accepted earlier, or
    (`new`) starts one, as a routed task does, its acceptance not made yet."""
    plan = continue_plan(None, RouteOrigin(), info, None, charter, here.runtime.settings,
                         here.runtime.runner.services.sinks.existing(info.session_id))
    if new:
        plan = dataclasses.replace(plan, task=info.task, continuing=False)

    async def run_here() -> SessionOutcome:
        raise AssertionError("no local slot: the session runs on a worker")

    async def route() -> None:
        outcome = await here.coordinator.run_session(plan, SessionRecord(info),
                                                     here.runtime.tools, None, run_here)
        if outcomes is not None:
            outcomes.append(outcome)

    tg.start_soon(route)
