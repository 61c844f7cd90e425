"""Cluster mode end to end: a coordinator and worker processes over a real redis-server."""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.cluster import Cluster, claims

pytestmark = pytest.mark.slow


def test_routes_spread_across_three_workers_and_squad_tools_reach_the_coordinator(
        tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        for name in ("w1", "w2", "w3"):
            cluster.start_worker(name, slots=2)
        # Each worker holds at most two sessions: six held routes must land on all three.
        titles = [f"topic-{i}" for i in range(6)]
        with ThreadPoolExecutor(len(titles)) as pool:
            futures = [pool.submit(cluster.daemon.client.route, f"hold:{t}", "lead")
                       for t in titles]
            for title in titles:
                cluster.team.wait_reached(title)
            for title in titles:
                cluster.team.release(title)
            results = [f.result(timeout=120) for f in futures]
        assert [r["ok"] for r in results] == [True] * 6, results
        assert sorted(r["answer"] for r in results) == sorted(f"decided {t}" for t in titles)
        holders = Counter(cluster.holder(r["session_id"]) for r in results)
        assert set(holders) == {"w1", "w2", "w3"}, holders
        assert max(holders.values()) <= 2
        # The CLI routes through the same path and reads the answer back.
        done = cluster.daemon.squadd("route", "lead", "hello there")
        assert done.returncode == 0, done.stderr
        assert "answer: hello there" in done.stdout
        # Status lists the workers and their slots.
        status = cluster.daemon.squadd("status", "--json")
        assert status.returncode == 0, status.stderr
        workers = json.loads(status.stdout)["cluster"]["workers"]
        assert sorted(w["name"] for w in workers) == ["w1", "w2", "w3"]
        assert {w["slots"] for w in workers} == {2}
        # With every route answered, no slot is busy: a reader waiting for a job is not work.
        deadline = time.monotonic() + 60
        while any(w["busy"] for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
            workers = json.loads(cluster.daemon.squadd("status", "--json").stdout)[
                "cluster"]["workers"]
        assert [w["busy"] for w in workers] == [0, 0, 0], workers
        # Doctor sees the same cluster from Redis itself.
        doctor = cluster.daemon.squadd("doctor", "--json", "--cluster", cluster.redis.url)
        checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
        assert checks["cluster"]["status"] == "ok", checks["cluster"]
        assert checks["cluster"]["summary"] == "3 workers alive, 6 slots"
        assert any("squadd:jobs:normal: 0 waiting" in d for d in checks["cluster"]["details"])
        # The coordinator is the one writer: every decision is in its .squad/, once.
        text = cluster.decisions_text()
        for title in titles:
            assert text.count(f"We settle {title}.") == 1, title


def test_worker_events_reach_the_coordinators_bus_naming_their_worker(cluster: Cluster) -> None:
    result = cluster.daemon.client.route("decide:events", "lead")
    assert result["ok"], result
    session = result["session_id"]
    # The worker's events travel on their own stream: look until they are there (bounded).
    for _ in range(100):
        events = cluster.daemon.squadd("events", "--recent", "512", "--json",
                                       "--session", session, timeout=20)
        lines = [json.loads(line) for line in events.stdout.splitlines() if line.strip()]
        completed = [e for e in lines if e["type"] == "agent.completed"]
        if completed:
            break
    assert completed, lines
    assert completed[-1]["worker"] == "w1"
    # The coordinator's own events name no worker.
    assert any(e["type"] == "agent.state" and e.get("worker") is None for e in lines)


def test_a_nested_route_on_a_one_slot_worker_does_not_deadlock(cluster: Cluster) -> None:
    # The parent holds the only slot; it gives it back while backend's child task runs.
    result = cluster.daemon.client.route("route:backend:decide:nested", "lead")
    assert result["ok"], result
    assert "decided nested" in result["answer"]
    child = [p.name.removesuffix(".jsonl")
             for p in cluster.layout.transcripts_dir.glob("*.jsonl")
             if p.name.removesuffix(".jsonl") != result["session_id"]]
    assert len(child) == 1
    assert cluster.holder(child[0]) == "w1"
    meta = cluster.transcript(child[0])[0]
    assert meta["parent_session_id"] == result["session_id"] and meta["agent"] == "backend"


def test_local_slots_run_sessions_on_the_coordinator_itself(tmp_path: Path) -> None:
    with Cluster(tmp_path, serve_args=("--local-slots", "1")) as cluster:
        # No worker at all: the coordinator's own slot runs the session.
        result = cluster.daemon.client.route("decide:local", "lead")
        assert result["ok"], result
        assert result["answer"] == "decided local"
        assert cluster.holder(result["session_id"]) is None  # never claimed by a worker
        report = json.loads(cluster.daemon.squadd("status", "--json").stdout)["cluster"]
        assert report["local_slots"] == 1 and report["workers"] == []


def test_a_session_continued_on_the_cluster_gets_its_new_task_once(cluster: Cluster) -> None:
    first = cluster.daemon.client.route("first task", "lead")
    assert first["ok"], first
    session = first["session_id"]
    waited = cluster.daemon.client.route("second task", "lead", session_id=session)
    assert waited["ok"] and waited["answer"] == "answer: second task", waited
    sent = cluster.daemon.client.route("third task", "lead", session_id=session,
                                       wait=False)
    assert sent["ok"], sent
    deadline = time.monotonic() + 90
    while len([r for r in cluster.transcript(session) if r.get("state") == "completed"]) < 3:
        assert time.monotonic() < deadline, cluster.transcript(session)
        time.sleep(0.1)
    users = [r["message"]["content"] for r in cluster.transcript(session)
             if r.get("kind") == "message" and r["message"]["role"] == "user"]
    assert users == ["first task", "second task", "third task"], users
    # Each task was recorded once as accepted (the claim made it the user message).
    queued = [r.get("task") for r in cluster.transcript(session)
              if r.get("kind") == "state" and r["state"] == "queued"]
    assert queued == [None, "second task", "third task"], queued


def test_a_worker_that_holds_the_prompt_starts_the_next_session_without_a_claim(
        cluster: Cluster) -> None:
    """The first route's job is claimed (the worker holds no prompt yet); the second one's
    hand-over names the same prompt, so the worker starts it under epoch 1 with no claim, and
    the coordinator records it as the holder at its first request. Both answer alike."""
    first = cluster.daemon.client.route("decide:first", "lead")
    second = cluster.daemon.client.route("decide:second", "lead")
    assert first["ok"] and second["ok"], (first, second)
    assert "decided second" in second["answer"]
    assert claims(cluster, first["session_id"]) == [("w1", 2)]
    assert claims(cluster, second["session_id"]) == [("w1", 1)]
    states = [r for r in cluster.transcript(second["session_id"]) if r.get("kind") == "state"]
    handed = [r for r in states if r.get("handed")]
    assert [(r["state"], r["epoch"]) for r in handed] == [("active", 1)]
    assert states[-1]["state"] == "completed"
    assert "We settle second." in cluster.decisions_text()
