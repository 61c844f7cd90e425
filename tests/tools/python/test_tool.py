"""Python tools: schema from signature and docstring, both forms, sync tools in threads."""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, Field

from squadd import ToolContext, ToolResult, tool
from squadd.contracts.events import ToolUpdated
from squadd.errors import ToolDefinitionError
from squadd.state.layout import SquadLayout
from squadd.tools.base import VariableSpec
from squadd.tools.python.docstrings import parse_docstring
from tests.tools.custom_tools import Answering, Recorder, call


def test_schema_comes_from_signature_docstring_defaults_and_constraints() -> None:
    @tool
    def search(query: str, limit: Annotated[int, Field(ge=1, le=50)] = 10,
               exact: bool = False, ctx: ToolContext | None = None) -> str:
        """Search the notes.

        Longer explanation that the model also reads.

        Args:
            query: What to look for.
            limit: Most results to return,
                counted after filtering.
        """
        return query

    schema = search.parameters_schema()
    assert search.name == "search" and search.description.startswith("Search the notes.")
    assert "Longer explanation" in search.description
    assert schema["required"] == ["query"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"query", "limit", "exact"}  # ctx is not an argument
    limit = schema["properties"]["limit"]
    assert limit["default"] == 10 and limit["minimum"] == 1 and limit["maximum"] == 50
    assert limit["description"] == "Most results to return, counted after filtering."
    assert schema["properties"]["query"]["description"] == "What to look for."


def test_sphinx_style_docstrings_describe_parameters_too() -> None:
    summary, params = parse_docstring("""Do it.

    :param path: The file.
    :param int count: How many,
        at most.
    :returns: nothing
    """)
    assert summary == "Do it." and params == {"path": "The file.", "count": "How many, at most."}


async def test_constraints_are_enforced_by_the_pipeline(layout: SquadLayout) -> None:
    @tool
    def pick(n: Annotated[int, Field(ge=1, le=3)], label: str = "x") -> str:
        return f"{label}{n}"

    bad = await call(layout, pick, "pick", {"n": 9, "extra": True})
    assert not bad.ok
    assert "- n: Input should be less than or equal to 3" in bad.text
    assert "- extra: Extra inputs are not permitted" in bad.text
    good = await call(layout, pick, "pick", {"n": 2})
    assert good.ok and good.text == "x2"


async def test_parameters_named_like_model_attributes_still_work(layout: SquadLayout) -> None:
    @tool
    def odd(json: str, copy: int = 1, model_config: str = "m") -> str:
        return f"{json}-{copy}-{model_config}"

    result = await call(layout, odd, "odd", {"json": "j", "copy": 2})
    assert result.text == "j-2-m"


async def test_explicit_form_with_args_model_and_label(layout: SquadLayout) -> None:
    class Args(BaseModel):
        city: str = Field(description="City name")

    def forecast(args: Args, ctx: ToolContext) -> dict[str, Any]:
        return {"city": args.city, "agent": ctx.agent}

    weather = tool(name="weather", label="Weather", description="Forecast for a city",
                   args=Args, execute=forecast)
    assert weather.label == "Weather" and weather.description == "Forecast for a city"
    assert weather.parameters_schema()["properties"]["city"]["description"] == "City name"
    result = await call(layout, weather, "weather", {"city": "Oslo"})
    assert result.ok and result.details["data"] == {"city": "Oslo", "agent": "fenster"}


async def test_return_values_str_dict_and_tool_result(layout: SquadLayout) -> None:
    @tool
    async def fails() -> ToolResult:
        return ToolResult.failure("no such thing", code=4)

    result = await call(layout, fails, "fails")
    assert not result.ok and result.text == "no such thing" and result.details["code"] == 4


async def test_sync_tools_run_in_a_worker_thread_and_report_progress(
        layout: SquadLayout, recorder: Recorder) -> None:
    threads: list[str] = []

    @tool
    def slow(ctx: ToolContext) -> str:
        """Blocks for a while."""
        threads.append(threading.current_thread().name)
        ctx.progress("half", 0.5)
        time.sleep(0.3)
        return "done"

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.02)
            ticks += 1

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        result = await call(layout, slow, "slow", sink=recorder)
        group.cancel_scope.cancel()
    assert result.text == "done"
    assert threads and threads[0] != threading.main_thread().name
    assert ticks >= 5  # the event loop kept running while the tool blocked
    [update] = recorder.of(ToolUpdated)
    assert update.message == "half" and update.fraction == 0.5


async def test_sync_tool_can_confirm_through_the_approval_flow(layout: SquadLayout) -> None:
    gate = Answering(lambda question: False)

    @tool
    def careful(ctx: ToolContext) -> str:
        return "went ahead" if ctx.confirm_sync("really?") else "stopped"

    result = await call(layout, careful, "careful", approvals=gate)
    assert result.text == "stopped" and gate.asked == ["really?"]


def test_requires_approval_and_variables_are_declared_on_the_tool() -> None:
    @tool(requires_approval=True, variables=[{"name": "API_KEY", "type": "secret"}],
          timeout_s=5)
    def deploy() -> str:
        return "ok"

    assert deploy.default_approval == "ask" and deploy.timeout_s == 5
    assert deploy.variables == (VariableSpec(name="API_KEY", type="secret"),)
    assert deploy() == "ok"  # the function stays callable


@pytest.mark.parametrize("define, message", [
    (lambda: tool(lambda *a: None), r"\*a is not allowed"),
    (lambda: tool(name="bad name!", execute=lambda: None), "is not allowed"),
    (lambda: tool(variables=[{"name": "1bad"}])(lambda: None), "bad variable declaration"),
])
def test_bad_declarations_say_what_is_wrong(define: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        define()


def test_a_parameter_without_annotation_is_refused() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(ToolDefinitionError, match="parameter 'x' has no type annotation"):
        tool(f)
