"""Named crash points for the crash tests: a process told to die at a point dies there, at once.

`SQUADD_CRASH_AT=name` (or `name:n`, the n-th time the point is reached, counting from 1) makes
`crash_point(name)` SIGKILL its own process. Unset, a crash point costs one dict lookup. The
points sit between the durable steps of the Scribe's writes, so a test can kill a real process
exactly there instead of guessing an instant with a sleep.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable

ENV = "SQUADD_CRASH_AT"
_reached: Counter[str] = Counter()
"""Times each point was reached while `SQUADD_CRASH_AT` names it. The count is the process's,
as the variable and the kill are: it is touched only in a process a test means to kill."""


def crash_point(name: str, before: Callable[[], object] | None = None) -> None:
    """Die with SIGKILL here when `SQUADD_CRASH_AT` names this point (and its count is due),
    after running `before` (what a crash mid-step leaves: half a write, say)."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    _reached[name] += 1
    if _reached[name] >= (int(nth) if nth.isdigit() else 1):
        if before is not None:
            before()
        os.kill(os.getpid(), signal.SIGKILL)
