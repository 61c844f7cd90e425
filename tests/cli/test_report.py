"""`squadd status`'s cluster lines: Redis, the workers (one worker, or several, named as such)
and their slots, then a line per worker."""

from __future__ import annotations

from typing import Any

from squadd.cli._report import cluster_lines


def _worker(name: str, slots: int, busy: int) -> dict[str, Any]:
    return {"name": name, "host": "h", "pid": 7, "version": "0.1.0", "slots": slots,
            "busy": busy, "started": "2026-11-29T00:00:00+00:00"}


def test_the_cluster_line_counts_one_worker_or_several() -> None:
    one = cluster_lines({"redis_up": True, "url": "redis://r/0", "workers": [_worker("w1", 2, 1)],
                         "slots": 2, "busy": 1, "local_slots": 0})
    two = cluster_lines({"redis_up": False, "url": "redis://r/0", "slots": 6, "busy": 0,
                         "workers": [_worker("w1", 2, 0), _worker("w2", 4, 0)]})
    assert one[0] == ("cluster: redis up (redis://r/0, 0 outages), 1 worker, 1/2 slots busy, "
                      "0 local slots")
    assert two[0].startswith("cluster: redis UNREACHABLE (redis://r/0, 0 outages), 2 workers, "
                             "0/6 slots busy")
    assert any(line.strip().startswith("w2: 0/4 slots busy") for line in two)
