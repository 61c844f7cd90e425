"""The agent-name rule, in one place: layout, config, the daemon's API and the tools all check
names with `safe_name` (or `is_safe_name`)."""

from __future__ import annotations

import re

from squadd.errors import InvalidNameError

NAME_RULE = "^[a-z0-9][a-z0-9._-]{0,63}$"
_NAME_RE = re.compile(NAME_RULE)


def safe_name(name: str, *, kind: str = "agent") -> str:
    """Return `name` lower-cased if it obeys the naming rule, else raise `InvalidNameError`."""
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a string, got {type(name).__name__}")
    lowered = name.lower()
    if not _NAME_RE.fullmatch(lowered) or ".." in lowered:
        shown = name if len(name) <= 40 else name[:37] + "..."
        raise InvalidNameError(
            f"invalid {kind} name {shown!r}: names must match {NAME_RULE} "
            "(lower-case letters, digits, '.', '_' and '-', starting with a letter or digit, "
            "at most 64 characters)"
        )
    return lowered


def is_safe_name(name: str) -> bool:
    """True when `name` would pass `safe_name`."""
    try:
        safe_name(name)
    except InvalidNameError:
        return False
    return True
