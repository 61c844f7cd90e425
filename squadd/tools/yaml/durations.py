"""Durations and sizes in a YAML tool file: one parser for each, and the bounds of every key.

A bare number is milliseconds everywhere in a tool file (`timeout: 60000`, `delay: 1000`); a
string may carry a unit: "500ms", "30s", "2m", "1h" (a string without a unit is milliseconds
too). Sizes are bytes, or a string with a unit: "512KB", "10MB", "1GB" (powers of 1024).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_SECONDS_PER = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|k|mb|m|gb|g|kib|mib|gib)?\s*$", re.I)
_BYTES_PER = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
              "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


@dataclass(frozen=True)
class Bounds:
    """The range a duration key accepts, in seconds; `low_open` excludes `low` itself."""

    low_s: float
    high_s: float
    low_open: bool = True

    def holds(self, seconds: float) -> bool:
        above = seconds > self.low_s if self.low_open else seconds >= self.low_s
        return above and seconds <= self.high_s

    def text(self) -> str:
        low = f"more than {_ms(self.low_s)}" if self.low_open else f"at least {_ms(self.low_s)}"
        return f"{low} and at most {_ms(self.high_s)} ({self.high_s:g} s)"


RUN_TIMEOUT = Bounds(0.0, 3600.0)
"""`timeout` and `resources.timeout`: how long the whole tool may run."""
RETRY_DELAY = Bounds(0.0, 60.0, low_open=False)
"""`error-handling.retry.delay`: the wait between two attempts of a step."""
CONFIRM_TIMEOUT = Bounds(0.0, 3600.0)
"""`interactive-options.timeout`: how long to wait for the person's answer."""
CPU_TIME = Bounds(0.0, 86400.0)
"""`resources.max-cpu-time`: CPU seconds a command may use (RLIMIT_CPU, whole seconds)."""
SIZE_LIMIT_BYTES = 1 << 40


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:g} ms"


def parse_duration(value: Any, *, key: str, bounds: Bounds) -> float:
    """Seconds from a bare number of milliseconds or a string with a unit, within `bounds`.

    Raises `ValueError` naming `key`, the value, and what it accepts.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{key}: expected a duration (milliseconds, or a string like '500ms', "
                         f"'30s', '2m'), got {value!r}")
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match is None:
            raise ValueError(f"{key}: {value!r} is not a duration: write milliseconds (60000) "
                             "or a number with a unit ('500ms', '30s', '2m', '1h')")
        seconds = float(match.group(1)) * _SECONDS_PER[match.group(2) or "ms"]
    else:
        if not math.isfinite(value):
            raise ValueError(f"{key}: {value!r} is not a finite number")
        seconds = float(value) / 1000.0
    if not bounds.holds(seconds):
        raise ValueError(f"{key}: {value!r} is {_ms(seconds)}, outside the range: it must be "
                         f"{bounds.text()}; a bare number is milliseconds")
    return seconds


def parse_size(value: Any, *, key: str) -> int:
    """Bytes from a bare number or a string like "512MB" (`ValueError` naming `key`)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{key}: expected a size like 536870912 or '512MB', got {value!r}")
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match is None:
            raise ValueError(f"{key}: {value!r} is not a size: write bytes or a number with a "
                             "unit ('64KB', '512MB', '2GB')")
        size = float(match.group(1)) * _BYTES_PER[(match.group(2) or "b").lower()]
    else:
        size = float(value)
    if not math.isfinite(size) or not 1 <= size <= SIZE_LIMIT_BYTES:
        raise ValueError(f"{key}: {value!r} must be between 1 byte and 1TB")
    return int(size)


def show_duration(seconds: float) -> str:
    """A resolved duration for people: "60000 ms (1m)"."""
    ms = seconds * 1000
    if seconds >= 60 and seconds % 60 == 0:
        unit = f"{seconds / 60:g}m"
    elif seconds >= 1:
        unit = f"{seconds:g}s"
    else:
        return f"{ms:g} ms"
    return f"{ms:g} ms ({unit})"
