"""One real redis-server for the cluster package's tests (emptied before each test)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from squadd.cluster.connection import RedisGuard, connect
from tests.support.cluster import Cluster
from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with RedisServer(Path(tmp_path_factory.mktemp("redis"))) as server:
        yield server


@pytest.fixture
async def guard(redis_server: RedisServer) -> AsyncIterator[RedisGuard]:
    client = connect(redis_server.url)
    await client.flushdb()
    try:
        yield RedisGuard(client, url=redis_server.url, down_s=30)
    finally:
        await client.aclose()


@pytest.fixture
async def no_scripts(guard: RedisGuard, redis_server: RedisServer
                     ) -> AsyncIterator[RedisGuard]:
    """A guard on the same Redis for a user whose ACL allows everything but scripts, as some
    hosted Redis set their users up."""
    await guard.client.acl_setuser("noscripts", enabled=True, nopass=True, keys=["*"],
                                   channels=["*"], commands=["+@all", "-@scripting"],
                                   reset=True)
    url = redis_server.url.replace("redis://", "redis://noscripts@")
    client = connect(url)
    try:
        yield RedisGuard(client, url=url, down_s=30)
    finally:
        await client.aclose()
        await guard.client.acl_deluser("noscripts")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A started cluster with one worker, `w1`, of one slot."""
    with Cluster(tmp_path) as started:
        started.start_worker("w1", slots=1)
        yield started
