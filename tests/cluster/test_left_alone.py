"""The cluster left alone: no accepted route stalls in silence, one coordinator per prefix, a
worker serves only its own squad, a dead worker's jobs come back together, and where each
session runs is visible. Real processes (coordinator, workers, redis-server), real SIGKILL;
each test counts routes answered and decisions applied exactly once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from squadd.cluster import keys
from squadd.runtime.prompt import WORKTREE_NOTE
from squadd.state.layout import SquadLayout
from squadd.state.transcripts import read_transcript
from tests.support.cluster import (
    CLUSTER_CONFIG,
    Background,
    Cluster,
    claims,
    eventually,
    git,
)
from tests.support.daemon_process import clean_env, make_repo

pytestmark = pytest.mark.slow


def other_repo(tmp_path: Path, name: str) -> SquadLayout:
    """Another repository with a squad of its own (its own root commit)."""
    layout = make_repo(tmp_path / name, ("lead",), CLUSTER_CONFIG)
    git(layout.repo, "init", "-q")
    git(layout.repo, "add", "-A")
    git(layout.repo, "commit", "-qm", f"{name}'s squad")
    return layout


def ended(cluster: Cluster, session_id: str) -> str | None:
    states = [r["state"] for r in cluster.transcript(session_id) if r.get("kind") == "state"]
    return states[-1] if states and states[-1] in ("completed", "error") else None


def test_a_second_coordinator_on_the_prefix_is_refused_naming_the_first(
        tmp_path: Path, cluster: Cluster) -> None:
    second = other_repo(tmp_path, "second")
    done = subprocess.run(
        [sys.executable, "-m", "squadd", "serve", "--cluster", cluster.redis.url],
        cwd=second.repo, env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg")),
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert "another coordinator already serves the cluster" in done.stderr
    assert f"PID {cluster.daemon.pid}" in done.stderr
    assert str(cluster.layout.repo) in done.stderr
    assert "Traceback" not in done.stderr
    # The first one serves on, undisturbed.
    assert cluster.daemon.client.route("decide:still", "lead")["ok"]


def test_a_coordinator_that_lost_its_lease_stops_serving(cluster: Cluster) -> None:
    client = redis.Redis.from_url(cluster.redis.url, decode_responses=True)
    try:
        client.set(keys.OWNER, json.dumps({"token": 99, "host": "elsewhere", "pid": 1,
                                           "repo": "/srv/other", "since": "now"}))
    finally:
        client.close()
    assert cluster.daemon.wait(timeout=60) == 0
    assert "coordinator lease lost" in cluster.daemon.output


def test_a_worker_for_another_repository_is_refused_with_both_names(
        tmp_path: Path, cluster: Cluster) -> None:
    stranger = other_repo(tmp_path, "stranger")
    done = subprocess.run(
        [sys.executable, "-m", "squadd", "worker", "--cluster", cluster.redis.url,
         "--repo", str(stranger.repo), "--name", "w1", "--provider", "openai",
         "--base-url", cluster.model.url, "--model", "test-model"],
        cwd=tmp_path, env=clean_env(XDG_CONFIG_HOME=str(tmp_path / "xdg"),
                                    XDG_CACHE_HOME=str(tmp_path / "cache")),
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert "serves another squad" in done.stderr
    assert str(cluster.layout.repo) in done.stderr and "stranger" in done.stderr
    # Its clone is kept per repository: a worker of the same name for the coordinator's own
    # repository does not reuse it.
    cache = tmp_path / "cache" / "squadd" / "workers"
    assert [p.name.startswith("stranger-") for p in cache.iterdir()] == [True]


def test_redis_restarted_empty_mid_run_loses_no_accepted_route(cluster: Cluster) -> None:
    # w1 has one slot: "hold:first" runs on it, the other two wait in the job stream.
    first = Background(cluster, "hold:first")
    cluster.team.wait_reached("first")
    waiting = [Background(cluster, f"decide:queued{n}") for n in range(2)]
    eventually(lambda: sum(1 for _ in cluster.layout.transcripts_dir.glob("*.jsonl")) == 3,
               "three routes accepted")
    cluster.redis.restart_empty()
    cluster.team.release("first")
    results = [first.wait(), *(route.wait() for route in waiting)]
    assert all(r["ok"] for r in results), results
    assert sorted(r["answer"] for r in results) == ["decided first", "decided queued0",
                                                    "decided queued1"]
    assert "Redis lost its data" in cluster.daemon.output
    text = cluster.decisions_text()
    for title in ("first", "queued0", "queued1"):
        assert text.count(f"We settle {title}.") == 1, title


def test_a_coordinator_killed_during_a_burst_resumes_every_accepted_route(
        tmp_path: Path) -> None:
    config = CLUSTER_CONFIG + "max_jobs = 2\n"
    with Cluster(tmp_path, config=config) as cluster:
        # No worker yet: two jobs reach Redis, the rest wait in the coordinator's own queue.
        accepted = [cluster.daemon.client.route(f"decide:burst{n}", "lead", wait=False)
                    for n in range(6)]
        assert all(r["ok"] for r in accepted), accepted
        sessions = [r["session_id"] for r in accepted]
        cluster.daemon.kill()
        cluster.start_coordinator()
        cluster.start_worker("w1", slots=2)
        for session in sessions:
            eventually(lambda s=session: ended(cluster, s), f"session {session} ended")
        assert [ended(cluster, s) for s in sessions] == ["completed"] * 6
        text = cluster.decisions_text()
        for n in range(6):
            assert text.count(f"We settle burst{n}.") == 1, n
            assert cluster.team.calls[f"squad_decide:burst{n}"] == 1


def test_a_dead_workers_jobs_come_back_together_to_a_worker_with_free_slots(
        tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        cluster.start_worker("w1", slots=8)
        markers = [tmp_path / f"job{n}" for n in range(8)]
        routes = [Background(cluster, f"step:{marker}") for marker in markers]
        for marker in markers:
            eventually(Path(f"{marker}.started").exists, f"{marker.name} started on w1")
        cluster.start_worker("w2", slots=8)
        cluster.kill_worker("w1")
        results = [route.wait() for route in routes]
        assert all(r["ok"] for r in results), results
        for result in results:
            assert [w for w, _ in claims(cluster, result["session_id"])] == ["w1", "w2"]
        # One scan takes what the free slots allow: the eight came back in few scans, and at
        # least one scan took several.
        counts = [int(n) for n in re.findall(r"stale jobs reclaimed .*?count=(\d+)",
                                             cluster.worker_log("w2"))]
        assert sum(counts) == 8 and max(counts) > 1, counts
        for marker in markers:  # each step ran once, on w1; never again on w2
            assert Path(f"{marker}.started").read_text().splitlines() == ["ran"]
        # Where each session ran is visible: the session list, a session's JSON, the events.
        listed = json.loads(cluster.daemon.squadd("sessions", "list", "--json").stdout)
        places = {s["session_id"]: s.get("worker") for s in listed["sessions"]}
        assert all(places.get(r["session_id"]) == "w2" for r in results), places
        shown = json.loads(cluster.daemon.squadd(
            "sessions", "show", results[0]["session_id"], "--json").stdout)["session"]
        assert shown["worker"] == "w2" and shown["worker_host"]
        events = cluster.daemon.squadd("events", "--recent", "512", "--json", "--type",
                                       "session.claimed,session.reclaimed", timeout=30)
        assert events.returncode == 0, events.stderr
        seen: list[dict[str, Any]] = [json.loads(line) for line in events.stdout.splitlines()
                                      if line.strip()]
        reclaimed = [e for e in seen if e["type"] == "session.reclaimed"]
        assert {e["session_id"] for e in reclaimed} == {r["session_id"] for r in results}
        assert all(e["worker"] == "w2" and e["previous_worker"] == "w1" and e["host"]
                   for e in reclaimed)
        assert sum(1 for e in seen if e["type"] == "session.claimed") >= 8


def test_status_shows_the_queue_per_stream_and_the_jobs_each_worker_holds(
        cluster: Cluster) -> None:
    first = Background(cluster, "hold:busy")
    cluster.team.wait_reached("busy")
    second = Background(cluster, "decide:behind")

    def queued() -> Any:
        report = json.loads(cluster.daemon.squadd("status", "--json").stdout)["cluster"]
        return report if report["streams"].get("normal", {}).get("queued") == 1 else None
    report = eventually(queued, "the second job waiting in the stream")
    assert report["pending_per_worker"] == {"w1": 1}
    assert report["streams"]["normal"]["oldest_unclaimed_s"] is not None
    assert report["owner"]["pid"] == cluster.daemon.pid
    # The workers' lines come from their heartbeats (every cluster.heartbeat_s): look until
    # one after the claim is in.
    def shown() -> str | None:
        text = cluster.daemon.squadd("status").stdout
        return text if "w1: 1/1 slots busy, 1 jobs held" in text else None
    text = eventually(shown, "w1's busy slot and held job in squadd status")
    assert "normal jobs: 1 queued, 1 running, oldest waiting" in text
    cluster.team.release("busy")
    assert first.wait()["ok"] and second.wait()["ok"]


WORKTREE_CONFIG = CLUSTER_CONFIG + """
[workspace]
isolation = "worktree"
land = "auto"
spares = 0
"""


def on_main(cluster: Cluster, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=cluster.layout.repo,
                          capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else None


def test_a_worktree_session_on_a_worker_lands_on_the_coordinators_main(
        tmp_path: Path) -> None:
    priced = WORKTREE_CONFIG + '\n[pricing."openai/test-model"]\ninput = 1000.0\noutput = 1000.0\n'
    with Cluster(tmp_path, config=priced) as cluster:
        cluster.start_worker("w1", slots=2)
        result = cluster.daemon.client.route("write:src/feature.txt", "lead")
        assert result["ok"], result
        assert result["answer"] == "wrote src/feature.txt"
        assert result["landing"]["state"] == "landed", result
        assert on_main(cluster, "src/feature.txt") == "written by the squad\n"
        # The worker's clone itself was never written: the work was in a worktree of it.
        assert not (tmp_path / "clone-w1" / "src" / "feature.txt").exists()
        # The prompt the coordinator handed over says how the work reaches git.
        messages = read_transcript(cluster.layout.transcript(result["session_id"])).messages
        assert WORKTREE_NOTE in messages[0]["content"], messages[0]
        log = subprocess.run(["git", "log", "-1", "--format=%an %s%n%b"],
                             cwd=cluster.layout.repo, capture_output=True, text=True).stdout
        assert log.startswith("Lead ") and f"Squad-Session: {result['session_id']}" in log
        # The worker's model calls are in the coordinator's ledger: priced like a local one's.
        shown = json.loads(cluster.daemon.squadd(
            "sessions", "show", result["session_id"], "--json").stdout)["session"]
        assert shown["cost_usd"] is not None and shown["cost_usd"] > 0, shown
        # The worker holds that prompt now, yet the next worktree session's job is not handed
        # over (a hand-over carries no worktree): it is claimed, and its work lands too.
        again = cluster.daemon.client.route("write:src/other.txt", "lead")
        assert again["ok"] and again["landing"]["state"] == "landed", again
        assert on_main(cluster, "src/other.txt") == "written by the squad\n"
        for sid in (result["session_id"], again["session_id"]):
            states = read_transcript(cluster.layout.transcript(sid)).states
            assert not any(s.get("handed") for s in states), states
            assert [s["epoch"] for s in states if "worker" in s] == [1], states


def test_a_worker_killed_mid_session_leaves_its_work_for_the_next(tmp_path: Path) -> None:
    with Cluster(tmp_path, config=WORKTREE_CONFIG) as cluster:
        cluster.start_worker("w1", slots=1)
        route = Background(cluster, "writehold:notes/progress.txt")
        cluster.team.wait_reached("notes/progress.txt")
        session = eventually(lambda: next(iter(
            p.name.removesuffix(".jsonl")
            for p in cluster.layout.transcripts_dir.glob("*.jsonl")), None), "a transcript")

        def checkpoint() -> bool:  # w1 pushed its work in progress as epoch 1's ref
            done = subprocess.run(
                ["git", "show", f"refs/squad/sessions/{session}/1:notes/progress.txt"],
                cwd=cluster.layout.repo, capture_output=True, text=True, check=False)
            return done.returncode == 0
        eventually(checkpoint, "w1's checkpoint of the session's work")
        cluster.start_worker("w2", slots=1)
        cluster.kill_worker("w1")
        cluster.team.release("notes/progress.txt")
        result = route.wait()
        assert result["ok"], result
        assert [w for w, _ in claims(cluster, session)] == ["w1", "w2"]
        # w2 started from w1's pushed work: the file written on w1 lands, once.
        assert result["landing"]["state"] == "landed", result
        assert on_main(cluster, "notes/progress.txt") == "written by the squad\n"
        refs = subprocess.run(["git", "for-each-ref", "refs/squad/sessions/"],
                              cwd=cluster.layout.repo, capture_output=True, text=True).stdout
        assert refs == ""  # brought back, then forgotten
