"""Cluster mode at start-up: `squadd serve --cluster URL` (or `[cluster] url`) connects to
Redis, makes the runtime's sessions run through a `Coordinator`, and sizes the pool's local
limit to the jobs the coordinator may hand out at once (the workers' slots are the real limit,
and Redis holds their queue).
"""

from __future__ import annotations

from squadd.cluster.connection import RedisGuard, connect, find_password
from squadd.config import Settings
from squadd.daemon.coordinator import Coordinator
from squadd.runtime.runtime import SquadRuntime
from squadd.runtime.slots import PrioritySlots
from squadd.tools.custom.variables import SecretsFile, secrets_file_path


def cluster_password(settings: Settings) -> str | None:
    """The Redis password from SQUADD_REDIS_PASSWORD or the secrets file (never `.squad/`)."""
    secrets = SecretsFile(secrets_file_path(settings))
    return find_password(lambda: dict(secrets.read().values))


def coordinate(runtime: SquadRuntime, settings: Settings) -> Coordinator:
    """Make `runtime` the coordinator of the cluster at `settings.cluster.url`."""
    cluster = settings.cluster
    client = connect(cluster.url, cluster_password(settings))
    guard = RedisGuard(client, url=cluster.url, down_s=cluster.redis_down_s)
    coordinator = Coordinator(runtime, cluster, guard)
    runtime.pool.slots = PrioritySlots(cluster.local_slots + cluster.max_jobs)
    runtime.runner.host = coordinator.host()
    return coordinator
