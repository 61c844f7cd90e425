"""How a serving process keeps Python's cyclic garbage collector out of the way of its routes.

By default a young-generation pass runs every 700 allocations, and each of the older passes
walks every object startup built. A daemon allocates a few thousand objects per route, most of
them short-lived and acyclic (freed by reference counting alone). `tune_for_serving` freezes
what exists now (startup lives as long as the process) and lets the young generation grow to
`YOUNG_THRESHOLD` objects between passes; cycles are still collected, just less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Allocations (minus frees) between young-generation passes (Python's default: 700)."""
MIDDLE_THRESHOLD = 50
"""Young passes between middle-generation passes (default: 10). A middle pass walks every
object that outlived a young one: with thousands of routes queued, that is most of them."""
OLD_THRESHOLD = 100
"""Middle passes between full passes (default: 10); Python also waits until a quarter of the
long-lived objects are new since the last full pass."""


def tune_for_serving() -> None:
    """Freeze what exists now out of every pass and space the passes out (process-wide: call
    once a serving process has started, as `squadd serve` does)."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
