"""Scoped variables and deferred resolution: a scoped variable is hidden from other tools'
environments, and a required variable without a value is asked for (`variable.requested`)
and waited for, until it is stored or the wait times out."""

from __future__ import annotations

import stat
from pathlib import Path

import anyio
import pytest

from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import VariableRequested, VariableResolved
from squadd.errors import VariableValueError
from squadd.state.layout import SquadLayout
from squadd.tools.approvals import ApprovalBroker
from squadd.tools.base import ToolResult, ToolSet
from squadd.tools.secrets import SecretRegistry
from squadd.tools.variables import SecretsFile, SquadVariables, store_variable
from tests.tools.custom_tools import Recorder, call, shell_tool

DEPLOY = {"description": "Deploy", "bash": "printenv DEPLOY_TOKEN || echo unset",
          "tags": ["run"],
          "variables": [{"name": "DEPLOY_TOKEN", "type": "secret", "scoped": True}]}
def _resolver(layout: SquadLayout, settings: Settings) -> SquadVariables:
    """The variables resolver, with a registry of its own for the secrets it hands out."""
    return SquadVariables(layout, settings, registry=SecretRegistry())


PEEK = {"description": "Peek at the environment", "bash": "printenv DEPLOY_TOKEN || echo unset",
        "tags": ["read"]}


@pytest.mark.parametrize("scoped", [True, False])
async def test_a_scoped_variable_is_hidden_from_tools_that_do_not_declare_it(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch, scoped: bool) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", "tok-123")
    declared = {**DEPLOY, "variables": [{**DEPLOY["variables"][0], "scoped": scoped}]}  # type: ignore[index]
    tools = ToolSet([shell_tool(declared, name="deploy"), shell_tool(PEEK, name="peek")])
    settings = Settings()
    variables = _resolver(layout, settings)
    peek = await call(layout, tools, "peek", variables=variables)
    deploy = await call(layout, tools, "deploy", variables=variables)
    assert peek.ok and deploy.ok
    assert deploy.text.strip() == "[secret:DEPLOY_TOKEN]"  # the declaring tool has it
    # Unscoped, peek sees the value in its environment, and prints it: redacted all the same.
    assert peek.text.strip() == ("unset" if scoped else "[secret:DEPLOY_TOKEN]")


async def test_a_narrowed_tool_set_still_hides_what_the_invoker_has_seen(
        layout: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    from squadd.contracts.messages import ToolCall
    from squadd.tools.invoke import CallOrigin, ToolInvoker

    monkeypatch.setenv("DEPLOY_TOKEN", "tok-123")
    deploy, peek = shell_tool(DEPLOY, name="deploy"), shell_tool(PEEK, name="peek")
    invoker = ToolInvoker(layout, Settings())
    origin = CallOrigin(session_id="s-1", agent="fenster")
    await invoker.invoke(ToolSet([deploy, peek]), ToolCall(id="a", name="peek"), origin)
    alone = await invoker.invoke(ToolSet([peek]), ToolCall(id="b", name="peek"), origin)
    assert alone.text.strip() == "unset"


def _settings(tmp_path: Path, timeout_s: float = 30.0) -> Settings:
    return Settings(tools=ToolsSettings(secrets_file=str(tmp_path / "cfg" / "secrets"),
                                        variable_timeout_s=timeout_s))


async def test_a_missing_variable_is_asked_for_and_the_call_runs_once_it_is_set(
        layout: SquadLayout, tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    recorder = Recorder()
    broker = ApprovalBroker(settings, recorder)
    tool = shell_tool(DEPLOY, name="deploy")
    results: list[ToolResult] = []

    async def run_call() -> None:
        results.append(await call(layout, tool, "deploy", settings=settings, sink=recorder,
                                  variables=_resolver(layout, settings),
                                  approvals=broker))

    async with anyio.create_task_group() as group:
        group.start_soon(run_call)
        [requested] = await recorder.wait_for(VariableRequested)
        assert (requested.name, requested.tool, requested.variable_type) == (
            "DEPLOY_TOKEN", "deploy", "secret")
        assert [p.variable for p in broker.variable_requests()] == ["DEPLOY_TOKEN"]
        assert not results  # still waiting
        store_variable(Path(settings.tools.secrets_file), "DEPLOY_TOKEN", "tok-456")
        assert broker.provided("DEPLOY_TOKEN") == 1
    [result] = results
    assert result.ok and result.text.strip() == "[secret:DEPLOY_TOKEN]"
    [resolved] = recorder.of(VariableResolved)
    assert resolved.provided and resolved.request_id == requested.request_id
    assert "tok-456" not in repr(recorder.events)
    assert broker.variable_requests() == []


async def test_a_variable_nobody_sets_fails_clearly_at_the_timeout(
        layout: SquadLayout, tmp_path: Path) -> None:
    settings = _settings(tmp_path, timeout_s=0.05)
    recorder = Recorder()
    broker = ApprovalBroker(settings, recorder)
    result = await call(layout, shell_tool(DEPLOY, name="deploy"), "deploy", settings=settings,
                        sink=recorder, variables=_resolver(layout, settings),
                        approvals=broker)
    assert not result.ok
    assert result.text.startswith("deploy cannot run: no value for DEPLOY_TOKEN within 0.05 s "
                                  "(tools.variable_timeout_s)")
    assert result.details["missing_variables"] == ["DEPLOY_TOKEN"]
    [resolved] = recorder.of(VariableResolved)
    assert not resolved.provided


async def test_without_a_broker_a_missing_variable_fails_at_once(layout: SquadLayout,
                                                                 tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    recorder = Recorder()
    result = await call(layout, shell_tool(DEPLOY, name="deploy"), "deploy", settings=settings,
                        sink=recorder, variables=_resolver(layout, settings))
    assert not result.ok and "required secret DEPLOY_TOKEN" in result.text
    assert recorder.of(VariableRequested) == []


def test_store_variable_makes_a_private_file_and_replaces_only_its_line(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "squadd" / "secrets"
    store_variable(path, "A_KEY", "first")
    path.write_text("# my keys\nOTHER=keep me\nA_KEY=first\n", encoding="utf-8")
    path.chmod(0o600)
    store_variable(path, "A_KEY", ' "spaced" value ')
    store_variable(path, "NEW", "x=y#z")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:2] == ["# my keys", "OTHER=keep me"]
    values = SecretsFile(path).read().values
    assert values == {"OTHER": "keep me", "A_KEY": ' "spaced" value ', "NEW": "x=y#z"}


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("BAD-NAME", "hunter2", "is not a variable name"),
    ("OK", "two\nlines", "line break"),
])
def test_store_variable_refuses_bad_input_without_showing_the_value(
        tmp_path: Path, name: str, value: str, expected: str) -> None:
    with pytest.raises(VariableValueError, match=expected) as caught:
        store_variable(tmp_path / "secrets", name, value)
    assert value not in str(caught.value)


def test_store_variable_never_loosens_a_shared_file(tmp_path: Path) -> None:
    path = tmp_path / "secrets"
    path.write_text("A=1\n", encoding="utf-8")
    path.chmod(0o644)
    with pytest.raises(VariableValueError, match="chmod 600"):
        store_variable(path, "B", "2")
    assert path.read_text(encoding="utf-8") == "A=1\n"
