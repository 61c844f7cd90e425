"""Cluster mode at start-up: `squadd serve --cluster URL` (or `[cluster] url`) checks Redis
with one quick PING (a wrong address or password is an error in seconds, not after
`cluster.redis_down_s`), takes the prefix's ownership lease (a second coordinator is refused,
naming the first), publishes the squad's identity and its run marker, makes the runtime's
sessions run through a `Coordinator`, and sizes the pool's local limit to the jobs the
coordinator may hand out at once (the workers' slots are the real limit, and Redis holds
their queue).
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass

import redis

from squadd.cluster import keys
from squadd.cluster.connection import CONNECT_TIMEOUT_S, RedisGuard, cluster_password, connect
from squadd.cluster.identity import SquadIdentity, ensure_squad_id, read_identity
from squadd.cluster.ownership import Ownership, take
from squadd.cluster.probe import PROBE_TIMEOUT_S, probe, shown
from squadd.config import ClusterSettings, Settings
from squadd.daemon.coordinator import Coordinator
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.slots import PrioritySlots
from squadd.state.layout import SquadLayout


@dataclass(frozen=True)
class ClusterStart:
    """What a coordinator holds from its start: its lease, its run marker, its squad."""

    ownership: Ownership
    run_id: str
    identity: SquadIdentity


def lease_ms(cluster: ClusterSettings) -> int:
    """How long the ownership lease lives without a renewal (renewed every heartbeat)."""
    return int(max(cluster.lease_s, 3 * cluster.heartbeat_s) * 1000)


def claim_prefix(layout: SquadLayout, cluster: ClusterSettings,
                 password: str | None) -> ClusterStart:
    """Probe Redis, take the ownership lease and publish the squad (blocking, at start);
    `ClusterError` saying what is wrong."""
    probe(cluster.url, password)
    ensure_squad_id(layout.squad_id_file)
    identity = read_identity(layout.repo, layout.squad_id_file, host=socket.gethostname())
    client = redis.Redis.from_url(cluster.url, password=password, decode_responses=True,
                                  socket_timeout=PROBE_TIMEOUT_S,
                                  socket_connect_timeout=CONNECT_TIMEOUT_S)
    try:
        ownership = take(client, repo=str(layout.repo), ttl_ms=lease_ms(cluster),
                         shown_url=shown(cluster.url))
        run_id = secrets.token_hex(8)
        client.set(keys.SQUAD, identity.model_dump_json())
        client.set(keys.RUN, run_id)
    finally:
        client.close()
    return ClusterStart(ownership=ownership, run_id=run_id, identity=identity)


def coordinate(runtime: SquadRuntime, settings: Settings) -> Coordinator:
    """Make `runtime` the coordinator of the cluster at `settings.cluster.url`."""
    cluster = settings.cluster
    password = cluster_password(settings)
    start = claim_prefix(runtime.layout, cluster, password)
    client = connect(cluster.url, password)
    guard = RedisGuard(client, url=shown(cluster.url), down_s=cluster.redis_down_s)
    coordinator = Coordinator(runtime, cluster, guard, start=start)
    runtime.pool.slots = PrioritySlots(cluster.local_slots + cluster.max_jobs)
    runtime.runner.host = coordinator.host()
    return coordinator
