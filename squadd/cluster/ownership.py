"""One coordinator per prefix: an ownership lease in Redis with a fencing token.

At start a coordinator takes the lease key (`SET` only where nobody holds it), or is refused
with an error naming the holder (host, PID, repository, since when). A holder on this host
that no longer runs (a coordinator killed with SIGKILL, restarted) is taken over at once; one
elsewhere keeps the prefix until its lease runs out. The coordinator renews its lease every
heartbeat; a renewal that finds another holder means it lost the prefix, and it stops serving
rather than fight over it. Each takeover draws a new fencing token, so the holders of a prefix
are ordered even across Redis restarts that lost the counter (the token is never lower than
the one the last holder wrote).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
from dataclasses import dataclass
from typing import Any

import redis

from squadd.cluster import keys
from squadd.cluster.connection import ClusterError, RedisGuard
from squadd.procs import process_start
from squadd.state.owner import owner_alive

_TAKE = """
local current = redis.call('GET', KEYS[1])
if (not current) or (ARGV[3] ~= '' and current == ARGV[3]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, ''}
end
return {0, current}
"""
_RENEW = """
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"""
RENEWED, RETAKEN, LOST = 1, 2, 0
"""What a renewal found: the lease as it was, none at all (taken back), another holder."""


@dataclass(frozen=True)
class Ownership:
    """This coordinator's hold on the prefix."""

    value: str
    """The lease key's value while this coordinator holds it (compared on renewal)."""
    token: int
    ttl_ms: int

    @property
    def holder(self) -> dict[str, Any]:
        return dict(json.loads(self.value))


def _gone(holder: dict[str, Any], repo: str) -> bool:
    """Whether `holder` is a coordinator on this host that cannot be running: this process
    holds the repository's daemon lock, so one of the same repository is gone, and so is one
    whose process (PID and start time) no longer runs."""
    if holder.get("host") != socket.gethostname():
        return False
    if holder.get("repo") == repo:
        return True
    return not owner_alive(holder)


def describe(holder: dict[str, Any]) -> str:
    return (f"host {holder.get('host', '?')}, PID {holder.get('pid', '?')}, repository "
            f"{holder.get('repo', '?')}, since {holder.get('since', '?')}")


def take(client: redis.Redis, *, repo: str, ttl_ms: int, shown_url: str) -> Ownership:
    """Take the prefix's lease for this process (blocking, at start), or `ClusterError`
    naming the coordinator that holds it."""
    take_script = client.register_script(_TAKE)
    previous = ""
    for _ in range(3):  # a holder found gone is replaced only if it is still the holder
        last: Any = client.get(keys.OWNER)
        last_token = 0
        if last:
            try:
                last_token = int(json.loads(last).get("token", 0))
            except (ValueError, AttributeError):
                last_token = 0
        token = max(int(client.incr(keys.FENCE)), last_token + 1)
        client.set(keys.FENCE, token)
        value = json.dumps({
            "token": token, "host": socket.gethostname(), "pid": os.getpid(),
            "start": process_start(os.getpid()), "repo": repo,
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
        taken, holder_text = take_script(keys=[keys.OWNER], args=[value, ttl_ms, previous])
        if int(taken) == 1:
            return Ownership(value=value, token=token, ttl_ms=ttl_ms)
        try:
            holder = json.loads(holder_text)
        except ValueError:
            holder = {}
        if not isinstance(holder, dict) or not _gone(holder, repo):
            left = client.pttl(keys.OWNER)
            who = describe(holder) if isinstance(holder, dict) else repr(holder_text)
            raise ClusterError(
                f"another coordinator already serves the cluster at {shown_url} ({who}): one "
                f"coordinator per Redis database; stop that one first (its lease lapses "
                f"{max(0, int(left)) / 1000:g}s after it stops renewing)")
        previous = holder_text
    raise ClusterError(f"the coordinator lease at {shown_url} kept changing hands; try again")


async def renew(guard: RedisGuard, ownership: Ownership) -> int:
    """Renew the lease: `RENEWED`, `RETAKEN` (nobody held it: it lapsed, or Redis lost it)
    or `LOST` (another coordinator holds it now)."""
    client = guard.client
    found: Any = await guard.run(lambda: client.eval(
        _RENEW, 1, keys.OWNER, ownership.value, ownership.ttl_ms))
    return int(found)


async def release(guard: RedisGuard, ownership: Ownership) -> None:
    """Give the lease up at a clean stop (only while it is still this coordinator's)."""
    client = guard.client
    await guard.run(lambda: client.eval(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) "
        "end return 0", 1, keys.OWNER, ownership.value))


async def holder(guard: RedisGuard) -> dict[str, Any] | None:
    """Who holds the prefix now (for status and doctor)."""
    client = guard.client
    value: Any = await guard.run(lambda: client.get(keys.OWNER))
    if not value:
        return None
    try:
        found = json.loads(value)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


