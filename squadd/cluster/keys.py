"""Every Redis stream, group and key name the cluster uses, in one place.

All names share a prefix, so one Redis database can hold one cluster and `KEYS`-free scans
(`SCAN MATCH squadd:worker:*`) find what belongs to it.
"""

from __future__ import annotations

PREFIX = "squadd"

JOBS_URGENT = f"{PREFIX}:jobs:urgent"
"""Session jobs routed with priority urgent: workers read this stream first."""
JOBS_NORMAL = f"{PREFIX}:jobs:normal"
JOB_STREAMS: tuple[str, str] = (JOBS_URGENT, JOBS_NORMAL)
WORKERS_GROUP = "workers"
"""The consumer group every worker reads the job streams in."""

REQUESTS = f"{PREFIX}:requests"
"""Workers' requests to the coordinator (claims, transcript records, squad-tool calls, ends)."""
COORDINATOR_GROUP = "coordinator"
COORDINATOR_CONSUMER = "coordinator"

EVENTS = f"{PREFIX}:events"
"""The capped stream of events the workers publish and the coordinator relays."""

APPLYING = f"{PREFIX}:applying"
"""Hash of request ids the coordinator has started to apply (write-ahead: a request found
here after a restart without a stored reply had an unknown effect and is never applied again)."""


def reply(request_id: str) -> str:
    """The stored reply to one request (a string key with a TTL)."""
    return f"{PREFIX}:reply:{request_id}"


def reply_box(request_id: str) -> str:
    """The list the reply to one request is pushed on (the worker waits on it with BLPOP)."""
    return f"{PREFIX}:replybox:{request_id}"


def epoch(session_id: str) -> str:
    """The session's lease epoch: raised at each claim; requests with an older one are refused."""
    return f"{PREFIX}:epoch:{session_id}"


def cancel(session_id: str) -> str:
    """Set when the coordinator cancels a session a worker runs."""
    return f"{PREFIX}:cancel:{session_id}"


OWNER = f"{PREFIX}:coordinator"
"""The coordinator's ownership lease of this prefix (JSON: fencing token, host, pid, repo,
since), with a TTL it renews: a second coordinator finds it and is refused."""
FENCE = f"{PREFIX}:coordinator:fence"
"""The counter each coordinator's fencing token is drawn from (INCR at each takeover)."""
SQUAD = f"{PREFIX}:squad"
"""The identity of the squad the coordinator serves (root commit, remote, squad id): a
worker compares its clone with it before it takes a job."""
RUN = f"{PREFIX}:run"
"""The coordinator's run marker: found missing, Redis lost its data (restarted empty, or was
flushed), and the coordinator submits again every route it holds."""

WORKER_PREFIX = f"{PREFIX}:worker:"
WORKERS = f"{PREFIX}:workers"
"""The names of the workers that beat (a set): listing them reads these keys, not the whole
keyspace, which holds a day of stored replies."""


def worker(name: str) -> str:
    """A worker's heartbeat key (JSON: slots, busy, version, host; expires without beats)."""
    return f"{WORKER_PREFIX}{name}"
