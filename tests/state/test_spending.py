"""Prices, costs and the spending ledger: dated model names find their table, cache tokens are
priced apart, an unknown price is None, the ledger's totals survive a new process, and its
writer gathers the calls counted meanwhile into one append."""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path

import anyio
import pytest

from squadd.config import PriceSettings, load_settings
from squadd.contracts.messages import Usage
from squadd.errors import ConfigError
from squadd.providers.http import usage_from
from squadd.state import spending
from squadd.state.layout import SquadLayout
from squadd.state.scaffold import init_squad
from squadd.state.spending import (
    Spend,
    SpendingLedger,
    cost_of,
    price_for,
    shown_cost,
    utc_day,
)

PRICES = {"anthropic/claude-sonnet-4-5": PriceSettings(input=3, output=15, cache_read=0.3,
                                                       cache_write=3.75),
          "openai/gpt-4o": PriceSettings(input=2.5, output=10, cache_read=1.25),
          "openai/gpt-4o-mini": PriceSettings(input=0.15, output=0.6)}


def test_a_dated_model_takes_the_longest_table_it_starts_with() -> None:
    assert price_for(PRICES, "openai", "gpt-4o-mini-2024-07-18") is PRICES["openai/gpt-4o-mini"]
    assert price_for(PRICES, "openai", "gpt-4o-2024-08-06") is PRICES["openai/gpt-4o"]
    assert price_for(PRICES, "anthropic", "claude-sonnet-4-5-20250929") \
        is PRICES["anthropic/claude-sonnet-4-5"]
    assert price_for(PRICES, "openai", "gpt-4o1") is None  # not a dated version of gpt-4o
    assert price_for(PRICES, "anthropic", "gpt-4o") is None  # another provider's table
    assert price_for(PRICES, "openai", "") is None


def test_cache_tokens_are_priced_apart_and_unknown_is_none_not_zero() -> None:
    # Anthropic's shape: cache tokens besides input_tokens
    usage = Usage(input_tokens=500_000, output_tokens=100_000, cache_read_tokens=400_000,
                  cache_write_tokens=100_000)
    # 500k plain at $3, 400k read at $0.30, 100k written at $3.75, 100k out at $15
    assert cost_of(usage, PRICES["anthropic/claude-sonnet-4-5"]) == pytest.approx(
        1.5 + 0.12 + 0.375 + 1.5)
    # OpenAI's shape: cached tokens are part of the prompt's, billed once at the cache price
    openai = Usage(input_tokens=1_000_000, output_tokens=0, cache_read_tokens=400_000,
                   cached_in_input=400_000)
    assert cost_of(openai, PRICES["openai/gpt-4o"]) == pytest.approx(1.5 + 0.5)
    # no cache prices: cached tokens cost what input costs
    assert cost_of(usage, PRICES["openai/gpt-4o-mini"]) == pytest.approx(0.15 + 0.06)
    assert cost_of(usage, None) is None
    assert shown_cost(None) == "unknown" and shown_cost(0.01234) == "$0.0123"


def test_providers_report_cache_tokens_in_either_shape() -> None:
    openai = usage_from({"usage": {"prompt_tokens": 100, "completion_tokens": 7,
                                   "prompt_tokens_details": {"cached_tokens": 60}}},
                        "prompt_tokens", "completion_tokens")
    assert (openai.input_tokens, openai.cache_read_tokens, openai.cached_in_input) == \
        (100, 60, 60)
    anthropic = usage_from({"usage": {"input_tokens": 10, "output_tokens": 5,
                                      "cache_read_input_tokens": 70,
                                      "cache_creation_input_tokens": 20}},
                           "input_tokens", "output_tokens")
    assert (anthropic.input_tokens, anthropic.cache_read_tokens, anthropic.cache_write_tokens,
            anthropic.cached_in_input) == (10, 70, 20, 0)
    assert anthropic.cache_read_input_tokens == 70  # as the provider said it, for traces


def _spend(ts: float, session: str, agent: str, root: str, cost: float | None) -> Spend:
    return Spend(ts=ts, session_id=session, agent=agent, root=root, provider="openai",
                 model="gpt-4o", input_tokens=10, output_tokens=5, cache_read_tokens=0,
                 cache_write_tokens=0, cost_usd=cost)


def test_the_ledger_is_durable_and_its_day_rolls_over(tmp_path: Path) -> None:
    layout = SquadLayout.at(init_squad(tmp_path).squad_dir)
    noon = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC).timestamp()
    now = [noon]
    ledger = SpendingLedger(layout, clock=lambda: now[0])
    ledger.load()
    ledger.record(_spend(noon - 86400, "s0", "lead", "s0", 9.0))  # yesterday
    ledger.record(_spend(noon, "s1", "lead", "s1", 1.0))
    ledger.record(_spend(noon, "s2", "fenster", "s1", 0.5))
    ledger.record(_spend(noon, "s3", "fenster", "s3", None))
    # a crash mid-append leaves a torn line: skipped, the rest counted
    with layout.spend_file("2026-03-01").open("a") as torn:
        torn.write('{"ts": 1')
    again = SpendingLedger(layout, clock=lambda: now[0])
    again.load()
    assert again.today().usd == pytest.approx(1.5) and again.today().unknown_calls == 1
    assert again.today().cost is None  # some of it is unknown
    assert again.route("s1").cost == pytest.approx(1.5)
    assert again.route("s0").cost == pytest.approx(9.0)  # older trees are kept a week
    assert again.agent_today("lead").cost == pytest.approx(1.0)
    assert again.session("s2").tokens == 15 and again.root_of("s2") == "s1"
    now[0] = noon + 86400  # the next day: today's totals start again, route trees do not
    assert again.today().usd == 0 and again.agent_today("lead").tokens == 0
    assert again.route("s1").cost == pytest.approx(1.5)
    lines = layout.spend_file("2026-03-01").read_text().splitlines()
    assert json.loads(lines[0])["cost_usd"] == 1.0


def test_a_price_table_with_an_unknown_key_or_name_names_it(tmp_path: Path) -> None:
    squad = tmp_path / ".squad"
    squad.mkdir()
    (squad / "config.toml").write_text('[pricing."openai/m"]\ninput = 1\noutput = 2\nout = 3\n')
    with pytest.raises(ConfigError, match=r"unknown key 'pricing.\"openai/m\".out'"):
        load_settings(squad, environ={}, user_file=tmp_path / "none.toml")
    (squad / "config.toml").write_text('[pricing.gpt]\ninput = 1\noutput = 2\n')
    with pytest.raises(ConfigError, match="PROVIDER/MODEL"):
        load_settings(squad, environ={}, user_file=tmp_path / "none.toml")
    (squad / "config.toml").write_text('[pricing."openai/gpt-4o"]\noutput = 11.0\n'
                                       '[pricing."openai/mine"]\ninput = 1\noutput = 2\n')
    settings = load_settings(squad, environ={}, user_file=tmp_path / "none.toml")
    assert settings.pricing["openai/gpt-4o"].output == 11.0  # overrides one price
    assert settings.pricing["openai/gpt-4o"].input == 2.5  # keeps the shipped others
    assert settings.pricing["openai/mine"].input == 1


def test_calls_a_kill_kept_from_the_ledger_are_found_in_their_transcripts(
        tmp_path: Path) -> None:
    layout = SquadLayout.at(init_squad(tmp_path).squad_dir)
    now = dt.datetime.now(dt.UTC)
    ledger = SpendingLedger(layout)
    ledger.load()
    ledger.record(_spend(now.timestamp() - 5, "s1", "lead", "s1", 1.0))  # synced before
    stamp = now.isoformat()
    records = [
        {"kind": "meta", "ts": stamp, "session_id": "s2", "agent": "fenster", "model": "gpt-4o",
         "parent_session_id": "s1"},
        {"kind": "message", "ts": stamp, "message": {"role": "assistant", "id": "msg-1"},
         "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.25},
        {"kind": "message", "ts": stamp, "message": {"role": "assistant", "id": "msg-2"},
         "input_tokens": 10, "output_tokens": 5},  # written before costs were kept: skipped
    ]
    path = layout.transcript("s2")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    for _ in range(2):  # found once: the second start finds it in the ledger
        again = SpendingLedger(layout)
        again.load()
        assert again.route("s1").usd == pytest.approx(1.25)
        assert again.session("s2").tokens == 15 and again.agent_today("fenster").usd == 0.25


@pytest.mark.parametrize("when", [0.0, 86399.999, 86400.0, -0.5, 951782400.0,  # 2000-02-29
                                  1764374399.999999, 1764374400.0, 4102444800.0])
def test_a_call_s_day_is_its_utc_date(when: float) -> None:
    assert utc_day(when) == dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%d")


async def test_the_ledger_writes_the_calls_counted_while_it_gathers_in_one_append(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = SquadLayout.at(init_squad(tmp_path).squad_dir)
    noon = dt.datetime(2026, 3, 1, 12, tzinfo=dt.UTC).timestamp()
    ledger = SpendingLedger(layout, clock=lambda: noon)
    ledger.load()
    appends: list[str] = []
    real_append = spending._append
    written = anyio.Event()

    def append(path: Path, data: str) -> None:  # in the writer's thread
        appends.append(data)
        real_append(path, data)
        anyio.from_thread.run_sync(written.set)

    monkeypatch.setattr(spending, "_append", append)
    paused: list[float] = []
    go_on = anyio.Event()

    async def pause(seconds: float) -> None:  # the gathering pause, held open by the test
        paused.append(seconds)
        await go_on.wait()

    async with anyio.create_task_group() as tg:
        await tg.start(functools.partial(ledger.run, gather_s=0.25, pause=pause))
        ledger.record_soon(_spend(noon, "s1", "lead", "s1", 1.0))
        await anyio.wait_all_tasks_blocked()  # the writer woke and gathers
        assert paused == [0.25] and appends == []
        ledger.record_soon(_spend(noon, "s2", "lead", "s1", 0.5))
        ledger.record_soon(_spend(noon, "s3", "lead", "s1", 0.25))
        assert ledger.route("s1").cost == pytest.approx(1.75)  # counted before written
        go_on.set()
        with anyio.fail_after(10):
            await written.wait()
        tg.cancel_scope.cancel()
    assert len(appends) == 1  # the three calls, one trip to a thread
    assert [json.loads(line)["session_id"] for line in appends[0].splitlines()] == [
        "s1", "s2", "s3"]
    lines = layout.spend_file("2026-03-01").read_text().splitlines()
    assert [json.loads(line)["session_id"] for line in lines] == ["s1", "s2", "s3"]
