"""Budgets park a session (no slot held) before the call that would pass a limit; the inbox
resumes it; squad_ask parks until answered, across a runtime's restart too."""

from __future__ import annotations

import json

import anyio
import pytest

from squadd.config import BudgetSettings, PriceSettings, ProviderSettings, Settings
from squadd.contracts.routes import RouteRequest
from squadd.providers.replay import ScriptedCall, ScriptedTurn
from squadd.runtime.runtime import SquadRuntime
from squadd.state.inbox_items import InboxItem
from squadd.state.layout import SquadLayout
from squadd.state.spending import SpendingLedger
from squadd.state.transcripts import read_transcript
from tests.runtime.scripted import add_agent, call, script, text

PRICE = PriceSettings(input=1.0, output=1000.0)
"""$0.001 an output token: a call that answers with 2000 tokens costs $2."""
BIG = (0, 2000)


def priced(**budget: float) -> Settings:
    return Settings(pricing={"openai/test-model": PRICE}, budget=BudgetSettings(**budget),
                    provider=ProviderSettings(max_tokens=10, model="test-model"))


@pytest.fixture
def squad(layout: SquadLayout) -> SquadLayout:
    for agent in ("lead", "fenster"):
        add_agent(layout, agent, model="test-model")
    return layout


async def _item(runtime: SquadRuntime, kind: str) -> InboxItem:
    """The first open item of `kind`, once its session is parked."""
    with anyio.fail_after(10):
        while True:
            found = [i for i in runtime.inbox.items() if i.kind == kind]
            record = runtime.pool.get(found[0].session_id or "") if found else None
            if record is not None and record.state == "parked":
                return found[0]
            await anyio.sleep(0.01)


async def test_a_route_tree_parks_before_the_call_that_would_pass_its_budget(
        squad: SquadLayout) -> None:
    routing = ScriptedTurn(tool_calls=[ScriptedCall(name="squad_route", arguments={
        "targetAgent": "fenster", "task": "fix it"})],
        usage={"input_tokens": 0, "output_tokens": 2000})
    provider = script(lead=[routing, text("all done", BIG)], fenster=[text("fixed", BIG)])
    async with SquadRuntime(squad, priced(per_route_usd=1.0), provider) as runtime:
        result: list[object] = []

        async def route() -> None:
            result.append(await runtime.route(RouteRequest(target_agent="lead", task="go")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(route)
            item = await _item(runtime, "parked")
            # fenster's first call would pass the tree's $1 ($2 spent already): it waits,
            # parked, holding no slot, and so does lead, waiting on it
            assert item.session_id is not None and item.reason.startswith("budget: per_route")
            assert item.details["scope"] == "route" and item.details["spent"] == 2.0
            parked = runtime.pool.get(item.session_id)
            assert parked is not None and parked.state == "parked" and parked.agent == "fenster"
            assert runtime.pool.totals().running == 0 and runtime.pool.totals().parked == 1
            runtime.pool.check_invariants()
            assert result == []
            await runtime.inbox.resolve(item.id, "approve", budget=5.0)
        (done,) = result
        assert done.ok and done.answer == "all done"  # type: ignore[attr-defined]
        view = await runtime.session(done.session_id)  # type: ignore[attr-defined]
        assert view is not None
        (priced_view,) = runtime.priced([view])
        assert priced_view.route_cost_usd == pytest.approx(6.0)
    # the ledger holds three calls of $2; a new ledger reads them back
    ledger = SpendingLedger(squad)
    ledger.load()
    assert ledger.today().usd == pytest.approx(6.0) and ledger.today().unknown_calls == 0
    states = [r.get("state") for r in read_transcript(
        squad.transcript(item.session_id)).states]
    assert states[-3:] == ["parked", "active", "completed"]


async def test_a_model_without_a_price_costs_unknown_not_zero(squad: SquadLayout) -> None:
    settings = Settings(provider=ProviderSettings(model="no-such-model"), pricing={})
    async with SquadRuntime(squad, settings, script([text("hi", (5, 5))])) as runtime:
        done = await runtime.route(RouteRequest(target_agent="lead", task="go"))
        (view,) = runtime.priced([v for v in runtime.pool.views()
                                  if v.session_id == done.session_id])
    assert done.ok and view.cost_usd is None
    assert json.loads(view.model_dump_json())["cost_usd"] is None


async def test_a_budget_in_dollars_parks_a_model_it_cannot_price(squad: SquadLayout) -> None:
    settings = Settings(provider=ProviderSettings(model="no-such-model"), pricing={},
                        budget=BudgetSettings(per_day_usd=100.0))
    async with SquadRuntime(squad, settings, script([text("hi", (5, 5))])) as runtime, \
            anyio.create_task_group() as tg:
        tg.start_soon(runtime.route, RouteRequest(target_agent="lead", task="go"))
        item = await _item(runtime, "parked")
        assert item.details["setting"] == "budget.per_day_usd"
        tg.cancel_scope.cancel()


async def test_squad_ask_parks_until_answered_and_the_answer_is_the_result(
        squad: SquadLayout) -> None:
    provider = script(lead=[call("squad_ask", question="Which database?"), text("ok")])
    async with SquadRuntime(squad, priced(), provider) as runtime:
        result: list[object] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(result, runtime.route(
                RouteRequest(target_agent="lead", task="set up the db"))))
            item = await _item(runtime, "question")
            assert item.details["question"] == "Which database?"
            assert runtime.pool.totals().running == 0
            with pytest.raises(Exception, match="takes answer, dismiss"):
                await runtime.inbox.resolve(item.id, "approve")
            await runtime.inbox.resolve(item.id, "answer", answer="postgres")
        (done,) = result
        assert done.ok  # type: ignore[attr-defined]
    tools = [m for m in read_transcript(squad.transcript(item.session_id or "")).messages
             if m.get("role") == "tool"]
    assert tools[-1]["content"] == "Answer from person: postgres"


async def test_a_question_answered_after_a_restart_resumes_the_session(
        squad: SquadLayout) -> None:
    turns = [call("squad_ask", question="Ship it?"), text("shipped")]
    async with SquadRuntime(squad, priced(), script(lead=turns)) as runtime, \
            anyio.create_task_group() as tg:
        tg.start_soon(runtime.route, RouteRequest(target_agent="lead", task="ship"))
        item = await _item(runtime, "question")
        tg.cancel_scope.cancel()  # the runtime goes away with the question open
    async with SquadRuntime(squad, priced(), script(lead=turns)) as runtime:
        (still,) = runtime.inbox.items()
        assert still.id == item.id and still.open
        idle = runtime.bus.subscribe(types=["agent.idle"])
        await runtime.inbox.resolve(item.id, "answer", answer="yes")
        assert await idle.get(within=10) is not None
        view = await runtime.session(item.session_id or "")
        assert view is not None and view.answer == "shipped"
    messages = read_transcript(squad.transcript(item.session_id or "")).messages
    tools = [m for m in messages if m.get("role") == "tool"]
    assert [t["content"] for t in tools] == ["Answer from person: yes"]  # no stand-in


async def _append(into: list[object], awaitable: object) -> None:
    into.append(await awaitable)  # type: ignore[misc]


async def test_dismissing_a_parked_session_ends_it_with_its_work_kept(
        squad: SquadLayout) -> None:
    async with SquadRuntime(squad, priced(per_session_tokens=5), script([text("x")])) as runtime:
        result: list[object] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: _append(result, runtime.route(
                RouteRequest(target_agent="lead", task="go"))))
            item = await _item(runtime, "parked")
            assert item.details["setting"] == "budget.per_session_tokens"
            await runtime.inbox.resolve(item.id, "dismiss")
        (done,) = result
        assert not done.ok and "stopped at its budget" in (done.error or "")  # type: ignore[attr-defined]
    assert read_transcript(squad.transcript(item.session_id or "")).last_state == "error"


async def test_a_priced_call_adds_no_sync_to_the_route_and_reaches_the_ledger_at_stop(
        squad: SquadLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    import squadd.state.spending as spending

    synced: list[str] = []
    real = spending.append_fsync
    monkeypatch.setattr(spending, "append_fsync",
                        lambda path, data: (synced.append(data), real(path, data)))
    async with SquadRuntime(squad, priced(), script([text("hi", BIG)])) as runtime:
        done = await runtime.route(RouteRequest(target_agent="lead", task="go"))
        assert done.ok and synced == []  # the transcript's sync covers the call
        assert runtime.ledger.today().usd == pytest.approx(2.0)  # counted at once
    assert len(synced) <= 1  # the stop syncs what is left (its batch may have gone already)
    again = SpendingLedger(squad)
    again.load()
    assert again.today().usd == pytest.approx(2.0)


async def test_raising_the_limit_in_the_settings_resumes_a_parked_session(
        squad: SquadLayout) -> None:
    async with SquadRuntime(squad, priced(per_day_usd=1.0), script([text("hi", BIG)])) as rt:
        first = await rt.route(RouteRequest(target_agent="fenster", task="spend"))
        assert first.ok  # $2 spent today: the next call would pass $1
        result: list[object] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _append(result, rt.route(
                    RouteRequest(target_agent="lead", task="go"))))
                item = await _item(rt, "parked")
                rt.apply_settings(priced(per_day_usd=1.5))  # still under what it needs
                await anyio.wait_all_tasks_blocked()
                assert rt.inbox.get(item.id).open  # type: ignore[union-attr]
                rt.apply_settings(priced(per_day_usd=10.0))
        (done,) = result
        assert done.ok  # type: ignore[attr-defined]
        resolved = rt.inbox.store.get(item.id)
        assert resolved is not None and resolved.resolution == {
            "action": "resume", "by": "settings", "reason": "the limit was raised"}


async def test_a_price_changed_in_the_settings_prices_the_next_call(squad: SquadLayout) -> None:
    turns = script([text("hi", BIG), text("hi", BIG)])
    async with SquadRuntime(squad, priced(), turns) as rt:
        before = await rt.route(RouteRequest(target_agent="lead", task="one"))
        rt.apply_settings(Settings(pricing={"openai/test-model": PriceSettings(input=1.0,
                                                                               output=3000.0)},
                                   provider=ProviderSettings(max_tokens=10, model="test-model")))
        after = await rt.route(RouteRequest(target_agent="fenster", task="two"))
        costs = {v.session_id: v.cost_usd for v in rt.priced(
            [v for v in rt.pool.views() if v.session_id in (before.session_id,
                                                              after.session_id)])}
    assert costs[before.session_id] == pytest.approx(2.0)
    assert costs[after.session_id] == pytest.approx(6.0)
