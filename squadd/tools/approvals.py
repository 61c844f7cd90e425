"""Approvals: which tools may run (`allow`, `ask`, `deny`) and the broker that asks the user.

The policy comes from `tools.approvals` (tool-name globs) over each tool's default. An `ask`
publishes `approval.requested` and waits for `resolve(id, ...)` (`squadd approve|deny ID`) or
the approval timeout, which counts as a denial. `ctx.confirm(question)` goes the same way, and
so does a call whose required variable has no value: `variable.requested`, answered by
`provided(NAME)` once `squadd var set NAME` stored it, or failed at `tools.variable_timeout_s`.
"""

from __future__ import annotations

import json
import secrets as token
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from squadd.config import Settings
from squadd.contracts.events import (
    ApprovalRequested,
    ApprovalResolved,
    EventSink,
    VariableRequested,
    VariableResolved,
)
from squadd.tools.base import Approval, ConfirmFn, Tool, ToolContext, ToolResult, VariableSpec
from squadd.tools.people import PersonQueue, PersonRequest
from squadd.tools.policy import PolicyDecision, approval_policy
from squadd.tools.redaction import redact, redact_any

MAX_PENDING_APPROVALS = 64
"""Approvals that may wait at once; past this an `ask` is denied at once, saying why."""

@dataclass(frozen=True)
class Decision:
    approved: bool
    reason: str = ""
    timed_out: bool = False
    cancelled: bool = False


@dataclass
class PendingApproval:
    """One question waiting for an answer."""

    approval_id: str
    tool: str
    arguments: dict[str, Any]
    question: str
    session_id: str
    agent: str
    timeout_s: float
    created: float = field(default_factory=time.time)
    variable: str = ""
    """For a variable request: the variable's name."""
    _answered: anyio.Event = field(default_factory=anyio.Event)
    _decision: Decision | None = None


CANCELLED = Decision(False, "the tool call was cancelled", cancelled=True)


def denial_text(tool_name: str, decision: Decision, timeout_s: float) -> str:
    """What the model is told when a call was not approved."""
    if decision.timed_out:
        return f"{tool_name} was not run: denied: no answer within {timeout_s:g} s"
    if decision.cancelled:
        return f"{tool_name} was not run: the call was cancelled while waiting for approval"
    text = f"{tool_name} was not run: denied by the user"
    return f"{text} ({decision.reason})" if decision.reason else text


def secrets_of(tool: Tool[Any], ctx: ToolContext) -> dict[str, str]:
    """Every secret to redact from what this call shows: all the pipeline knows, and the
    values of `tool`'s own secret variables."""
    return {**ctx.known_secrets,
            **{spec.name: ctx.variables[spec.name] for spec in tool.variables
               if spec.type == "secret" and spec.name in ctx.variables}}


class ApprovalBroker:
    """The `ApprovalGate` of the daemon: asks through events, answered by `resolve`.

    `resolve` must be called from the event loop thread (the daemon's HTTP handler is).
    """

    def __init__(self, settings: Settings, sink: EventSink, *,
                 max_pending: int = MAX_PENDING_APPROVALS):
        self.rules: Mapping[str, Approval] = settings.tools.approvals
        self.timeout_s = settings.tools.approval_timeout_s
        self.sink = sink
        self.max_pending = max_pending
        self.variable_timeout_s = settings.tools.variable_timeout_s
        self._pending: dict[str, PendingApproval] = {}
        self._variables: dict[str, PendingApproval] = {}
        self.expire_after_s = settings.approvals.expire_after_s
        self.people: PersonQueue | None = None
        """The inbox, when there is one (the daemon): an `ask` of a call in a session goes
        there, durable, and waits without a slot until answered or `approvals.expire_after_s`."""

    def apply_settings(self, settings: Settings) -> None:
        """Take changed `[tools]` approval rules and timeouts (asks already waiting keep
        theirs)."""
        self.rules = settings.tools.approvals
        self.timeout_s = settings.tools.approval_timeout_s
        self.variable_timeout_s = settings.tools.variable_timeout_s

    def policy(self, tool: Tool[Any]) -> PolicyDecision:
        return approval_policy(tool, self.rules)

    async def check(self, tool: Tool[Any], arguments: Mapping[str, Any], ctx: ToolContext,
                    secrets: Mapping[str, str], *, reason: str | None = None
                    ) -> ToolResult | None:
        decision = self.policy(tool)
        if decision.approval == "allow" and reason is None:
            return None
        if decision.approval == "deny":
            return ToolResult.failure(
                f"{tool.name} was not run: denied by {decision.refusal_where()}; it cannot be "
                "used here",
                approval="deny")
        question = f"Run {tool.name}?" if reason is None else \
            f"Run {tool.name}? {reason}: squadd, git or a later session will execute it"
        answer = await self.ask(tool, arguments, ctx, secrets, question=question)
        if answer.approved:
            return None
        waited = self.expire_after_s if self.people is not None else self.timeout_s
        return ToolResult.failure(denial_text(tool.name, answer, waited),
                                  approval="denied", timed_out=answer.timed_out)

    def confirm_fn(self, tool: Tool[Any], ctx: ToolContext) -> ConfirmFn:
        async def confirm(question: str) -> bool:
            answer = await self.ask(tool, {}, ctx, secrets_of(tool, ctx), question=question)
            return answer.approved

        return confirm

    async def ask(self, tool: Tool[Any], arguments: Mapping[str, Any], ctx: ToolContext,
                  secrets: Mapping[str, str], *, question: str) -> Decision:
        """Publish `approval.requested` and wait for the answer or the timeout."""
        people = self.people
        if people is not None and ctx.call_id and ctx.session_id:
            return await self._ask_inbox(people, tool, arguments, ctx, secrets, question)
        if len(self._pending) >= self.max_pending:
            return Decision(False, f"{self.max_pending} approvals are already waiting; answer "
                                   "them with 'squadd approve ID' or 'squadd deny ID' first")
        approval_id = self._new_id()
        pending = PendingApproval(
            approval_id=approval_id, tool=tool.name,
            arguments=redact_any(dict(arguments), secrets),  # whole: what is shown is what runs
            question=redact(question, secrets)[:1000], session_id=ctx.session_id,
            agent=ctx.agent, timeout_s=self.timeout_s,
        )
        self._pending[approval_id] = pending
        try:
            self.sink.publish(ApprovalRequested(
                session_id=ctx.session_id, agent=ctx.agent, approval_id=approval_id,
                tool=tool.name, arguments=_shown(pending.arguments),
                arguments_bytes=arguments_bytes(pending.arguments), question=pending.question,
                timeout_s=self.timeout_s,
            ))
            decision = await self._wait(pending, ctx)
        except BaseException:
            if not pending._answered.is_set():
                self._publish_resolved(pending, CANCELLED)
            raise
        finally:
            self._pending.pop(approval_id, None)
        if not pending._answered.is_set():  # timed out or cancelled: nobody published it yet
            self._publish_resolved(pending, decision)
        return decision

    async def _ask_inbox(self, people: PersonQueue, tool: Tool[Any],
                         arguments: Mapping[str, Any], ctx: ToolContext,
                         secrets: Mapping[str, str], question: str) -> Decision:
        shown = redact_any(_shown(arguments), secrets)
        # The item keeps the whole arguments (what Approve runs, all of it shown to the
        # person); only the event, kept and replayed, carries them cut.
        whole = redact_any(dict(arguments), secrets)
        asked = redact(question, secrets)[:1000]

        def requested(item_id: str) -> None:  # the same event as without an inbox
            self.sink.publish(ApprovalRequested(
                session_id=ctx.session_id, agent=ctx.agent, approval_id=item_id,
                tool=tool.name, arguments=shown, question=asked, timeout_s=0))

        answer = await people.ask_person(PersonRequest(
            kind="approval", session_id=ctx.session_id, agent=ctx.agent, call_id=ctx.call_id,
            reason=asked, actions=("approve", "deny"),
            details={"tool": tool.name, "arguments": whole, "question": asked},
            on_added=requested))
        decision = (Decision(False, answer.reason, timed_out=True) if answer.expired
                    else Decision(answer.action == "approve", answer.reason))
        self.sink.publish(ApprovalResolved(
            session_id=ctx.session_id, agent=ctx.agent, approval_id=answer.item_id,
            approved=decision.approved, reason=decision.reason))
        return decision

    async def request_variables(self, tool: Tool[Any], missing: tuple[VariableSpec, ...],
                                ctx: ToolContext) -> str | None:
        """Publish `variable.requested` for each of `missing` and wait until all were set
        (`provided`), the variable timeout passes, or the call is cancelled. None when all were
        set; else why not."""
        if len(self._pending) + len(self._variables) + len(missing) > self.max_pending:
            return (f"{self.max_pending} requests are already waiting; set the variables "
                    "first ('squadd var set NAME')")
        waiting: list[PendingApproval] = []
        try:
            for spec in missing:
                pending = PendingApproval(
                    approval_id=self._new_id(), tool=tool.name, arguments={},
                    question=f"Set {spec.name}", session_id=ctx.session_id, agent=ctx.agent,
                    timeout_s=self.variable_timeout_s, variable=spec.name)
                self._variables[pending.approval_id] = pending
                waiting.append(pending)
                self.sink.publish(VariableRequested(
                    session_id=ctx.session_id, agent=ctx.agent,
                    request_id=pending.approval_id, tool=tool.name, name=spec.name,
                    variable_type=spec.type, description=spec.description[:500],
                    timeout_s=self.variable_timeout_s))
            deadline = anyio.current_time() + self.variable_timeout_s
            for pending in waiting:
                left = max(0.0, deadline - anyio.current_time())
                decision = await self._wait(pending, ctx, left)
                if not decision.approved:
                    if decision.cancelled:
                        return "the call was cancelled while waiting for its variables"
                    return (f"no value for {pending.variable} within "
                            f"{self.variable_timeout_s:g} s (tools.variable_timeout_s); "
                            f"'squadd var set {pending.variable}' gives it one")
            return None
        finally:
            for pending in waiting:
                self._variables.pop(pending.approval_id, None)
                if not pending._answered.is_set():
                    pending._answered.set()
                    self._publish_variable(pending, False, "the wait ended without a value")

    def provided(self, name: str) -> int:
        """`name` was just stored: wake every call waiting for it; how many were waiting."""
        woken = 0
        for pending in list(self._variables.values()):
            if pending.variable == name and not pending._answered.is_set():
                pending._decision = Decision(True)
                pending._answered.set()
                self._publish_variable(pending, True, "")
                woken += 1
        return woken

    def variable_requests(self) -> list[PendingApproval]:
        """The variable requests waiting now, oldest first."""
        return sorted(self._variables.values(), key=lambda p: p.created)

    def _publish_variable(self, pending: PendingApproval, provided: bool, reason: str) -> None:
        self.sink.publish(VariableResolved(
            session_id=pending.session_id, agent=pending.agent,
            request_id=pending.approval_id, name=pending.variable, provided=provided,
            reason=reason))

    async def _wait(self, pending: PendingApproval, ctx: ToolContext,
                    timeout_s: float | None = None) -> Decision:
        outcome: list[Decision] = []
        async with anyio.create_task_group() as group:
            async def on_cancel() -> None:
                await ctx.cancel.wait()
                outcome.append(CANCELLED)
                group.cancel_scope.cancel()

            group.start_soon(on_cancel)
            with anyio.move_on_after(self.timeout_s if timeout_s is None else timeout_s):
                await pending._answered.wait()
            group.cancel_scope.cancel()
        if pending._decision is not None:
            return pending._decision
        if outcome:
            return outcome[0]
        return Decision(False, "no answer", timed_out=True)

    def resolve(self, approval_id: str, approved: bool, reason: str = "") -> bool:
        """Answer a waiting approval; False when no approval with that id is waiting."""
        pending = self._pending.get(approval_id)
        if pending is None or pending._answered.is_set():
            return False
        pending._decision = Decision(approved, reason.strip()[:500])
        pending._answered.set()
        self._publish_resolved(pending, pending._decision)
        return True

    def pending(self) -> list[PendingApproval]:
        """The approvals waiting now, oldest first."""
        return sorted(self._pending.values(), key=lambda p: p.created)

    def _publish_resolved(self, pending: PendingApproval, decision: Decision) -> None:
        reason = decision.reason
        if decision.timed_out:
            reason = f"no answer within {self.timeout_s:g} s"
        self.sink.publish(ApprovalResolved(
            session_id=pending.session_id, agent=pending.agent,
            approval_id=pending.approval_id, approved=decision.approved, reason=reason,
        ))

    def _new_id(self) -> str:
        while True:
            candidate = token.token_hex(4)
            if candidate not in self._pending and candidate not in self._variables:
                return candidate


def arguments_text(arguments: Mapping[str, Any]) -> str:
    """The whole of a call's arguments as a person reviews them before approving: indented JSON
    with every character outside ASCII escaped (no right-to-left override or look-alike can
    hide part of it), nothing cut."""
    return json.dumps(arguments, indent=2, ensure_ascii=True, default=str)


def arguments_bytes(arguments: Mapping[str, Any]) -> int:
    """The size of a call's arguments, in bytes of compact UTF-8 JSON (what the tool gets)."""
    return len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":"),
                          default=str).encode("utf-8", "surrogatepass"))


def _shown(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments an event carries (events are kept and replayed): long strings cut, with
    a marker; `arguments_bytes` says how much the whole is, the dashboard and `squadd
    approvals` show all of it."""
    shown: dict[str, Any] = {}
    for key, value in list(arguments.items())[:50]:
        if isinstance(value, str) and len(value) > 2000:
            value = value[:2000] + "…"
        shown[str(key)[:64]] = value
    return shown
