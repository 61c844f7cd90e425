"""The one invocation pipeline: validation, unknown tools, exceptions, timeouts, secrets, spill."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, Field

from squadd.config import Settings, ToolsSettings
from squadd.contracts.events import BaseEvent, ToolCompleted, ToolStarted, ToolUpdated
from squadd.contracts.messages import ToolCall
from squadd.state.layout import SquadLayout
from squadd.tools.base import Tool, ToolContext, ToolOutput, ToolResult, ToolSet, VariableSpec
from squadd.tools.invoke import CallOrigin, ToolInvoker
from squadd.tools.redaction import redact


class Recorder:
    def __init__(self) -> None:
        self.events: list[BaseEvent] = []

    def publish(self, event: BaseEvent) -> None:
        self.events.append(event)


class EchoArgs(BaseModel):
    text: str = Field(min_length=1)
    times: int = Field(1, ge=1, le=5)


class Echo(Tool[EchoArgs]):
    name = "echo"
    description = "Echo text"
    args_model = EchoArgs

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
        ctx.progress("halfway", 0.5)
        return args.text * args.times


class Boom(Tool[EchoArgs]):
    name = "boom"
    description = "Always raises"
    args_model = EchoArgs

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
        raise RuntimeError("kaboom: " + args.text)


class Sleepy(Tool[EchoArgs]):
    name = "sleepy"
    description = "Sleeps"
    args_model = EchoArgs
    timeout_s = 0.2

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
        await anyio.sleep(30)
        return "never"


class OwnTimeout(Tool[EchoArgs]):
    """Raises its own TimeoutError (a client library's), long before any tool timeout."""

    name = "own_timeout"
    description = "Times out on its own"
    args_model = EchoArgs

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
        raise TimeoutError("the upstream API did not answer")


class SquadOwnTimeout(OwnTimeout):
    """The same, as a squad tool: squad tools have no timeout at all."""

    name = "squad_own_timeout"
    squad_tool = True


class Leaky(Tool[EchoArgs]):
    name = "leaky"
    description = "Prints its secret"
    args_model = EchoArgs
    variables = (VariableSpec(name="SQUADD_TEST_TOKEN", type="secret"),)

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
        ctx.progress(f"using {ctx.variables['SQUADD_TEST_TOKEN']}", None)
        return {"token": ctx.variables["SQUADD_TEST_TOKEN"], "text": args.text}


def _invoker(layout: SquadLayout, settings: Settings | None = None) -> tuple[ToolInvoker, Recorder]:
    sink = Recorder()
    return ToolInvoker(layout, settings or Settings(), sink), sink


def _call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(id="call_1", name=name, arguments=arguments)


ORIGIN = CallOrigin(session_id="s-1", agent="fenster")


async def test_success_result_and_events_in_order(layout: SquadLayout) -> None:
    invoker, sink = _invoker(layout)
    result = await invoker.invoke(ToolSet([Echo()]), _call("echo", text="ab", times=2), ORIGIN)
    assert result.ok and result.text == "abab"
    kinds = [type(e) for e in sink.events]
    assert kinds == [ToolStarted, ToolUpdated, ToolCompleted]
    update = sink.events[1]
    assert isinstance(update, ToolUpdated) and update.fraction == 0.5
    assert "full_output" not in result.details
    assert not (layout.root / "tool-output").exists()  # within the limits: nothing spilled


async def test_invalid_args_list_each_bad_field(layout: SquadLayout) -> None:
    invoker, _ = _invoker(layout)
    result = await invoker.invoke(ToolSet([Echo()]), _call("echo", text="", times=9), ORIGIN)
    assert result.result_type == "failure"
    assert "- text:" in result.text and "- times:" in result.text
    assert "less than or equal to 5" in result.text


async def test_missing_required_field_is_named(layout: SquadLayout) -> None:
    invoker, _ = _invoker(layout)
    result = await invoker.invoke(ToolSet([Echo()]), _call("echo"), ORIGIN)
    assert not result.ok and "- text: required, but missing" in result.text


async def test_unknown_tool_lists_available_tools(layout: SquadLayout) -> None:
    invoker, _ = _invoker(layout)
    result = await invoker.invoke(ToolSet([Echo(), Boom()]), _call("nope", text="x"), ORIGIN)
    assert not result.ok
    assert "unknown tool 'nope'" in result.text and "boom, echo" in result.text


async def test_invalid_json_arguments_become_a_correctable_failure(layout: SquadLayout) -> None:
    invoker, _ = _invoker(layout)
    call = ToolCall(id="c", name="echo", arguments_error="Expecting value: line 1 column 1")
    result = await invoker.invoke(ToolSet([Echo()]), call, ORIGIN)
    assert not result.ok and result.text.startswith("arguments were not valid JSON: Expecting")


async def test_exception_becomes_failure_not_raise(layout: SquadLayout) -> None:
    invoker, sink = _invoker(layout)
    result = await invoker.invoke(ToolSet([Boom()]), _call("boom", text="x"), ORIGIN)
    assert not result.ok and "RuntimeError: kaboom: x" in result.text
    done = sink.events[-1]
    assert isinstance(done, ToolCompleted) and done.result_type == "failure"


async def test_timeout_stops_the_tool(layout: SquadLayout) -> None:
    invoker, _ = _invoker(layout)
    with anyio.fail_after(30):
        result = await invoker.invoke(ToolSet([Sleepy()]), _call("sleepy", text="x"), ORIGIN)
    assert not result.ok and "timed out after 0.2s" in result.text


@pytest.mark.parametrize("tool", [OwnTimeout(), SquadOwnTimeout()], ids=["custom", "squad"])
async def test_a_tool_raising_its_own_timeout_error_is_a_failure_not_a_timeout(
        layout: SquadLayout, tool: Tool[Any]) -> None:
    invoker, sink = _invoker(layout)
    result = await invoker.invoke(ToolSet([tool]), _call(tool.name, text="x"), ORIGIN)
    assert not result.ok
    assert result.text == (f"{tool.name} failed: TimeoutError: the upstream API did not answer")
    assert "timed out" not in result.text
    done = sink.events[-1]
    assert isinstance(done, ToolCompleted) and done.result_type == "failure"


async def test_secret_is_redacted_everywhere_it_could_leak(
    layout: SquadLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "s3cr3t-value-123"
    monkeypatch.setenv("SQUADD_TEST_TOKEN", secret)
    invoker, sink = _invoker(layout)
    result = await invoker.invoke(ToolSet([Leaky()]), _call("leaky", text="hi"), ORIGIN)
    assert result.ok
    assert secret not in result.text and "[secret:SQUADD_TEST_TOKEN]" in result.text
    assert secret not in json.dumps(result.details)
    assert all(secret not in e.model_dump_json() for e in sink.events)


async def test_missing_required_variable_names_it(
    layout: SquadLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SQUADD_TEST_TOKEN", raising=False)
    invoker, _ = _invoker(layout)
    result = await invoker.invoke(ToolSet([Leaky()]), _call("leaky", text="hi"), ORIGIN)
    assert not result.ok and "SQUADD_TEST_TOKEN" in result.text


async def test_long_output_is_truncated_and_spilled(layout: SquadLayout) -> None:
    settings = Settings(tools=ToolsSettings(max_output_lines=10, max_output_bytes=4096))
    invoker, _ = _invoker(layout, settings)
    text = "".join(f"line {i}\n" for i in range(100))
    result = await invoker.invoke(ToolSet([Echo()]), _call("echo", text=text), ORIGIN)
    assert result.ok
    assert result.text.count("\n") <= 12
    spill = Path(result.details["full_output"])
    assert spill == layout.root / "tool-output" / "s-1" / "call_1.txt"
    assert spill.read_text(encoding="utf-8") == text
    assert ".squad/tool-output/s-1/call_1.txt" in result.text


async def test_squad_tool_results_are_capped_at_squad_limit(layout: SquadLayout) -> None:
    class Big(Echo):
        name = "big"
        squad_tool = True

    invoker, _ = _invoker(layout)
    result = await invoker.invoke(ToolSet([Big()]), _call("big", text="x" * 30_000), ORIGIN)
    assert len(result.text.encode()) < 10_240 + 400
    assert Path(result.details["full_output"]).stat().st_size == 30_000


def test_redact_replaces_longest_first() -> None:
    assert redact("abc abcdef", {"A": "abc", "B": "abcdef"}) == "[secret:A] [secret:B]"


async def test_cancellation_propagates_and_sets_the_signal(layout: SquadLayout) -> None:
    invoker, _ = _invoker(layout)
    origin = CallOrigin(session_id="s-2", agent="fenster")
    with anyio.move_on_after(0.1):
        await invoker.invoke(ToolSet([Sleepy()]), _call("sleepy", text="x"), origin)
    assert origin.cancel.cancelled


async def test_a_cancelled_call_still_reports_that_it_ended(layout: SquadLayout) -> None:
    """Watchers pair tool.started with tool.completed: a call cut by the session's cancellation
    must not look as if it were still running."""
    running = anyio.Event()

    class Parked(Sleepy):
        timeout_s = None  # only the session's cancellation ends it

        async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
            running.set()
            return await super().run(args, ctx)

    invoker, sink = _invoker(layout)
    origin = CallOrigin(session_id="s-3", agent="fenster")
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(invoker.invoke, ToolSet([Parked()]), _call("sleepy", text="x"), origin)
            with anyio.fail_after(10):
                await running.wait()
            scope.cancel()
    assert [type(e) for e in sink.events] == [ToolStarted, ToolCompleted]
    done = sink.events[-1]
    assert isinstance(done, ToolCompleted) and done.result_type == "failure"
    assert done.call_id == "call_1" and done.summary.startswith("interrupted")
    assert done.details == {"interrupted": True}


def test_toolset_narrowing_by_names_and_globs() -> None:
    tools = ToolSet([Echo(), Boom(), Sleepy()])
    assert tools.narrowed(["echo", "s*"]).names == ["echo", "sleepy"]
    assert tools.narrowed(None).names == ["echo", "boom", "sleepy"]
    assert tools.narrowed([]).names == []
    assert tools.narrowed(["b?om", "[ef]cho", "slee"]).names == ["echo", "boom"]
    assert tools.narrowed(["ech", "echo*"]).names == ["echo"]  # a name matches whole


def test_spill_refuses_traversal_in_ids(layout: SquadLayout) -> None:
    from squadd.errors import InvalidNameError

    with pytest.raises(InvalidNameError):
        layout.tool_output("../../etc", "x")
    assert not (layout.repo.parent / "etc").exists()
    assert not (layout.root / "tool-output").exists()


def test_tool_result_helpers() -> None:
    assert ToolResult.failure("no", why=1).details == {"why": 1}


async def test_a_timeout_stops_the_call_but_not_the_session(layout: SquadLayout) -> None:
    seen: list[bool] = []

    class Watcher(Echo):
        name = "watcher"

        async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
            seen.append(ctx.cancel.cancelled)
            return "ok"

    invoker, _ = _invoker(layout)
    origin = CallOrigin(session_id="s-3", agent="fenster")
    tools = ToolSet([Sleepy(), Watcher()])
    assert not (await invoker.invoke(tools, _call("sleepy", text="x"), origin)).ok
    assert not origin.cancel.cancelled
    assert (await invoker.invoke(tools, _call("watcher", text="x"), origin)).ok
    assert seen == [False]


async def test_tool_started_is_published_with_secrets_redacted(
    layout: SquadLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQUADD_TEST_TOKEN", "tok-abc-123")
    invoker, sink = _invoker(layout)
    await invoker.invoke(ToolSet([Leaky()]), _call("leaky", text="tok-abc-123"), ORIGIN)
    started = sink.events[0]
    assert isinstance(started, ToolStarted)
    assert started.arguments == {"text": "[secret:SQUADD_TEST_TOKEN]"}


async def test_a_result_the_tool_spilled_itself_is_only_capped(layout: SquadLayout) -> None:
    class Spiller(Echo):
        name = "spiller"

        async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolOutput:
            path = layout.tool_output(ctx.session_id, ctx.call_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("the whole output", encoding="utf-8")
            return ToolResult.success("head\n[output truncated: see the file]",
                                      full_output=str(path))

    invoker, _ = _invoker(layout, Settings(tools=ToolsSettings(max_output_lines=1)))
    result = await invoker.invoke(ToolSet([Spiller()]), _call("spiller", text="x"), ORIGIN)
    assert result.text == "head\n[output truncated: see the file]"
    assert Path(result.details["full_output"]).read_text() == "the whole output"


async def test_output_that_cannot_be_spilled_is_still_cut_to_the_byte_and_line_limits(
    layout: SquadLayout,
) -> None:
    # A file where the tool-output folder should be: the spill fails, the limits still hold.
    layout.root.mkdir(parents=True, exist_ok=True)
    (layout.root / "tool-output").write_text("not a folder", encoding="utf-8")
    settings = Settings(tools=ToolsSettings(max_output_lines=5, max_output_bytes=4096))
    invoker, _ = _invoker(layout, settings)
    text = "".join(f"é{i}\n" for i in range(2000))  # two bytes per "é"
    result = await invoker.invoke(ToolSet([Echo()]), _call("echo", text=text), ORIGIN)
    assert result.ok and "full_output" not in result.details
    head, note = result.text.split("\n[output truncated", 1)
    assert head == "".join(f"é{i}\n" for i in range(5))
    assert "5 of 2000 lines" in note and "could not be saved" in note
