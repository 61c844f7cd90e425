"""Approval policy: whether a tool may run (`allow`), must be asked about (`ask`) or never runs
(`deny`), from the `tools.approvals` globs over each tool's own default.

Every approval gate reads the policy here; `squadd.tools.invoke` holds the gate used when no
one can be asked, `squadd.tools.approvals` the broker that asks through events.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squadd.tools.base import Approval, Tool

STRICTNESS: dict[Approval, int] = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True)
class PolicyDecision:
    approval: Approval
    rule: str | None
    """The `tools.approvals` pattern that decided, or None for the tool's own default."""

    def refusal_where(self) -> str:
        """What decided a `deny`, in words for the model."""
        return f"tools.approvals rule '{self.rule}'" if self.rule else "its default policy"


def _specificity(pattern: str) -> tuple[int, int]:
    wildcards = sum(pattern.count(c) for c in "*?[")
    return (0 if wildcards else 1, len(pattern) - wildcards)


def approval_policy(tool: Tool[Any], rules: Mapping[str, Approval]) -> PolicyDecision:
    """The rule for `tool`: the most specific matching pattern (an exact name beats any glob,
    then the longest literal part; on a tie the stricter answer), else the tool's default."""
    matching = [(pattern, answer) for pattern, answer in rules.items()
                if fnmatch.fnmatchcase(tool.name, pattern)]
    if not matching:
        return PolicyDecision(tool.default_approval, None)
    pattern, answer = max(matching,
                          key=lambda item: (_specificity(item[0]), STRICTNESS[item[1]]))
    return PolicyDecision(answer, pattern)
