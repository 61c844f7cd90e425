"""Redis going away: operations wait through a restart (reported), and fail clearly past the
bound; commands are packed in C, to the bytes redis-py's own packer makes; a send to a server
that stops reading ends at the socket timeout."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

from squadd.cluster.connection import ClusterError, RedisGuard, connect
from tests.support.redis_server import RedisServer


async def test_a_redis_restart_is_ridden_out_and_reported(tmp_path: Path) -> None:
    changes: list[bool] = []
    with RedisServer(tmp_path / "redis") as server:
        client = connect(server.url)
        guard = RedisGuard(client, url=server.url, down_s=60,
                           on_change=lambda up, _reason: changes.append(up))
        try:
            await guard.run(lambda: client.set("k", "before"))
            await anyio.to_thread.run_sync(server.restart)
            value = await guard.run(lambda: client.get("k"))
        finally:
            await client.aclose()
    assert value == "before"  # the append-only file kept it
    assert changes == [False, True]
    assert guard.outages == 1 and guard.up


async def test_redis_gone_past_the_bound_fails_with_the_setting_named(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        url = server.url
    client = connect(url)  # the server is gone now
    guard = RedisGuard(client, url=url, down_s=0.3)
    try:
        with pytest.raises(ClusterError, match=r"cluster\.redis_down_s"):
            await guard.run(lambda: client.ping())
    finally:
        await client.aclose()
    assert guard.up is False


def test_a_password_in_the_url_is_refused() -> None:
    from squadd.config import load_settings
    from squadd.errors import ConfigError

    with pytest.raises(ConfigError, match="SQUADD_REDIS_PASSWORD"):
        load_settings(overrides={"cluster": {"url": "redis://:hunter2@db:6379/0"}},
                      environ={})


def test_doctor_fails_the_cluster_check_when_redis_is_gone(tmp_path: Path) -> None:
    from squadd.cli.doctor import check_cluster, run_checks

    with RedisServer(tmp_path / "redis") as server:
        url = server.url
    (result,) = run_checks(tmp_path, [check_cluster], cluster_url=url)
    assert result.status == "fail"
    assert url in result.summary
    (skipped,) = run_checks(tmp_path, [check_cluster])
    assert skipped.status == "skip"


def test_doctor_on_a_redis_no_coordinator_used_yet_warns_of_no_worker(tmp_path: Path) -> None:
    from squadd.cli.doctor import check_cluster, run_checks

    with RedisServer(tmp_path / "redis") as server:
        (result,) = run_checks(tmp_path, [check_cluster], cluster_url=server.url)
    assert result.status == "warn", result
    assert result.summary == "Redis reachable, but no worker is alive"
    assert not any("squadd:jobs:" in d for d in result.details), result.details


async def test_commands_are_packed_in_c_and_mean_what_the_python_packer_sent(
        guard: RedisGuard) -> None:
    client = guard.client
    pool = client.connection_pool
    assert pool.connection_class.__name__ == "CPackedConnection"
    args = ("XADD", "s", "*", "text", "é\u2028 ok", "n", 7, "x", 0.1, "raw", b"\x00\xff")
    packed = pool.make_connection().pack_command(*args)  # type: ignore[no-untyped-call]
    assert b"".join(packed) == b"".join(Connection().pack_command(*args))
    async with client.pipeline(transaction=True) as pipe:
        pipe.xadd("s", {"text": "é\u2028 ok", "n": 7, "x": 0.1})
        pipe.xrange("s")
        _, [(_, fields)] = await pipe.execute()
    assert fields == {"text": "é\u2028 ok", "n": "7", "x": "0.1"}
    with pytest.raises(DataError):
        await client.set("k", None)  # type: ignore[arg-type]
    assert connect(guard.url).connection_pool.connection_class is pool.connection_class


async def test_a_send_to_a_server_that_stops_reading_ends_at_the_socket_timeout() -> None:
    """A server that takes the connection and never reads fills the socket's buffers: the
    send fails as a timeout (which the guard treats as Redis gone) instead of waiting for
    ever."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        client = connect(f"redis://127.0.0.1:{port}/0")
        pool = client.connection_pool
        pool.connection_kwargs["socket_timeout"] = 0.5
        try:
            with anyio.fail_after(30):  # the guard against a hang; the bound is 0.5 s
                with pytest.raises(RedisTimeoutError):
                    await client.set("big", "x" * (64 << 20))
        finally:
            await client.aclose()
