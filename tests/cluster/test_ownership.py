"""One coordinator per prefix: the ownership lease taken, refused, taken over from a holder
that cannot be running, renewed, and lost to another holder."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator

import pytest
import redis

from squadd.cluster import keys, ownership
from squadd.cluster.connection import ClusterError, RedisGuard, connect
from squadd.procs import process_start
from tests.support.redis_server import RedisServer


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    sync = redis.Redis.from_url(redis_server.url, decode_responses=True)
    sync.flushdb()
    try:
        yield sync
    finally:
        sync.close()


def holder(client: redis.Redis) -> dict[str, object]:
    return dict(json.loads(str(client.get(keys.OWNER))))


def test_a_live_holder_elsewhere_refuses_a_second_coordinator(client: redis.Redis) -> None:
    first = ownership.take(client, repo="/srv/a", ttl_ms=30_000, shown_url="redis://r/0")
    assert first.holder["pid"] == os.getpid()
    with pytest.raises(ClusterError, match=r"another coordinator already serves the cluster "
                                           r"at redis://r/0 \(host .*repository /srv/a"):
        ownership.take(client, repo="/srv/b", ttl_ms=30_000, shown_url="redis://r/0")
    assert holder(client)["token"] == first.token  # the first one still holds it


def test_a_holder_on_this_host_that_no_longer_runs_is_taken_over_with_a_higher_token(
        client: redis.Redis) -> None:
    gone = {"token": 7, "host": socket.gethostname(), "pid": os.getpid(),
            "start": "not this process's start", "repo": "/srv/other", "since": "earlier"}
    client.set(keys.OWNER, json.dumps(gone), px=60_000)
    taken = ownership.take(client, repo="/srv/mine", ttl_ms=30_000, shown_url="redis://r/0")
    assert taken.token > 7  # above the last holder's, even though the counter was lost
    assert holder(client)["repo"] == "/srv/mine"
    assert holder(client)["start"] == process_start(os.getpid())


def test_the_same_repository_on_this_host_is_taken_over_at_once(client: redis.Redis) -> None:
    # This process holds the repository's daemon lock: a holder of the same repository on
    # this host is a coordinator that was killed, whatever its PID says.
    ownership.take(client, repo="/srv/repo", ttl_ms=30_000, shown_url="redis://r/0")
    again = ownership.take(client, repo="/srv/repo", ttl_ms=30_000, shown_url="redis://r/0")
    assert holder(client)["token"] == again.token


async def test_renewal_keeps_retakes_and_loses_the_lease(
        client: redis.Redis, redis_server: RedisServer) -> None:
    mine = ownership.take(client, repo="/srv/a", ttl_ms=30_000, shown_url="redis://r/0")
    aio = connect(redis_server.url)
    guard = RedisGuard(aio, url=redis_server.url, down_s=5)
    try:
        assert await ownership.renew(guard, mine) == ownership.RENEWED
        client.delete(keys.OWNER)  # Redis lost it (restarted empty) or it lapsed
        assert await ownership.renew(guard, mine) == ownership.RETAKEN
        client.set(keys.OWNER, json.dumps({"token": 99, "host": "elsewhere", "pid": 1}))
        assert await ownership.renew(guard, mine) == ownership.LOST
        await ownership.release(guard, mine)  # not its own any more: left alone
        assert holder(client)["token"] == 99
    finally:
        await aio.aclose()
