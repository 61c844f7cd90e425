"""The faults cluster mode must survive, each with real processes, real SIGKILL / SIGSTOP and
a real redis-server restart. Kill points are chosen by hooks (a held model turn, a tool that
waits for a file), never by a clock; waits are bounded polls of what the processes wrote."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from squadd.cluster.connection import RedisGuard, connect
from squadd.cluster.requests import send
from squadd.cluster.wire import Request
from squadd.errors import DaemonError
from tests.support.cluster import (
    Background,
    Cluster,
    claims,
    eventually,
    marks,
    one_session,
)

pytestmark = pytest.mark.slow

def test_worker_killed_mid_session_another_worker_finishes_it(cluster: Cluster) -> None:
    route = Background(cluster, "hold:alpha")
    cluster.team.wait_reached("alpha")  # the decision is applied; its next turn is held
    session = one_session(cluster)
    assert cluster.holder(session) == "w1"
    cluster.start_worker("w2", slots=1)
    cluster.kill_worker("w1")
    cluster.team.release("alpha")
    result = route.wait()
    assert result["ok"], result
    assert result["answer"] == "decided alpha"
    # Its job was handed over under epoch 1; w1, holding no prompt yet, claimed it (2).
    assert claims(cluster, session) == [("w1", 2), ("w2", 3)]
    # The model asked for the decision once; it was applied once.
    assert cluster.team.calls["squad_decide:alpha"] == 1
    # Nothing written twice: each forwarded record is in the transcript once.
    recorded = marks(cluster, session)
    assert len(recorded) == len(set(recorded))
    assert cluster.decisions_text().count("We settle alpha.") == 1


def test_worker_stopped_by_sigterm_says_what_it_leaves_and_its_job_moves_on(
        cluster: Cluster) -> None:
    route = Background(cluster, "hold:alpha")
    cluster.team.wait_reached("alpha")
    session = one_session(cluster)
    assert cluster.holder(session) == "w1"
    cluster.start_worker("w2", slots=1)
    w1 = cluster.workers["w1"]
    w1.send_signal(signal.SIGTERM)
    assert w1.wait(timeout=30) == 0
    log = cluster.worker_log("w1")
    assert "worker stopping" in log and "jobs_left=1" in log and "signal=SIGTERM" in log
    cluster.team.release("alpha")
    result = route.wait()
    assert result["ok"], result
    assert result["answer"] == "decided alpha"
    assert [w for w, _ in claims(cluster, session)] == ["w1", "w2"]
    assert cluster.team.calls["squad_decide:alpha"] == 1


def test_tool_in_flight_when_its_worker_dies_is_reported_not_run_again(
        tmp_path: Path, cluster: Cluster) -> None:
    marker = tmp_path / "m1"
    route = Background(cluster, f"step:{marker}")
    started = Path(f"{marker}.started")
    eventually(started.exists, "the step tool started on w1")
    cluster.start_worker("w2", slots=1)
    cluster.kill_worker("w1")
    result = route.wait()
    Path(f"{marker}.go").write_text("go")
    assert result["ok"], result
    assert "effect is unknown" in result["answer"]
    assert started.read_text().splitlines() == ["ran"]  # never run a second time
    session = result["session_id"]
    assert [w for w, _ in claims(cluster, session)] == ["w1", "w2"]


def test_coordinator_killed_and_restarted_loses_nothing(cluster: Cluster) -> None:
    route = Background(cluster, "hold:beta")
    cluster.team.wait_reached("beta")
    session = one_session(cluster)
    cluster.daemon.kill()
    with pytest.raises(DaemonError):
        route.wait()  # its caller lost the daemon; the session lives on in the worker
    cluster.team.release("beta")  # the worker's records now wait for a coordinator
    cluster.start_coordinator()

    def ended() -> bool:
        states = [r["state"] for r in cluster.transcript(session) if r.get("kind") == "state"]
        return states[-1] == "completed"
    eventually(ended, "the session completed through the restarted coordinator")
    final = [r for r in cluster.transcript(session) if r.get("state") == "completed"]
    assert len(final) == 1 and final[0]["answer"] == "decided beta"
    recorded = marks(cluster, session)
    assert len(recorded) == len(set(recorded))
    view = cluster.daemon.client.session(session, transcript=False)["session"]
    assert view["answer"] == "decided beta"
    assert cluster.team.calls["squad_decide:beta"] == 1
    assert cluster.decisions_text().count("We settle beta.") == 1


def test_redis_restart_is_reported_and_routes_work_again(cluster: Cluster) -> None:
    assert cluster.daemon.client.route("decide:before", "lead")["ok"]
    cluster.redis.restart()  # append-only file on: groups and pending entries survive
    after = cluster.daemon.client.route("decide:after", "lead")
    assert after["ok"], after
    assert after["answer"] == "decided after"
    report = json.loads(cluster.daemon.squadd("status", "--json").stdout)["cluster"]
    assert report["redis_up"] is True
    assert report["redis_outages"] >= 1
    assert "redis unreachable" in cluster.worker_log("w1")
    assert "redis reachable again" in cluster.worker_log("w1")
    text = cluster.decisions_text()
    assert text.count("We settle before.") == 1 and text.count("We settle after.") == 1


def test_stale_epoch_requests_are_refused_and_apply_nothing(cluster: Cluster) -> None:
    result = cluster.daemon.client.route("decide:gamma", "lead")
    assert result["ok"], result
    session = result["session_id"]
    before = cluster.transcript(session)

    async def forged(kind: str, body: dict[str, Any]) -> Any:
        client = connect(cluster.redis.url)
        guard = RedisGuard(client, url=cluster.redis.url, down_s=10)
        try:
            return await send(guard, Request(
                request_id=f"forged-{kind}", kind=kind, session_id=session,  # type: ignore[arg-type]
                worker="late", epoch=0, body=body), timeout_s=5, attempts=6)
        finally:
            await client.aclose()

    call = {"id": "late_call", "name": "squad_decide", "arguments": {
        "title": "late", "body": "We settle late.", "agentName": "lead",
        "category": "architecture"}}
    tool = asyncio.run(forged("tool", {"call": call}))
    records = asyncio.run(forged("records", {"records": [
        {"kind": "message", "n": 99, "message": {"role": "assistant", "content": "x"}}]}))
    for reply in (tool, records):
        assert reply.ok is False and reply.refused == "stale_epoch"
        assert "stale" in (reply.error or "")
    assert cluster.transcript(session) == before
    assert "We settle late." not in cluster.decisions_text()


def test_paused_worker_loses_its_job_and_its_late_results_are_refused(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        slow = cluster.start_worker("w1", slots=1)
        route = Background(cluster, "hold:delta")
        cluster.team.wait_reached("delta")
        session = one_session(cluster)
        slow.send_signal(signal.SIGSTOP)  # cut off: no lease renewals, no requests
        try:
            cluster.start_worker("w2", slots=1)
            cluster.team.release("delta")
            result = route.wait()
        finally:
            slow.send_signal(signal.SIGCONT)
        assert result["ok"] and result["answer"] == "decided delta"
        assert claims(cluster, session) == [("w1", 2), ("w2", 3)]  # as above
        eventually(lambda: "lease moved on" in cluster.worker_log("w1")
                   or "taken over by another worker" in cluster.worker_log("w1"),
                   "w1 noticed that its lease moved on")
        # Whatever w1 said after waking was refused: every record after the new claim is w2's.
        epochs = [e for e, _ in marks(cluster, session)]
        assert epochs == sorted(epochs)
        states = [r["state"] for r in cluster.transcript(session) if r.get("kind") == "state"]
        assert states.count("completed") == 1


def test_a_cancelled_session_stops_on_its_worker_and_its_job_is_done_with(
        tmp_path: Path, cluster: Cluster) -> None:
    marker = tmp_path / "m2"
    started = cluster.daemon.client.route(f"step:{marker}", "lead", wait=False)
    session = started["session_id"]
    eventually(Path(f"{marker}.started").exists, "the step tool started on w1")
    assert cluster.daemon.client.cancel(session)["cancelled"] is True
    Path(f"{marker}.go").write_text("go")  # the worker hears of the cancel at its next call

    def stopped() -> bool:
        states = [r["state"] for r in cluster.transcript(session) if r.get("kind") == "state"]
        return states[-1] == "interrupted"
    eventually(stopped, "the worker stopped the cancelled session")

    def done_with() -> bool:
        report = json.loads(cluster.daemon.squadd("status", "--json").stdout)["cluster"]
        return all(j["pending"] == 0 and j["lag"] == 0 for j in report["jobs"].values())
    eventually(done_with, "the cancelled session's job was acknowledged")
    assert not any(r.get("state") == "completed" for r in cluster.transcript(session))


def test_a_cancelled_session_resumed_on_the_cluster_is_claimed_and_finishes(
        tmp_path: Path, cluster: Cluster) -> None:
    marker = tmp_path / "m3"
    session = cluster.daemon.client.route(f"step:{marker}", "lead", wait=False)["session_id"]
    eventually(Path(f"{marker}.started").exists, "the step tool started on w1")
    assert cluster.daemon.client.cancel(session)["cancelled"] is True
    Path(f"{marker}.go").write_text("go")
    eventually(lambda: [r["state"] for r in cluster.transcript(session)
                        if r.get("kind") == "state"][-1] == "interrupted",
               "the worker stopped the cancelled session")
    # The cancel was of the earlier run: the resumed one is claimed, not refused.
    resumed = cluster.daemon.client.resume(session)
    assert resumed["ok"], resumed
    assert [w for w, _ in claims(cluster, session)] == ["w1", "w1"]
    assert [r["state"] for r in cluster.transcript(session)
            if r.get("kind") == "state"][-1] == "completed"


def test_redis_gone_past_its_bound_fails_routes_clearly_and_the_daemon_keeps_serving(
        tmp_path: Path) -> None:
    from tests.support.cluster import CLUSTER_CONFIG

    config = CLUSTER_CONFIG.replace("redis_down_s = 60.0", "redis_down_s = 1.0")
    with Cluster(tmp_path, config=config) as cluster:
        cluster.start_worker("w1", slots=1)
        cluster.redis.stop()
        failed = cluster.daemon.client.route("decide:nowhere", "lead")
        assert failed["ok"] is False
        assert "cluster.redis_down_s" in failed["error"]
        assert cluster.daemon.client.health()["pid"] == cluster.daemon.pid
        cluster.redis.start()  # back: the loops reconnect, and routes run again
        again = eventually(lambda: (lambda r: r if r["ok"] else None)(
            cluster.daemon.client.route("decide:back", "lead")), "a route after Redis returned")
        assert again["answer"] == "decided back"
