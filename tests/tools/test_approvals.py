"""Approvals: policy from globs and defaults; ask waits, approve runs, deny and silence refuse;
ctx.confirm takes the same way."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import ApprovalRequested, ApprovalResolved, ToolCompleted
from squadd.state.layout import SquadLayout
from squadd.tools.approvals import ApprovalBroker, approval_policy
from squadd.tools.base import ToolContext, VariableSpec
from squadd.tools.python.tool import tool
from tests.tools.custom_tools import Recorder, call, shell_tool


def _settings(timeout: float = 5.0, **rules: str) -> Settings:
    return Settings(tools=ToolsSettings(approval_timeout_s=timeout, approvals=rules))


@tool(requires_approval=True)
def deploy(target: str) -> str:
    """Deploy."""
    return f"deployed {target}"


def test_defaults_yaml_without_security_tag_and_requires_approval_ask() -> None:
    untagged = shell_tool({"description": "d", "bash": "x"})
    tagged = shell_tool({"description": "d", "bash": "x", "tags": ["misc", "read"]})

    @tool
    def plain() -> str:
        return ""

    assert untagged.default_approval == "ask" and tagged.default_approval == "allow"
    assert deploy.default_approval == "ask" and plain.default_approval == "allow"


def test_the_most_specific_glob_decides_and_ties_go_to_the_stricter() -> None:
    named = shell_tool({"description": "d", "bash": "x", "tags": ["read"]}, name="deploy_prod")
    rules: dict[str, Any] = {"*": "allow", "deploy*": "ask", "deploy_prod": "deny"}
    assert approval_policy(named, rules).approval == "deny"
    assert approval_policy(named, {"*": "allow", "deploy*": "ask"}).rule == "deploy*"
    assert approval_policy(named, {"deploy_*": "deny", "*_prod": "allow"}).approval == "deny"
    assert approval_policy(named, {"dep*": "allow", "*rod": "deny"}).approval == "deny"
    assert approval_policy(named, {"other": "deny"}).approval == "allow"


async def _answer(recorder: Recorder, broker: ApprovalBroker, approved: bool,
                  reason: str = "") -> str:
    request = (await recorder.wait_for(ApprovalRequested))[0]
    assert [p.approval_id for p in broker.pending()] == [request.approval_id]
    assert broker.resolve(request.approval_id, approved, reason)
    assert not broker.resolve(request.approval_id, approved)  # answered once only
    return str(request.approval_id)


async def test_ask_waits_and_approve_lets_it_run(layout: SquadLayout, recorder: Recorder) -> None:
    broker = ApprovalBroker(_settings(), recorder)
    async with anyio.create_task_group() as group:
        group.start_soon(_answer, recorder, broker, True)
        result = await call(layout, deploy, "deploy", {"target": "prod"}, sink=recorder,
                            approvals=broker)
    assert result.ok and result.text == "deployed prod"
    [request] = recorder.of(ApprovalRequested)
    assert request.tool == "deploy" and request.arguments == {"target": "prod"}
    [resolved] = recorder.of(ApprovalResolved)
    assert resolved.approved and resolved.approval_id == request.approval_id
    assert broker.pending() == []


async def test_deny_tells_the_model_it_was_denied_by_the_user(
        layout: SquadLayout, recorder: Recorder) -> None:
    broker = ApprovalBroker(_settings(), recorder)
    async with anyio.create_task_group() as group:
        group.start_soon(_answer, recorder, broker, False, "not on a Friday")
        result = await call(layout, deploy, "deploy", {"target": "prod"}, sink=recorder,
                            approvals=broker)
    assert not result.ok
    assert result.text == "deploy was not run: denied by the user (not on a Friday)"


async def test_silence_times_out_as_a_denial(layout: SquadLayout, recorder: Recorder) -> None:
    broker = ApprovalBroker(_settings(timeout=0.2), recorder)
    with anyio.fail_after(30):
        result = await call(layout, deploy, "deploy", {"target": "x"}, sink=recorder,
                            approvals=broker)
    assert not result.ok
    assert result.text == "deploy was not run: denied: no answer within 0.2 s"
    [resolved] = recorder.of(ApprovalResolved)
    assert not resolved.approved and resolved.reason == "no answer within 0.2 s"
    assert broker.pending() == []


async def test_deny_policy_refuses_at_once_and_allow_skips_asking(
        layout: SquadLayout, recorder: Recorder) -> None:
    broker = ApprovalBroker(_settings(deploy="deny"), recorder)
    result = await call(layout, deploy, "deploy", {"target": "x"}, approvals=broker,
                        sink=recorder)
    assert not result.ok and "denied by tools.approvals rule 'deploy'" in result.text
    allowed = ApprovalBroker(_settings(**{"dep*": "allow"}), recorder)
    assert (await call(layout, deploy, "deploy", {"target": "x"}, approvals=allowed)).ok
    assert recorder.of(ApprovalRequested) == []


async def test_approval_events_never_show_a_secret(layout: SquadLayout, recorder: Recorder,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQUADD_TEST_KEY", "hunter2-secret")

    @tool(variables=[VariableSpec(name="SQUADD_TEST_KEY", type="secret")])
    async def guarded(note: str, ctx: ToolContext) -> str:
        ok = await ctx.confirm(f"use key {ctx.variables['SQUADD_TEST_KEY']}?")
        return "used" if ok else "not used"

    broker = ApprovalBroker(_settings(guarded="ask"), recorder)

    async def approve_all() -> None:
        for count in (1, 2):
            request = (await recorder.wait_for(ApprovalRequested, count))[-1]
            broker.resolve(request.approval_id, True)

    async with anyio.create_task_group() as group:
        group.start_soon(approve_all)
        result = await call(layout, guarded, "guarded", {"note": "hunter2-secret"},
                            sink=recorder, approvals=broker)
    assert result.text == "used"
    first, second = recorder.of(ApprovalRequested)
    assert first.arguments == {"note": "[secret:SQUADD_TEST_KEY]"}
    assert second.question == "use key [secret:SQUADD_TEST_KEY]?"
    assert all("hunter2-secret" not in e.model_dump_json() for e in recorder.events)


async def test_confirm_denied_by_the_user_returns_false(layout: SquadLayout,
                                                        recorder: Recorder) -> None:
    @tool
    async def careful(ctx: ToolContext) -> str:
        return "went ahead" if await ctx.confirm("really delete?") else "stopped"

    broker = ApprovalBroker(_settings(), recorder)
    async with anyio.create_task_group() as group:
        group.start_soon(_answer, recorder, broker, False)
        result = await call(layout, careful, "careful", sink=recorder, approvals=broker)
    assert result.text == "stopped"
    assert recorder.of(ApprovalRequested)[0].question == "really delete?"


async def test_pending_approvals_are_bounded(layout: SquadLayout, recorder: Recorder) -> None:
    broker = ApprovalBroker(_settings(timeout=5), recorder, max_pending=2)
    results: list[Any] = []

    async def one(index: int) -> None:
        results.append(await call(layout, deploy, "deploy", {"target": str(index)},
                                  approvals=broker, sink=recorder, call_id=f"c{index}"))

    async with anyio.create_task_group() as group:
        group.start_soon(one, 1)
        group.start_soon(one, 2)
        await recorder.wait_for(ApprovalRequested, 2)
        third = await call(layout, deploy, "deploy", {"target": "3"}, approvals=broker,
                           sink=recorder, call_id="c3")
        assert not third.ok and "2 approvals are already waiting" in third.text
        for pending in broker.pending():
            broker.resolve(pending.approval_id, True)
    assert [r.ok for r in results] == [True, True]
    assert len(recorder.of(ToolCompleted)) == 3


async def test_a_cancelled_call_withdraws_its_question(layout: SquadLayout,
                                                       recorder: Recorder) -> None:
    broker = ApprovalBroker(_settings(timeout=60), recorder)
    with anyio.CancelScope() as scope:
        async def cancel_once_asked() -> None:
            await recorder.wait_for(ApprovalRequested)
            scope.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(cancel_once_asked)
            await call(layout, deploy, "deploy", {"target": "x"}, approvals=broker,
                       sink=recorder)
    assert scope.cancelled_caught
    assert broker.pending() == []
    [resolved] = recorder.of(ApprovalResolved)
    assert not resolved.approved and resolved.reason == "the tool call was cancelled"


def test_a_tool_that_uses_an_ask_tool_asks_too_and_an_alias_keeps_its_base_tags(
        layout: SquadLayout) -> None:
    from tests.tools.custom_tools import discover, write

    write(layout.tools_dir, "wipe.yaml", "description: Wipe\nbash: echo wiped\n")
    write(layout.tools_dir, "ls.yaml", "description: List\ntags: [read]\nbash: ls\n")
    write(layout.tools_dir, "tidy.yaml", """
        description: Tidy up
        tags: [read]
        steps: [{name: s, use-tool: wipe}]
        """)
    write(layout.tools_dir, "ls-alias.yaml", "type: alias\nbase-tool: ls\n")
    tools = discover(layout).toolset()
    policies = {name: tools.get(name).default_approval  # type: ignore[union-attr]
                for name in ("wipe", "ls", "tidy", "ls-alias")}
    assert policies == {"wipe": "ask", "ls": "allow", "tidy": "ask", "ls-alias": "allow"}
