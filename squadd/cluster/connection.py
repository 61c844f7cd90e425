"""The Redis connection: made from the cluster settings and a password found outside `.squad/`,
with timeouts on every socket wait and commands packed in C, and `RedisGuard`, which retries an
operation across a Redis restart with tenacity (bounded by `cluster.redis_down_s`) and reports
the outage and the return.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis
import structlog
import tenacity
from redis.asyncio.connection import AbstractConnection
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.utils import HIREDIS_AVAILABLE

from squadd.errors import ClusterError as ClusterError

if TYPE_CHECKING:
    from squadd.config import Settings

log = structlog.get_logger("squadd.cluster")
T = TypeVar("T")

PASSWORD_ENV = "SQUADD_REDIS_PASSWORD"
SOCKET_TIMEOUT_S = 30.0
"""Bound on any one socket read; blocking commands ask for less (see `BLOCK_S`)."""
CONNECT_TIMEOUT_S = 5.0
BLOCK_S = 2.0
"""How long a blocking read (XREADGROUP, BLPOP) waits in Redis before it returns empty."""
TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError)


def find_password(secrets: Callable[[], dict[str, str]] | None = None) -> str | None:
    """The Redis password: `SQUADD_REDIS_PASSWORD`, else that line of the secrets file."""
    value = os.environ.get(PASSWORD_ENV)
    if value:
        return value
    if secrets is not None:
        return secrets().get(PASSWORD_ENV) or None
    return None


def cluster_password(settings: Settings) -> str | None:
    """The Redis password from SQUADD_REDIS_PASSWORD or the secrets file (never `.squad/`)."""
    from squadd.tools.variables import SecretsFile, secrets_file_path

    secrets_file = SecretsFile(secrets_file_path(settings))
    return find_password(lambda: dict(secrets_file.read().values))


def connect(url: str, password: str | None = None) -> aioredis.Redis:
    """A client for `url` (no I/O yet); every socket wait is bounded."""
    if not url:
        raise ClusterError("no cluster URL: pass --cluster redis://HOST:PORT/DB or set "
                           "[cluster] url")
    client = aioredis.Redis.from_url(
        url, password=password, decode_responses=True, socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S, health_check_interval=10,
        retry_on_timeout=False)
    pool = client.connection_pool
    pool.connection_class = packed_in_c(pool.connection_class)
    return client


_PACKED: dict[str, type[AbstractConnection]] = {}


def packed_in_c(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """`base` (the connection class the URL's scheme chose) packing its commands with hiredis,
    the bytes redis-py's blocking client sends when hiredis is installed; its asyncio client
    packs them in Python, a quarter of the speed and a tenth of a cluster route's CPU."""
    if not HIREDIS_AVAILABLE or base.__name__.startswith("CPacked"):
        return base
    key = f"{base.__module__}.{base.__qualname__}"
    if key in _PACKED:
        return _PACKED[key]
    serializer = HiredisRespSerializer()

    class Packed(base):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            return serializer.pack(*args)  # type: ignore[no-any-return]

    Packed.__name__ = Packed.__qualname__ = f"CPacked{base.__name__}"
    _PACKED[key] = Packed
    return Packed


class RedisGuard:
    """Runs Redis operations, retrying through an outage of at most `down_s` seconds.

    `on_change(up, reason)` hears when Redis went away and when it came back (the coordinator
    turns these into log lines and status; the worker logs them). Past the bound the operation
    raises `ClusterError`, which names the URL and the setting.
    """

    def __init__(self, client: aioredis.Redis, *, url: str, down_s: float,
                 on_change: Callable[[bool, str], None] | None = None):
        self.client = client
        self.url = url
        self.down_s = down_s
        self.up = True
        self.outages = 0
        self.scripts: bool | None = None
        """Whether this Redis runs scripts (`scripts_refused`): None until one was tried."""
        self._on_change = on_change

    def scripts_refused(self, exc: ResponseError) -> bool:
        """Whether `exc` says this Redis will not run a script at all: its ACL refuses them
        (`NOPERM`), or the command was renamed away. If so it is remembered (`scripts`, False:
        no script is sent again) and logged once. A script's own failure is not that."""
        if not isinstance(exc, NoPermissionError) and "unknown command" not in str(exc):
            return False
        if self.scripts is not False:
            log.warning("redis refuses scripts: jobs are read one stream at a time, and "
                        "requests go out unmarked (the coordinator asks who holds each job)",
                        url=self.url, error=str(exc)[:300])
            self.scripts = False
        return True

    def _mark(self, up: bool, reason: str) -> None:
        if up == self.up:
            return
        self.up = up
        if not up:
            self.outages += 1
            log.warning("redis unreachable; reconnecting", url=self.url, reason=reason)
        else:
            log.info("redis reachable again", url=self.url)
        if self._on_change is not None:
            self._on_change(up, reason)

    async def run(self, operation: Callable[[], Awaitable[T]]) -> T:
        """`operation()`, retried with backoff while Redis is unreachable (bounded).

        The first try runs straight, outside the retry machinery: a command a route takes
        costs a Redis round trip, not the building of a retry loop (that was about a third of
        the coordinator's CPU a route); only a failed try starts the bounded retries."""
        first_failure: list[float] = []
        if self.up:
            try:
                return await operation()
            except TRANSIENT as exc:
                first_failure.append(time.monotonic())
                self._mark(False, f"{type(exc).__name__}: {exc}")
        return await self._retried(operation, first_failure)

    async def _retried(self, operation: Callable[[], Awaitable[T]],
                       first_failure: list[float]) -> T:
        def gone_too_long(state: tenacity.RetryCallState) -> bool:
            # Counted from the first failure, not from the call: a blocking read that waited
            # its full time before Redis went away still gets the whole bound.
            now = time.monotonic()
            if not first_failure:
                first_failure.append(now)
            return now - first_failure[0] >= self.down_s

        retrying = tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(TRANSIENT),
            wait=tenacity.wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.05),
            stop=gone_too_long,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    try:
                        result = await operation()
                    except TRANSIENT as exc:
                        self._mark(False, f"{type(exc).__name__}: {exc}")
                        raise
            self._mark(True, "")
            return result
        except TRANSIENT as exc:
            raise ClusterError(
                f"Redis at {self.url} was unreachable for {self.down_s:g}s "
                f"(cluster.redis_down_s): {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover (tenacity reraises)
