"""A learning stored with squad_memory is in the agent's next prompt, whatever shape and order its
history.md uses, also after a Scribe pass compacted that history."""

from __future__ import annotations

import pytest

from squadd.config import Settings
from squadd.contracts.routes import RouteRequest
from squadd.runtime.runtime import SquadRuntime
from squadd.scribe import merge_inbox
from squadd.state.layout import SquadLayout
from tests.runtime.scripted import Gauge, call, script, settings, text
from tests.state.memory_fixtures import grown_history

LEARNING = "The wind vane reads 3 degrees east of true north; subtract it before logging."


def system_prompt(gauge: Gauge) -> str:
    message = gauge.requests[-1].messages[0]
    assert message.role == "system"
    return str(message.content)


@pytest.mark.parametrize(("blocks", "newest_first", "plain"), [
    (True, True, True), (True, False, True), (True, True, False), (True, False, False),
    (False, True, False), (False, False, False)])
async def test_a_stored_learning_is_in_the_next_prompt_of_a_large_history(
    layout: SquadLayout, blocks: bool, newest_first: bool, plain: bool,
) -> None:
    count = 90 if blocks else 260  # past the prompt's history budget and the compaction size
    layout.history("fenster").write_text(
        grown_history(count, blocks=blocks, newest_first=newest_first, plain=plain),
        encoding="utf-8")
    gauge = Gauge(script(fenster=[
        call("squad_memory", agentName="fenster", learning=LEARNING, category="technical"),
        text("stored"),
        text("second task done"),
        text("third task done"),
    ]))
    async with SquadRuntime(layout, settings(), gauge) as runtime:
        first = await runtime.route(RouteRequest(target_agent="fenster", task="calibrate"))
        assert first.ok, first.message
        second = await runtime.route(RouteRequest(target_agent="fenster", task="log the wind"))
        assert second.ok
        assert LEARNING in system_prompt(gauge)

        report = merge_inbox(layout, Settings())
        assert [c.agent for c in report.compacted] == ["fenster"]
        third = await runtime.route(RouteRequest(target_agent="fenster", task="again"))
        assert third.ok
        assert LEARNING in system_prompt(gauge)
    assert LEARNING in layout.history("fenster").read_text()
    assert LEARNING not in layout.history_archive("fenster").read_text()
