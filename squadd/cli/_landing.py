"""A landing's outcome as the CLI shows it: the lines for a person and the exit code a script
reads, shared by `squadd route`, `squadd land` and `squadd sessions show`.

Works on the JSON form (`LandingOutcome.model_dump`), as the daemon sends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXIT_LANDING_REFUSED = 3
"""The landing was refused: `check_failed` or `conflict` (the target is untouched)."""
EXIT_LANDING_PENDING = 4
"""The landing did not finish: `pending` (queued, waiting on a repair turn or a person)."""


def exit_code(landing: Mapping[str, Any] | None) -> int:
    """0 for no landing, `landed` or `skipped`; else the landing's own code."""
    state = (landing or {}).get("state")
    if state in ("check_failed", "conflict"):
        return EXIT_LANDING_REFUSED
    if state == "pending":
        return EXIT_LANDING_PENDING
    return 0


def lines(landing: Mapping[str, Any], *, detail_lines: int = 20) -> list[str]:
    """`landing: STATE [commit]`, the tests it fixed and broke, the detail's last
    `detail_lines` lines (a check's output tail) and `next: ...`."""
    state = str(landing.get("state") or "?")
    commit = landing.get("commit")
    shown = [f"landing: {state}" + (f" {str(commit)[:12]}" if commit else "")]
    for key in ("fixed", "broke"):
        tests = [str(test) for test in landing.get(key) or ()]
        if tests:
            shown.append(f"  {key}: {', '.join(tests)}")
    detail = str(landing.get("detail") or "").rstrip()
    if detail:
        tail = detail.splitlines()[-detail_lines:]
        shown.extend(f"  {line}" for line in tail)
    if landing.get("next"):
        shown.append(f"next: {landing['next']}")
    return shown
