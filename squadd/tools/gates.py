"""What the invocation pipeline asks of its owner, as Protocols: an approval gate, a variable
resolver (and a gate that waits for a missing variable), the secrets the owner knows; and the
plain ones used when there is no one to ask (`Unattended`, `EnvironmentVariables`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from squadd.config import Settings
from squadd.errors import VariablesMissing
from squadd.tools.base import ConfirmFn, Tool, ToolContext, ToolResult, VariableSpec
from squadd.tools.policy import approval_policy


@dataclass(frozen=True)
class ResolvedVariables:
    values: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    """Secret variable name -> value, for redaction."""


class VariableResolver(Protocol):
    def resolve(self, specs: tuple[VariableSpec, ...]) -> ResolvedVariables: ...


class ApprovalGate(Protocol):
    async def check(self, tool: Tool[Any], arguments: Mapping[str, Any], ctx: ToolContext,
                    secrets: Mapping[str, str], *, reason: str | None = None
                    ) -> ToolResult | None:
        """None when the call may run, else the failure result that tells the model why not.
        `reason` (the tool's `approval_reason`): this call must be asked about even where the
        policy allows the tool; a `deny` still refuses it."""

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn: ...


async def _answer_no(question: str) -> bool:
    return False


class Unattended:
    """The gate of an invoker that has no one to ask: `allow` runs; `ask` and `deny` are
    refused, saying why; `ctx.confirm` answers no. An invoker built without a gate uses it, so
    that a missing gate never lets a guarded tool run."""

    def __init__(self, settings: Settings, *, approve_asks: bool = False):
        self.rules = settings.tools.approvals
        self.approve_asks = approve_asks

    def apply_settings(self, settings: Settings) -> None:
        self.rules = settings.tools.approvals

    async def check(self, tool: Tool[Any], arguments: Mapping[str, Any], ctx: ToolContext,
                    secrets: Mapping[str, str], *, reason: str | None = None
                    ) -> ToolResult | None:
        decision = approval_policy(tool, self.rules)
        if reason is not None and decision.approval == "allow":
            if self.approve_asks:
                return None
            return ToolResult.failure(
                f"{tool.name} was not run: {reason}, so this call needs approval and no one "
                "can be asked here; run it through the daemon", approval="denied")
        if decision.approval == "allow" or (decision.approval == "ask" and self.approve_asks):
            return None
        if decision.approval == "deny":
            return ToolResult.failure(
                f"{tool.name} was not run: denied by {decision.refusal_where()}; it cannot be "
                "used here", approval="deny")
        return ToolResult.failure(
            f"{tool.name} was not run: it needs approval and no one can be asked here; run it "
            f"through the daemon, or allow it with tools.approvals = {{ \"{tool.name}\" = "
            '"allow" }', approval="denied")

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn:
        return _answer_no


@runtime_checkable
class VariableGate(Protocol):
    """An approval gate that can also wait for a missing variable to be set."""

    async def request_variables(self, tool: Tool[Any], missing: tuple[VariableSpec, ...],
                                ctx: ToolContext) -> str | None:
        """None once every one of `missing` was set; else why the wait ended without it."""


class EnvironmentVariables:
    """Resolve declared variables from the process environment only."""

    def resolve(self, specs: tuple[VariableSpec, ...]) -> ResolvedVariables:
        values: dict[str, str] = {}
        secrets: dict[str, str] = {}
        for spec in specs:
            value = os.environ.get(spec.name)
            if value is None:
                if spec.required:
                    raise VariablesMissing(
                        f"required variable {spec.name} is not set: export {spec.name}=... "
                        "in the environment squadd runs in", (spec,)
                    )
                continue
            values[spec.name] = value
            if spec.type == "secret":
                secrets[spec.name] = value
        return ResolvedVariables(values, secrets)


class KnownSecrets(Protocol):
    """Every secret value the invoker's owner has handed out (`SecretRegistry`)."""

    def snapshot(self) -> dict[str, str]: ...

    def remember(self, secrets: Mapping[str, str]) -> None: ...
