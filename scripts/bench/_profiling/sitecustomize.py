"""Profiles a squadd process of the scale benchmark over its measured routes only.

`scale.py --profile` puts this folder on the processes' PYTHONPATH with
`SQUADD_BENCH_PROFILE=PREFIX`: SIGUSR1 starts cProfile in the main thread (the event loop's),
SIGUSR2 stops it (its clock: the thread's CPU time) and writes the statistics to `PREFIX.PID`.
"""

from __future__ import annotations

import cProfile
import os
import signal
import time
from typing import Any

_PREFIX = os.environ.get("SQUADD_BENCH_PROFILE")
if _PREFIX:
    _profile = cProfile.Profile(time.thread_time)  # CPU time of the loop's thread, not wall

    def _start(*_: Any) -> None:
        _profile.enable()

    def _stop(*_: Any) -> None:
        _profile.disable()
        _profile.dump_stats(f"{_PREFIX}.{os.getpid()}")

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
