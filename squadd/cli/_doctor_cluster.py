"""`squadd doctor`'s cluster check: Redis reachable, workers alive and on our version, and how
far behind the job and request streams are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from squadd.cli._doctor_result import CheckResult, DoctorContext

PROBE_TIMEOUT_S = 10.0


def check_cluster(ctx: DoctorContext) -> CheckResult:
    from squadd.cli._doctor_result import CheckResult

    url = ctx.cluster_url or (ctx.settings.cluster.url if ctx.settings is not None else "")
    if not url:
        return CheckResult("cluster", "skip", "one host (no [cluster] url, no --cluster)")
    assert ctx.settings is not None or ctx.cluster_url
    import anyio

    from squadd.cluster.connection import ClusterError

    try:
        found = anyio.run(_probe, url, ctx)
    except (ClusterError, TimeoutError, OSError) as exc:
        return CheckResult("cluster", "fail", f"Redis at {url} is not reachable: {exc}",
                           ["is redis-server running there? is SQUADD_REDIS_PASSWORD set "
                            "(or a SQUADD_REDIS_PASSWORD= line in the secrets file)?"])
    return _judge(url, found)


async def _probe(url: str, ctx: DoctorContext) -> dict[str, Any]:
    import anyio

    from squadd.cluster import keys
    from squadd.cluster.connection import RedisGuard, cluster_password, connect
    from squadd.cluster.jobs import JobQueue
    from squadd.cluster.workers import live_workers
    from squadd.config import Settings

    settings = ctx.settings or Settings()
    client = connect(url, cluster_password(settings))
    guard = RedisGuard(client, url=url, down_s=3.0)
    try:
        with anyio.fail_after(PROBE_TIMEOUT_S):
            info: Any = await guard.run(lambda: client.info("server"))
            workers = await live_workers(guard)
            lags = await JobQueue(guard).lags()
            requests: Any = await guard.run(lambda: client.xlen(keys.REQUESTS))
            return {"redis_version": info.get("redis_version", "?"), "workers": workers,
                    "lags": lags, "requests": int(requests or 0)}
    finally:
        await client.aclose()


def _judge(url: str, found: dict[str, Any]) -> CheckResult:
    from squadd._version import __version__
    from squadd.cli._doctor_result import CheckResult

    workers = found["workers"]
    details = [f"redis {found['redis_version']} at {url}"]
    for worker in workers:
        details.append(f"worker {worker.name}: {worker.busy}/{worker.slots} slots busy, "
                       f"{worker.host} pid {worker.pid}, squadd {worker.version}")
    for stream, lag in found["lags"].items():
        details.append(f"{stream}: {lag['lag']} waiting, {lag['pending']} running")
    details.append(f"requests not yet answered by the coordinator: {found['requests']}")
    if not workers:
        return CheckResult("cluster", "warn", "Redis reachable, but no worker is alive",
                           [*details, "start one: squadd worker --cluster URL --repo REPO"])
    others = sorted({w.version for w in workers if w.version != __version__})
    if others:
        return CheckResult("cluster", "warn", f"workers run other squadd versions: "
                                              f"{', '.join(others)} (this is {__version__})",
                           details)
    slots = sum(w.slots for w in workers)
    named = f"{len(workers)} worker{'' if len(workers) == 1 else 's'}"
    return CheckResult("cluster", "ok", f"{named} alive, {slots} slots", details)
