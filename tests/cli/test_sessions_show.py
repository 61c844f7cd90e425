"""`squadd sessions show`'s transcript lines: a cluster session's state records say where
the session went (handed to the workers, then the worker that ran it) and under which epoch."""

from __future__ import annotations

import click

from squadd.cli.sessions import transcript_lines


def _plain(record: dict[str, object]) -> list[str]:
    return [click.unstyle(line) for line in transcript_lines(record)]


def test_cluster_state_records_name_the_hand_over_and_the_worker() -> None:
    ts = "2026-11-29T12:43:11.000+00:00"
    assert _plain({"kind": "state", "ts": ts, "state": "active"}) == ["12:43:11 — active"]
    assert _plain({"kind": "state", "ts": ts, "state": "active", "epoch": 1,
                   "handed": True}) == ["12:43:11 — active, handed to the workers, epoch 1"]
    assert _plain({"kind": "state", "ts": ts, "state": "active", "worker": "w1",
                   "host": "vm", "epoch": 2}) == ["12:43:11 — active on w1@vm, epoch 2"]
    assert _plain({"kind": "state", "ts": ts, "state": "error", "worker": "w1",
                   "error": "boom"}) == ["12:43:11 — error on w1: boom"]
