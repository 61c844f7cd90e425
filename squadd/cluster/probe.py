"""The first contact with Redis, before a coordinator or worker starts: one PING within a few
seconds, and every way it can fail turned into one sentence that says what is wrong and what
to check (an address nobody listens on, a host that does not answer, a missing or wrong
password, TLS on one side only, a database index out of range). No retries: a wrong address
does not become right by waiting `cluster.redis_down_s`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import redis
from redis.exceptions import (
    AuthenticationError,
    ConnectionError,
    RedisError,
    ResponseError,
)
from redis.exceptions import TimeoutError as RedisTimeoutError

from squadd.cluster.connection import PASSWORD_ENV, ClusterError

PROBE_TIMEOUT_S = 2.0
"""Bound on the connection and on the PING's answer: a verdict comes in about this long."""


def shown(url: str) -> str:
    """`url` without any credentials in it, fit for an error message or a log line."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


def probe(url: str, password: str | None, *, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """PING the Redis at `url` once; `ClusterError` that names the cause when it fails."""
    where = shown(url)
    tls = urlsplit(url).scheme == "rediss"
    client = redis.Redis.from_url(url, password=password, socket_connect_timeout=timeout_s,
                                  socket_timeout=timeout_s, retry_on_timeout=False,
                                  retry=None)
    try:
        client.ping()
    except AuthenticationError as exc:
        raise ClusterError(_auth_problem(where, password, str(exc))) from None
    except RedisTimeoutError:
        if tls:
            raise ClusterError(
                f"Redis at {where} did not complete a TLS handshake within {timeout_s:g}s: is "
                "that server plain Redis? Use redis:// for a server without TLS") from None
        raise ClusterError(
            f"Redis at {where} did not answer within {timeout_s:g}s: is the host reachable "
            "from here, and is it a Redis server (a firewall that drops packets, or a TLS "
            "server reached with redis:// instead of rediss://)?") from None
    except ConnectionError as exc:
        raise ClusterError(_connection_problem(where, tls, str(exc))) from None
    except ResponseError as exc:
        text = str(exc)
        if "NOAUTH" in text or "WRONGPASS" in text:
            raise ClusterError(_auth_problem(where, password, text)) from None
        if "DB index" in text:
            raise ClusterError(f"Redis at {where}: the database index in the URL is out of "
                               f"range ({text})") from None
        raise ClusterError(f"Redis at {where} refused the first command: {text}") from None
    except (RedisError, OSError) as exc:
        raise ClusterError(f"Redis at {where} could not be used: "
                           f"{type(exc).__name__}: {exc}") from None
    finally:
        client.close()


def _auth_problem(where: str, password: str | None, said: str) -> str:
    if password is None:
        return (f"Redis at {where} needs a password and none is set: set {PASSWORD_ENV} or "
                f"put a {PASSWORD_ENV}=... line in the secrets file")
    return (f"Redis at {where} refused the password ({PASSWORD_ENV} or the secrets file): "
            f"{said.rstrip('.')}")


def _connection_problem(where: str, tls: bool, said: str) -> str:
    lowered = said.lower()
    if "refused" in lowered:
        return (f"nothing listens at {where} (connection refused): is redis-server running, "
                "on that port and address?")
    if "name or service not known" in lowered or "nodename nor servname" in lowered \
            or "temporary failure in name resolution" in lowered:
        return f"the host of {where} is not known (DNS): check the name in the URL"
    if "ssl" in lowered or "tls" in lowered or "wrong version number" in lowered:
        if tls:
            return (f"TLS with Redis at {where} failed: {said} (a plain server needs "
                    "redis://; a self-signed one needs its CA)")
        return f"Redis at {where} speaks TLS: use rediss:// ({said})"
    if "closed by server" in lowered or "reset" in lowered:
        hint = "" if tls else " (a TLS-only server reached with redis://? use rediss://)"
        return f"Redis at {where} closed the connection at once{hint}: {said}"
    return f"Redis at {where} could not be reached: {said}"
