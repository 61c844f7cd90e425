"""The soak in cluster mode: a coordinator, three `squadd worker` processes (each with its own
clone in its own folder) and a real redis-server; tasks that each apply one decision, sent in
batches with faults between them: workers SIGKILLed and started again, the coordinator
SIGKILLed and started again, Redis restarted. Then every invariant is checked.

The short run (60 tasks) runs in CI (`slow`); the full run (1,000 tasks, more kills) is marked
`soak` (`scripts/soak`). The invariants, for every accepted task:
- its session completed exactly once, with the scripted answer;
- its decision is in the coordinator's `.squad/` exactly once, or (when the model was told the
  call was interrupted, effect unknown) at most once: never twice;
- no transcript record forwarded by a worker was stored twice;
- its transcript holds one call of the decision (a killed call is answered, never re-run).
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from squadd.errors import DaemonError
from tests.support.cluster import Cluster

SEED = int(os.environ.get("SOAK_SEED", "8"))
WORKERS = ("w1", "w2", "w3")


@dataclass(frozen=True)
class ClusterPlan:
    name: str
    tasks: int
    batches: int
    worker_kills: int
    coordinator_kills: int
    redis_restarts: int
    settle_s: float


SHORT = ClusterPlan("short", tasks=60, batches=6, worker_kills=2, coordinator_kills=1,
                    redis_restarts=1, settle_s=300.0)
FULL = ClusterPlan("full", tasks=1000, batches=20, worker_kills=8, coordinator_kills=3,
                   redis_restarts=1, settle_s=1800.0)


def _faults(plan: ClusterPlan, rng: random.Random) -> dict[int, str]:
    """Which fault comes after which batch (never after the last)."""
    kinds = (["worker"] * plan.worker_kills + ["coordinator"] * plan.coordinator_kills
             + ["redis"] * plan.redis_restarts)
    slots = rng.sample(range(plan.batches - 1), k=min(len(kinds), plan.batches - 1))
    return dict(zip(sorted(slots), rng.sample(kinds, k=len(slots)), strict=True))


def _submit(cluster: Cluster, task: str) -> str:
    for _ in range(200):
        try:
            result = cluster.daemon.client.route(task, "lead", wait=False)
        except DaemonError:
            time.sleep(0.05)
            continue
        assert result["ok"], result
        return str(result["session_id"])
    raise AssertionError(f"{task} was never accepted")


def _states(cluster: Cluster, session_id: str) -> list[dict[str, Any]]:
    try:
        records = cluster.transcript(session_id)
    except FileNotFoundError:
        return []
    return [r for r in records if r.get("kind") == "state"]


def run_cluster_soak(plan: ClusterPlan, tmp_path: Path) -> dict[str, Any]:
    rng = random.Random(SEED)
    faults = _faults(plan, rng)
    sessions: dict[str, str] = {}
    survived = {"worker": 0, "coordinator": 0, "redis": 0}
    per_batch = plan.tasks // plan.batches
    with Cluster(tmp_path) as cluster:
        for name in WORKERS:
            cluster.start_worker(name, slots=4)
        for batch in range(plan.batches):
            for n in range(per_batch):
                title = f"b{batch}-t{n}"
                sessions[_submit(cluster, f"decide:{title}")] = title
            fault = faults.get(batch)
            if fault == "worker":
                victim = rng.choice(WORKERS)
                cluster.kill_worker(victim)
                cluster.start_worker(victim, slots=4)
            elif fault == "coordinator":
                cluster.daemon.kill()
                cluster.start_coordinator()
            elif fault == "redis":
                cluster.redis.restart()
            if fault:
                survived[fault] += 1
        deadline = time.monotonic() + plan.settle_s
        resumed: set[str] = set()
        while True:
            waiting = [sid for sid in sessions
                       if not any(s["state"] == "completed" for s in _states(cluster, sid))]
            if not waiting:
                break
            assert time.monotonic() < deadline, f"{len(waiting)} tasks never completed"
            report = json.loads(cluster.daemon.squadd("status", "--json").stdout)["cluster"]
            drained = all(j["lag"] == 0 and j["pending"] == 0
                          for j in report["jobs"].values())
            for sid in waiting:
                states = _states(cluster, sid)
                # Accepted, but its coordinator died before the job reached Redis: resume it.
                if drained and sid not in resumed and states and \
                        states[-1]["state"] == "interrupted" and \
                        not any("worker" in s for s in states):
                    cluster.daemon.client.resume(sid, wait=False)
                    resumed.add(sid)
            time.sleep(0.2)
        checks = _check(cluster, sessions)
    return {"plan": plan.name, "tasks": len(sessions), "faults": survived,
            "resumed": len(resumed), **checks}


def _check(cluster: Cluster, sessions: dict[str, str]) -> dict[str, Any]:
    text = cluster.decisions_text()  # stops the coordinator first: nothing moves meanwhile
    interrupted_calls = 0
    for sid, title in sessions.items():
        records = cluster.transcript(sid)
        completed = [r for r in records if r.get("state") == "completed"]
        assert len(completed) == 1, (sid, completed)
        assert completed[0]["answer"] == f"decided {title}"
        marks = [tuple(r["cluster"]) for r in records if "cluster" in r]
        assert len(marks) == len(set(marks)), f"{sid}: a forwarded record stored twice"
        results = [r["message"]["content"] for r in records if r.get("kind") == "message"
                   and r["message"].get("role") == "tool"]
        count = text.count(f"We settle {title}.")
        if any("effect" in r and "unknown" in r for r in results):
            interrupted_calls += 1
            assert count <= 1, f"{title} applied {count} times"
        else:
            assert count == 1, f"{title} applied {count} times"
        calls = [c for r in records if r.get("kind") == "message"
                 for c in r["message"].get("tool_calls") or [] if c["name"] == "squad_decide"]
        assert len(calls) == 1, (title, calls)
    return {"interrupted_calls": interrupted_calls}


@pytest.mark.slow
def test_short_cluster_soak_keeps_every_invariant(tmp_path: Path) -> None:
    summary = run_cluster_soak(SHORT, tmp_path)
    assert summary["tasks"] == SHORT.tasks
    assert sum(summary["faults"].values()) == 4


@pytest.mark.soak
def test_full_cluster_soak_keeps_every_invariant(tmp_path: Path) -> None:
    summary = run_cluster_soak(FULL, tmp_path)
    target = os.environ.get("SOAK_CLUSTER_SUMMARY")
    if target:
        Path(target).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    assert summary["tasks"] == FULL.tasks
